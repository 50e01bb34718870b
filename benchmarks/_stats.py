"""A percentile of measured values, as every benchmark here reports its tails."""

from __future__ import annotations


def percentile(values: list[float], q: float) -> float:
    """The value at fraction ``q`` (0.5: the median, 0.99: p99) of ``values``, sorted: a
    measured value, never an interpolation."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
