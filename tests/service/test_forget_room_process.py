"""Forget everywhere (issue #53), as an operator does it: a real reference gateway, a real
``tether bridge run`` process on a SQLite store whose agent keeps a room's text in every place a
run can (a step, the room's state, the reply, a question and its answer), then ``tether store
forget-room`` as a real process with the gateway configured. Afterwards no file of either
store (the databases, their ``-wal``, ``-shm`` and news files) holds a byte of the room's text,
while another room's text is still there; the bridge keeps running and answers the room anew.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio

from support.gateway import RunningGateway
from support.service import BridgeProcess, bridge_env
from support.waiting import wait_until

pytestmark = pytest.mark.slow

FORGET = "ZQXFORGETME7731"
KEEP = "KPTKEEPME2468"


def _holding(folder: Path, text: str) -> list[str]:
    """The files under ``folder`` whose bytes hold ``text``."""
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and text.encode() in path.read_bytes():
            found.append(path.name)
    return found


async def test_forget_room_leaves_no_trace_of_the_rooms_text_in_either_store(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    store = tmp_path / "bridge" / "custody.db"
    bridge = await BridgeProcess.start(
        gateway.url,
        token_file,
        store,
        tmp_path / "bridge.log",
        agent="support.agents.remember:factory",
        workers=1,
    )
    first = await gateway.submit(f"{FORGET} one", room="secret")
    kept = await gateway.submit(f"{KEEP} one", room="public")

    async def answered(id: str) -> bool:
        status: str = (await gateway.message(id, wait=1))["status"]
        return status == "answered"

    await wait_until(lambda: answered(first), within=30, explain=_log(bridge))
    asking = await gateway.submit(f"{FORGET} wait", room="secret")

    async def asked() -> bool:
        return bool((await gateway.message(asking))["messages"])

    await wait_until(asked, within=30, explain=_log(bridge))
    answer = await gateway.submit(f"{FORGET} yes", room="secret")
    await wait_until(lambda: answered(asking), within=30, explain=_log(bridge))
    await wait_until(lambda: answered(kept), within=30, explain=_log(bridge))
    reply = (await gateway.message(asking))["reply"]
    assert f"noted: {FORGET} wait {FORGET} yes (after: {FORGET} one" in reply
    assert _holding(store.parent, FORGET)
    assert _holding(gateway.db.parent, FORGET)

    forget = await trio.run_process(
        [
            *(sys.executable, "-m", "tether", "store", "forget-room", "secret"),
            *("--store", str(store), "--gateway", gateway.url, "--token-file", str(token_file)),
        ],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=bridge_env(),
    )
    out = forget.stdout.decode()
    assert forget.returncode == 0, (out, forget.stderr.decode())
    assert "forgot room 'secret' in the custody store:" in out
    assert "its state, the text of 3 task(s)" in out
    assert "no copy is left in the store's files" in out
    assert "forgot room 'secret' at the gateway" in out
    assert "3 message(s) erased" in out
    assert _holding(store.parent, FORGET) == []
    assert _holding(gateway.db.parent, FORGET) == []
    assert _holding(store.parent, KEEP)
    assert _holding(gateway.db.parent, KEEP)
    for id in (first, asking, answer):  # the gateway's views of them are gone too
        response = await gateway.http.get(
            f"{gateway.url}/v1/messages/{id}", headers=gateway.headers()
        )
        assert response.status_code == 404

    again = await gateway.submit("hello again", room="secret")  # the bridge runs on
    await wait_until(lambda: answered(again), within=30, explain=_log(bridge))
    assert (await gateway.message(again))["reply"] == "noted: hello again  (after: )"
    assert await bridge.stop() == 0, bridge.log_tail()
    assert _holding(store.parent, FORGET) == []  # its last checkpoint brought none back


def _log(bridge: BridgeProcess) -> Callable[[], Awaitable[str]]:
    async def explain() -> str:
        return f"bridge log: {bridge.log_tail()}"

    return explain
