"""The file-exchange adapter: the message format, and a real outside program answering."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from support.waiting import wait_until
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.pool import Reconciler, ResultRefused, file_exchange_worker
from tether.bridge.pool._files import (
    FileExchange,
    HeaderRefused,
    escape_value,
    format_message,
    parse_message,
    parse_result,
    task_message,
    unescape_value,
)

S = CustodyState
AGENT = Path(__file__).parents[1] / "support" / "agents" / "file_program.py"


@given(st.text())
def test_escaped_values_stay_on_one_line_and_round_trip(value: str) -> None:
    escaped = escape_value(value)
    assert len(escaped.splitlines()) <= 1
    assert "\n" not in escaped
    assert "\r" not in escaped
    assert unescape_value(escaped) == value


@given(
    st.dictionaries(st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True), st.text()), st.text()
)
def test_no_header_value_can_inject_a_header_or_the_body(
    headers: dict[str, str], body: str
) -> None:
    pairs = [("task", "t1"), *sorted(headers.items())]
    assert parse_message(format_message(pairs, body)) == (pairs, body)


def test_an_injection_attempt_is_just_text() -> None:
    task = Task(
        "t1",
        "the body",
        room="lobby\ntask: t2",
        headers={"subject": "hi\n\nfake body", "x": "a\u2028b\\n"},
    )
    text = task_message(task)
    head, _, body = text.partition("\n\n")
    assert body == "the body"
    assert head.splitlines() == [
        "task: t1",
        "priority: normal",
        "room: lobby\\ntask: t2",
        "header.subject: hi\\n\\nfake body",
        "header.x: a\\u2028b\\\\n",
    ]
    headers, parsed_body = parse_message(text)
    assert dict(headers)["room"] == "lobby\ntask: t2"
    assert parsed_body == "the body"


def test_a_header_key_that_cannot_be_written_is_refused() -> None:
    with pytest.raises(HeaderRefused, match="header key 'bad key:'"):
        task_message(Task("t1", "b", headers={"bad key:": "v"}))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("task: other\n\nbody", "must start with the line 'task: t1'"),
        ("\ntask: t1\n\nbody", "must start with the line"),
        ("body only", "must start with the line"),
        ("task: t1\nno colon here\n\nbody", "header line 2"),
        ("task: t1\nno-send: maybe\n\n", "no-send must be true or false"),
    ],
)
def test_bad_result_files_are_refused(text: str, message: str) -> None:
    with pytest.raises(ResultRefused, match=message):
        parse_result(text, "t1")


def test_good_result_files() -> None:
    assert parse_result("task: t1\n\nhello\n\nworld", "t1").body == "hello\n\nworld"
    quiet = parse_result("task: t1\nno-send: true\n", "t1")
    assert (quiet.body, quiet.no_send) == ("", True)


@contextmanager
def outside_agent(root: Path, *wrong_once: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, str(AGENT), str(root), *wrong_once])
    try:
        yield proc
    finally:
        (root / "stop").touch()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_a_real_outside_program_answers_through_files(tmp_path: Path) -> None:
    root = tmp_path / "exchange"
    store = await SqliteStore.open(
        tmp_path / "custody.db", lease_s=1.0, max_attempts=3, synchronous="NORMAL"
    )
    tasks = [
        Task("plain", "hello"),
        Task("tricky", "body\n\nwith blank lines", room="r\nx", headers={"s": "a\nb: c"}),
        Task("refused-once", "retry me"),
        Task("slow", "take your time", headers={"delay": "2.5"}),
    ]
    try:
        worker = file_exchange_worker(
            store, "files", root, heartbeat_interval=0.25, result_poll_interval=0.02
        )
        await store.ingest_many(tasks)
        with outside_agent(root, "refused-once"):
            async with trio.open_nursery() as nursery:
                await nursery.start(partial(Reconciler(store).run, interval=0.1))
                await nursery.start(worker.run)

                async def all_done() -> bool:
                    return (await store.counts())[S.RESULT] == len(tasks)

                await wait_until(all_done, within=20)
                worker.request_stop()
                nursery.cancel_scope.cancel()
        results = {r.task.id: r for r in await store.ready_results()}
        for task in tasks:
            seen = json.loads(results[task.id].body)
            assert seen["body"] == task.body
            assert seen["headers"]["task"] == task.id
            assert {k[7:]: v for k, v in seen["headers"].items() if k.startswith("header.")} == (
                task.headers
            )
            assert seen["headers"].get("room") == task.room
        assert results["refused-once"].attempt == 2
        assert results["slow"].attempt == 1  # the lease was renewed while the file waited
        assert results["plain"].attempt == 1
        # archived after completion; the refused answer is kept for inspection
        assert sorted(os.listdir(root / "outbox")) == []
        assert [n for n in os.listdir(root / "results") if not n.startswith(".")] == []
        assert sorted(os.listdir(root / "archive")) == sorted(
            [f"{t.id}.{kind}.txt" for t in tasks for kind in ("task", "result")]
            + [f"{t.id}.conversation.json" for t in tasks if t.room is not None]
        )
        (refused,) = os.listdir(root / "refused")
        assert refused == "refused-once.1.txt"
        assert (root / "refused" / refused).read_text().startswith("task: somebody-else\n")
        assert stat.S_IMODE((root / "outbox").stat().st_mode) == 0o700
        assert stat.S_IMODE((root / "archive" / "plain.task.txt").stat().st_mode) == 0o600
    finally:
        await store.aclose()


def test_an_outbox_write_cut_short_by_a_kill_is_cleaned_up_at_the_next_start(
    tmp_path: Path,
) -> None:
    """A process SIGKILLed between writing an outbox file's tmp and renaming it leaves the tmp
    behind; the next exchange on that folder removes it. A tmp whose writer still lives, and
    anything that is not such a tmp, are left alone."""
    FileExchange(tmp_path)
    outbox = tmp_path / "outbox"
    killed_mid_write = (
        "import os, signal, sys; from tether._plumbing import _atomic_file as a;"
        "os.replace = lambda *_a, **_k: os.kill(os.getpid(), signal.SIGKILL);"
        "a.write_atomic_at(os.open(sys.argv[1], os.O_RDONLY), 'x-1.txt', b'task x-1')"
    )
    child = subprocess.run([sys.executable, "-c", killed_mid_write, str(outbox)], check=False)
    assert child.returncode == -9
    [left] = [p.name for p in outbox.iterdir()]
    assert left.startswith(".x-1.txt.")
    assert left.endswith(".tmp")
    with subprocess.Popen(["sleep", "60"]) as alive:
        try:
            writing = outbox / f".x-2.txt.{alive.pid}.0123456789ab.tmp"
            writing.write_bytes(b"being written")
            (outbox / ".notes.tmp").write_bytes(b"not ours")
            (outbox / "x-3.txt").write_bytes(b"task x-3")
            FileExchange(tmp_path)
            assert sorted(p.name for p in outbox.iterdir()) == sorted(
                [writing.name, ".notes.tmp", "x-3.txt"]
            )
        finally:
            alive.kill()


async def test_a_worker_archives_what_a_process_killed_after_storing_a_result_left(
    tmp_path: Path,
) -> None:
    """A process killed between storing a task's result and archiving its files leaves them in
    ``outbox/`` and ``results/``, and no run of that task comes again to archive them: the next
    worker on the exchange archives them as it starts. A task still in custody keeps its files
    (its next run reads the result file already there)."""
    root = tmp_path / "exchange"
    FileExchange(root)
    store = await SqliteStore.open(tmp_path / "custody.db", lease_s=5.0)
    try:
        await store.ingest_many([Task("done", "a"), Task("open", "b", priority="low")])
        [claim] = await store.claim_many("killed", 1, leaderless=True)
        await store.complete(claim, "A")  # stored; the kill came before the archive
        for id in ("done", "open", "pruned"):
            (root / "outbox" / f"{id}.txt").write_text(f"task: {id}\n\nbody")
        (root / "results" / "done.txt").write_text("A")
        (root / "results" / "pruned.txt").write_text("gone from the store")
        worker = file_exchange_worker(
            store, "files", root, result_poll_interval=0.02, stop_grace=0.0
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)

            async def open_claimed() -> bool:
                return await store.state("open") is S.CLAIMED

            await wait_until(open_claimed, within=20)
            worker.request_stop()
        assert sorted(os.listdir(root / "archive")) == [
            "done.result.txt",
            "done.task.txt",
            "pruned.result.txt",
            "pruned.task.txt",
        ]
        assert os.listdir(root / "outbox") == ["open.txt"]
        assert [n for n in os.listdir(root / "results") if not n.startswith(".")] == []
    finally:
        await store.aclose()
