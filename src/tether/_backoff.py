"""The one backoff schedule (restarts, the gateway client, task retries): exponential, capped,
jittered so things that failed together do not all come back at once; jitter only shortens."""

from __future__ import annotations

import random
from typing import Literal

import attrs

_MAX_EXPONENT = 64  # 2**64 times any sane initial delay is already far past any cap


@attrs.define(eq=False)
class Backoff:
    """Delay before retry ``n`` (0-based): ``ceiling(n) = min(maximum, initial * multiplier**n)``,
    then jittered. The defaults are the gateway protocol's: 1 s doubling to 60 s, up to 20 %
    shorter.

    ``jitter`` is a fraction ``j`` (each delay drawn uniformly in ``(1 - j, 1]`` of its ceiling;
    ``0`` gives exact delays for tests and replays), or ``"full"`` (AWS's full jitter: uniform
    between 0 and the ceiling, which spreads a burst of failures the widest). ``initial = 0``
    means no waiting at all.

    Use it either way: :meth:`delay` for attempt counts kept elsewhere (the supervisor counts
    per child), or :meth:`next_delay` / :meth:`reset` for a retry loop's consecutive failures.
    ``rng`` is injectable so tests (and simulations) get an exact schedule.
    """

    initial: float = 1.0
    maximum: float = 60.0
    multiplier: float = 2.0
    jitter: float | Literal["full"] = 0.2
    rng: random.Random = attrs.field(factory=random.Random, repr=False)
    failures: int = attrs.field(default=0, init=False)
    """Consecutive failures :meth:`next_delay` has counted since the last :meth:`reset`."""

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.initial <= self.maximum:
            raise ValueError(
                f"backoff needs 0 <= initial <= maximum, got {self.initial!r} and {self.maximum!r}"
            )
        if self.multiplier < 1:
            raise ValueError(f"backoff multiplier must be >= 1, got {self.multiplier!r}")
        if self.jitter != "full" and not (
            isinstance(self.jitter, int | float) and 0 <= self.jitter <= 1
        ):
            raise ValueError(
                f"backoff jitter must be a fraction in [0, 1] or 'full', got {self.jitter!r}"
            )

    def ceiling(self, attempt: int) -> float:
        """The delay before retry ``attempt`` (0-based) without jitter: the longest it can be."""
        exponent = min(max(attempt, 0), _MAX_EXPONENT)
        return min(self.maximum, self.initial * self.multiplier**exponent)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """A delay before retry ``attempt`` (0-based), drawn with ``rng`` (or ``self.rng``)."""
        rng = self.rng if rng is None else rng
        ceiling = self.ceiling(attempt)
        if self.jitter == "full":
            return rng.uniform(0.0, ceiling)
        if self.jitter:
            ceiling *= 1.0 - self.jitter * rng.random()
        return ceiling

    def next_delay(self) -> float:
        """The delay before the next retry; each call counts one more consecutive failure."""
        delay = self.delay(self.failures)
        self.failures += 1
        return delay

    def reset(self) -> None:
        """A success: the next failure starts again from ``initial``."""
        self.failures = 0
