"""A small live system whose task tree is printed while it runs: two "agents" run handlers of one
name at once, and the identity registry shows both."""

from __future__ import annotations

import trio

from .. import open_runtime, owned_by


async def _handler(delay: float) -> None:
    await trio.sleep(delay)


async def _agent(name: str, messages: int) -> None:
    with owned_by(f"session:{name}"):
        async with trio.open_nursery() as nursery:
            for i in range(messages):
                nursery.start_soon(_handler, 0.5 + 0.1 * i, name=f"{name}::message::handler")


async def _main(seconds: float) -> None:
    async with open_runtime(grace=1.0) as rt:
        rt.spawn(_agent, "alice", 2, name="agent:alice")
        rt.spawn(_agent, "bob", 1, name="agent:bob")
        await trio.sleep(0.2)
        print(rt.registry.render_tree())
        print()
        shared = "alice::message::handler"
        print(f"live tasks named {shared!r}: {len(rt.registry.find(shared))}")
        await trio.sleep(max(0.0, seconds - 0.2))
        print(f"after {seconds}s: {len(rt.registry)} live task(s)")


def run_demo(seconds: float = 1.5) -> None:
    trio.run(_main, seconds)
