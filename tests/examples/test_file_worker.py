"""examples/file_worker.sh: a plain shell program answers tasks through the file exchange,
driven by a real store and tether's ``file_exchange_worker``."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import trio

from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.pool import file_exchange_worker

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "file_worker.sh"


@contextmanager
def shell_worker(root: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["bash", str(SCRIPT), str(root)], stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


async def test_the_shell_worker_answers_every_task_and_stops_on_sigterm(tmp_path: Path) -> None:
    root = tmp_path / "exchange"
    tasks = [
        Task("plain", "hello there"),
        Task("blank-lines", "one\n\ntwo three\n\n"),
        Task("empty", ""),
        Task("headers", "mind the room", room="r\nx", headers={"subject": "a\n\nb"}),
    ]
    async with await SqliteStore.open(tmp_path / "custody.db", lease_s=5.0) as store:
        await store.ingest_many(tasks)
        worker = file_exchange_worker(store, "shell", root, result_poll_interval=0.02)
        with shell_worker(root) as proc:
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                with trio.fail_after(60):
                    while (await store.counts())[CustodyState.RESULT] < len(tasks):  # noqa: ASYNC110
                        await trio.sleep(0.05)
                worker.request_stop()
            proc.send_signal(signal.SIGTERM)
            assert await trio.to_thread.run_sync(proc.wait) == 0
            assert proc.stderr is not None
            assert proc.stderr.read() == b""
        results = {r.task.id: r for r in await store.ready_results()}
    assert {i: r.body for i, r in results.items()} == {
        "plain": "2 words: HELLO THERE",
        "blank-lines": "3 words: ONE\n\nTWO THREE\n\n",
        "empty": "0 words: ",
        "headers": "3 words: MIND THE ROOM",
    }
    assert all(r.attempt == 1 for r in results.values())  # no refused answer, no retry
    # both files of each task (and a room's conversation) archived once its result was
    # stored; nothing left behind
    assert os.listdir(root / "outbox") == []
    assert os.listdir(root / "results") == []
    assert sorted(os.listdir(root / "archive")) == sorted(
        [f"{t.id}.{kind}.txt" for t in tasks for kind in ("task", "result")]
        + [f"{t.id}.conversation.json" for t in tasks if t.room is not None]
    )
