"""Exponential backoff with jitter, for retrying a remote that is down or overloaded.

Jitter spreads the retries of many clients so a recovering gateway is not hit by all of them
at the same instant. The schedule itself is the runtime's (``tether._backoff.Backoff``, which
the supervisor uses between restarts); this class adds the count of consecutive failures that
a retry loop needs.
"""

from __future__ import annotations

import random

import attrs

from ..._backoff import Backoff as _Schedule


@attrs.define(eq=False)
class Backoff:
    """Delays ``initial * multiplier**n`` capped at ``maximum``, each shortened by up to ``jitter``.

    ``rng`` is injectable so tests (and simulations) get an exact schedule.
    """

    initial: float = 1.0
    maximum: float = 60.0
    multiplier: float = 2.0
    jitter: float = 0.2
    rng: random.Random = attrs.field(factory=random.Random)
    failures: int = attrs.field(default=0, init=False)
    _schedule: _Schedule = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        if not 0 < self.initial <= self.maximum:
            raise ValueError(
                f"backoff needs 0 < initial <= maximum, got {self.initial} and {self.maximum}"
            )
        if self.multiplier < 1:
            raise ValueError(f"backoff multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"backoff jitter must be in [0, 1), got {self.jitter}")
        self._schedule = _Schedule(
            initial=self.initial, maximum=self.maximum, jitter=self.jitter, factor=self.multiplier
        )

    def next_delay(self) -> float:
        """The delay before the next retry; each call counts one more consecutive failure."""
        delay = self._schedule.delay(self.failures, self.rng)
        self.failures += 1
        return delay

    def reset(self) -> None:
        """A success: the next failure starts again from ``initial``."""
        self.failures = 0
