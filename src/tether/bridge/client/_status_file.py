"""The gateway client's status file: whether the gateway is reachable, for an operator or a probe;
one small JSON object replaced atomically (never torn), never holding the token."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import attrs
import trio

from ..._plumbing._atomic_file import write_atomic
from ..._plumbing._converter import unstructure
from ..._plumbing._fs import ensure_private_dir

STATUS_SCHEMA_VERSION = 1


@attrs.frozen
class ConnectionStatus:
    """A snapshot of the client's connection to its gateway.

    ``last_ok`` is the wall-clock time (ISO 8601, UTC) of the last successful request;
    ``backoff_s`` is the delay the client is waiting out before retrying (None when it is
    not backing off); ``error`` is the last failure, cleared by the next success.
    """

    gateway: str
    client: str
    connected: bool = False
    last_ok: str | None = None
    backoff_s: float | None = None
    error: str | None = None
    consecutive_failures: int = 0
    heartbeat: str = "unknown"  # unknown | ok | failing | unsupported
    """``failing``: the last beat failed, or the gateway stopped answering since the last good
    one (a beat could not get through either; the client beats again once it answers)."""
    pool: str | None = None
    """The stem of the process's pool names in the custody store (``<pool>-w1``...)."""
    updated_at: str = ""
    schema_version: int = STATUS_SCHEMA_VERSION

    def same_state(self, other: ConnectionStatus) -> bool:
        """True when only timestamps differ: no reason to rewrite the file right away."""
        return attrs.evolve(self, last_ok=None, updated_at="") == attrs.evolve(
            other, last_ok=None, updated_at=""
        )


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@attrs.define(eq=False)
class StatusFile:
    """Writes :class:`ConnectionStatus` snapshots to ``path``, coalescing unchanged ones.

    A changed state is written at once; an unchanged one (only ``last_ok`` moved) at most
    every ``refresh`` seconds, so a busy client does not fsync on every request.
    """

    path: Path
    refresh: float = 5.0
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _written: ConnectionStatus | None = attrs.field(default=None, init=False)
    _written_at: float = attrs.field(default=float("-inf"), init=False)

    async def publish(self, status: ConnectionStatus) -> None:
        async with self._lock:
            now = time.monotonic()
            if (
                self._written is not None
                and status.same_state(self._written)
                and now - self._written_at < self.refresh
            ):
                return
            stamped = attrs.evolve(status, updated_at=utc_now_iso())
            data = (json.dumps(unstructure(stamped), indent=2, sort_keys=True) + "\n").encode()
            if self._written is None:  # first write: missing parents are created 0700
                await trio.to_thread.run_sync(ensure_private_dir, self.path.parent)
            await trio.to_thread.run_sync(write_atomic, self.path, data, 0o600)
            self._written = status
            self._written_at = now
