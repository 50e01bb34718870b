"""``tether worker run --exchange DIR`` with the plain-shell example program, as real processes.

The shell program (``examples/file-exchange/answer.sh``) is SIGKILLed again and again, many
times in the middle of writing an answer (it pauses between header and body, ``SLOW``), and
restarted; the ``tether worker run`` process hosting the exchange is SIGKILLed once too and
restarted under the same ``--pool-name``. Every task must end with exactly one stored reply,
the right one; nothing dead, nothing left in the outbox, each pair archived once.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
from pathlib import Path

import pytest
import trio

from support.waiting import wait_until
from tether.bridge import CustodyState, SqliteStore, Task

S = CustodyState
ROOT = Path(__file__).resolve().parents[2]
ANSWER_SH = ROOT / "examples" / "file-exchange" / "answer.sh"
TASKS = 40


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}


async def _start_worker(db: Path, exchange: Path, log: Path, status: Path) -> trio.Process:
    args = [
        sys.executable, "-m", "tether", "worker", "run",
        "--store", str(db),
        "--exchange", str(exchange),
        "--pool-name", "xhost",
        "--workers", "1",
        "--concurrency", "8",
        "--lease-s", "3",
        "--reconcile-interval", "0.3",
        "--poll-interval", "0.05",
        "--grace", "1",
        "--status-file", str(status),
        "--log-level", "WARNING",
    ]  # fmt: skip
    with open(log, "ab") as sink:  # noqa: ASYNC230 - a file handle for the child
        return await trio.lowlevel.open_process(args, stderr=sink, env=_env())


async def _start_shell(exchange: Path) -> trio.Process:
    env = {**_env(), "SLOW": "0.15"}
    return await trio.lowlevel.open_process(["sh", str(ANSWER_SH), str(exchange)], env=env)


async def _kill(process: trio.Process) -> None:
    process.send_signal(signal.SIGKILL)
    await process.wait()


@pytest.mark.slow
async def test_the_shell_example_answers_every_task_once_through_kills_mid_write(
    tmp_path: Path,
) -> None:
    db, exchange = tmp_path / "custody.db", tmp_path / "exchange"
    log, status = tmp_path / "worker.log", tmp_path / "worker-status.json"
    store = await SqliteStore.open(db, synchronous="NORMAL", lease_s=3.0)
    rng = random.Random(18)
    processes: list[trio.Process] = []
    try:
        for i in range(TASKS):
            await store.ingest(
                Task(f"x-{i}", f"message {i}\nsecond line", room=f"r{i % 3}"),
                room_policy="concurrent",
            )
        worker = await _start_worker(db, exchange, log, status)
        processes.append(worker)
        shell = await _start_shell(exchange)
        processes.append(shell)

        async def results(n: int) -> bool:
            return (await store.counts())[S.RESULT] >= n

        async def outbox_has_tasks() -> bool:
            return any((exchange / "outbox").glob("*.txt")) if exchange.exists() else False

        mid_write_kills = 0
        with trio.fail_after(120):
            await wait_until(outbox_has_tasks, within=60)
            # the shell program dies often, at random moments, mostly inside a write
            for _ in range(12):
                await trio.sleep(rng.uniform(0.2, 0.6))
                await _kill(shell)
                if list((exchange / "results").glob(".*.tmp")):
                    mid_write_kills += 1
                shell = await _start_shell(exchange)
                processes.append(shell)
            # then the tether process hosting the exchange dies with tasks in flight
            await wait_until(lambda: results(TASKS // 3), within=60)
            await _kill(worker)
            worker = await _start_worker(db, exchange, log, status)
            processes.append(worker)
            await wait_until(lambda: results(TASKS), within=90)
        assert mid_write_kills >= 1, "no kill landed mid-write; the test proved less"

        counts = await store.counts()
        assert counts[S.RESULT] == TASKS
        assert counts[S.DEAD] == 0
        for i in range(TASKS):
            record = await store.get(f"x-{i}")
            assert record is not None
            assert record.result == f"MESSAGE {i}\nSECOND LINE"
            assert record.owner is not None
            assert record.owner.startswith("xhost-w")

        async def archived() -> bool:
            return len(list((exchange / "archive").glob("*.result.txt"))) == TASKS

        await wait_until(archived, within=30)
        assert sorted(p.name for p in (exchange / "archive").iterdir()) == sorted(
            f"x-{i}.{kind}"
            for i in range(TASKS)
            for kind in ("task.txt", "result.txt", "conversation.json")  # rooms: issue #34
        )
        assert list((exchange / "outbox").iterdir()) == []
        assert list((exchange / "refused").iterdir()) == []
        doc = json.loads(status.read_text())
        assert doc["pool"]["stem"] == "xhost"
        assert doc["pool"]["workers"] == ["xhost-w1"]
        assert doc["exchange"] == str(exchange)
        assert status.stat().st_mode & 0o777 == 0o600

        worker.send_signal(signal.SIGTERM)  # a graceful stop: exit 0
        with trio.fail_after(30):
            assert await worker.wait() == 0
        assert "Traceback" not in log.read_text()
    finally:
        for process in processes:
            if process.returncode is None:
                await _kill(process)
        await store.aclose()
