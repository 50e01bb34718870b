"""Property: under any schedule of spawn / finish / cancel / crash with colliding names, the
registry equals the true live set at every checkpoint."""

from __future__ import annotations

import attrs
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from tether import TaskRegistry

NAMES = ["handler", "handler", "sess::msg::handler", "other"]


class Crash(Exception):
    pass


@attrs.define(eq=False)
class Worker:
    name: str
    finish: trio.Event = attrs.Factory(trio.Event)
    cancel: trio.CancelScope = attrs.Factory(trio.CancelScope)
    crash: bool = False
    task: trio.lowlevel.Task | None = None


ops = st.lists(
    st.one_of(
        st.tuples(st.just("spawn"), st.sampled_from(NAMES)),
        st.tuples(st.sampled_from(["finish", "cancel", "crash"]), st.integers(0, 30)),
        st.tuples(st.just("checkpoint"), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=75, deadline=None)
@given(schedule=ops)
async def test_registry_equals_the_true_live_set(schedule: list[tuple[str, object]]) -> None:
    registry = TaskRegistry()
    trio.lowlevel.add_instrument(registry)
    truth: set[trio.lowlevel.Task] = set()
    workers: list[Worker] = []

    async def work(w: Worker) -> None:
        w.task = trio.lowlevel.current_task()
        truth.add(w.task)
        try:
            with w.cancel:
                await w.finish.wait()
                if w.crash:
                    raise Crash(w.name)
        finally:
            truth.discard(w.task)

    async def host(w: Worker) -> None:
        try:
            async with trio.open_nursery() as inner:
                inner.start_soon(work, w, name=w.name)
        except* Crash:
            pass

    async def checkpoint() -> None:
        await trio.testing.wait_all_tasks_blocked()
        seen = {t for t in registry.current_tasks() if t.name != "host"}
        assert seen == truth
        for name in set(NAMES):
            assert set(registry.find(name)) == {t for t in truth if t.name == name}

    try:
        async with trio.open_nursery() as nursery:
            for op, arg in schedule:
                if op == "spawn":
                    w = Worker(name=str(arg))
                    workers.append(w)
                    nursery.start_soon(host, w, name="host")
                elif op == "checkpoint":
                    await checkpoint()
                elif workers:
                    w = workers[int(str(arg)) % len(workers)]
                    if op == "cancel":
                        w.cancel.cancel()
                    else:
                        w.crash = op == "crash"
                        w.finish.set()
            await checkpoint()
            for w in workers:
                w.finish.set()
        await checkpoint()
        assert truth == set()
        assert registry.current_tasks() == []
    finally:
        trio.lowlevel.remove_instrument(registry)
