"""The bridge's configuration: defaults < a TOML ``[bridge]`` table < ``TETHER_*`` < flags.

Every value is validated once, here: a bad one (or an unknown key) is one line naming the setting,
the value and its source, so an operator never reads a traceback to find a typo.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from ..._plumbing._config_error import ConfigError as ConfigError
from ..._plumbing._fs import ensure_private_dir
from ..._plumbing._logging import LogFormat
from ..._plumbing._redact import redact_url
from ..custody._rooms import DEFAULT_ROOM_POLICY, ROOM_POLICIES, RoomPolicy
from ..pool._retry import RetryBackoff
from ..stores.postgres._dsn import check_schema, is_postgres_dsn

DEFAULT_DATA_DIR: Final = Path("tether-data")
DEFAULT_GATEWAY: Final = "http://127.0.0.1:8765"
DEFAULT_AGENT: Final = "tether.agents.echo:factory"
ENV_PREFIX: Final = "TETHER_"
DEFAULT_CONCURRENCY: Final = 4


@attrs.frozen
class BridgeConfig:
    """Everything ``tether bridge run`` needs. Build it with :func:`load_config`."""

    gateway: str = DEFAULT_GATEWAY
    token_file: Path = DEFAULT_DATA_DIR / "gateway" / "token"
    store: str = str(DEFAULT_DATA_DIR / "bridge" / "custody.db")
    """A SQLite file path, or a ``postgresql://`` URL (never with a password in it)."""
    store_password_file: Path | None = None
    """PostgreSQL password, one line in a 0600 file (else ``PGPASSWORD`` or ``~/.pgpass``)."""
    store_schema: str = "tether"
    """PostgreSQL schema holding the custody tables."""
    agent: str = DEFAULT_AGENT
    workers: int = 4
    concurrency: int = DEFAULT_CONCURRENCY
    """Tasks one worker runs at the same time."""
    capacity: int | None = None
    """Tasks one worker asks the pool lead for: running plus assigned and waiting (a prefetch).
    None = ``PoolWorker``'s default, 4 x ``concurrency``: the next tasks are in hand when a run
    ends (throughput). ``capacity = concurrency`` for slow agents: no task waits behind a busy
    worker while another idles (fairness). At least ``concurrency``."""
    client_name: str = "tether-bridge"
    pool_name: str | None = None
    """The stem of this process's pool names (``<stem>-w1``, ``<stem>-lead``), verbatim; a
    second live process under it is refused. None: ``<client_name>-<host>-<random>``, unique."""
    poll_wait: float = 30.0
    lease_s: float = 60.0
    max_attempts: int = 5
    retry_backoff: RetryBackoff = attrs.field(factory=RetryBackoff)
    """The delay before a failed task's next attempt: full jitter, uniform between 0 and
    ``min(cap, first * 2 ** (attempt - 1))``; ``FIRST:CAP`` seconds in flags, TOML and
    ``TETHER_RETRY_BACKOFF`` (default ``2:300``; ``0``: retry at once). An agent's
    ``Retry(after=)`` overrides it for its task."""
    run_timeout: float | None = 600.0
    """Seconds one agent run may take before it is cancelled and counted as a failed attempt
    ("timed out after N s"); None (``0``/``off`` in flags, TOML and ``TETHER_RUN_TIMEOUT``):
    no limit. Ten minutes suits LLM agents (long generations, tool calls); an agent factory
    overrides it with a ``run_timeout`` attribute. A run still not finished ``grace`` seconds
    later loses its lease to the reconciler."""
    heartbeat_interval: float = 60.0
    reconcile_interval: float = 5.0
    room_policy: RoomPolicy = DEFAULT_ROOM_POLICY
    """How a room's messages run (``tether.bridge.custody._rooms``): ``serial`` (one at a time,
    in arrival order, replies in order), ``replace`` (a newer message supersedes older ones
    still waiting or running) or ``concurrent``. An agent may override it (its factory's
    ``room_policy`` attribute, or a ``replace`` task handler)."""
    lead: bool = True
    """Run a pool lead (room affinity, balanced assignment). Without one, workers claim pending
    tasks directly: less latency, no affinity."""
    lead_beat_interval: float = 0.5
    """Seconds between a lead candidate's beats; a leader silent for two of them is replaced
    by the oldest standby candidate (another process's lead)."""
    sweep_interval: float = 0.05
    """Seconds between the pool lead's periodic sweeps. In-process wake-ups make it sweep as
    soon as tasks arrive or a slot frees; this is the fallback (work added by other processes)."""
    poll_interval: float = 0.05
    """Seconds an idle worker waits before looking again, unless rung (the fallback)."""
    stall_after: float = 300.0
    retention: float = 7 * 86_400.0
    """Seconds a delivered task is kept (so a gateway replay of it is recognised), then pruned.
    Keep it longer than the gateway's replay window. Dead tasks are never pruned."""
    tombstone_retention: float = 30 * 86_400.0
    """Seconds the id of a pruned delivered task is still recognised as a replay (a tombstone),
    counted from its delivery; then the tombstone goes too."""
    grace: float = 10.0
    """Seconds a stopping bridge gives workers to finish or release their tasks."""
    status_file: Path | None = None
    synchronous: str = "FULL"
    log_level: str = "INFO"
    log_format: LogFormat = "text"
    """``text`` or ``json`` (one JSON object per line, see ``tether._plumbing._logging``)."""
    admin_port: int | None = None
    """The admin endpoint (health, metrics, task tree); None = off, 0 = a free port."""
    admin_host: str = "127.0.0.1"
    admin_token_file: Path = DEFAULT_DATA_DIR / "bridge" / "admin-token"
    health_window: float = 120.0
    """``/healthz`` fails when the gateway has not answered for this many seconds."""

    def __attrs_post_init__(self) -> None:
        problem = capacity_problem(self.capacity, self.concurrency)
        if problem is not None:
            raise ConfigError(f"capacity {problem}, got {_shown(self.capacity)}")

    @property
    def store_is_url(self) -> bool:
        return is_postgres_url(self.store)


def capacity_problem(capacity: int | None, concurrency: int) -> str | None:
    """Why ``capacity`` is not valid beside ``concurrency`` (None: it is)."""
    if capacity is None:
        return None
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < concurrency:
        return f"must be an integer >= concurrency ({concurrency}), or unset for adaptive"
    return None


def is_postgres_url(value: str) -> bool:
    """A ``postgresql://`` URL or a libpq ``key=value`` string, not a SQLite path."""
    return is_postgres_dsn(value)


# -- parsing and validation ----------------------------------------------------------------------


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    return value.strip()


def _path(name: str, value: Any) -> Path:
    if isinstance(value, Path):
        return value
    return Path(_text(name, value)).expanduser()


def _int_range(low: int, high: int) -> Callable[[str, Any], int]:
    def parse(name: str, value: Any) -> int:
        if isinstance(value, str) and re.fullmatch(r"\s*[0-9]+\s*", value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"must be an integer from {low} to {high}")
        return value

    return parse


def _seconds(low: float, high: float) -> Callable[[str, Any], float]:
    def parse(name: str, value: Any) -> float:
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not low <= value <= high
        ):
            raise ValueError(f"must be a number of seconds from {low:g} to {high:g}")
        return float(value)

    return parse


def _url(name: str, value: Any) -> str:
    url = _text(name, value).rstrip("/")
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
        raise ValueError("must be an http:// or https:// URL")
    if "@" in url.split("://", 1)[1].split("/", 1)[0]:
        raise ValueError(
            "must not carry a user or password (user:password@): the gateway's token comes "
            "from --token-file"
        )
    if "?" in url or "#" in url:
        raise ValueError("must not carry a query or fragment (request paths are appended)")
    return url


def _agent(name: str, value: Any) -> str:
    spec = _text(name, value)
    if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", spec):
        raise ValueError("must look like module.path:factory")
    return spec


def _label(name: str, value: Any) -> str:
    text = _text(name, value)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}", text):
        raise ValueError("must be 1-128 characters from [A-Za-z0-9_.:-], starting alphanumeric")
    return text


def _choice(*options: str) -> Callable[[str, Any], str]:
    def parse(name: str, value: Any) -> str:
        text = _text(name, value).upper()
        if text not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return text

    return parse


def _store(name: str, value: Any) -> str:
    if isinstance(value, Path):
        return str(value)
    text = _text(name, value)
    if "://" in text and not is_postgres_url(text):
        raise ValueError("must be a file path or a postgresql:// URL")
    return text


def _schema(name: str, value: Any) -> str:
    return check_schema(_text(name, value))


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = _text(name, value).lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def _lower_choice(*options: str) -> Callable[[str, Any], str]:
    def parse(name: str, value: Any) -> str:
        text = _text(name, value).lower()
        if text not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return text

    return parse


def _optional_port(name: str, value: Any) -> int | None:
    if value is None or value == "" or (isinstance(value, str) and value.lower() == "off"):
        return None
    return _int_range(0, 65535)(name, value)


def _optional_int(low: int, high: int) -> Callable[[str, Any], int | None]:
    def parse(name: str, value: Any) -> int | None:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        return _int_range(low, high)(name, value)

    return parse


def _host(name: str, value: Any) -> str:
    text = _text(name, value)
    if not re.fullmatch(r"[A-Za-z0-9.:-]{1,255}", text):
        raise ValueError("must be a host name or an IP address")
    return text


def _optional_pool_name(name: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    text = _text(name, value)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,55}", text):
        raise ValueError("must be 1-56 characters from [A-Za-z0-9_-], starting alphanumeric")
    return text


def _retry_backoff(name: str, value: Any) -> RetryBackoff:
    if isinstance(value, RetryBackoff):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    return RetryBackoff.parse(_text(name, value))


def _optional_seconds(low: float, high: float) -> Callable[[str, Any], float | None]:
    def parse(name: str, value: Any) -> float | None:
        if value is None or (isinstance(value, str) and value.strip().lower() in ("off", "none")):
            return None
        if value == 0 or (isinstance(value, str) and value.strip() in ("0", "0.0")):
            return None
        try:
            return _seconds(low, high)(name, value)
        except ValueError:
            raise ValueError(
                f"must be a number of seconds from {low:g} to {high:g}, or 0/off for no limit"
            ) from None

    return parse


def _optional_path(name: str, value: Any) -> Path | None:
    if value is None or value == "":
        return None
    return _path(name, value)


_PARSERS: Final[Mapping[str, Callable[[str, Any], Any]]] = {
    "gateway": _url,
    "token_file": _path,
    "store": _store,
    "store_password_file": _optional_path,
    "store_schema": _schema,
    "agent": _agent,
    "workers": _int_range(1, 256),
    "concurrency": _int_range(1, 1024),
    "capacity": _optional_int(1, 16_384),
    "client_name": _label,
    "pool_name": _optional_pool_name,
    "poll_wait": _seconds(0, 60),
    "lease_s": _seconds(0.1, 86_400),
    "max_attempts": _int_range(1, 1000),
    "retry_backoff": _retry_backoff,
    "run_timeout": _optional_seconds(0.1, 7 * 86_400),
    "heartbeat_interval": _seconds(0.1, 3600),
    "reconcile_interval": _seconds(0.01, 3600),
    "room_policy": _lower_choice(*ROOM_POLICIES),
    "lead": _bool,
    "lead_beat_interval": _seconds(0.05, 60),
    "sweep_interval": _seconds(0.005, 60),
    "poll_interval": _seconds(0.005, 60),
    "stall_after": _seconds(0.1, 7 * 86_400),
    "retention": _seconds(60, 366 * 86_400),
    "tombstone_retention": _seconds(60, 10 * 366 * 86_400),
    "grace": _seconds(0, 3600),
    "status_file": _optional_path,
    "synchronous": _choice("FULL", "NORMAL", "EXTRA"),
    "log_level": _choice("DEBUG", "INFO", "WARNING", "ERROR"),
    "log_format": _lower_choice("text", "json"),
    "admin_port": _optional_port,
    "admin_host": _host,
    "admin_token_file": _path,
    "health_window": _seconds(1, 86_400),
}
SETTINGS: Final = tuple(_PARSERS)


def env_name(setting: str) -> str:
    return ENV_PREFIX + setting.upper()


def _shown(value: Any) -> str:
    """A setting's value for an error message: credentials redacted, at most 80 characters."""
    text = repr(str(value) if isinstance(value, Path) else value)
    if isinstance(value, str):
        text = repr(redact_url(value))
    return text if len(text) <= 80 else text[:77] + "..."


def load_config(
    *,
    file: Path | None = None,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> BridgeConfig:
    """Merge defaults, ``file`` (TOML), ``environ`` (``TETHER_*``) and ``flags`` (None = unset).

    ``file`` defaults to ``$TETHER_CONFIG`` when that is set. Raises :class:`ConfigError`.
    """
    values, raw = merge_settings("bridge", _PARSERS, file=file, flags=flags, environ=environ)
    concurrency = values.get("concurrency", DEFAULT_CONCURRENCY)
    problem = capacity_problem(values.get("capacity"), concurrency)
    if problem is not None:
        value, source = raw["capacity"]
        if "concurrency" in raw:
            source += f"; concurrency from {raw['concurrency'][1]}"
        raise ConfigError(f"capacity {problem}, got {_shown(value)} (from {source})")
    return BridgeConfig(**values)


def merge_settings(
    table: str,
    parsers: Mapping[str, Callable[[str, Any], Any]],
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
            raise ConfigError(f"{setting} {exc}, got {_shown(value)} (from {source})") from None
    return values, raw


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
    if unknown:
        raise ConfigError(
            f"config file {path}: unknown setting {unknown[0]!r} in [{table}] "
            f"(known: {', '.join(settings)})"
        )
    return values


def prepare_data_dir(config: BridgeConfig) -> None:
    """Create the SQLite store's directory and every missing parent, each mode 0700."""
    if config.store_is_url:
        return
    ensure_private_dir(Path(config.store).parent)
