"""``BridgeService.abort``: an abrupt in-process stop that loses nothing and leaks no task."""

from __future__ import annotations

from pathlib import Path

import trio

from support.gateway import RunningGateway
from support.service import answered_count, submit_many
from support.waiting import wait_until
from tether import Session, open_runtime
from tether.bridge import BridgeConfig, BridgeService, CustodyState, SqliteStore, Task

SLOW_S = 30.0
"""How long the first bridge's agent thinks about a 'slow' message: far past any bound below."""


def slow_agent(session: Session) -> None:
    @session.on("task")
    async def reply(task: Task) -> str:
        if "slow" in task.body:
            await trio.sleep(SLOW_S)
        return f"echo: {task.body}"


def descendants(task: trio.lowlevel.Task) -> set[trio.lowlevel.Task]:
    found: set[trio.lowlevel.Task] = set()
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            found |= {child} | descendants(child)
    return found


def config_for(gateway: RunningGateway, token_file: Path, store: Path) -> BridgeConfig:
    return BridgeConfig(
        gateway=gateway.url,
        token_file=token_file,
        store=str(store),
        workers=2,
        concurrency=4,
        poll_wait=0.5,
        lease_s=5.0,
        grace=30.0,  # a graceful stop could take this long; an abort must not
        reconcile_interval=0.2,
    )


async def test_abort_mid_run_returns_at_once_and_the_next_run_delivers_everything_once(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    path = tmp_path / "store" / "custody.db"
    quick = await submit_many(gateway, [f"quick {i}" for i in range(20)], "quick")
    config = config_for(gateway, token_file, path)
    first = BridgeService(config, factory=slow_agent)
    async with await SqliteStore.open(path) as observer, open_runtime(handle_signals=False):
        me = trio.lowlevel.current_task()
        before = descendants(me)

        async def quick_delivered() -> bool:
            return (await observer.counts())[CustodyState.DELIVERED] == len(quick)

        async def slow_runs_in_hand() -> bool:
            counts = await observer.counts()
            waiting = counts[CustodyState.PENDING] + counts[CustodyState.ASSIGNED]
            return counts[CustodyState.CLAIMED] > 0 and counts[CustodyState.CLAIMED] + waiting == 12

        async with trio.open_nursery() as nursery:
            await nursery.start(first.run)
            await wait_until(quick_delivered)
            slow = await submit_many(gateway, [f"slow {i}" for i in range(12)], "slow")
            await wait_until(slow_runs_in_hand)
            assert descendants(me) - before, "the bridge runs tasks here"
            aborted_at = trio.current_time()
            first.abort("the test pulled the plug")
        took = trio.current_time() - aborted_at
        assert took < 0.5, f"abort took {took:.2f}s (agents sleep {SLOW_S}s, grace 30s)"
        assert first.aborted == "the test pulled the plug"
        assert descendants(me) == before, "no task of the bridge outlived run()"
        counts = await observer.counts()
        # like a crash, but the cancelled workers handed their claims back at once
        assert counts[CustodyState.CLAIMED] == 0
        assert counts[CustodyState.PENDING] + counts[CustodyState.ASSIGNED] == len(slow)
        assert await answered_count(gateway) == len(quick)
        first.abort("a second abort is a no-op")
        assert first.aborted == "the test pulled the plug"

        # the next run on the same store (a fast agent now) answers the rest
        second = BridgeService(config)  # config.agent: the bundled echo agent

        async def all_answered() -> bool:
            return await answered_count(gateway) == len(quick) + len(slow)

        async with trio.open_nursery() as nursery:
            await nursery.start(second.run)
            await wait_until(all_answered)
            nursery.cancel_scope.cancel()  # a graceful stop: nothing in hand, so quick
        counts = await observer.counts()
        assert counts[CustodyState.DELIVERED] == len(quick) + len(slow)
        assert sum(counts.values()) == len(quick) + len(slow), "nothing lost, nothing doubled"
        released = await observer.records(CustodyState.DELIVERED, limit=100)
        assert {r.attempt for r in released if r.task.id in slow} == {1}, "no attempt burnt"
    for task_id in quick + slow:
        message = await gateway.message(task_id)
        assert message["reply"] == f"echo: {message['text']}"


async def test_an_aborted_service_stays_aborted(tmp_path: Path) -> None:
    store = tmp_path / "never" / "custody.db"
    service = BridgeService(
        BridgeConfig(gateway="http://127.0.0.1:9", token_file=tmp_path / "token", store=str(store))
    )
    service.abort("before it ran")
    with trio.fail_after(1):
        await service.run()  # returns at once: no store opened, no gateway called
    assert not store.parent.exists()
    assert not service.running
    assert service.aborted == "before it ran"


async def test_an_abort_while_the_bridge_starts_ends_run_without_ready(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    """The agent factory runs as the workers start, halfway through ``run``'s start-up."""
    path = tmp_path / "custody.db"
    holder: list[BridgeService] = []

    def aborting_agent(session: Session) -> None:
        holder[0].abort("changed my mind")
        slow_agent(session)

    service = BridgeService(config_for(gateway, token_file, path), factory=aborting_agent)
    holder.append(service)
    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(service.run)
    assert service.aborted == "changed my mind"
    assert not service.running
    async with await SqliteStore.open(path) as store:
        assert [w.name for w in await store.workers() if w.role == "worker"] == []


async def test_an_abort_cuts_a_graceful_stop_short(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    """A graceful stop waits for the 30 s runs (grace 30 s); an abort during it ends it now."""
    path = tmp_path / "custody.db"
    service = BridgeService(config_for(gateway, token_file, path), factory=slow_agent)
    slow = await submit_many(gateway, [f"slow {i}" for i in range(4)], "slow")
    aborted_at: list[float] = []

    async def abort_later() -> None:
        await trio.sleep(0.3)
        assert not bridge.cancel_scope.cancelled_caught, "still stopping gracefully"
        aborted_at.append(trio.current_time())
        service.abort("stopping took too long")

    async with await SqliteStore.open(path) as observer, trio.open_nursery() as helpers:

        async def runs_in_hand() -> bool:
            return (await observer.counts())[CustodyState.CLAIMED] == len(slow)

        async with trio.open_nursery() as bridge:
            await bridge.start(service.run)
            await wait_until(runs_in_hand)
            helpers.start_soon(abort_later)
            bridge.cancel_scope.cancel()  # the graceful stop: it would wait for the runs
        ended = trio.current_time()
        assert aborted_at, "the graceful stop ended before the abort: nothing was tested"
        assert ended - aborted_at[0] < 0.5
        counts = await observer.counts()
        assert counts[CustodyState.CLAIMED] == 0
        assert counts[CustodyState.PENDING] + counts[CustodyState.ASSIGNED] == len(slow)
