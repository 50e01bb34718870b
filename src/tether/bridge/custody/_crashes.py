"""Crashes are not the task's fault until proven: crash expiries, suspects, poison tasks.

A lease lost to a dead process spends no failure; its tasks become suspects. A worker that can
start its agent in a child runs a suspect in a quarantine process (``pool._quarantine``): only
that child's death while it runs the task, seen by its live parent, counts against the task
(``quarantine_death_outcome``), and the worker's own process dying blames nobody; a run that
was waiting for a permit when its process died ran none of its own code and becomes no
suspect (``Expired.waiting_for``). A worker that
cannot (an agent given as an object) runs a suspect alone in its process, and one that kills
it twice alone is dead. See docs/guide/design.md, "Crash accounting".
"""

from __future__ import annotations

import re
from typing import Final

import attrs

from ..._plumbing._when import duration, iso_time
from ._rules import CustodyState

DEFAULT_MAX_CRASHES_ALONE: Final = 2
"""Crashes of its process while it ran alone that prove a task kills its process."""

_PROCESS_NAME: Final = re.compile(r"^(.+-w)[0-9]+$")
SUSPECTS_RUN: Final = "in a quarantine process, or alone in its process where none can start"
"""Where a suspect runs, in words for people (the worker decides: ``pool._quarantine``)."""


def run_words(attempt: int, crash_count: int) -> str:
    """A task's run counter in words: ``attempt`` counts runs, and a run lost to a crash is
    no failed attempt, so after a crash the counter is shown as the run it is."""
    if not crash_count:
        return f"attempt {attempt}"
    crashes = (
        "1 crash, not a failed attempt"
        if crash_count == 1
        else (f"{crash_count} crashes, not failed attempts")
    )
    return f"run {attempt} ({crashes})"


def silent_after(lease_s: float) -> float:
    """How long a holder may go without a beat and still count as alive: half the lease.

    A live worker beats and renews together every ``min(2 s, lease / 3)``, so at expiry time a
    live holder beat within a third of the lease; a dead one last beat about a whole lease
    before its lease ran out."""
    return lease_s / 2


def holder_died(last_beat: float | None, now: float, lease_s: float) -> bool:
    """Did the holder of an expired lease die? Its beat row is there and silent past
    ``silent_after`` (``None``, no row: no evidence of a crash)."""
    return last_beat is not None and last_beat < now - silent_after(lease_s)


def process_prefix(worker: str) -> str | None:
    """The name prefix every worker of ``worker``'s process shares: ``<stem>-w`` for a pool
    name ``<stem>-w<N>`` (bridges and ``tether worker run`` name theirs so, one stem per
    process). ``None``: any other name is a process of its own."""
    m = _PROCESS_NAME.match(worker)
    return m.group(1) if m else None


def failures(attempt: int, crash_count: int) -> int:
    """How many of the runs 1..``attempt`` failed (or will have, if run ``attempt`` fails):
    the runs lost to crashes do not count. ``max_attempts`` bounds this number."""
    return attempt - crash_count


def check_max_crashes_alone(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_crashes_alone must be an int >= 1, got {value!r}")
    return value


@attrs.frozen
class Expired:
    """One expired (or orphaned) lease as the store read it, with its holder's last beat."""

    id: str
    owner: str
    attempt: int
    lease_until: float
    suspect: bool
    crash_count: int
    crashes_alone: int
    last_beat: float | None
    run: int
    """The lease's run number: its settlement is fenced on it."""
    quarantined: bool = False
    """The suspect ran in a quarantine child: its worker's process dying blames nobody."""
    waiting_for: str | None = None
    """The key of a limit whose permit the run was waiting for when its holder was last seen
    alive (a waiter row newer than the holder's last beat): it ran none of its own code."""


@attrs.frozen
class ExpiryOutcome:
    """What the store writes for one expired lease."""

    state: CustodyState
    attempt: int
    crash_count: int
    crashes_alone: int
    suspect: bool
    crash: bool
    reason: str


def expiry_outcome(
    e: Expired,
    *,
    now: float,
    lease_s: float,
    max_attempts: int,
    max_crashes_alone: int,
    restarted: bool = False,
) -> ExpiryOutcome:
    """Decide one expired lease (``restarted``: its holder's name came back in a new process,
    so the holder died whatever its beats say). Every reason starts "lease of worker", which
    the journal's triggers read as the reconciler's move."""
    lost = (
        f"lease of worker {e.owner} on attempt {e.attempt} lost: the worker restarted in a new "
        "process"
        if restarted
        else f"lease of worker {e.owner} on attempt {e.attempt} expired at "
        f"{iso_time(e.lease_until)} ({duration(now - e.lease_until)} ago)"
    )
    if restarted or holder_died(e.last_beat, now, lease_s):
        if not restarted:
            beat = (
                "never beat"
                if e.last_beat is None
                else f"last beat {iso_time(e.last_beat)}, {duration(now - e.last_beat)} ago"
            )
            lost += f"; its process died ({beat})"
        if e.waiting_for is not None:
            return _waiter_outcome(e, lost)
        return _crash_outcome(e, lost, max_crashes_alone)
    if failures(e.attempt, e.crash_count) >= max_attempts:
        return ExpiryOutcome(
            CustodyState.DEAD,
            e.attempt,
            e.crash_count,
            e.crashes_alone,
            False,
            False,
            f"{lost}; max_attempts {max_attempts} reached",
        )
    return ExpiryOutcome(
        CustodyState.PENDING,
        e.attempt + 1,
        e.crash_count,
        e.crashes_alone,
        False,
        False,
        f"{lost}; repooled as attempt {e.attempt + 1}",
    )


def _waiter_outcome(e: Expired, lost: str) -> ExpiryOutcome:
    """An expired lease whose holder's process died while its run waited for a permit: a
    crash (a run lost, not a failed attempt) that proves nothing of the task, which ran none
    of its own code. It becomes no suspect (one already is stays one, its count alone kept):
    a waiter need not run in quarantine, which would cost a process start each."""
    crashes = e.crash_count + 1
    still = "still a suspect" if e.suspect else "not a suspect"
    return ExpiryOutcome(
        CustodyState.PENDING,
        e.attempt + 1,
        crashes,
        e.crashes_alone,
        e.suspect,
        True,
        f"{lost} while it waited for a permit of {e.waiting_for}: none of its own doing "
        f"(crash {crashes}, not a failed attempt); {still}",
    )


def _crash_outcome(e: Expired, lost: str, max_crashes_alone: int) -> ExpiryOutcome:
    """An expired lease whose holder's process died (``lost`` says how): a crash, not a
    failed attempt. The task becomes a suspect that runs alone; a suspect that kills its
    process ``max_crashes_alone`` times alone is dead; one that ran in quarantine blames
    nobody (its worker's process died, not its own)."""
    crashes = e.crash_count + 1
    if e.suspect and e.quarantined:
        return ExpiryOutcome(
            CustodyState.PENDING,
            e.attempt + 1,
            crashes,
            e.crashes_alone,
            True,
            True,
            f"{lost} while it ran in a quarantine process: its worker's process died, not "
            f"its own, which blames nobody (crash {crashes}, not a failed attempt); still a "
            "suspect, it runs in quarantine again",
        )
    if e.suspect:
        alone = e.crashes_alone + 1
        if alone >= max_crashes_alone:
            return ExpiryOutcome(
                CustodyState.DEAD,
                e.attempt,
                crashes,
                alone,
                False,
                True,
                f"killed its worker process {alone} times while running alone ({lost})",
            )
        return ExpiryOutcome(
            CustodyState.PENDING,
            e.attempt + 1,
            crashes,
            alone,
            True,
            True,
            f"{lost} while it ran alone: crash {alone} of {max_crashes_alone} alone, not a "
            f"failed attempt; still a suspect, it runs apart from other tasks again",
        )
    return ExpiryOutcome(
        CustodyState.PENDING,
        e.attempt + 1,
        crashes,
        e.crashes_alone,
        True,
        True,
        f"{lost}: crash {crashes}, not a failed attempt; a suspect now, it runs next apart "
        f"from other tasks ({SUSPECTS_RUN})",
    )


DEFAULT_MAX_QUARANTINE_DEATHS: Final = 2
"""Deaths of its quarantine child while it ran the task that prove a task kills processes."""


def check_max_quarantine_deaths(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_quarantine_deaths must be an int >= 1, got {value!r}")
    return value


def quarantine_death_outcome(
    *, attempt: int, deaths: int, max_deaths: int, death: str
) -> tuple[CustodyState, str]:
    """A quarantine child died while it ran the task (``death`` says how, naming the signal
    or exit code; ``deaths`` counts the ones before): dead at ``max_deaths``, else pending
    again, still a suspect, as the next attempt (a death is a crash: it spends no failure)."""
    now = deaths + 1
    if now >= max_deaths:
        return (
            CustodyState.DEAD,
            f"quarantine: killed its quarantine process {now} times (last: {death}); "
            f"max_quarantine_deaths {max_deaths} reached",
        )
    return (
        CustodyState.PENDING,
        f"quarantine: {death} in run {attempt}: death {now} of {max_deaths}, not a failed "
        "attempt; it runs in quarantine again",
    )
