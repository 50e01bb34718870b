"""A lead and three worker processes on one SQLite store; one worker is SIGKILLed mid-task."""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from tether.bridge import CustodyState, SqliteStore, Task

S = CustodyState
CHILD = Path(__file__).with_name("pool_process.py")
TASKS = 40


def _spawn(db: Path, role: str, name: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(db), role, name], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc


def _lines(db: Path, name: str) -> list[tuple[str, str]]:
    path = Path(f"{db}.{name}.log")
    if not path.exists():
        return []
    return [tuple(line.split(" ", 1)) for line in path.read_text().splitlines()]  # type: ignore[misc]


@pytest.mark.slow
async def test_every_task_ends_with_exactly_one_result_when_a_worker_is_killed(
    tmp_path: Path,
) -> None:
    db = tmp_path / "custody.db"
    store = await SqliteStore.open(db, synchronous="NORMAL")
    procs: list[subprocess.Popen[str]] = []
    try:
        await store.ingest_many([Task(f"t{i:02}", f"body {i}") for i in range(TASKS)])
        procs = [_spawn(db, "lead", "lead")] + [
            _spawn(db, "worker", name) for name in ("wa", "wb", "victim")
        ]
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        victim = procs[-1]
        deadline = time.monotonic() + 20
        # kill the victim while it holds a task it has not finished
        while True:
            events = _lines(db, "victim")
            started = {id for ev, id in events if ev == "start"}
            done = {id for ev, id in events if ev == "done"}
            if started - done and done:
                break
            assert time.monotonic() < deadline, "the victim never got to work"
            await trio.sleep(0.01)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        while (await store.counts())[S.RESULT] < TASKS:
            assert time.monotonic() < deadline, f"stuck at {await store.counts()}"
            await trio.sleep(0.05)
        counts = await store.counts()
        assert counts[S.RESULT] == TASKS
        assert counts[S.DEAD] == 0
        results = {r.task.id: r for r in await store.ready_results(limit=TASKS)}
        assert sorted(results) == [f"t{i:02}" for i in range(TASKS)]
        assert all(r.body == f"done {id}" for id, r in results.items())
        # no task was completed twice: each "done" line names the stored result's worker
        logged = [
            (name, id)
            for name in ("wa", "wb", "victim")
            for ev, id in _lines(db, name)
            if ev == "done"
        ]
        assert all(n == 1 for n in collections.Counter(id for _, id in logged).values())
        assert all(results[id].worker == name for name, id in logged)
        # what the victim held when it died: a live worker finished it on a later attempt, unless
        # the victim stored it in the instant between its last log line and the kill
        held = {id for ev, id in _lines(db, "victim") if ev == "start"} - {
            id for ev, id in _lines(db, "victim") if ev == "done"
        }
        taken_over = {id for id in held if results[id].worker != "victim"}
        assert taken_over
        for id in taken_over:
            assert results[id].worker in ("wa", "wb")
            assert results[id].attempt == 2
        for id in held - taken_over:
            assert results[id].attempt == 1
        assert {r.worker for r in results.values()} >= {"wa", "wb"}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        await store.aclose()
