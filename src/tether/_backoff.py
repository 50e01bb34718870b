"""Backoff between restarts of one child: exponential, capped, optionally jittered.

Why jitter: after a shared dependency (a gateway, a database) comes back, children that
crashed together would otherwise all retry at the same instants. Jitter only ever *shortens* a
delay, so ``maximum`` stays a hard bound that operators can rely on.
"""

from __future__ import annotations

import random

import attrs

_MAX_EXPONENT = 64  # 2**64 times any sane initial delay is already far past any cap


@attrs.frozen(kw_only=True)
class Backoff:
    """Delay before restart number ``attempt`` (0-based) since the child last stayed up.

    ``delay(n) = min(maximum, initial * factor**n)``, then, with ``jitter = j > 0``, scaled by
    a uniform factor in ``(1 - j, 1]``. ``jitter = 0`` gives exact delays (tests, replays).
    """

    initial: float
    maximum: float
    jitter: float = 0.0
    factor: float = 2.0

    def __attrs_post_init__(self) -> None:
        if self.initial < 0:
            raise ValueError(f"backoff_initial must be >= 0, got {self.initial!r}")
        if self.maximum < self.initial:
            raise ValueError(
                f"backoff_max ({self.maximum!r}) must be >= backoff_initial ({self.initial!r})"
            )
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be a fraction in [0, 1], got {self.jitter!r}")
        if self.factor < 1.0:
            raise ValueError(f"backoff factor must be >= 1, got {self.factor!r}")

    def delay(self, attempt: int, rng: random.Random) -> float:
        base = min(self.maximum, self.initial * self.factor ** min(attempt, _MAX_EXPONENT))
        if self.jitter:
            base *= 1.0 - self.jitter * rng.random()
        return base
