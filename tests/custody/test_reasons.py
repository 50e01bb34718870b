"""Reasons a person reads (``store show``, the journal, dead letters) carry times as ISO
instants and ages, never raw epoch numbers (issue 32.9: "expired at 1796279477.324")."""

from __future__ import annotations

import re

from tether.bridge.custody._crashes import Expired, expiry_outcome

LEASE_END = 1796279477.324  # 2026-12-03T06:31:17.324Z


def _reason(*, last_beat: float | None, restarted: bool = False) -> str:
    expired = Expired("t", "w-1", 1, LEASE_END, False, 0, 0, last_beat, 1)
    outcome = expiry_outcome(
        expired,
        now=LEASE_END + 3.25,
        lease_s=30.0,
        max_attempts=5,
        max_crashes_alone=2,
        restarted=restarted,
    )
    return outcome.reason


def test_an_expired_lease_says_when_in_iso_and_how_long_ago() -> None:
    reason = _reason(last_beat=LEASE_END - 1.0)  # a live holder: a plain expiry
    assert reason.startswith(
        "lease of worker w-1 on attempt 1 expired at 2026-12-03T06:31:17.324Z (3.2 s ago)"
    ), reason
    assert not re.search(r"\d{9,}", reason), reason


def test_a_dead_holder_s_last_beat_is_an_instant_and_an_age() -> None:
    reason = _reason(last_beat=LEASE_END - 100.0)  # silent for long: its process died
    assert "its process died (last beat 2026-12-03T06:29:37.324Z, 1 min 43 s ago)" in reason
    assert not re.search(r"\d{9,}", reason), reason
    restarted = _reason(last_beat=LEASE_END, restarted=True)
    assert restarted.startswith(
        "lease of worker w-1 on attempt 1 lost: the worker restarted in a new process"
    ), restarted
    assert not re.search(r"\d{9,}", restarted), restarted
