"""Helpers for the bridge service tests: a test-sized client, bridge processes, user-side load."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from tether.bridge import BridgeConfig, GatewayClient, write_token

from .gateway import RunningGateway


def gateway_client(url: str, token_file: Path, **overrides: Any) -> GatewayClient:
    """A client with test-sized timings: short polls, backoff from 50 ms."""
    fields: dict[str, Any] = {
        "client_name": "bridge-test",
        "poll_wait": 0.5,
        "backoff_initial": 0.05,
        "backoff_maximum": 0.5,
    }
    fields.update(overrides)
    return GatewayClient(url, token_file, **fields)


TESTS_DIR = Path(__file__).resolve().parent.parent
BRIDGE_COMMAND = [sys.executable, "-m", "tether", "bridge", "run"]


def bridge_env() -> dict[str, str]:
    """The child's environment: no stray TETHER_* settings; tests/ importable for agents."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS_DIR), env.get("PYTHONPATH")]))
    env["TETHER_QUARANTINE_ENV"] = AGENTS_READ  # in a quarantine child too (issue #48)
    return env


AGENTS_READ = (
    "CONVERSATION_AGENT_LOG LIMITS_AGENT_LOG STEPS_AGENT_LOG OUTAGE_RUNS_FILE TETHER_TEST_HOLD "
    "DEPLOY_AGENT_CODE DEPLOY_AGENT_SLEEP"
)
"""The variables the tests' agents read (their logs, a hold): what ``quarantine_env`` names."""


STARTED: list[trio.Process] = []
"""Every bridge process a test started: the ``reap_bridges`` fixture SIGKILLs what is left, so
a failing test never leaves a bridge running (and loading the machine) after it."""


@attrs.define(eq=False)
class BridgeProcess:
    """``tether bridge run`` as a real child process (stderr kept in a log file)."""

    process: trio.Process
    log: Path

    @classmethod
    async def start(
        cls,
        url: str,
        token_file: Path,
        store: Path | str,
        log: Path,
        *,
        agent: str = "tether.agents.echo:factory",
        workers: int = 4,
        extra: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> BridgeProcess:
        args = [
            *BRIDGE_COMMAND,
            "--gateway", url,
            "--token-file", str(token_file),
            "--store", str(store),
            "--agent", agent,
            "--workers", str(workers),
            "--poll-wait", "1",
            "--reconcile-interval", "0.2",
            "--log-level", "WARNING",
            *extra,
        ]  # fmt: skip
        with open(log, "ab") as sink:  # noqa: ASYNC230 - a file handle for the child
            process = await trio.lowlevel.open_process(
                args, stderr=sink, env={**bridge_env(), **(env or {})}
            )
        STARTED.append(process)
        return cls(process, log)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)

    async def stop(self, signum: int = signal.SIGTERM, limit_s: float = 30.0) -> int:
        self.process.send_signal(signum)
        with trio.fail_after(limit_s):
            return await self.process.wait()

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


async def store_status(store: Path) -> Any:
    """``tether store status --json`` run as a real process."""
    result = await trio.run_process(
        [sys.executable, "-m", "tether", "store", "status", "--store", str(store), "--json"],
        capture_stdout=True,
        capture_stderr=True,
        env=bridge_env(),
    )
    return json.loads(result.stdout)


async def submit_many(
    gateway: RunningGateway, texts: Sequence[str], prefix: str, rooms: int = 40
) -> list[str]:
    """Submit every text (16 at a time) with ids ``<prefix>-<n>``, spread over ``rooms`` rooms
    (``room-<n>``; a room's tasks stay on one worker); returns the ids."""
    ids = [f"{prefix}-{i:05d}" for i in range(len(texts))]
    limiter = trio.CapacityLimiter(16)

    async def one(i: int) -> None:
        async with limiter:
            await gateway.submit(texts[i], room=f"room-{i % rooms}", id=ids[i])

    async with trio.open_nursery() as nursery:
        for i in range(len(texts)):
            nursery.start_soon(one, i)
    return ids


def password_free_url(postgres_dsn: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The server's URL as a user gives it to a process: no password in it, which comes from
    ``PGPASSWORD`` (set here for the processes the test starts)."""
    from psycopg.conninfo import conninfo_to_dict

    parts = conninfo_to_dict(postgres_dsn)
    monkeypatch.setenv("PGPASSWORD", str(parts.get("password", "")))
    return f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"


async def answered_count(gateway: RunningGateway) -> int:
    tasks = (await gateway.stats())["tasks"]
    return int(tasks["answered"] + tasks["closed"])


def admin_bridge_config(
    gateway_url: str, token_file: Path, folder: Path, admin_token: str, **overrides: Any
) -> BridgeConfig:
    """A test bridge (short polls and grace) with its admin endpoint on a free port of
    127.0.0.1 and ``admin_token`` in a 0600 file under ``folder``."""
    admin_token_file = folder / "admin" / "token"
    admin_token_file.parent.mkdir(mode=0o700)
    write_token(admin_token_file, admin_token)
    fields: dict[str, Any] = {"workers": 1, "poll_wait": 0.5, "grace": 1.0}
    fields.update(overrides)
    return BridgeConfig(
        gateway=gateway_url,
        token_file=token_file,
        admin_port=0,
        admin_token_file=admin_token_file,
        **fields,
    )
