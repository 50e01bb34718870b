"""How long a failed task waits before its next attempt, and how an agent names its failure.

Full-jitter exponential backoff, so a provider's outage does not dead-letter every message;
``Retry(after=...)`` and ``Permanent`` let an agent say better. See docs/guide/design.md, "Workers".
"""

from __future__ import annotations

import math
import random
import re
from typing import Final

import attrs

from ..._backoff import Backoff
from ..custody._limits import check_key

DEFAULT_FIRST: Final = 2.0
DEFAULT_CAP: Final = 300.0
MAX_DELAY: Final = 86_400.0
"""The longest cap a setting may ask for (a day)."""


def _finite_seconds(what: str, value: object, *, allow_zero: bool = True) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not allow_zero)
    ):
        low = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{what} must be a finite number of seconds {low}, got {value!r}")
    return float(value)


@attrs.frozen
class RetryBackoff:
    """The retry setting (``FIRST:CAP``): the delay before attempt ``n + 1`` after attempt
    ``n`` failed is the runtime's :class:`~tether._backoff.Backoff` from ``first`` doubling to
    ``cap`` with full jitter (uniform between 0 and the ceiling). ``first = 0``: no delay at
    all (retry at once)."""

    first: float = attrs.field(default=DEFAULT_FIRST)
    cap: float = attrs.field(default=DEFAULT_CAP)
    _schedule: Backoff = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        _finite_seconds("retry backoff first delay", self.first)
        _finite_seconds("retry backoff cap", self.cap)
        if self.cap < self.first:
            raise ValueError(
                f"retry backoff cap ({self.cap:g}) must be >= its first delay ({self.first:g})"
            )
        schedule = Backoff(float(self.first), float(self.cap), jitter="full")
        object.__setattr__(self, "_schedule", schedule)  # a frozen record's derived field

    def ceiling(self, attempt: int) -> float:
        """The longest delay after failed attempt ``attempt`` (1-based)."""
        return self._schedule.ceiling(attempt - 1)

    def delay(self, attempt: int, rng: random.Random) -> float:
        """A delay after failed attempt ``attempt`` (1-based), drawn with ``rng``."""
        return self._schedule.delay(attempt - 1, rng)

    @classmethod
    def parse(cls, text: str) -> RetryBackoff:
        """``"FIRST[:CAP]"`` in seconds (``"2:300"``, ``"0.5"``); ``"0"`` or ``"off"``: none."""
        spec = text.strip().lower()
        if spec in ("0", "off", "none"):
            return cls(0.0, 0.0)
        match = re.fullmatch(r"([0-9]*\.?[0-9]+)(?::([0-9]*\.?[0-9]+))?", spec)
        if match is None:
            raise ValueError("must be FIRST[:CAP] in seconds (e.g. 2:300), or 0/off for none")
        first = float(match[1])
        cap = float(match[2]) if match[2] is not None else max(first, DEFAULT_CAP)
        if cap < first:
            raise ValueError(
                f"must have CAP >= FIRST (FIRST:CAP in seconds), got {first:g}:{cap:g}"
            )
        if cap > MAX_DELAY:
            raise ValueError(f"must have CAP <= {MAX_DELAY:g} seconds, got {cap:g}")
        return cls(first, cap)

    def __str__(self) -> str:
        return "off" if self.first == 0 else f"{self.first:g}:{self.cap:g}"


class Retry(Exception):
    """Raise from an agent's task handler: this attempt failed, try again later.

    ``after``: seconds until the next attempt (a provider's ``Retry-After``); ``None``: the
    bridge's backoff decides. ``key``: a limit's key (``"openai:gpt-4o"``) that is paused for
    everyone on the store as long (a 429 says the provider's quota is spent for all, not just
    for this task). It still counts as a failed attempt (``max_attempts`` bounds how often a
    task comes back)."""

    def __init__(
        self,
        reason: str = "the agent asked for a retry",
        *,
        after: float | None = None,
        key: str | None = None,
    ):
        if not isinstance(reason, str) or not reason.strip():
            raise TypeError(f"Retry needs a non-empty str reason, got {reason!r}")
        if after is not None:
            after = _finite_seconds("Retry(after=)", after)
        if key is not None:
            key = check_key(key)
        super().__init__(reason)
        self.reason = reason
        self.after = after
        self.key = key


class Permanent(Exception):
    """Raise from an agent's task handler: this input can never succeed (dead-letter it now,
    with ``reason``, without burning the remaining attempts)."""

    def __init__(self, reason: str):
        if not isinstance(reason, str) or not reason.strip():
            raise TypeError(f"Permanent needs a non-empty str reason, got {reason!r}")
        super().__init__(reason)
        self.reason = reason
