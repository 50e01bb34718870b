"""Times and durations as log lines and reasons show them."""

from __future__ import annotations

import pytest

from tether._plumbing._when import duration, iso_time


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.0, "0.0 s"),
        (0.44, "0.4 s"),
        (9.94, "9.9 s"),
        (43.2, "43 s"),
        (59.6, "1 min"),
        (125, "2 min 5 s"),
        (3600, "1 h"),
        (3 * 3600 + 125, "3 h 2 min"),
    ],
)
def test_a_duration_is_as_precise_as_a_person_needs(seconds: float, shown: str) -> None:
    assert duration(seconds) == shown


def test_an_instant_is_iso_8601_utc_to_the_millisecond() -> None:
    assert iso_time(1796279477.324) == "2026-12-03T06:31:17.324Z"
