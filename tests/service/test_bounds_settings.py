"""The bounds' settings (issue #53): ``--max-step-bytes``, ``--max-state-bytes`` and
``--max-reply-bytes`` on ``tether bridge run`` and ``tether worker run`` (flags, TOML,
``TETHER_*``), in bytes or KiB/MiB, each at most what the stores take (a reply at most the
store's body limit), a bad one a one-line error naming it; a worker process's runs keep them."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import trio

from support.agents.bounds import factory
from support.gateway import RunningGateway
from support.waiting import state_is, wait_until
from tether._cli._main import build_parser
from tether.bridge import (
    BridgeConfig,
    BridgeService,
    ConfigError,
    CustodyState,
    SqliteStore,
    Task,
    WorkerConfig,
    load_config,
    load_worker_config,
)
from tether.bridge.pool import Bounds
from tether.bridge.service._worker_service import WorkerService


def test_the_default_bounds_are_a_mebibyte_a_mebibyte_and_256_kibibytes() -> None:
    expected = Bounds(step=1 << 20, state=1 << 20, reply=256 * 1024)
    assert load_config(environ={}).bounds == expected
    assert load_worker_config(environ={}).bounds == expected


def test_the_bounds_follow_the_precedence_in_bytes_or_units(tmp_path: Path) -> None:
    file = tmp_path / "tether.toml"
    file.write_text("[bridge]\nmax_step_bytes = 2048\nmax_state_bytes = '8KiB'\n")
    environ = {"TETHER_MAX_STATE_BYTES": "64 kib", "TETHER_MAX_REPLY_BYTES": "1MiB"}
    flags = {"max_reply_bytes": "1000", "max_step_bytes": None}
    config = load_config(file=file, environ=environ, flags=flags)
    assert config.bounds == Bounds(step=2048, state=64 * 1024, reply=1000)
    worker = tmp_path / "worker.toml"
    worker.write_text("[worker]\nmax_reply_bytes = '100k'\n")
    assert load_worker_config(file=worker, environ={}).bounds.reply == 100 * 1024


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("max_step_bytes", "0", "from 1 to 1,048,576 (what a store records of one step)"),
        ("max_step_bytes", "lots", "must be a number of bytes from 1 to"),
        ("max_state_bytes", "1.5MiB", "(what a store keeps of a room's state)"),
        ("max_state_bytes", "2GiB", "e.g. 262144 or 256KiB"),
        (
            "max_reply_bytes",
            "2MiB",
            "from 1 to 1,048,576 (the store's body limit: a reply is stored as a result)",
        ),
    ],
)
def test_a_bad_bound_is_one_line_naming_its_source(setting: str, value: str, says: str) -> None:
    name = f"TETHER_{setting.upper()}"
    for load in (load_config, load_worker_config):
        with pytest.raises(ConfigError) as info:
            load(environ={name: value})
        message = str(info.value)
        assert message.startswith(f"{setting} must be a number of bytes")
        assert says in message
        assert message.endswith(f"got {value!r} (from {name})")
        assert "\n" not in message


def test_a_bound_in_toml_must_be_a_size_not_a_boolean(tmp_path: Path) -> None:
    file = tmp_path / "tether.toml"
    file.write_text("[bridge]\nmax_reply_bytes = true\n")
    with pytest.raises(ConfigError, match=r"max_reply_bytes must be .* got True \(from "):
        load_config(file=file, environ={})


def test_a_config_built_directly_refuses_a_reply_bound_over_the_stores_body_limit() -> None:
    with pytest.raises(ConfigError, match="max_reply_bytes must be a number of bytes from 1 to"):
        BridgeConfig(max_reply_bytes=(1 << 20) + 1)
    with pytest.raises(ConfigError, match="max_step_bytes"):
        WorkerConfig(max_step_bytes=0)


@pytest.mark.parametrize("command", [("bridge", "run"), ("worker", "run")])
def test_both_processes_take_the_bounds_as_flags(command: tuple[str, ...]) -> None:
    flags = ["--max-step-bytes", "1KiB", "--max-state-bytes", "2048", "--max-reply-bytes", "512"]
    args = build_parser().parse_args([*command, *flags])
    assert (args.max_step_bytes, args.max_state_bytes, args.max_reply_bytes) == (
        "1KiB",
        "2048",
        "512",
    )
    given = {n: getattr(args, n) for n in ("max_step_bytes", "max_state_bytes", "max_reply_bytes")}
    load = load_config if command[0] == "bridge" else load_worker_config
    assert load(flags=given, environ={}).bounds == Bounds(step=1024, state=2048, reply=512)


async def test_a_worker_processs_runs_keep_its_bounds(tmp_path: Path) -> None:
    """From the settings to the run: a worker process configured with a 1,000-byte step bound
    fails a run whose step returns 1,001 bytes at once, and keeps one of 1,000."""
    path = tmp_path / "c.db"
    config = WorkerConfig(store=str(path), workers=1, poll_interval=0.05, max_step_bytes=1000)
    async with await SqliteStore.open(path) as store:
        assert [w.bounds for w in WorkerService(config)._build_workers(store)] == [
            Bounds(step=1000)
        ]
        await store.ingest_many([Task("over", "step 1001"), Task("within", "step 1000")])
        service = WorkerService(config, store=store, factory=factory)
        async with trio.open_nursery() as nursery:
            await nursery.start(service.run)
            await wait_until(partial(state_is, store, "over", CustodyState.DEAD), within=60)
            await wait_until(partial(state_is, store, "within", CustodyState.RESULT), within=60)
            nursery.cancel_scope.cancel()
        over = await store.get("over")
    assert over is not None
    assert over.attempt == 1
    assert "over the 1,000 bytes a step may record (--max-step-bytes)" in str(over.reason)


async def test_a_bridges_runs_keep_its_bounds(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    """A bridge configured with a 100-byte reply bound: the echo of a long message is over
    it, dead on its first attempt; the echo of a short one is delivered."""
    config = BridgeConfig(
        gateway=gateway.url,
        token_file=token_file,
        store=str(tmp_path / "custody.db"),
        workers=1,
        poll_wait=0.5,
        grace=1.0,
        max_reply_bytes=100,
    )
    async with await SqliteStore.open(tmp_path / "custody.db") as store:
        service = BridgeService(config, store=store)
        async with trio.open_nursery() as nursery:
            await nursery.start(service.run)
            long = await gateway.submit("x" * 95)  # "echo: " and 95 bytes: 101
            short = await gateway.submit("x" * 94)
            await wait_until(partial(state_is, store, long, CustodyState.DEAD), within=60)
            await wait_until(partial(state_is, store, short, CustodyState.DELIVERED), within=60)
            nursery.cancel_scope.cancel()
        record = await store.get(long)
    assert record is not None
    assert record.attempt == 1
    assert "is 101 bytes, over the 100 bytes a reply may be (--max-reply-bytes)" in str(
        record.reason
    )
