"""The file exchange hands a room's conversation to an outside program and takes its new state
back (issue #34): a real program (``support/agents/conversation_file_program.py``) answers
three messages of a room, counting in the state; the files are archived with the reply."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import trio

from support.waiting import wait_until
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.pool import file_exchange_worker

AGENT = Path(__file__).parents[1] / "support" / "agents" / "conversation_file_program.py"


def _start(root: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(AGENT), str(root)])


async def test_an_outside_program_reads_the_history_and_keeps_the_state(tmp_path: Path) -> None:
    root = tmp_path / "exchange"
    store = await SqliteStore.open(tmp_path / "custody.db", synchronous="NORMAL")
    worker = file_exchange_worker(store, "w1", root, result_poll_interval=0.02)
    program = _start(root)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            for i in range(3):
                await store.ingest(Task(f"m{i}", f"hello {i}", room="r"), room_policy="serial")

                async def delivered(id: str = f"m{i}") -> bool:
                    if await store.state(id) is CustodyState.RESULT:
                        await store.mark_delivered(id)
                    return await store.state(id) is CustodyState.DELIVERED

                await wait_until(delivered, within=20)
            worker.request_stop()
        view = await store.room("r")
        assert view is not None
        replies = [t.text for t in view.turns if t.role == "assistant"]
        assert replies == [
            "0 before; count 1 (v0)",
            "1 before; count 2 (v1)",
            "2 before; count 3 (v2)",
        ]
        assert (view.state, view.version) == ({"count": 3}, 3)
        archived = json.loads((root / "archive" / "m2.conversation.json").read_text())
        assert archived["schema_version"] == 1
        assert [t["text"] for t in archived["history"]][:2] == ["hello 0", "0 before; count 1 (v0)"]
        assert json.loads((root / "archive" / "m2.state.json").read_text()) == {"count": 3}
        assert sorted(p.name for p in (root / "outbox").iterdir()) == []
    finally:
        program.kill()
        program.wait()
        await store.aclose()
