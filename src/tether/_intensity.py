"""Restart intensity, as in Erlang/OTP: at most ``max_restarts`` restarts in ``period`` seconds.

The window is closed at its old end, as OTP's: a restart exactly ``period`` seconds old still
counts. See docs/guide/design.md, "Supervisors".
"""

from __future__ import annotations

from collections import deque

import attrs


@attrs.define
class RestartIntensity:
    max_restarts: int
    period: float
    _times: deque[float] = attrs.field(init=False, factory=deque)

    def __attrs_post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts!r}")
        if self.period <= 0:
            raise ValueError(f"period must be > 0 seconds, got {self.period!r}")

    def _forget_before(self, now: float) -> None:
        threshold = now - self.period
        while self._times and self._times[0] < threshold:
            self._times.popleft()

    def record(self, now: float) -> bool:
        """Record a restart at ``now``; False when it makes too many inside the window."""
        self._forget_before(now)
        self._times.append(now)
        return len(self._times) <= self.max_restarts

    def recent(self, now: float) -> int:
        """Restarts recorded within the window ending at ``now``."""
        self._forget_before(now)
        return len(self._times)
