"""Conversations survive crashes and barge-ins (issue #34), with ``tether bridge run`` as a
real process SIGKILLed several times: every room's replies count 1..k with no gap or repeat
(the count is kept in the room's state, stored with each reply), and every run saw exactly the
turns the person saw before its message (the gateway's record of the room).

Sized for the test budget: 6 rooms x 6 messages (the issue's 20 x 15 runs the same code), 3
SIGKILLs, and barge-ins: about one message in five is followed at once by the next one of its
room, so under ``--room-policy replace`` the first is superseded if it has not answered yet
(its run is cut; it leaves no reply turn, and its state is never stored)."""

from __future__ import annotations

import json
import random
import signal
from pathlib import Path

import pytest
import trio

from support.gateway import RunningGateway
from support.service import BridgeProcess
from support.waiting import wait_until

pytestmark = pytest.mark.slow

ROOMS = 6
MESSAGES = 6
KILLS = 3
AGENT = "support.agents.conversation:factory"
EXTRA = ["--lease-s", "2", "--grace", "2", "--room-policy", "replace"]


async def test_a_conversation_survives_sigkills_and_barge_ins(
    gateway: RunningGateway, token_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "runs.jsonl"
    monkeypatch.setenv("CONVERSATION_AGENT_LOG", str(log))
    store, bridge_log = tmp_path / "bridge" / "custody.db", tmp_path / "bridge.log"
    rng = random.Random(34)
    said: dict[str, list[str]] = {f"room-{r}": [] for r in range(ROOMS)}
    barge_ins = 0

    async def person(room: str) -> None:
        nonlocal barge_ins
        for j in range(MESSAGES):
            id = f"{room}-m{j}"
            await gateway.submit(f"{room} says {j}", room=room, id=id)
            said[room].append(id)
            if j < MESSAGES - 1 and rng.random() < 0.2:
                barge_ins += 1
                continue  # the next message at once: a barge-in
            while (await gateway.message(id, wait=5))["status"] not in ("answered", "closed"):
                pass

    bridge = await BridgeProcess.start(
        gateway.url, token_file, store, bridge_log, agent=AGENT, extra=EXTRA
    )
    kills = 0
    async with trio.open_nursery() as nursery:
        for r in range(ROOMS):
            nursery.start_soon(person, f"room-{r}")
        for _ in range(KILLS):
            enough = 8 * (kills + 1)  # each kill after more runs: it lands mid-conversation
            await wait_until(lambda n=enough: _runs(log, n), within=60, step=0.05)  # type: ignore[misc]
            bridge.kill()
            assert await bridge.process.wait() == -signal.SIGKILL
            kills += 1
            bridge = await BridgeProcess.start(
                gateway.url, token_file, store, bridge_log, agent=AGENT, extra=EXTRA
            )
    assert await bridge.stop() == 0, bridge.log_tail()

    runs = [json.loads(line) for line in log.read_text().splitlines()]
    views = {id: await gateway.message(id) for ids in said.values() for id in ids}
    for room, ids in said.items():
        replies = [views[id]["reply"] for id in ids if views[id]["reply"] is not None]
        assert replies == [str(n) for n in range(1, len(replies) + 1)], (room, replies)
        seen: list[list[str]] = []  # what the person saw before each message, in order
        for id in ids:
            for run in (r for r in runs if r["id"] == id):
                assert run["history"] == seen, (id, run["history"], seen)
            seen.append(["user", views[id]["text"]])
            if views[id]["reply"] is not None:
                seen.append(["assistant", views[id]["reply"]])
    superseded = sum(1 for v in views.values() if v["reply"] is None)
    print(
        f"\nconversations: {ROOMS} rooms x {MESSAGES} messages, {kills} SIGKILLs, "
        f"{barge_ins} barge-ins ({superseded} superseded), {len(runs)} runs"
    )
    assert kills == KILLS
    assert len(runs) > len(views) - superseded  # some runs were cut by a kill or a barge-in


async def _runs(log: Path, n: int) -> bool:
    path = trio.Path(log)
    return await path.exists() and len((await path.read_text()).splitlines()) >= n
