"""The settings every process on a custody store has (a bridge, a worker) and how any process's
settings load: defaults < a TOML table < ``TETHER_*`` < flags, each value checked once; a bad one
(or an unknown key) is one line naming the setting, the value and its source."""

# no ``from __future__ import annotations``: the fields' types stay objects, so a subclass's
# generated __init__ (whose string annotations autodoc resolves in the subclass's module)
# needs none of this module's imports
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

import attrs

from ..._plumbing._config_error import ConfigError
from ..._plumbing._fs import ensure_private_dir
from ..._plumbing._log_format import LogFormat
from ..custody._conversation import DEFAULT_HISTORY_TURNS, MAX_HISTORY_TURNS
from ..custody._limits import LimitSpec, parse_limit
from ..custody._rules import DEFAULT_QUEUES
from ..runs._bounds import (
    DEFAULT_MAX_REPLY_BYTES,
    DEFAULT_MAX_STATE_BYTES,
    DEFAULT_MAX_STEP_BYTES,
    Bounds,
)
from ._setting_values import (
    is_postgres_url,
    parse_bool,
    parse_bytes,
    parse_host,
    parse_int,
    parse_label,
    parse_lower_choice,
    parse_optional_int,
    parse_optional_path,
    parse_optional_pool_name,
    parse_optional_port,
    parse_optional_version,
    parse_path,
    parse_queues,
    parse_schema,
    parse_seconds,
    parse_store,
    parse_upper_choice,
    shown,
)

DEFAULT_DATA_DIR: Final = Path("tether-data")
DEFAULT_CONCURRENCY: Final = 4
ENV_PREFIX: Final = "TETHER_"

Parsers = Mapping[str, Callable[[str, Any], Any]]


@attrs.frozen(kw_only=True)
class ProcessSettings:
    """The store, the pool and the process's own plumbing (logs, admin endpoint): what a bridge
    (``BridgeConfig``) and a pool-only worker process (``WorkerConfig``) share."""

    store: str = str(DEFAULT_DATA_DIR / "bridge" / "custody.db")
    """A SQLite file path, or a ``postgresql://`` URL (never with a password in it)."""
    store_password_file: Path | None = None
    """PostgreSQL password, one line in a 0600 file (else ``PGPASSWORD`` or ``~/.pgpass``)."""
    store_schema: str = "tether"
    """PostgreSQL schema holding the custody tables."""
    workers: int = 4
    queues: tuple[str, ...] = DEFAULT_QUEUES
    """The queues whose tasks this process's workers take (issue #51): its agent serves them
    all. A gateway's tasks are in ``default``; children name theirs (``run.spawn(queue=...)``).
    """
    concurrency: int = DEFAULT_CONCURRENCY
    """Tasks one worker runs at the same time."""
    capacity: int | None = None
    """Tasks one worker asks the pool lead for: running plus assigned and waiting (a prefetch).
    None = ``PoolWorker``'s default, 4 x ``concurrency``: the next tasks are in hand when a run
    ends (throughput). ``capacity = concurrency`` for slow agents: no task waits behind a busy
    worker while another idles (fairness). At least ``concurrency``."""
    history_turns: int = DEFAULT_HISTORY_TURNS
    """Turns of its room's conversation a run reads at most (``conversation_of``)."""
    max_step_bytes: int = DEFAULT_MAX_STEP_BYTES
    """The largest result a step records (JSON, bytes; at most 1 MiB): a run whose step
    returns more fails at once, its task dead with the size in its reason (never retried)."""
    max_state_bytes: int = DEFAULT_MAX_STATE_BYTES
    """The largest state a reply may give its room (JSON, bytes; at most 1 MiB): over it,
    the run fails at once, its task dead."""
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES
    """The largest reply (UTF-8, bytes; at most the store's body limit, 1 MiB): over it, the
    run fails at once, its task dead."""
    client_name: str = "tether-bridge"
    pool_name: str | None = None
    """The stem of this process's pool names (``<stem>-w1``, ``<stem>-lead``), verbatim; a
    second live process under it is refused. None: ``<client_name>-<host>-<random>``, unique
    (a bridge on a SQLite file: ``<client_name>-<host>``, one bridge per file)."""
    lease_s: float = 60.0
    max_attempts: int = 5
    reconcile_interval: float = 5.0
    agent_version: str | None = None
    """The version the runs' step records keep (issue #53): a resumed run is checked against
    the version that recorded it. None: the agent's own (its package's version, or a hash of
    its module's source)."""
    park_after: float = 30.0
    """Seconds: a durable sleep (``run.sleep``) at most this long sleeps in place, holding its
    lease and slot; a longer one parks its task in ``waiting`` (the slot free, no attempt
    spent) and the reconciler wakes it when due (on time when it parked in this process;
    within ``reconcile_interval`` when another process parked it after the last pass)."""
    lead: bool = True
    """Run a pool lead (room affinity, balanced assignment). Without one, workers claim pending
    tasks directly: less latency, no affinity."""
    lead_lease: float = 3.0
    """Seconds a leader's beat holds the lead: a leader silent this long is replaced by the
    oldest standby candidate (another process's lead). Candidates beat three times a lease."""
    sweep_interval: float = 0.05
    """Seconds between the pool lead's periodic sweeps. In-process wake-ups make it sweep as
    soon as tasks arrive or a slot frees; this is the fallback (work added by other processes)."""
    poll_interval: float = 0.05
    """Seconds an idle worker waits before looking again, unless rung (the fallback)."""
    grace: float = 10.0
    """Seconds a stopping process gives workers to finish or release their tasks."""
    status_file: Path | None = None
    synchronous: str = "NORMAL"
    """NORMAL: durable at promises (a commit is synced before anything that depends on it
    leaves the process); FULL: every commit synced; EXTRA: SQLite's FULL and more."""
    log_level: str = "INFO"
    log_format: LogFormat = "text"
    """``text`` or ``json`` (one JSON object per line, see ``tether._plumbing._logging``)."""
    admin_port: int | None = None
    """The admin endpoint (health, metrics, task tree); None = off, 0 = a free port."""
    admin_host: str = "127.0.0.1"
    admin_token_file: Path = DEFAULT_DATA_DIR / "bridge" / "admin-token"
    limits: tuple[LimitSpec, ...] = ()
    """Limits this process declares in the store as it starts (flow control, issue #38):
    ``"openai:gpt-4o rate=500/min burst=50 concurrency=20"``, several separated by ``;`` (a
    list of such strings in TOML). The store keeps them for every process on it; ``tether
    store limits set`` changes one without a restart."""

    def __attrs_post_init__(self) -> None:
        problem = capacity_problem(self.capacity, self.concurrency)
        if problem is not None:
            raise ConfigError(f"capacity {problem}, got {shown(self.capacity)}")
        try:
            self.bounds  # noqa: B018 (checks the three bounds, as Bounds does)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    @property
    def store_is_url(self) -> bool:
        return is_postgres_url(self.store)

    @property
    def bounds(self) -> Bounds:
        """The size limits of the runs' step results, room states and replies."""
        return Bounds(self.max_step_bytes, self.max_state_bytes, self.max_reply_bytes)


PROCESS_PARSERS: Final[Parsers] = {
    "store": parse_store,
    "store_password_file": parse_optional_path,
    "store_schema": parse_schema,
    "workers": parse_int(1, 256),
    "queues": parse_queues,
    "concurrency": parse_int(1, 1024),
    "capacity": parse_optional_int(1, 16_384),
    "history_turns": parse_int(0, MAX_HISTORY_TURNS),
    "max_step_bytes": parse_bytes,
    "max_state_bytes": parse_bytes,
    "max_reply_bytes": parse_bytes,
    "client_name": parse_label,
    "pool_name": parse_optional_pool_name,
    "lease_s": parse_seconds(0.1, 86_400),
    "max_attempts": parse_int(1, 1000),
    "reconcile_interval": parse_seconds(0.01, 3600),
    "park_after": parse_seconds(0, 86_400),
    "agent_version": parse_optional_version,
    "lead": parse_bool,
    "lead_lease": parse_seconds(0.05, 60),
    "sweep_interval": parse_seconds(0.005, 60),
    "poll_interval": parse_seconds(0.005, 60),
    "grace": parse_seconds(0, 3600),
    "status_file": parse_optional_path,
    "synchronous": parse_upper_choice("FULL", "NORMAL", "EXTRA"),
    "log_level": parse_upper_choice("DEBUG", "INFO", "WARNING", "ERROR"),
    "log_format": parse_lower_choice("text", "json"),
    "admin_port": parse_optional_port,
    "admin_host": parse_host,
    "admin_token_file": parse_path,
    "limits": lambda setting, value: parse_limits(value),
}
"""How each of :class:`ProcessSettings`' fields is read from a file, the environment or a flag."""


def parse_limits(value: object) -> tuple[LimitSpec, ...]:
    """The ``limits`` setting: ``;``-separated specs (a flag, ``TETHER_LIMITS``) or a TOML list
    of them; each key once."""
    if isinstance(value, str):
        texts = [part for part in value.split(";") if part.strip()]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        texts = list(value)
    else:
        raise ValueError("must be 'KEY rate=N/min burst=N concurrency=N; ...' or a list of those")
    specs = tuple(parse_limit(text) for text in texts)
    keys = [spec.key for spec in specs]
    if len(set(keys)) != len(keys):
        raise ValueError("names a key twice")
    return specs


def settings_parsers(kind: type[ProcessSettings], own: Parsers) -> dict[str, Any]:
    """``kind``'s parsers: its ``own`` settings' then the shared ones, exactly its fields."""
    parsers = {**own, **PROCESS_PARSERS}
    missing = set(attrs.fields_dict(kind)) ^ set(parsers)
    if missing:
        raise AssertionError(f"{kind.__name__}: no parser or no field for {sorted(missing)}")
    return parsers


def capacity_problem(capacity: int | None, concurrency: int) -> str | None:
    """Why ``capacity`` is not valid beside ``concurrency`` (None: it is)."""
    if capacity is None:
        return None
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < concurrency:
        return f"must be an integer >= concurrency ({concurrency}), or unset for adaptive"
    return None


def env_name(setting: str) -> str:
    return ENV_PREFIX + setting.upper()


S = TypeVar("S", bound=ProcessSettings)


def load_settings(
    kind: type[S],
    table: str,
    parsers: Parsers,
    *,
    file: Path | None,
    flags: Mapping[str, Any] | None,
    environ: Mapping[str, str] | None,
) -> S:
    """A ``kind`` from ``merge_settings``; a capacity below the concurrency names both sources."""
    values, raw = merge_settings(table, parsers, file=file, flags=flags, environ=environ)
    concurrency = values.get("concurrency", DEFAULT_CONCURRENCY)
    problem = capacity_problem(values.get("capacity"), concurrency)
    if problem is not None:
        value, source = raw["capacity"]
        if "concurrency" in raw:
            source += f"; concurrency from {raw['concurrency'][1]}"
        raise ConfigError(f"capacity {problem}, got {shown(value)} (from {source})")
    return kind(**values)


def merge_settings(
    table: str,
    parsers: Parsers,
    *,
    file: Path | None,
    flags: Mapping[str, Any] | None,
    environ: Mapping[str, str] | None,
) -> tuple[dict[str, Any], dict[str, tuple[Any, str]]]:
    """The settings named in ``parsers``, parsed, from defaults < ``file``'s ``[table]`` <
    ``environ`` (``TETHER_*``) < ``flags`` (None = unset); a bad one is a ``ConfigError`` naming
    the setting, the value and where it came from. ``file`` defaults to ``$TETHER_CONFIG``.
    Returns the parsed values and, for each, the raw value and where it came from."""
    environ = os.environ if environ is None else environ
    raw: dict[str, tuple[Any, str]] = {}
    if file is None and environ.get(ENV_PREFIX + "CONFIG"):
        file = Path(environ[ENV_PREFIX + "CONFIG"])
    if file is not None:
        for key, value in read_table(file, table, tuple(parsers)).items():
            raw[key] = (value, f"{file} [{table}] {key}")
    for setting in parsers:
        name = env_name(setting)
        if name in environ:
            raw[setting] = (environ[name], name)
    for setting, value in (flags or {}).items():
        if setting not in parsers:
            raise ConfigError(f"unknown setting {setting!r}")
        if value is not None:
            raw[setting] = (value, "--" + setting.replace("_", "-"))
    values: dict[str, Any] = {}
    for setting, (value, source) in raw.items():
        try:
            values[setting] = parsers[setting](setting, value)
        except ValueError as exc:
            raise ConfigError(f"{setting} {exc}, got {shown(value)} (from {source})") from None
    return values, raw


RENAMED_SETTINGS: Final = {
    "lead_beat_interval": "'lead_lease' (seconds a leader's lease lasts, 3 beats each)"
}
"""Settings an earlier tether had, and what replaced them: the error says so."""
_TABLES: Final = {"bridge": "settings", "worker": "worker settings"}
"""The config file's tables: ``[bridge]`` (``tether bridge run``), ``[worker]`` (``tether worker
run``), with how an error names what goes in each."""


def read_table(path: Path, table: str, settings: Sequence[str]) -> dict[str, Any]:
    """``path``'s ``[table]``, checked: TOML, known tables only, known settings only."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    unknown_tables = sorted(set(data) - set(_TABLES))
    if unknown_tables:
        raise ConfigError(
            f"config file {path}: unknown key or table {unknown_tables[0]!r}; "
            f"{_TABLES[table]} go in a [{table}] table"
        )
    values = data.get(table, {})
    if not isinstance(values, dict):
        raise ConfigError(f"config file {path}: {table!r} must be a table")
    unknown = sorted(set(values) - set(settings))
    renamed = [key for key in unknown if key in RENAMED_SETTINGS]
    if renamed:
        raise ConfigError(
            f"config file {path}: setting {renamed[0]!r} in [{table}] is now "
            f"{RENAMED_SETTINGS[renamed[0]]}"
        )
    if unknown:
        raise ConfigError(
            f"config file {path}: unknown setting {unknown[0]!r} in [{table}] "
            f"(known: {', '.join(settings)})"
        )
    return values


def prepare_store_dir(settings: ProcessSettings) -> None:
    """Create the SQLite store's directory and every missing parent, each mode 0700."""
    if not settings.store_is_url:
        ensure_private_dir(Path(settings.store).parent)
