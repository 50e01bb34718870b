"""Asking the person under SIGKILL (issue #36), through the reference gateway: each room's
first message runs an agent that asks "confirm?" and replies ``booked: <answer>``; the test
answers each room once its question shows at the gateway, and SIGKILLs the bridge while
questions are being asked and posted, while runs wait, and while answers are ingested and
the runs resume. Every room shows exactly one question, one answer (closed at the gateway,
no reply of its own) and one final reply quoting the answer.

The issue's 30 rooms and 8 kills become 8 rooms and 3 kills within the suite's budget, with
the same claims.
"""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest
import trio

from support.gateway import RunningGateway
from support.service import BridgeProcess
from support.waiting import wait_until

pytestmark = pytest.mark.slow

AGENT = "support.agents.ask:factory"
ROOMS, KILLS = 8, 3
OPTIONS = ["--lease-s", "2", "--concurrency", "4", "--grace", "1", "--quarantine-processes", "4"]


async def _questions(gateway: RunningGateway, room: int) -> int:
    return len((await gateway.message(f"q-{room}"))["messages"])


async def test_sigkills_lose_no_question_answer_or_reply_and_repeat_none(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    store, log = tmp_path / "bridge" / "custody.db", tmp_path / "bridge.log"

    async def start() -> BridgeProcess:
        return await BridgeProcess.start(
            gateway.url, token_file, store, log, agent=AGENT, workers=1, extra=OPTIONS
        )

    bridge = await start()
    for room in range(ROOMS):
        await gateway.submit("a table for 4 at 8 pm", room=f"r-{room}", id=f"q-{room}")
    rng = random.Random(36)
    kills = 0

    async def asked(at_least: int) -> bool:
        return sum([await _questions(gateway, room) >= 1 for room in range(ROOMS)]) >= at_least

    async def replies() -> int:
        views = [await gateway.message(f"q-{room}") for room in range(ROOMS)]
        return sum(view["reply"] is not None for view in views)

    async def answer(rooms: range) -> None:
        for room in rooms:
            await gateway.submit(f"yes {room}", room=f"r-{room}", id=f"a-{room}")
            await trio.sleep(rng.uniform(0.0, 0.1))

    async def kill_and_restart() -> BridgeProcess:
        nonlocal kills
        await trio.sleep(rng.uniform(0.0, 0.2))
        bridge.kill()
        assert await bridge.process.wait() == -signal.SIGKILL, bridge.log_tail()
        kills += 1
        banners = log.read_text().count("tether bridge:")
        other = await start()

        async def up() -> bool:  # the new bridge is running (not killed as it starts)
            return log.read_text().count("tether bridge:") > banners

        await wait_until(up, within=30, step=0.02)
        return other

    with trio.fail_after(150):
        # 1: while the questions are asked, recorded and posted
        await wait_until(lambda: asked(1), within=60, step=0.02)
        bridge = await kill_and_restart()
        # 2: while runs wait and the first answers are ingested (runs resuming)
        await wait_until(lambda: asked(ROOMS), within=60, step=0.05)
        await answer(range(ROOMS // 2))
        bridge = await kill_and_restart()
        # 3: while the other answers are ingested and their runs resume and reply
        await answer(range(ROOMS // 2, ROOMS))

        async def replied_one_more() -> bool:
            return await replies() > ROOMS // 2

        await wait_until(replied_one_more, within=60, step=0.02)
        bridge = await kill_and_restart()

        async def all_replied() -> bool:
            return await replies() == ROOMS

        await wait_until(all_replied, within=90, step=0.1)
        assert await bridge.stop() == 0, bridge.log_tail()
    assert kills == KILLS
    for room in range(ROOMS):
        response = await gateway.http.get(
            f"{gateway.url}/v1/messages", params={"room": f"r-{room}"}, headers=gateway.headers()
        )
        question, reply_to_it = response.json()["messages"]  # exactly two messages in the room
        assert [m["body"] for m in question["messages"]] == ["confirm?"]  # shown once
        assert (question["id"], question["status"]) == (f"q-{room}", "answered")
        assert question["reply"] == f"booked: yes {room}"
        closed = (reply_to_it["id"], reply_to_it["status"], reply_to_it["reply"])
        assert closed == (f"a-{room}", "closed", None)  # the answer: no run, no reply of its own
        assert reply_to_it["messages"] == []
