"""The bridge's configuration: every process's settings (``_settings``) plus its gateway, runs
and retention, from a TOML ``[bridge]`` table, ``TETHER_*`` and flags.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from ..._plumbing._config_error import ConfigError as ConfigError
from ..custody._conversation import DEFAULT_ROOM_KEEP, MAX_HISTORY_TURNS
from ..custody._events import DEFAULT_EVENT_TTL_S
from ..custody._rooms import DEFAULT_ROOM_POLICY, MAX_DEBOUNCE_S, ROOM_POLICIES, RoomPolicy
from ..runs._retry import RetryBackoff
from ._setting_values import (
    parse_agent,
    parse_env_names,
    parse_int,
    parse_lower_choice,
    parse_optional_seconds,
    parse_path,
    parse_retry_backoff,
    parse_seconds,
    parse_url,
)
from ._settings import (
    DEFAULT_DATA_DIR,
    ProcessSettings,
    load_settings,
    settings_parsers,
)

DEFAULT_GATEWAY: Final = "http://127.0.0.1:8765"
DEFAULT_AGENT: Final = "tether.agents.echo:factory"

log = logging.getLogger("tether.bridge.config")


@attrs.frozen(kw_only=True)
class BridgeConfig(ProcessSettings):
    """Everything ``tether bridge run`` needs. Build it with :func:`load_config`.

    The store, pool, log and admin settings are every process's (``ProcessSettings``); the
    fields written here are the bridge's own: its gateway, its runs, what it keeps.
    """

    gateway: str = DEFAULT_GATEWAY
    token_file: Path = DEFAULT_DATA_DIR / "gateway" / "token"
    agent: str = DEFAULT_AGENT
    poll_wait: float = 30.0
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
    room_policy: RoomPolicy = DEFAULT_ROOM_POLICY
    """How a room's messages run (``tether.bridge.custody._rooms``): ``serial`` (one at a time,
    in arrival order, replies in order), ``replace`` (a newer message supersedes older ones
    still waiting or running) or ``concurrent``. An agent may override it (its factory's
    ``room_policy`` attribute, or a ``replace`` task handler)."""
    room_debounce: float = 0.0
    """Seconds (0: off) within which a room's messages are one burst (issue #52): a message
    waits this long before its run may start, and a newer one of its room within that time
    takes its place (the older ends as a no-send result "answered with <newer id>"); the run
    of the burst's last message sees the others as turns of its conversation. A message that
    comes once a run started follows ``room_policy``."""
    event_ttl: float = DEFAULT_EVENT_TTL_S
    """Seconds an event sent to the admin endpoint (``POST /v1/events``) is kept for the
    runs that wait for its key later (issue #52)."""
    stall_after: float = 300.0
    retention: float = 7 * 86_400.0
    """Seconds a delivered task is kept (so a gateway replay of it is recognised), then pruned.
    Keep it longer than the gateway's replay window. Dead tasks are never pruned."""
    room_keep: int = DEFAULT_ROOM_KEEP
    """Turns each room's conversation keeps at most (``--room-keep``); retention prunes the
    older ones, and a finished task whose turns it prunes loses their text from its row too
    (issue #53). What a run reads of them is ``history_turns``, a window of the newest."""
    history_keep: int | None = None
    """Deprecated: the old name of ``room_keep`` (``--history-keep``, ``TETHER_HISTORY_KEEP``,
    ``history_keep`` in the file), still read with a warning into ``room_keep`` (and None
    here after); set, it wins over a default ``room_keep`` (both set to different values:
    ``ConfigError``)."""
    tombstone_retention: float = 30 * 86_400.0
    """Seconds the id of a pruned delivered task is still recognised as a replay (a tombstone),
    counted from its delivery; then the tombstone goes too."""
    health_window: float = 120.0
    """``/healthz`` fails when the gateway has not answered for this many seconds."""
    quarantine_processes: int = 2
    """Quarantine children (one suspect each) this process runs at most at once."""
    max_quarantine_deaths: int = 2
    """Deaths of its quarantine child while it ran the task that make a task dead."""
    quarantine_memory: int = 0
    """MiB of address space a quarantine child may use (``RLIMIT_AS``); 0: no limit."""
    quarantine_env: tuple[str, ...] = ()
    """Environment variables a quarantine child gets beyond the base ones (names, or
    prefixes ending ``*``): what the agent reads, e.g. its API key's variable."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        if self.history_keep is None:
            return
        if self.room_keep not in (DEFAULT_ROOM_KEEP, self.history_keep):
            raise ConfigError(
                f"room_keep ({self.room_keep}) and its old name history_keep "
                f"({self.history_keep}) disagree: give room_keep only"
            )
        log.warning(
            "tether: warning: the setting history_keep (--history-keep, TETHER_HISTORY_KEEP) "
            "is now room_keep (--room-keep, TETHER_ROOM_KEEP); the old name still works"
        )
        object.__setattr__(self, "room_keep", self.history_keep)
        object.__setattr__(self, "history_keep", None)  # read once: a copy warns no more


_PARSERS: Final = settings_parsers(
    BridgeConfig,
    {
        "gateway": parse_url,
        "token_file": parse_path,
        "agent": parse_agent,
        "poll_wait": parse_seconds(0, 60),
        "retry_backoff": parse_retry_backoff,
        "run_timeout": parse_optional_seconds(0.1, 7 * 86_400),
        "heartbeat_interval": parse_seconds(0.1, 3600),
        "room_policy": parse_lower_choice(*ROOM_POLICIES),
        "room_debounce": parse_seconds(0, MAX_DEBOUNCE_S),
        "event_ttl": parse_seconds(1, 366 * 86_400),
        "stall_after": parse_seconds(0.1, 7 * 86_400),
        "retention": parse_seconds(60, 366 * 86_400),
        "tombstone_retention": parse_seconds(60, 10 * 366 * 86_400),
        "room_keep": parse_int(0, MAX_HISTORY_TURNS),
        "history_keep": parse_int(0, MAX_HISTORY_TURNS),
        "health_window": parse_seconds(1, 86_400),
        "quarantine_processes": parse_int(1, 64),
        "max_quarantine_deaths": parse_int(1, 100),
        "quarantine_memory": parse_int(0, 1 << 30),
        "quarantine_env": parse_env_names,
    },
)
SETTINGS: Final = tuple(_PARSERS)


def load_config(
    *,
    file: Path | None = None,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> BridgeConfig:
    """Merge defaults, ``file`` (TOML), ``environ`` (``TETHER_*``) and ``flags`` (None = unset).

    ``file`` defaults to ``$TETHER_CONFIG`` when that is set. Raises :class:`ConfigError`.
    """
    return load_settings(BridgeConfig, "bridge", _PARSERS, file=file, flags=flags, environ=environ)
