"""Bursts with a real bridge process (issue #52): with ``--room-debounce``, three lines a
person types within the window are one run, of the last, whose conversation shows the first
two; the gateway closes those two without a message and the person gets one reply. A line
typed after the window is a run of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.gateway import RunningGateway
from support.service import BridgeProcess, answered_count
from support.waiting import wait_until


async def test_three_quick_lines_are_one_run_that_sees_them_all(
    gateway: RunningGateway, token_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen_log = tmp_path / "seen.jsonl"
    monkeypatch.setenv("CONVERSATION_AGENT_LOG", str(seen_log))
    bridge = await BridgeProcess.start(
        gateway.url, token_file, tmp_path / "bridge" / "custody.db", tmp_path / "bridge.log",
        agent="support.agents.conversation:factory", extra=["--room-debounce", "1.5"],
    )  # fmt: skip
    lines = [await gateway.submit(text, room="alice") for text in ("hi", "can you", "help me?")]

    async def closed_or_answered(n: int) -> bool:
        return await answered_count(gateway) >= n

    await wait_until(lambda: closed_or_answered(3), within=60, step=0.05)
    first, second, last = [await gateway.message(id) for id in lines]
    assert (first["status"], second["status"]) == ("closed", "closed")  # no message sent
    assert (last["status"], last["reply"]) == ("answered", "1")  # one reply, for the burst
    runs = [json.loads(line) for line in seen_log.read_text().splitlines()]
    assert [r["id"] for r in runs] == [lines[2]]
    assert runs[0]["history"] == [["user", "hi"], ["user", "can you"]]
    later = await gateway.submit("thanks", room="alice")  # after the window: a run of its own
    await wait_until(lambda: closed_or_answered(4), within=60, step=0.05)
    assert (await gateway.message(later))["reply"] == "2"
    assert await bridge.stop() == 0, bridge.log_tail()
