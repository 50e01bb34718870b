"""What both backends say about an operator's re-drive and cancel (``OperatorStore``).

The SQL stays per dialect; the reasons recorded, the refusals and the outcomes are built here,
so ``tether store retry`` and ``cancel`` read the same on SQLite and PostgreSQL. A recorded
reason starts with ``OPERATOR_PREFIX``: the journal triggers of both schemas read the actor
``operator`` off it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from ..custody._records import OperatorOutcome
from ..custody._rules import (
    OPERATOR_PREFIX,
    PRIORITY_RANK,
    CustodyState,
    check_task_id,
    operator_may,
)
from ._common import check_reason

CANCELLABLE: Final = tuple(
    s for s in CustodyState if operator_may(s, CustodyState.DEAD)
)  # pending, assigned, claimed
REDRIVE_PRIORITY: Final = PRIORITY_RANK["low"]
"""A re-driven task queues behind fresh work of normal and urgent priority: it keeps its age
(its place among low tasks), so a loop of re-drives of tasks that fail again takes what
capacity fresh work leaves and never the head of the queue (issue 33)."""
CANCELLABLE_SQL: Final = ", ".join(f"'{s.value}'" for s in CANCELLABLE)


def check_ids(ids: object) -> list[str]:
    """The ids of an operator's call, each checked (a bad one refuses the call), duplicates
    dropped with their order kept."""
    if isinstance(ids, str) or not isinstance(ids, Sequence):
        raise TypeError(f"ids must be a sequence of task ids, got {type(ids).__name__}")
    return list(dict.fromkeys(check_task_id(id) for id in ids))


def redrive_reason(reason: str | None) -> str:
    """The reason a re-driven task records (its journal row says who and why)."""
    if reason is None:
        return f"{OPERATOR_PREFIX}re-driven"
    return check_reason(f"{OPERATOR_PREFIX}re-driven: {check_reason(reason)}")


CANCELLED_PREFIX: Final = f"{OPERATOR_PREFIX}cancelled: "
"""How an operator-cancelled task's reason begins: ``retry --dead`` leaves such a task dead
unless asked to include it (a person was told "cancelled"); naming its id re-drives it."""

FORGOTTEN_REASON: Final = f"{CANCELLED_PREFIX}its room was forgotten (its text erased)"
"""The reason of every task a room's erasure leaves dead (a live one cancelled, a dead one's
own reason erased: it may quote the text), and the journal entry of each erased task. It reads
as an operator's cancel, so ``retry --dead`` leaves these tasks be (their message is gone) and
the gateway is told "an operator cancelled this message"."""


def cancel_reason(reason: str) -> str:
    """The reason a cancelled task records (it is dead with it)."""
    return check_reason(f"{CANCELLED_PREFIX}{check_reason(reason)}")


def check_contains(text: object) -> str | None:
    if text is None:
        return None
    if not isinstance(text, str) or not text:
        raise ValueError(f"reason_contains must be None or a non-empty str, got {text!r}")
    return text


def _refused_redrive(id: str, state: CustodyState | None) -> OperatorOutcome:
    if state is None:
        return OperatorOutcome(id, False, None, f"task {id!r}: no such task in the store")
    if state is CustodyState.DELIVERED:
        why = "it is delivered (its reply was confirmed to the gateway); nothing to re-drive"
    else:
        why = f"it is {state.value}, not dead (still in the bridge's hands); nothing changed"
    return OperatorOutcome(id, False, state, f"task {id!r} not re-driven: {why}")


def _refused_cancel(id: str, state: CustodyState | None) -> OperatorOutcome:
    if state is None:
        return OperatorOutcome(id, False, None, f"task {id!r}: no such task in the store")
    if state is CustodyState.DEAD:
        why = "it is already dead"
    elif state is CustodyState.DELIVERED:
        why = "it is delivered (its reply was confirmed to the gateway)"
    else:
        why = f"it is {state.value}: its reply is stored and waits for delivery"
    return OperatorOutcome(id, False, state, f"task {id!r} not cancelled: {why}")


def redrive_outcomes(
    ids: Sequence[str], moved: Mapping[str, CustodyState], seen: Mapping[str, CustodyState]
) -> list[OperatorOutcome]:
    """One outcome per id: re-driven (``moved``: id -> the state it left), else refused with
    the state ``seen`` (absent: no such task)."""
    return [
        OperatorOutcome(id, True, CustodyState.PENDING, f"task {id!r} re-driven: dead -> pending")
        if id in moved
        else _refused_redrive(id, seen.get(id))
        for id in ids
    ]


def cancel_outcomes(
    ids: Sequence[str], moved: Mapping[str, CustodyState], seen: Mapping[str, CustodyState]
) -> list[OperatorOutcome]:
    """One outcome per id: cancelled (``moved``: id -> the state it left), else refused."""
    return [
        OperatorOutcome(
            id, True, CustodyState.DEAD, f"task {id!r} cancelled: {moved[id].value} -> dead"
        )
        if id in moved
        else _refused_cancel(id, seen.get(id))
        for id in ids
    ]
