"""A schedule's replies reach its room (issue #52): a real bridge process fires a one-second
schedule on its SQLite store, its agent answers each task, and the gateway, which never sent
those ids, takes each reply as a new message in the schedule's room (``metadata.room``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from support.gateway import RunningGateway
from support.service import BridgeProcess, answered_count
from support.waiting import wait_until
from tether._protocol._messages import (
    ResultMetadata,
    ResultRequest,
    parse_result,
    result_document,
)
from tether.bridge import CustodyState, SqliteStore
from tether.bridge.custody._schedules import ScheduleSpec


async def test_each_firing_is_answered_in_the_schedules_room(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    path = tmp_path / "bridge" / "custody.db"
    bridge = await BridgeProcess.start(gateway.url, token_file, path, tmp_path / "bridge.log")
    await wait_until(lambda: trio.to_thread.run_sync(path.exists), within=60)
    async with await SqliteStore.open(path) as store:
        await store.add_schedule(ScheduleSpec("tick", "ops-room", "ping", every=1))

        async def three_answered() -> bool:
            return await answered_count(gateway) >= 3

        await wait_until(three_answered, within=60, step=0.1)
        assert await store.pause_schedule("tick")
        assert await bridge.stop() == 0, bridge.log_tail()
        view = await store.schedule("tick")
        assert view is not None
        delivered = await store.records(CustodyState.DELIVERED, limit=100)
        assert len(delivered) >= 3
        counts = await store.counts()
        assert counts[CustodyState.DEAD] == 0  # no reply refused
        assert counts[CustodyState.DELIVERED] == len(delivered) <= view.fired
    for record in delivered:
        message = await gateway.message(record.task.id)
        assert message["room"] == "ops-room"
        assert message["reply"] == record.result
        assert (message["status"], message["sender"]) == ("answered", "tether")


def test_only_a_bridge_made_tasks_result_names_its_room() -> None:
    """Every other result reads as before to a gateway without the extension."""
    plain = result_document(ResultRequest("t1", "hi", metadata=ResultMetadata(worker="w1")))
    assert plain["metadata"] == {"worker": "w1", "attempt": None}
    made = ResultRequest("tick~20261207T090000Z", "hi", metadata=ResultMetadata(room="ops"))
    assert result_document(made)["metadata"]["room"] == "ops"
    assert parse_result(result_document(made)) == made
    with pytest.raises(ValueError, match=r"metadata\.room"):
        parse_result({"id": "t", "body": "x", "metadata": {"room": ""}})
