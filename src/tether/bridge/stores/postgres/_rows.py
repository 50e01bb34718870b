"""What every PostgreSQL part reads and writes the same way: bodies as bytes, a task, a record,
where a task stands after a missed compare-and-set, a claim's fence as parameters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from ...custody._rules import Claim, CustodyState, Result, Task, TaskRecord
from .._common import FoundState, record_from_row, task_from_row
from ._connection import Conn
from ._listen import RESULT

_UTF8: Final = "utf-8"
_ERRORS: Final = "surrogatepass"  # any Python str round-trips exactly, as in check_body


def encode(text: str) -> bytes:
    return text.encode(_UTF8, _ERRORS)


def decode(data: bytes) -> str:
    return bytes(data).decode(_UTF8, _ERRORS)


def task_of(row: Sequence[Any]) -> Task:
    return task_from_row(row, decode(row[1]))


def claim_of(row: Sequence[Any], worker: str, until: float, *, suspect: bool = False) -> Claim:
    """A claim from a claiming statement's row: the task's five columns (``_sql.TASK_COLS``),
    then ``attempt, run_no`` (and what else the statement returns, read by name elsewhere)."""
    _id, _body, _room, _rank, _headers, attempt, run, *_ = row
    return Claim(task_of(row), worker, attempt, until, run, suspect=suspect)


def result_of(row: Sequence[Any]) -> Result:
    """A ready result from ``_sql``'s ``ready``/``take_results`` row: the task's columns, then
    ``result, owner, attempt, no_send``."""
    _id, _body, _room, _rank, _headers, result, owner, attempt, no_send, *_ = row
    return Result(task_of(row), decode(result), owner, attempt, no_send)


def one(row: Sequence[Any] | None) -> float | None:
    """The first column of ``row`` as a float, or None (a NULL, or no row)."""
    return None if row is None or row[0] is None else float(row[0])


def seen(conn: Conn, state_sql: str, params: Mapping[str, Any]) -> FoundState | None:
    """Where the task of a compare-and-set that missed stands now (None: no such task)."""
    row = conn.execute(state_sql, params).fetchone()
    if row is None:
        return None
    state, owner, attempt, lease_until, reason, run = row
    return FoundState(CustodyState(state), owner, attempt, lease_until, reason, run=run)


def record_of(row: Sequence[Any]) -> TaskRecord:
    return record_from_row(row, decode)


def fence(claim: Claim, now: float) -> dict[str, Any]:
    """A claim's fence as parameters (checked by the frame)."""
    return {"id": claim.task.id, "worker": claim.worker, "run": claim.run, "now": now}


def complete_params(
    claim: Claim, body: str, no_send: bool, now: float, channel: str
) -> dict[str, Any]:
    """The parameters of the fenced ``complete`` statement (``Sql.complete``)."""
    params = fence(claim, now)
    params.update(body=encode(body), no_send=no_send, chan=channel, payload=RESULT)
    return params
