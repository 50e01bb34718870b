"""A suspect's run reads its room's conversation on demand through its worker (issue #49):
the quarantine child asks its parent, which reads it once through the run's own ``Talk``,
so the state the child returns is based on the version it read; a suspect that never reads
costs no read. Real child processes, a real SQLite store."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from support.agents.quarantine import factory
from support.clock import FakeClock
from support.suspects import make_suspects
from support.waiting import wait_until
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.pool import PoolWorker
from tether.bridge.pool._quarantine import Quarantine, QuarantineSpec

S = CustodyState
SPEC = QuarantineSpec("support.agents.quarantine:factory")


pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tests_importable")]


async def test_a_suspect_reads_its_conversation_through_its_parent_once(
    store: SqliteStore, fake_clock: FakeClock
) -> None:
    await store.ingest(Task("m0", "hello", room="r"))
    [first] = await store.claim_many("w0", 1, leaderless=True)
    await store.complete_with_state(first, "hi", {"seen": 4}, 0)
    await store.mark_delivered("m0")
    await make_suspects(store, fake_clock, Task("chat", "chat", room="r"), Task("quiet", "steps"))
    reads: list[tuple[str, Any]] = []
    conversation = store.conversation

    async def reading(id: str, *args: Any, **kwargs: Any) -> Any:
        reads.append((id, kwargs.get("limit")))
        return await conversation(id, *args, **kwargs)

    store.conversation = reading  # type: ignore[assignment]
    quarantine = Quarantine(SPEC, processes=2)
    worker = PoolWorker(store, "w1", factory, quarantine=quarantine, concurrency=2)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)

        async def both_stored() -> bool:
            return all([await store.state(id) is S.RESULT for id in ("chat", "quiet")])

        await wait_until(both_stored, within=60)
        worker.request_stop()
    assert quarantine.runs == 2
    chat = await store.get("chat")
    assert chat is not None
    assert chat.result == "history 2"  # the child's run saw the room's two turns
    view = await store.room("r")
    assert view is not None
    assert (view.state, view.version) == ({"seen": 5}, 2)  # based on the version it read
    assert reads == [("chat", 50)]  # one read, the suspect that asked; "quiet" read nothing
