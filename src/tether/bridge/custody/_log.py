"""One log line per committed custody transition, on ``tether.custody``, for every backend.

Fields ``task_id``, ``custody_from``, ``custody_to``; forward moves at DEBUG, back to the pool at
INFO, a failed attempt at WARNING, a dead letter at ERROR.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from ._rules import Claim, CustodyState

if TYPE_CHECKING:
    from ._records import LeaseExpiry

log = logging.getLogger("tether.custody")

_LEVELS = {
    CustodyState.PENDING: logging.INFO,  # back to the pool (ingest logs its own DEBUG line)
    CustodyState.ASSIGNED: logging.DEBUG,
    CustodyState.CLAIMED: logging.DEBUG,
    CustodyState.RESULT: logging.DEBUG,
    CustodyState.DELIVERED: logging.DEBUG,
    CustodyState.DEAD: logging.ERROR,
    CustodyState.WAITING: logging.INFO,  # a run parked itself (a durable sleep)
}


def moved(
    task_id: str,
    source: CustodyState | str | None,
    target: CustodyState,
    *,
    worker: str | None = None,
    attempt: int | None = None,
    reason: str | None = None,
    level: int | None = None,
) -> None:
    """Log that ``task_id`` moved from ``source`` (None: unknown/any) to ``target``."""
    level = _LEVELS[target] if level is None else level
    if not log.isEnabledFor(level):
        return
    src = "?" if source is None else str(source)
    who = "" if worker is None else f" worker {worker}"
    nth = "" if attempt is None else f" attempt {attempt}"
    why = "" if reason is None else f": {reason}"
    log.log(
        level,
        "task %s: %s -> %s%s%s%s",
        task_id,
        src,
        target,
        who,
        nth,
        why,
        extra={"task_id": task_id, "custody_from": src, "custody_to": str(target)},
    )


def left_claim(
    claim: Claim, target: CustodyState, *, reason: str | None = None, level: int | None = None
) -> None:
    """Log that ``claim``'s task moved ``claimed -> target`` under that claim (its worker and
    attempt): a completion, a failure, a park, a quarantine death."""
    moved(
        claim.task.id,
        CustodyState.CLAIMED,
        target,
        worker=claim.worker,
        attempt=claim.attempt,
        reason=reason,
        level=level,
    )


def ingested(ids: Iterable[str], new: Iterable[bool]) -> None:
    if not log.isEnabledFor(logging.DEBUG):
        return
    for task_id, fresh in zip(ids, new, strict=True):
        if fresh:
            moved(task_id, "new", CustodyState.PENDING, level=logging.DEBUG)
        else:
            log.debug(
                "task %s: replayed ingest, already in the store (no change)",
                task_id,
                extra={"task_id": task_id},
            )


def assigned(pairs: Iterable[tuple[str, str]], ids_moved: Collection[str]) -> None:
    """One line per ``(id, worker)`` pair whose task is in ``ids_moved`` (now assigned)."""
    for task_id, worker in pairs:
        if task_id in ids_moved:
            moved(task_id, CustodyState.PENDING, CustodyState.ASSIGNED, worker=worker)


def claimed(claims: Iterable[Claim], worker: str) -> None:
    """One line per claim ``worker`` now holds (its lease starts)."""
    for claim in claims:
        moved(claim.task.id, None, CustodyState.CLAIMED, worker=worker, attempt=claim.attempt)


def expired(expiries: Iterable[LeaseExpiry]) -> None:
    """One line per lease the store expired (at DEBUG: the reconciler reports each one, with
    its evidence)."""
    for expiry in expiries:
        moved(
            expiry.id,
            CustodyState.CLAIMED,
            expiry.outcome,
            worker=expiry.worker,
            attempt=expiry.attempt,
            reason=expiry.reason,
            level=logging.DEBUG,
        )


def returned(task_ids: Iterable[str], source: CustodyState, *, worker: str, why: str) -> None:
    for task_id in task_ids:
        moved(task_id, source, CustodyState.PENDING, worker=worker, reason=why)


def pruned(count: int, before: float) -> None:
    if count:
        log.info("pruned %d delivered task(s) last updated before %.3f", count, before)
