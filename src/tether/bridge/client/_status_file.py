"""The gateway client's status file: whether the gateway is reachable, for an operator or a probe;
one small JSON object replaced atomically (never torn), never holding the token."""

from __future__ import annotations

import json
import time
from pathlib import Path

import attrs
import trio

from ..._plumbing._atomic_file import write_atomic
from ..._plumbing._converter import unstructure
from ..._plumbing._fs import ensure_private_dir
from ..._protocol._connection import ConnectionStatus, utc_now_iso


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
