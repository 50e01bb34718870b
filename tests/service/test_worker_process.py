"""``tether worker run`` as a real process beside a ``tether bridge run`` on one SQLite store.

The worker process has no gateway: it claims, runs and stores; the bridge ingests and delivers.
Its admin ``/status`` names the leader and the workers it sees; a second process under the
same explicit ``--pool-name`` is refused in one line (exit 2); SIGTERM stops it (exit 0).
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from support.gateway import RunningGateway
from support.service import (
    STARTED,
    BridgeProcess,
    answered_count,
    bridge_env,
    store_status,
    submit_many,
)
from support.waiting import wait_until
from tether._cli._main import main
from tether.bridge import SqliteStore, WorkerConfig, WorkerService, write_token
from tether.bridge.pool._idle import IDLE_MAXIMUM, QUIET_WORKER_MAXIMUM

WORKER_COMMAND = [sys.executable, "-m", "tether", "worker", "run"]


async def start_worker(store: Path, log: Path, *extra: str) -> trio.Process:
    args = [
        *WORKER_COMMAND,
        "--store", str(store),
        "--agent", "tether.agents.echo:factory",
        "--reconcile-interval", "0.2",
        "--grace", "1",
        "--log-level", "INFO",
        *extra,
    ]  # fmt: skip
    with open(log, "ab") as sink:  # noqa: ASYNC230 - a file handle for the child
        process = await trio.lowlevel.open_process(args, stderr=sink, env=bridge_env())
    STARTED.append(process)
    return process


@pytest.mark.slow
async def test_a_worker_process_shares_the_pool_shows_the_leader_and_refuses_its_name_twice(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    store = tmp_path / "custody.db"
    admin_token = tmp_path / "admin" / "token"
    admin_token.parent.mkdir(mode=0o700)
    write_token(admin_token, "worker-admin-token")
    bridge_status = tmp_path / "bridge-status.json"
    bridge = await BridgeProcess.start(
        gateway.url,
        token_file,
        store,
        tmp_path / "bridge.log",
        workers=1,
        extra=["--status-file", str(bridge_status)],
    )
    try:
        await _shared_pool_scenario(gateway, tmp_path, store, admin_token, bridge)
    finally:  # in the test's own run: a failure must not leave a worker process running
        for process in STARTED:
            if process.returncode is None:
                process.kill()
                await process.wait()


async def _shared_pool_scenario(
    gateway: RunningGateway, tmp_path: Path, store: Path, admin_token: Path, bridge: BridgeProcess
) -> None:
    bridge_status = tmp_path / "bridge-status.json"
    worker_log = tmp_path / "worker.log"
    worker = await start_worker(
        store,
        worker_log,
        "--pool-name", "blue",
        "--workers", "2",
        "--admin-port", "0",
        "--admin-token-file", str(admin_token),
    )  # fmt: skip

    async def admin_announced() -> bool:
        return "admin endpoint http://" in worker_log.read_text()

    await wait_until(admin_announced, within=30, step=0.05)
    [line] = [ln for ln in worker_log.read_text().splitlines() if "admin endpoint http" in ln]
    url = line.split()[4]

    ids = await submit_many(gateway, [f"hello {i}" for i in range(80)], "wp")

    async def all_answered() -> bool:
        return await answered_count(gateway) == len(ids)

    async def explain() -> str:
        status = await store_status(store)
        return (
            f"answered {await answered_count(gateway)} of {len(ids)}; store {status}\n"
            f"bridge log:\n{bridge.log_tail()}\nworker log:\n{worker_log.read_text()[-3000:]}"
        )

    await wait_until(all_answered, within=60, explain=explain)
    workers = {(await gateway.message(id))["worker"] for id in ids}
    assert {"blue-w1", "blue-w2"} & workers, workers  # the worker process did work
    for id in ids[:5]:
        assert (await gateway.message(id))["reply"].startswith("echo: hello ")

    headers = {"authorization": "Bearer worker-admin-token"}
    pool: dict[str, Any] = {}

    async def every_worker_seen() -> bool:
        # the live workers are those of the beats the lead candidate read last (once a beat
        # period): right after start that read may predate the process's own workers' first beat
        nonlocal pool
        async with httpx.AsyncClient(timeout=10) as http:
            pool = (await http.get(f"{url}/status", headers=headers)).json()["pool"]
        return len(pool["workers_seen"]) == 3

    async def seen_so_far() -> str:
        return f"pool status {pool}\nworker log:\n{worker_log.read_text()[-3000:]}"

    await wait_until(every_worker_seen, within=30, step=0.1, explain=seen_so_far)
    assert pool["stem"] == "blue"
    assert pool["workers"] == ["blue-w1", "blue-w2"]
    assert pool["leader"] is not None
    assert pool["leader"].endswith("-lead")
    assert {"blue-w1", "blue-w2"} <= set(pool["workers_seen"])
    assert len(pool["workers_seen"]) == 3  # and the bridge's worker

    bridge_pool = json.loads(bridge_status.read_text())["pool"]  # its unique stem
    assert bridge_pool.startswith("tether-bridge-")
    assert f"{bridge_pool}-w1" in pool["workers_seen"]

    # the same explicit name again, while the first process lives: refused in one line
    second_log = tmp_path / "second.log"
    second = await start_worker(store, second_log, "--pool-name", "blue", "--workers", "2")
    with trio.fail_after(90):  # a Python start-up on a loaded 2-core machine, then 2.5 s
        assert await second.wait() == 2
    err = second_log.read_text().strip().splitlines()
    assert err[-1].startswith("tether: error: pool name blue-")
    assert "in use by another live process" in err[-1]
    assert "Traceback" not in second_log.read_text()

    worker.send_signal(signal.SIGTERM)
    with trio.fail_after(30):
        assert await worker.wait() == 0
    assert await bridge.stop() == 0


def test_worker_run_reports_bad_settings_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = [
        (["--agent", "no.such.module:factory"], "no.such.module"),
        (["--agent", "tether.agents.echo:factory", "--exchange", str(tmp_path)], "not both"),
        (["--workers", "0"], "workers must be an integer from 1 to 256"),
        (["--pool-name", "bad name"], "pool_name must be"),
    ]
    for extra, expected in cases:
        code = main(["worker", "run", "--store", str(tmp_path / "s.db"), *extra])
        err = capsys.readouterr().err
        assert code == 2, err
        assert len(err.strip().splitlines()) == 1, err
        assert expected in err, err


@pytest.mark.slow
async def test_a_restarted_worker_process_keeps_the_name_in_its_status_file(
    tmp_path: Path,
) -> None:
    """A restart with the same ``--status-file`` keeps the generated pool name (its rooms and
    logs stay continuous); a second live process given that file is refused in one line."""
    store = tmp_path / "custody.db"
    status = tmp_path / "worker-status.json"
    keep = ["--status-file", str(status), "--workers", "1"]
    try:
        first = await start_worker(store, tmp_path / "first.log", *keep)
        stem = await _running_stem(status, first.pid)
        assert stem.startswith("tether-worker-")

        second_log = tmp_path / "second.log"
        second = await start_worker(store, second_log, *keep)
        with trio.fail_after(90):  # a Python start-up on a loaded machine, then 2.5 s
            assert await second.wait() == 2
        err = second_log.read_text().strip().splitlines()
        assert err[-1].startswith(f"tether: error: pool name {stem}-"), err[-1]
        assert f"kept in the status file {status}" in err[-1]
        assert "Traceback" not in second_log.read_text()
        assert json.loads(status.read_text())["pid"] == first.pid  # untouched by the refused

        first.send_signal(signal.SIGKILL)
        await first.wait()
        third_log = tmp_path / "third.log"
        third = await start_worker(store, third_log, *keep)
        assert await _running_stem(status, third.pid) == stem
        assert f"pool name {stem}: kept from {status}" in third_log.read_text()
        third.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await third.wait() == 0
    finally:
        for process in STARTED:
            if process.returncode is None:
                process.kill()
                await process.wait()


async def _running_stem(status: Path, pid: int) -> str:
    """The pool stem in the status file once the process ``pid`` wrote it, running."""
    found: list[str] = []

    async def written() -> bool:
        try:
            document = json.loads(await trio.Path(status).read_text())
        except (FileNotFoundError, ValueError):
            return False
        if document["pid"] != pid or document["state"] != "running":
            return False
        found.append(document["pool"]["stem"])
        return True

    await wait_until(written, within=90, step=0.05)
    return found[-1]


async def test_only_the_first_worker_of_a_worker_process_keeps_the_idle_pace(
    tmp_path: Path,
) -> None:
    """As in a bridge (``pool._idle``): its other workers are rung by the store's news."""
    echo = "tether.agents.echo:factory"
    config = WorkerConfig(store=str(tmp_path / "c.db"), workers=3, agent=echo)
    async with await SqliteStore.open(tmp_path / "c.db") as store:
        workers = WorkerService(config)._build_workers(store)
    quiet = QUIET_WORKER_MAXIMUM
    assert [w.idle_maximum for w in workers] == [IDLE_MAXIMUM, quiet, quiet]
