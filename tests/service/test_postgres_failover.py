"""A PostgreSQL failover under a running pool loses nothing acknowledged (issue #45).

A primary with a synchronous standby (``support.replica``), a ``tether bridge run`` and a
``tether worker run`` on a multi-host DSN (``target_session_attrs=read-write``), an agent of
three steps that log their effects (``support.agents.steps``). Mid-run the primary is stopped
at once and the standby promoted, as a managed PostgreSQL fails over. Then:

- every message is answered once, with the reply its run made: an ingest acknowledged to the
  gateway was on the standby before its ack (the third wave's barrier waited for nothing, and
  acknowledged messages were lost here for ever);
- no step ran again after its record was returned to the run: for each (task, step) the
  recorded nonce is the last effect the log holds for it (earlier ones are repeats in the
  window between an effect and its record, which the durable-runs guide allows);
- no worker child crashed (a task the promoted standby never had is a lost lease, not an
  ExceptionGroup), and both processes stop cleanly.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, cast

import pytest
import trio

from support.gateway import RunningGateway
from support.replica import Replicated, primary_with_standby
from support.service import BridgeProcess, answered_count, bridge_env, submit_many
from support.step_effects import effect_lines, recorded_steps_hold
from support.waiting import wait_until
from tether.bridge import PostgresStore
from tether.bridge.stores.postgres._throwaway import NoPostgres

pytestmark = pytest.mark.slow

AGENT = "support.agents.steps:factory"
MESSAGES = 40
WORKER_COMMAND = [sys.executable, "-m", "tether", "worker", "run"]
OPTIONS = ["--lease-s", "3", "--room-policy", "concurrent", "--grace", "2"]


@pytest.fixture
def replicated() -> Any:
    try:
        with primary_with_standby() as pair:
            yield pair
    except NoPostgres as exc:
        pytest.skip(f"needs PostgreSQL server binaries: {exc}")


async def _worker_run(pair: Replicated, log: Path) -> trio.Process:
    args = [
        *WORKER_COMMAND,
        "--store", pair.url,
        "--agent", AGENT,
        "--workers", "1",
        "--concurrency", "4",
        "--lease-s", "3",
        "--grace", "2",
        "--log-level", "WARNING",
    ]  # fmt: skip
    env = {**bridge_env(), "PGPASSWORD": pair.password}
    with open(log, "ab") as sink:  # noqa: ASYNC230 - a file handle for the child
        return await trio.lowlevel.open_process(args, stderr=sink, env=env)


async def test_a_failover_mid_run_loses_nothing_acknowledged_and_repeats_no_recorded_step(
    gateway: RunningGateway,
    token_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    replicated: Replicated,
) -> None:
    effects = tmp_path / "effects.log"
    monkeypatch.setenv("STEPS_AGENT_LOG", str(effects))
    monkeypatch.setenv("PGPASSWORD", replicated.password)
    texts = [f"message {i}" for i in range(MESSAGES)]
    ids = await submit_many(gateway, texts, "failover", rooms=MESSAGES)
    bridge_log, worker_log = tmp_path / "bridge.log", tmp_path / "worker.log"
    bridge = await BridgeProcess.start(
        gateway.url, token_file, cast(Path, replicated.url), bridge_log, agent=AGENT,
        workers=1, extra=OPTIONS,
    )  # fmt: skip
    worker = await _worker_run(replicated, worker_log)
    try:
        with trio.fail_after(150):

            async def mid_run() -> bool:
                return len(effect_lines(effects)) >= MESSAGES  # about a third of the steps

            await wait_until(mid_run, within=60, step=0.02)
            await trio.to_thread.run_sync(replicated.fail_over)

            async def all_answered() -> bool:
                return await answered_count(gateway) >= MESSAGES

            await wait_until(all_answered, within=90, step=0.1)
            assert bridge.process.returncode is None, bridge.log_tail()
            assert worker.returncode is None, worker_log.read_text()[-3000:]
            assert await bridge.stop() == 0, bridge.log_tail()
            worker.terminate()
            assert await worker.wait() == 0, worker_log.read_text()[-3000:]
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()

    stats = await gateway.stats()
    assert stats["tasks"]["answered"] == MESSAGES
    for id, text in zip(ids, texts, strict=True):
        assert (await gateway.message(id))["reply"] == f"done: {text}"
    async with await PostgresStore.open(replicated.standby_dsn, create=False) as store:
        repeats = await recorded_steps_hold(store, ids, effects)
    for log in (bridge_log, worker_log):
        text = log.read_text(errors="replace")
        met = ("unreachable", "lost the connection", "LISTEN connection lost")
        assert any(word in text for word in met), text[-3000:]  # the failover met it mid-run
        assert "Traceback" not in text, text[-3000:]
        assert "ExceptionGroup" not in text, text[-3000:]
    print(f"\nfailover: {repeats} step(s) repeated in the effect-record window")
