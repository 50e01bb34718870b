"""Crashes are not the task's fault until proven: crash expiries, suspects, poison tasks.

A lease lapses for one of two reasons. Either its holder is alive and let it go (a run past its
timeout plus grace: the worker stops renewing it), which is the task's failure and burns an
attempt as before; or the holder's process died (SIGKILL, OOM, power), which says nothing
about the task: every task in flight in that process lost its lease at once. Counting those as
failed attempts dead-lettered healthy tasks under SIGKILL chaos. Here:

- **Crash expiry.** An expired lease whose holder is *silent* (its beat row is there, the last
  beat older than ``silent_after``: half the lease, while a live worker beats every third of
  it at most) is a crash expiry: the task goes back to pending, its ``crash_count`` goes up,
  and it becomes a *suspect*. Its ``attempt`` still goes up by one: the attempt is the run's
  number and half of every fence, so a holder that only *looked* dead (a process frozen for
  half a lease) can never complete the run that replaced its own, even under the same name.
  What a crash does not spend is the failure budget: a task dies of failures once
  ``attempt - crash_count`` reaches ``max_attempts`` (``failures``), never of crashes.
- **Restarts.** A worker that starts under the name of a process that died (a SQLite bridge
  keeps its names across restarts) takes its predecessor's claims back the same way before its
  first beat (``recover_claims``), so the fresh beats under that name never make a dead holder
  look alive. A holder with no beat row at all is not evidence of a crash (a clean stop
  removes the row after releasing its claims; a claimant outside the pool never beat): its
  expiry counts as a failed attempt, as before.
- **Suspects run alone.** A suspect is never assigned by the lead (its view leaves suspects
  out) and is claimed by one rule on both stores, in the claim's own transaction: a worker
  takes a suspect only when no suspect is claimed anywhere in the pool AND nothing at all is
  claimed in the worker's *process* (its workers share the name stem ``<stem>-w<N>``, see
  ``process_prefix``); that claim is the only one of its batch. While a suspect is claimed in
  a process, no worker of that process claims anything else. While a suspect waits (due, its
  room lets it run) and none is claimed, no worker claims new non-suspect work, so a busy
  process drains and takes it (a pause of one run's length; suspects only exist after a
  crash). Suspects run most-crashed first, so a task that was in flight at a crash is cleared
  (or convicted) right after the restart. SQLite decides each claim in its one writer;
  PostgreSQL takes a suspect under advisory locks (the pool's, and its process's exclusively,
  while other claims of a process hold that one shared once suspects are in play). One
  PostgreSQL residual: a claim statement that began just before a task became a suspect may
  still commit beside that suspect's first claim in the same process (a window of one
  statement); that run is then not alone, and a crash during it would still count against the
  suspect, but conviction needs two crashes alone, so one such coincidence convicts nobody.
- **Why alone in its process and not only in its worker.** A process dies as a whole: if a
  suspect shared its process with other runs, the next crash could be any of theirs (a poison
  task that was never yet suspected), and the suspect would be blamed for it. Alone in its
  process, a crash while it runs has one candidate cause. Other *processes* keep running
  their non-suspect work (a crash of theirs is not this process's), and only one suspect is in
  flight in the whole pool, so two suspects never share the blame of one crash either.
- **Proof.** A crash expiry of a suspect (it ran alone) counts ``crashes_alone``; at
  ``max_crashes_alone`` (default 2) the task goes dead, "killed its worker process 2 times
  while running alone". Nothing else dead-letters a task for crashes: an innocent task in
  flight at any number of crashes among other tasks is never dead-lettered. The residual
  error: an outside kill that lands twice on the same suspect's lone runs is
  indistinguishable from the task killing its process; most-crashed-first makes that need two
  kills right after two restarts.
- **Clearing.** A suspect that completes, fails (a normal failure, a timeout, a ``Retry``) or
  loses its lease to a live holder stops being a suspect (its crash counts stay, as history).
  A soft stop's ``release`` keeps it a suspect: it did not run to an end.
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
        crashes = e.crash_count + 1
        if not restarted:
            beat = (
                "never beat"
                if e.last_beat is None
                else f"last beat {iso_time(e.last_beat)}, {duration(now - e.last_beat)} ago"
            )
            lost += f"; its process died ({beat})"
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
                f"failed attempt; it runs alone again as attempt {e.attempt + 1}",
            )
        return ExpiryOutcome(
            CustodyState.PENDING,
            e.attempt + 1,
            crashes,
            e.crashes_alone,
            True,
            True,
            f"{lost}: crash {crashes}, not a failed attempt; a suspect now, it runs alone as "
            f"attempt {e.attempt + 1}",
        )
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
