"""What an operator sees and does with a waiting ask (issue #36): ``store list --state
waiting`` lists the asking task, ``store show`` its question and what became of it, and
``store cancel`` ends it, leaving its room free: the room's next message runs as its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tether._cli._main import main
from tether.bridge import CustodyState, SqliteStore, Task


async def _asking(path: Path) -> None:
    async with await SqliteStore.open(path) as store:
        booker = Task("booker", "a table for 4", room="r", headers={"sender": "ann"})
        await store.ingest(booker, room_policy="serial")
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None
        why = "asked the person (~ask:1): 8 pm, book it?"
        await store.ask(
            claim, "~ask:1", "8 pm, book it?", store.clock() + 3600, why, answer_from=["ann"]
        )


async def _next_message_runs(path: Path) -> None:
    async with await SqliteStore.open(path) as store:
        await store.ingest(Task("later", "hello?", room="r"), room_policy="serial")
        assert await store.state("later") is CustodyState.PENDING
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None
        assert claim.task.id == "later"


def test_an_operator_sees_a_waiting_ask_and_cancelling_it_frees_the_room(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custody.db"
    trio.run(_asking, path)
    assert main(["store", "list", "--state", "waiting", "--store", str(path)]) == 0
    assert "booker" in capsys.readouterr().out
    assert main(["store", "show", "booker", "--store", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "  waits for   asked the person (~ask:1): 8 pm, book it?" in out
    [ask] = out[out.index("asks: 1") + 1 :][:1]
    assert ask.split(" ago  ", 1)[1].startswith(
        "~ask:1 (seq 1) 8 pm, book it?: open (not yet shown), times out in "
    )
    assert ask.endswith(", from ann")  # who may answer (issue #48)
    assert main(["store", "show", "booker", "--store", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(a["name"], a["status"], a["answer_from"]) for a in doc["asks"]] == [
        ("~ask:1", "open", ["ann"])
    ]
    assert main(["store", "cancel", "booker", "--store", str(path), "--reason", "gone"]) == 0
    capsys.readouterr()
    trio.run(_next_message_runs, path)
