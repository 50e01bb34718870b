"""Every backend logs each committed custody transition once, with its task id
(``tether.custody``; see ``_custody_log``), and nothing for a refused or no-op call."""

from __future__ import annotations

import logging

import pytest

from support.clock import FakeClock
from support.custody import MAX_ATTEMPTS
from tether.bridge import CustodyState, Task
from tether.bridge.custody import CustodyConflict, Store

D, INFO, W, E = logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR


def transitions(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, str, int]]:
    return [
        (r.task_id, r.custody_from, r.custody_to, r.levelno)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "tether.custody" and hasattr(r, "custody_to")
    ]


async def test_each_transition_is_logged_once_with_the_task_id(
    store: Store, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tether.custody")
    assert await store.ingest_many([Task(id="a", body="x"), Task(id="b", body="y")]) == [
        True,
        True,
    ]
    assert await store.ingest(Task(id="a", body="x")) is False  # replay: no transition
    await store.assign("a", "w1")
    claim = await store.claim("w1")
    assert claim is not None
    await store.complete(claim, "done")
    await store.mark_delivered("a")
    await store.mark_delivered("a")  # idempotent: logged once
    for attempt in range(1, MAX_ATTEMPTS):
        claim_b = await store.claim("w2", leaderless=True)
        assert claim_b is not None
        assert claim_b.attempt == attempt
        assert await store.fail(claim_b, "agent crashed") is CustodyState.PENDING
    claim_b = await store.claim("w2", leaderless=True)
    assert claim_b is not None
    fake_clock.advance(3600)  # the last attempt's lease runs out: dead
    [expiry] = await store.expire_leases()
    assert expiry.outcome is CustodyState.DEAD
    with pytest.raises(CustodyConflict):
        await store.mark_delivered("b")  # refused: nothing logged

    retries = [("b", "?", "claimed", D), ("b", "claimed", "pending", W)] * (MAX_ATTEMPTS - 1)
    assert transitions(caplog) == [
        ("a", "new", "pending", D),
        ("b", "new", "pending", D),
        ("a", "pending", "assigned", D),
        ("a", "?", "claimed", D),
        ("a", "claimed", "result", D),
        ("a", "result", "delivered", D),
        *retries,
        ("b", "?", "claimed", D),
        ("b", "claimed", "dead", D),  # DEBUG: the reconciler reports it with its evidence
    ]
    replay = [r for r in caplog.records if "replayed ingest" in r.getMessage()]
    assert [r.task_id for r in replay] == ["a"]  # type: ignore[attr-defined]
    failed = [r for r in caplog.records if r.levelno == W]
    assert all("agent crashed" in r.getMessage() for r in failed)
    assert "worker w2 attempt 1" in failed[0].getMessage()


async def test_a_dead_letter_is_an_error_line_naming_the_task(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether.custody")
    await store.ingest(Task(id="lost-1", body="x"))
    claim = await store.claim("w", leaderless=True)
    assert claim is not None
    await store.release(claim)
    await store.dead_letter("lost-1", "the gateway refused the reply: HTTP 400")
    await store.dead_letter("lost-1", "again")  # already dead: no second line
    moves = transitions(caplog)
    assert moves[0] == ("lost-1", "claimed", "pending", INFO)
    # a backend may not know which in-custody state a dead letter left ("?")
    assert moves[1:] in (
        [("lost-1", "pending", "dead", E)],
        [("lost-1", "?", "dead", E)],
    )
    [dead] = [r for r in caplog.records if r.levelno == E]
    assert "lost-1" in dead.getMessage()
    assert "HTTP 400" in dead.getMessage()
