"""``tether worker run``'s configuration: the bridge's rules and a ``[worker]`` TOML table; each
shared setting is parsed by the bridge's function, so it means the same."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from ..._plumbing._config_error import ConfigError
from ..._plumbing._fs import ensure_private_dir
from ..._plumbing._logging import LogFormat
from ._config import (
    _PARSERS,
    DEFAULT_AGENT,
    DEFAULT_CONCURRENCY,
    DEFAULT_DATA_DIR,
    _optional_path,
    _shown,
    capacity_problem,
    is_postgres_url,
    merge_settings,
)


@attrs.frozen
class WorkerConfig:
    """Everything ``tether worker run`` needs. Build it with :func:`load_worker_config`."""

    store: str = str(DEFAULT_DATA_DIR / "bridge" / "custody.db")
    store_password_file: Path | None = None
    store_schema: str = "tether"
    agent: str | None = None
    """``module:factory``; None: the bundled echo agent, unless ``exchange`` is set."""
    exchange: Path | None = None
    """Host the file exchange under this directory for an outside program (no ``agent``)."""
    workers: int = 4
    concurrency: int = DEFAULT_CONCURRENCY
    capacity: int | None = None
    client_name: str = "tether-worker"
    pool_name: str | None = None
    lease_s: float = 60.0
    max_attempts: int = 5
    reconcile_interval: float = 5.0
    lead: bool = True
    lead_beat_interval: float = 0.5
    sweep_interval: float = 0.25
    """Slower than a bridge's (0.05 s): a worker process hears new work through the store's
    wake-ups (PostgreSQL ``NOTIFY``); the sweep and the poll are the fallback, and idle polls
    from many processes load the database."""
    poll_interval: float = 0.25
    grace: float = 10.0
    status_file: Path | None = None
    synchronous: str = "FULL"
    log_level: str = "INFO"
    log_format: LogFormat = "text"
    admin_port: int | None = None
    admin_host: str = "127.0.0.1"
    admin_token_file: Path = DEFAULT_DATA_DIR / "worker" / "admin-token"

    def __attrs_post_init__(self) -> None:
        problem = capacity_problem(self.capacity, self.concurrency)
        if problem is not None:
            raise ConfigError(f"capacity {problem}, got {_shown(self.capacity)}")
        if self.agent is not None and self.exchange is not None:
            raise ConfigError(
                "give either --agent (a Python agent) or --exchange (an outside program), not both"
            )

    @property
    def store_is_url(self) -> bool:
        return is_postgres_url(self.store)

    @property
    def agent_spec(self) -> str:
        return self.agent or DEFAULT_AGENT


_WORKER_PARSERS: Final = {
    **{name: _PARSERS[name] for name in attrs.fields_dict(WorkerConfig) if name in _PARSERS},
    "agent": lambda name, value: None if value is None else _PARSERS["agent"](name, value),
    "exchange": _optional_path,
}
WORKER_SETTINGS: Final = tuple(name for name in attrs.fields_dict(WorkerConfig))
assert set(_WORKER_PARSERS) == set(WORKER_SETTINGS)


def load_worker_config(
    *,
    file: Path | None = None,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> WorkerConfig:
    """Merge defaults, ``file`` (its ``[worker]`` table), ``environ`` and ``flags``."""
    values, raw = merge_settings("worker", _WORKER_PARSERS, file=file, flags=flags, environ=environ)
    problem = capacity_problem(
        values.get("capacity"), values.get("concurrency", DEFAULT_CONCURRENCY)
    )
    if problem is not None:
        raise ConfigError(f"capacity {problem}, got {_shown(raw['capacity'][0])}")
    return WorkerConfig(**values)


def prepare_worker_dirs(config: WorkerConfig) -> None:
    """Create the SQLite store's directory (0700) if the store is a file."""
    if not config.store_is_url:
        ensure_private_dir(Path(config.store).parent)
