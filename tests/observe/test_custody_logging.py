"""Every custody transition is logged once, after it committed, with its task id."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tether.bridge import CustodyConflict, SqliteStore, Task


def transitions(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, str, int]]:
    return [
        (r.task_id, r.custody_from, r.custody_to, r.levelno)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "tether.custody" and hasattr(r, "custody_to")
    ]


async def test_each_transition_is_logged_with_the_task_id(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tether.custody")
    clock = [1000.0]
    store = await SqliteStore.open(
        tmp_path / "c.db", clock=lambda: clock[0], max_attempts=2, synchronous="NORMAL"
    )
    try:
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
        claim_b = await store.claim("w2", leaderless=True)
        assert claim_b is not None
        assert (await store.fail(claim_b, "agent crashed")).value == "pending"
        claim_b = await store.claim("w2", leaderless=True)
        assert claim_b is not None
        clock[0] += 3600  # the lease runs out: attempt 2 of 2 -> dead
        [expiry] = await store.expire_leases()
        assert expiry.outcome.value == "dead"
        with pytest.raises(CustodyConflict):
            await store.mark_delivered("b")  # refused: nothing logged
    finally:
        await store.aclose()

    d, i, w, e = logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR
    assert transitions(caplog) == [
        ("a", "new", "pending", d),
        ("b", "new", "pending", d),
        ("a", "pending", "assigned", d),
        ("a", "?", "claimed", d),
        ("a", "claimed", "result", d),
        ("a", "result", "delivered", d),
        ("b", "?", "claimed", d),
        ("b", "claimed", "pending", w),
        ("b", "?", "claimed", d),
        ("b", "claimed", "dead", d),
    ]
    assert i not in {lvl for *_, lvl in transitions(caplog)}
    replay = [r for r in caplog.records if "replayed ingest" in r.getMessage()]
    assert [r.task_id for r in replay] == ["a"]  # type: ignore[attr-defined]
    [failed] = [r for r in caplog.records if r.levelno == w]
    assert "agent crashed" in failed.getMessage()
    assert "worker w2 attempt 1" in failed.getMessage()
    assert e not in {lvl for *_, lvl in transitions(caplog)}


async def test_a_dead_letter_is_an_error_line_naming_the_task(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether.custody")
    store = await SqliteStore.open(tmp_path / "c.db", synchronous="NORMAL")
    try:
        await store.ingest(Task(id="lost-1", body="x"))
        claim = await store.claim("w", leaderless=True)
        assert claim is not None
        await store.release(claim)
        await store.dead_letter("lost-1", "the gateway refused the reply: HTTP 400")
        await store.dead_letter("lost-1", "again")  # already dead: no second line
    finally:
        await store.aclose()
    assert transitions(caplog) == [
        ("lost-1", "claimed", "pending", logging.INFO),
        ("lost-1", "pending", "dead", logging.ERROR),
    ]
    [dead] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "lost-1" in dead.getMessage()
    assert "HTTP 400" in dead.getMessage()


async def test_a_task_the_gateway_client_skips_is_logged_with_its_id(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    import httpx

    from tether.bridge import GatewayClient, write_token

    tasks = [{"id": "../../etc/passwd", "body": "x"}, {"id": "no-body"}, {"body": "no id"}]

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"tasks": tasks})

    token = tmp_path / "token"
    write_token(token, "token-for-skips-1")
    transport = httpx.MockTransport(answer)
    async with GatewayClient(
        "http://gw.invalid", token, client_name="t", transport=transport
    ) as client:
        assert await client.poll_tasks(wait=0) == []
    skipped = [r for r in caplog.records if "cannot take" in r.getMessage()]
    assert [r.task_id for r in skipped] == [  # type: ignore[attr-defined]
        "'../../etc/passwd'",
        "'no-body'",
        "(no id)",
    ]
