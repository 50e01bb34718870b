"""Flow control (issue #38): the rules of a limit per key (a model provider, a model, a
tenant), kept by the custody store so every bridge and worker on it shares them.

A limit is a token bucket (``rate`` tokens a second, at most ``burst`` saved up; an acquire of
``weight`` spends that many) and a concurrency cap (permits held at once). The arithmetic lives
here, once: SQLite applies :func:`decide` in its writer's job; PostgreSQL applies the same
formulas in one statement (``stores/postgres/_limits``) and falls back to :func:`decide` to
say how long to wait. The conformance suite holds both to these numbers.
"""

from __future__ import annotations

import math
import re
from typing import Final

import attrs

LIMIT_KEY_RULE: Final = r"[A-Za-z0-9][A-Za-z0-9_.:@/+~-]{0,127}"
"""A limit's key: ``openai:gpt-4o``, ``tenant:acme`` (at most 128 characters)."""
_KEY_RE: Final = re.compile(LIMIT_KEY_RULE)
_UNITS: Final = {
    **dict.fromkeys(("s", "sec", "second"), 1.0),
    **dict.fromkeys(("m", "min", "minute"), 60.0),
    **dict.fromkeys(("h", "hour"), 3600.0),
}
WAITER_GRACE: Final = 1.0
"""A refused acquire counts among its key's waiters until its expected wait is over plus this
long (a run that waits for a holder, or one that died waiting, drops out by itself)."""
MAX_PAUSE: Final = 86_400.0
"""The longest pause one call asks for (a day)."""


def check_key(key: object) -> str:
    """``key`` if it is a valid limit key, else ``ValueError`` naming it."""
    if not isinstance(key, str) or _KEY_RE.fullmatch(key) is None:
        raise ValueError(
            f"limit key {key!r:.140} must match {LIMIT_KEY_RULE} (e.g. 'openai:gpt-4o')"
        )
    return key


def check_positive(value: object, what: str) -> float:
    """``value`` as a float if it is a finite number > 0, else an error naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number, got {type(value).__name__}")
    if not 0 < value < math.inf:
        raise ValueError(f"{what} must be finite and > 0, got {value!r}")
    return float(value)


def check_weight(weight: object) -> float:
    """A weight is a finite number > 0 (tokens one acquire spends)."""
    return check_positive(weight, "a permit's weight")


def parse_rate(text: str) -> float:
    """``"500/min"``, ``"20/s"``, ``"3600/hour"``, ``"2.5"`` (per second) -> tokens a second."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(?:/\s*([a-z]+))?\s*", text.lower())
    if match is None or (match[2] is not None and match[2] not in _UNITS):
        raise ValueError(f"rate {text!r} must be N/s, N/min or N/hour (e.g. 500/min)")
    per = _UNITS[match[2]] if match[2] else 1.0
    rate = float(match[1]) / per
    if rate <= 0:
        raise ValueError(f"rate {text!r} must be > 0")
    return rate


@attrs.frozen
class LimitSpec:
    """A declared limit: ``rate`` tokens a second (None: no rate), ``burst`` tokens at most in
    the bucket, ``concurrency`` permits held at once (None: no cap)."""

    key: str = attrs.field(converter=check_key)
    rate: float | None = None
    burst: float = 0.0
    concurrency: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.rate is not None and not (0 < self.rate < math.inf):
            raise ValueError(f"limit {self.key}: rate must be > 0 tokens a second")
        if self.concurrency is not None and not (
            isinstance(self.concurrency, int) and self.concurrency >= 1
        ):
            raise ValueError(f"limit {self.key}: concurrency must be an int >= 1")
        if not (0 <= self.burst < math.inf):
            raise ValueError(f"limit {self.key}: burst must be finite and >= 0")
        if self.rate is not None and self.burst < 1:
            # the default burst: one second's tokens (at least one)
            object.__setattr__(self, "burst", float(max(1, math.ceil(self.rate))))


def parse_limit(text: str) -> LimitSpec:
    """``"openai:gpt-4o rate=500/min burst=50 concurrency=20"``: a key, then any of ``rate``,
    ``burst`` (with a rate) and ``concurrency`` (at least one of rate and concurrency)."""
    key, *fields = text.split()
    given: dict[str, str] = {}
    for field in fields:
        name, eq, value = field.partition("=")
        if not eq or name not in ("rate", "burst", "concurrency") or name in given:
            raise ValueError(
                f"limit {text!r}: {field!r} is not one of rate=N/min, burst=N, concurrency=N"
            )
        given[name] = value
    if "rate" not in given and "concurrency" not in given:
        raise ValueError(f"limit {text!r} needs rate= or concurrency= (or both)")
    if "burst" in given and "rate" not in given:
        raise ValueError(f"limit {text!r}: burst= sizes a rate's bucket, give rate= too")
    try:
        rate = parse_rate(given["rate"]) if "rate" in given else None
        burst = float(given.get("burst", 0))
        concurrency = int(given["concurrency"]) if "concurrency" in given else None
    except ValueError as exc:
        raise ValueError(f"limit {text!r}: {exc}") from None
    return LimitSpec(key, rate, burst, concurrency)


@attrs.frozen
class Bucket:
    """A key's stored state: its spec, the tokens as of ``at``, permits in flight, and the
    pause (store clock)."""

    spec: LimitSpec
    tokens: float
    at: float
    in_flight: int = 0
    paused_until: float | None = None


@attrs.frozen
class Granted:
    """A permit was taken: ``permit`` is its id (None for a key without a declared limit);
    ``tokens`` the bucket's tokens after it."""

    permit: int | None
    tokens: float = math.inf


@attrs.frozen
class NoPermit:
    """No permit now: try again in ``seconds`` (None: when a holder releases, unknown), ``why``
    names what is short (``paused``, ``concurrency``, ``rate``)."""

    seconds: float | None
    why: str


def tokens_at(bucket: Bucket, now: float) -> float:
    """The bucket's tokens at ``now``: refilled at ``rate`` since ``at``, at most ``burst``
    (PostgreSQL's acquire statement spells this same formula)."""
    rate = bucket.spec.rate
    if rate is None:
        return math.inf
    return min(bucket.spec.burst, bucket.tokens + max(0.0, now - bucket.at) * rate)


def decide(bucket: Bucket, weight: float, now: float) -> Granted | NoPermit:
    """May a permit of ``weight`` be taken from ``bucket`` at ``now``? ``Granted`` (with the
    tokens left; its id is the store's) or how long to wait (a ``NoPermit``). A weight over the
    burst can never be served: ``ValueError``."""
    spec = bucket.spec
    if spec.rate is not None and weight > spec.burst:
        raise ValueError(
            f"a permit of weight {weight:g} can never be served by limit {spec.key!r} "
            f"(burst {spec.burst:g})"
        )
    if bucket.paused_until is not None and now < bucket.paused_until:
        return NoPermit(bucket.paused_until - now, "paused")
    if spec.concurrency is not None and bucket.in_flight >= spec.concurrency:
        return NoPermit(None, "concurrency")
    tokens = tokens_at(bucket, now)
    if spec.rate is not None and tokens < weight:
        return NoPermit((weight - tokens) / spec.rate, "rate")
    return Granted(None, tokens - weight if spec.rate is not None else math.inf)


def check_pause(after: object) -> float:
    """A pause lasts finite seconds, 0 to ``MAX_PAUSE``."""
    if isinstance(after, bool) or not isinstance(after, int | float):
        raise TypeError(f"a pause is seconds (a number), got {type(after).__name__}")
    if not 0 <= after <= MAX_PAUSE:
        raise ValueError(f"a pause must be 0 to {MAX_PAUSE:g} seconds, got {after!r}")
    return float(after)


@attrs.frozen
class LimitView:
    """What ``tether store limits`` shows of a key at one moment."""

    spec: LimitSpec
    tokens: float
    in_flight: int
    paused_until: float | None
    waiters: int
