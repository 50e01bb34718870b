"""examples/chat_agent.py as a real ``tether bridge run --agent chat_agent:factory`` process,
between the reference gateway and the fake model server, all on 127.0.0.1: the tokens show at
the gateway while the reply is written, a 429 waits out its ``Retry-After`` in the store, a
400 is dead at once with the API's reason, and a hung model ends at the run time limit."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from support.gateway import RunningGateway
from support.service import BRIDGE_COMMAND, bridge_env
from support.waiting import wait_until
from tether.bridge import CustodyState, SqliteStore, write_token
from tether.bridge.service._dead_notices import notice_reason

from ._fake_model import KEY, FakeModel, fake_model

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "gateway" / "token"
    path.parent.mkdir(mode=0o700)
    write_token(path, "chat-example-token")
    return path


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "model-key"
    write_token(path, KEY)
    return path


@pytest.fixture
async def gateway(
    nursery: trio.Nursery, tmp_path: Path, token_file: Path
) -> AsyncIterator[RunningGateway]:
    async with httpx.AsyncClient(timeout=30) as http:
        db = tmp_path / "gateway" / "gateway.db"
        gateway = RunningGateway.on_free_port(nursery, http, token_file, db, lease=1.0)
        await gateway.start()
        yield gateway
        await gateway.stop()


@pytest.fixture
def processes() -> Iterator[list[trio.Process]]:
    """The bridges a test started: SIGKILLed at the end if still running, pass or fail."""
    started: list[trio.Process] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()


@asynccontextmanager
async def chat_bridge(
    started: list[trio.Process],
    gateway: RunningGateway,
    model: FakeModel,
    key_file: Path,
    folder: Path,
    *,
    env: Mapping[str, str] = {},
    extra: tuple[str, ...] = (),
) -> AsyncIterator[Path]:
    """``tether bridge run --agent chat_agent:factory`` (examples/ on PYTHONPATH, the model's
    settings in TETHER_CHAT_*) until the block ends (SIGTERM: it must exit 0); yields the
    custody store's path."""
    store = folder / "custody.db"
    child_env = bridge_env()
    child_env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLES), child_env["PYTHONPATH"]])
    child_env.update(
        TETHER_CHAT_BASE_URL=model.url,
        TETHER_CHAT_MODEL="test-model",
        TETHER_CHAT_API_KEY_FILE=str(key_file),
        **env,
    )
    args = [
        *BRIDGE_COMMAND,
        "--gateway", gateway.url,
        "--token-file", str(gateway.token_file),
        "--store", str(store),
        "--agent", "chat_agent:factory",
        "--workers", "1",
        "--poll-wait", "1",
        "--reconcile-interval", "0.2",
        "--grace", "2",
        "--log-level", "WARNING",
        *extra,
    ]  # fmt: skip
    log = folder / "bridge.log"
    with open(log, "ab") as sink:  # noqa: ASYNC230 - a file handle for the child
        process = await trio.lowlevel.open_process(args, stderr=sink, env=child_env)
    started.append(process)
    yield store
    process.send_signal(signal.SIGTERM)
    with trio.fail_after(30):
        code = await process.wait()
    assert code == 0, log.read_text(errors="replace")[-3000:]


async def message_where(
    gateway: RunningGateway, task_id: str, check: Any, limit_s: float = 30
) -> Any:
    """The gateway's view of ``task_id`` once ``check(view)`` holds."""
    view: Any = None

    async def holds() -> bool:
        nonlocal view
        view = await gateway.message(task_id)
        return bool(check(view))

    await wait_until(holds, within=limit_s, step=0.05)
    return view


async def test_tokens_show_as_progress_a_429_waits_retry_after_a_400_is_dead(
    gateway: RunningGateway,
    key_file: Path,
    tmp_path: Path,
    processes: list[trio.Process],
) -> None:
    async with fake_model() as model:
        story = await gateway.submit("story", room="a")
        busy = await gateway.submit("busy once", room="b")
        bad = await gateway.submit("bad", room="c")
        async with chat_bridge(processes, gateway, model, key_file, tmp_path) as path:
            # the stream holds after "Once upon" until we release it: what the gateway shows
            # meanwhile is the progress the worker sent
            writing = await message_where(gateway, story, lambda v: v["partial"] == "Once upon")
            assert writing["status"] == "acked"
            assert writing["progress"] == "asking test-model"
            assert writing["reply"] is None
            model.release.set()
            done = await message_where(gateway, story, lambda v: v["status"] == "answered")
            assert (done["reply"], done["partial"]) == ("Once upon a time.", None)

            async with await SqliteStore.open(path) as store:  # the bridge's store, read beside it

                async def retried() -> bool:
                    record = await store.get(busy)
                    return record is not None and record.attempt >= 2

                await wait_until(retried, within=30, step=0.01)
                answered = await message_where(gateway, busy, lambda v: v["status"] == "answered")
                assert answered["reply"] == "you said: busy once"
                closed = await message_where(gateway, bad, lambda v: v["status"] == "closed")
                journal = await store.journal(busy)
                dead = await store.get(bad)
    (failed,) = [
        e for e in journal if e.src is CustodyState.CLAIMED and e.dst is CustodyState.PENDING
    ]
    assert failed.reason is not None
    assert "HTTP 429, retry after 1s" in failed.reason
    (claimed,) = [e for e in journal if e.dst is CustodyState.CLAIMED and e.attempt == 2]
    # nobody took it before the server's Retry-After (read from the journal, not caught in its
    # pending window, which a loaded machine's poll could miss)
    assert claimed.at >= failed.at + 1.0 - 1e-6, (failed.at, claimed.at)
    assert model.seen["busy once"] == 2

    assert closed["reason"] == notice_reason(bad)  # the person reads plain words (issue 47.5)
    assert dead is not None
    assert "HTTP 400" in (dead.reason or "")  # the operator reads the detail
    assert "model 'nope' does not exist" in (dead.reason or "")
    assert dead.state is CustodyState.DEAD
    assert dead.attempt == 1  # Permanent: dead at once, no attempts burnt
    assert model.seen["bad"] == 1


async def test_a_hung_model_ends_at_the_run_time_limit_then_is_dead(
    gateway: RunningGateway,
    key_file: Path,
    tmp_path: Path,
    processes: list[trio.Process],
) -> None:
    async with fake_model() as model:
        slow = await gateway.submit("slow", room="a")
        stall = await gateway.submit("stall", room="b")
        settings = {"TETHER_CHAT_RUN_TIMEOUT": "1"}
        extra = ("--max-attempts", "2", "--retry-backoff", "0")
        async with chat_bridge(
            processes, gateway, model, key_file, tmp_path, env=settings, extra=extra
        ) as path:
            views = [
                await message_where(gateway, task_id, lambda v: v["status"] == "closed")
                for task_id in (slow, stall)
            ]
            async with await SqliteStore.open(path) as store:
                records = [await store.get(task_id) for task_id in (slow, stall)]
    for view, task_id in zip(views, (slow, stall), strict=True):
        assert view["reason"] == notice_reason(task_id)
    for record in records:
        assert record is not None
        assert "ChatTimeout: no reply from the model within 1s" in (record.reason or "")
        assert (record.state, record.attempt) == (CustodyState.DEAD, 2)
    assert (model.seen["slow"], model.seen["stall"]) == (2, 2)
