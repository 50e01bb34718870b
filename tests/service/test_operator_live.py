"""An operator's verbs on a running bridge (issue #16, item 4): the real ``tether store`` process
on the live bridge's SQLite file, a real gateway on 127.0.0.1. A cancelled running task's run
is cancelled and its user told; a re-driven one is run again by the same bridge (no restart)
and its reply reaches the user, replacing the dead notice the gateway had shown."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import trio

from support.gateway import RunningGateway
from support.service import bridge_env
from support.waiting import wait_until
from tether import ChildSpec, open_runtime
from tether.bridge import BridgeConfig, BridgeService, CustodyState, SqliteStore, Task

S = CustodyState


async def _tether(*argv: str) -> tuple[int, str, str]:
    done = await trio.run_process(
        [sys.executable, "-m", "tether", "store", *argv],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=bridge_env(),
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_cancel_then_retry_on_a_running_bridge(
    gateway: RunningGateway, token_file: Path, store: SqliteStore, tmp_path: Path
) -> None:
    gate = trio.Event()
    runs: list[str] = []
    cancelled = trio.Event()

    async def handle(task: Task) -> str:
        runs.append(task.id)
        if not gate.is_set():
            try:
                await trio.sleep_forever()
            finally:
                cancelled.set()
        return f"answer to {task.body}"

    def factory(session: object) -> None:
        session.add_handler("task", handle)  # type: ignore[attr-defined]

    config = BridgeConfig(
        gateway=gateway.url,
        token_file=token_file,
        store=str(store.path),
        workers=1,
        poll_wait=0.5,
        grace=1.0,
        reconcile_interval=0.5,
    )
    service = BridgeService(config, store=store, factory=factory)
    path = str(store.path)
    task_id = await gateway.submit("a hard question")
    async with open_runtime(handle_signals=False) as runtime:
        await runtime.supervisor.start_child(
            ChildSpec("bridge", service.run, shutdown_grace=service.stop_grace)
        )
        await wait_until(lambda: _state_is(store, task_id, S.CLAIMED), within=30)

        code, out, err = await _tether("cancel", task_id, "--store", path, "--reason", "spam")
        assert (code, err) == (0, "")
        assert out.splitlines()[0] == f"task {task_id!r} cancelled: claimed -> dead"
        with trio.fail_after(30):
            await cancelled.wait()  # the worker's next renew was refused: its run cancelled
        # the user is told (the dead notice) that an operator cancelled it, in plain words;
        # the operator's own reason ("spam") stays with the operators (issue 47.5)
        message = await _message_until(gateway, task_id, "closed")
        assert message["reason"] == (
            f"an operator cancelled this message; it was not answered (reference {task_id})"
        )
        record = await store.get(task_id)
        assert record is not None
        assert record.reason == "operator: cancelled: spam"
        assert [w.counts.completed for w in service.workers] == [0]

        gate.set()
        code, out, err = await _tether("retry", task_id, "--store", path)
        assert (code, err) == (0, ""), err
        # the same bridge runs it again and delivers the reply: the gateway reopens the task
        message = await _message_until(gateway, task_id, "answered")
        assert (message["reply"], message["reason"]) == ("answer to a hard question", None)
        # the gateway has the reply before the bridge books its acknowledgement: wait for it
        await wait_until(lambda: _state_is(store, task_id, S.DELIVERED), within=30)
        assert runs == [task_id, task_id]
        # a delivered task is refused, one line, exit 1
        code, out, err = await _tether("retry", task_id, "--store", path)
        assert code == 1
        assert err.splitlines() == [
            f"tether: task {task_id!r} not re-driven: it is delivered (its reply was confirmed "
            "to the gateway); nothing to re-drive"
        ]


async def _state_is(store: SqliteStore, id: str, state: CustodyState) -> bool:
    return await store.state(id) is state


async def _message_until(gateway: RunningGateway, task_id: str, status: str) -> dict[str, Any]:
    with trio.fail_after(30):
        while (message := await gateway.message(task_id, wait=2))["status"] != status:
            pass
    return dict(message)
