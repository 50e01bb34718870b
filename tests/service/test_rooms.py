"""Room policies through a real bridge (``BridgeService`` in process, a real gateway, SQLite):
barge-in (``replace``) cancels the superseded run and records why; the ``serial`` order holds
across bridge restarts, hard ones included."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import trio

from support.gateway import RunningGateway
from support.service import answered_count
from support.waiting import wait_until
from tether import Session, open_runtime
from tether.bridge import BridgeConfig, BridgeService, CustodyState, SqliteStore, Task


async def test_a_newer_message_supersedes_the_running_one(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    """The agent asks for barge-in (a ``replace`` task handler) on a bridge left at the
    default ``serial``: the running first answer is cancelled after the soft-stop grace, its
    task closes as a no-send result saying what superseded it, and the correction is
    answered."""
    started: list[str] = []
    cancelled: list[str] = []
    correction_seen = trio.Event()

    def agent(session: Session) -> None:
        @session.on("task", policy="replace")
        async def reply(task: Task) -> str:
            started.append(task.body)
            if task.body == "what is 2 + 2? (slow)":
                try:
                    await trio.sleep_forever()
                finally:
                    cancelled.append(task.body)
            correction_seen.set()
            return f"answer to {task.body!r}"

    path = tmp_path / "store" / "custody.db"
    config = BridgeConfig(
        gateway=gateway.url,
        token_file=token_file,
        store=str(path),
        workers=2,
        poll_wait=0.5,
        lease_s=1.5,  # a renewal every 0.5 s tells the worker it was superseded
        grace=0.5,
    )
    async with trio.open_nursery() as nursery:
        service = BridgeService(config, factory=agent, freeze_gc=False)
        await nursery.start(service.run)
        assert service.room_policy == "replace"
        first = await gateway.submit("what is 2 + 2? (slow)", room="chat", id="q1")

        async def running() -> bool:
            return bool(started)

        await wait_until(running)
        second = await gateway.submit("sorry, I meant 2 + 3", room="chat", id="q2")

        async def settled() -> bool:
            return await answered_count(gateway) == 2 and bool(cancelled)

        await wait_until(settled, within=20)
        nursery.cancel_scope.cancel()
    assert started == ["what is 2 + 2? (slow)", "sorry, I meant 2 + 3"]
    assert cancelled == ["what is 2 + 2? (slow)"]
    old, new = await gateway.message(first), await gateway.message(second)
    assert (old["status"], old["reply"]) == ("closed", None)
    assert (new["status"], new["reply"]) == ("answered", "answer to 'sorry, I meant 2 + 3'")
    async with await SqliteStore.open(path) as store:
        rec = await store.get(first)
        assert rec is not None
        assert (rec.state, rec.reason, rec.result) == (
            CustodyState.DELIVERED,
            "superseded by q2",
            "",
        )


def ordered_agent(log: dict[str, list[str]], running: dict[str, int], overlaps: list[str]) -> Any:
    def install(session: Session) -> None:
        @session.on("task")
        async def reply(task: Task) -> str:
            room = task.room or ""
            running[room] = running.get(room, 0) + 1
            if running[room] > 1:
                overlaps.append(task.id)
            log.setdefault(room, []).append(task.id)
            try:
                await trio.sleep(random.random() * 0.02)
            finally:
                running[room] -= 1
            return f"reply to {task.id}"

    return install


async def test_the_serial_order_survives_bridge_restarts(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    """The order is the store's, not a process's: bridges stopped softly and aborted (runs cut
    off mid-call) at random points leave each room running its messages in send order."""
    rooms, per_room = 6, 25
    rng = random.Random(5)
    sent = {f"room-{r}": [f"room-{r}-m{i:02d}" for i in range(per_room)] for r in range(rooms)}
    for i in range(per_room):  # each room's messages in order; rooms interleaved
        for name, ids in sent.items():
            await gateway.submit(f"message {i}", room=name, id=ids[i])
    log: dict[str, list[str]] = {}
    running: dict[str, int] = {}
    overlaps: list[str] = []
    config = BridgeConfig(
        gateway=gateway.url,
        token_file=token_file,
        store=str(tmp_path / "store" / "custody.db"),
        workers=2,
        concurrency=4,
        poll_wait=0.5,
        lease_s=2.0,
        grace=0.5,
        reconcile_interval=0.2,
    )
    async with open_runtime(handle_signals=False):
        for n in range(6):
            async with trio.open_nursery() as nursery:
                service = BridgeService(
                    config, factory=ordered_agent(log, running, overlaps), freeze_gc=False
                )
                await nursery.start(service.run)

                async def progressed(at_least: int = 15 * (n + 1)) -> bool:
                    return await answered_count(gateway) >= at_least

                await wait_until(progressed, within=60)
                await trio.sleep(rng.random() * 0.05)
                if n % 2:
                    service.abort("a hard stop mid-load")
                else:
                    nursery.cancel_scope.cancel()  # a graceful stop
        assert await answered_count(gateway) < rooms * per_room  # the stops cut in
        async with trio.open_nursery() as nursery:
            service = BridgeService(
                config, factory=ordered_agent(log, running, overlaps), freeze_gc=False
            )
            await nursery.start(service.run)

            async def all_answered() -> bool:
                return await answered_count(gateway) == rooms * per_room

            await wait_until(all_answered, within=120, step=0.1)
            nursery.cancel_scope.cancel()
    assert overlaps == []
    for name, ids in sent.items():
        # a run cut off by a stop runs again, right away: drop those repeats
        ran = [id for k, id in enumerate(log[name]) if k == 0 or log[name][k - 1] != id]
        assert ran == ids, name
        views = [await gateway.message(id) for id in ids]
        assert [v["reply"] for v in views] == [f"reply to {id}" for id in ids]
        arrived = [v["answered_at"] for v in views]
        assert arrived == sorted(arrived), f"{name}: replies arrived out of order"
