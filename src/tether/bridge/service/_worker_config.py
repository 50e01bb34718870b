"""``tether worker run``'s configuration: every process's settings (``_settings``) plus its
agent or file exchange, from a ``[worker]`` table; a shared setting is the bridge's own field
and parser, so it means the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from ..._plumbing._config_error import ConfigError
from ._config import DEFAULT_AGENT
from ._setting_values import parse_agent, parse_optional_path
from ._settings import DEFAULT_DATA_DIR, ProcessSettings, load_settings, settings_parsers


@attrs.frozen(kw_only=True)
class WorkerConfig(ProcessSettings):
    """Everything ``tether worker run`` needs. Build it with :func:`load_worker_config`.

    The store, pool, log and admin settings are every process's (``ProcessSettings``); the
    fields written here are the worker's own, and the defaults it sets apart.
    """

    agent: str | None = None
    """``module:factory``; None: the bundled echo agent, unless ``exchange`` is set."""
    exchange: Path | None = None
    """Host the file exchange under this directory for an outside program (no ``agent``)."""
    client_name: str = "tether-worker"
    sweep_interval: float = 0.25
    """Slower than a bridge's (0.05 s): a worker process hears new work through the store's
    wake-ups (PostgreSQL ``NOTIFY``); the sweep and the poll are the fallback, and idle polls
    from many processes load the database."""
    poll_interval: float = 0.25
    admin_token_file: Path = DEFAULT_DATA_DIR / "worker" / "admin-token"

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        if self.agent is not None and self.exchange is not None:
            raise ConfigError(
                "give either --agent (a Python agent) or --exchange (an outside program), not both"
            )

    @property
    def agent_spec(self) -> str:
        return self.agent or DEFAULT_AGENT


_WORKER_PARSERS: Final = settings_parsers(
    WorkerConfig,
    {
        "agent": lambda name, value: None if value is None else parse_agent(name, value),
        "exchange": parse_optional_path,
    },
)
WORKER_SETTINGS: Final = tuple(_WORKER_PARSERS)


def load_worker_config(
    *,
    file: Path | None = None,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> WorkerConfig:
    """Merge defaults, ``file`` (its ``[worker]`` table), ``environ`` and ``flags``."""
    return load_settings(
        WorkerConfig, "worker", _WORKER_PARSERS, file=file, flags=flags, environ=environ
    )
