"""The file exchange never leaves its folder (issue 22): planted symlinks and non-regular
files are refused and reported, nothing outside is read, written or moved, and no file's
content reaches a reason or a log line raw."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest
import trio

from tether._plumbing._atomic_file import write_atomic
from tether.bridge import Task
from tether.bridge.pool import ResultRefused
from tether.bridge.pool._files import ExchangeUnsafe, FileExchange

SECRET = "SECRET-LINE-do-not-show-7Hq"


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "secret.txt"
    path.parent.mkdir()
    path.write_text(f"{SECRET}\nmore secrets\n")
    path.chmod(0o644)
    return path


def _text(path: Path) -> str:
    return path.read_text()


def _exchange(tmp_path: Path) -> FileExchange:
    return FileExchange(tmp_path / "exchange", poll_interval=0.01)


def _planted(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "planted.txt"
    path.write_text(text)
    os.chmod(path, 0o644)
    return path


async def _answer(exchange: FileExchange, task: Task) -> object:
    with trio.fail_after(30):
        return await exchange.exchange(task)


@pytest.mark.parametrize("looks_valid", [False, True])
async def test_a_symlinked_result_file_is_refused_unread(
    tmp_path: Path, secret_file: Path, caplog: pytest.LogCaptureFixture, looks_valid: bool
) -> None:
    if looks_valid:  # even a link to a well-formed result is not a reply
        os.replace(_planted(tmp_path, f"task: t1\n\n{SECRET}"), secret_file)
    exchange = _exchange(tmp_path)
    os.symlink(secret_file, exchange.results / "t1.txt")
    with caplog.at_level(logging.DEBUG), pytest.raises(ResultRefused) as caught:
        await _answer(exchange, Task("t1", "hello"))
    assert "symlink" in str(caught.value)
    assert SECRET not in str(caught.value)
    assert SECRET not in caplog.text
    assert "symlink" in caplog.text  # reported
    # the link itself was moved aside; the file it pointed to is untouched
    (kept,) = os.listdir(exchange.refused_dir)
    assert stat.S_ISLNK(os.lstat(exchange.refused_dir / kept).st_mode)
    assert _text(secret_file).count(SECRET) == 1
    assert exchange.refused_count == 1


async def test_a_fifo_or_a_directory_as_a_result_is_refused_without_blocking(
    tmp_path: Path,
) -> None:
    exchange = _exchange(tmp_path)
    os.mkfifo(exchange.results / "t1.txt")
    (exchange.results / "t2.txt").mkdir()
    for task_id, kind in (("t1", "not a regular file"), ("t2", "not a regular file")):
        with pytest.raises(ResultRefused, match=kind):
            await _answer(exchange, Task(task_id, "hello"))
    assert sorted(os.listdir(exchange.refused_dir)) == ["t1.1.txt", "t2.1.txt"]


async def test_a_hard_linked_result_file_is_refused(tmp_path: Path, secret_file: Path) -> None:
    exchange = _exchange(tmp_path)
    os.link(secret_file, exchange.results / "t1.txt")
    with pytest.raises(ResultRefused, match="hard link") as caught:
        await _answer(exchange, Task("t1", "hello"))
    assert SECRET not in str(caught.value)


async def test_a_planted_temporary_file_symlink_is_not_followed(
    tmp_path: Path, secret_file: Path
) -> None:
    """The atomic write used to open ``.<name>.<pid>.tmp`` with O_TRUNC, following a link
    planted there: it truncated and chmodded a file outside."""
    exchange = _exchange(tmp_path)
    planted = exchange.outbox / f".t1.txt.{os.getpid()}.tmp"
    os.symlink(secret_file, planted)
    target = tmp_path / "plain-dir" / "file.txt"
    target.parent.mkdir()
    os.symlink(secret_file, target.parent / f".file.txt.{os.getpid()}.tmp")
    write_atomic(target, b"new")
    (exchange.results / "t1.txt").write_text("task: t1\n\nthe reply")
    reply = await _answer(exchange, Task("t1", "hello"))
    assert getattr(reply, "body", None) == "the reply"
    assert _text(secret_file).startswith(SECRET)
    assert stat.S_IMODE(os.stat(secret_file).st_mode) == 0o644
    assert (exchange.outbox / "t1.txt").read_text().startswith("task: t1\n")
    assert target.read_bytes() == b"new"


async def test_a_symlinked_folder_is_refused_and_nothing_goes_outside(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "exchange"
    root.mkdir()
    os.symlink(elsewhere, root / "outbox")
    with pytest.raises(ExchangeUnsafe, match="outbox"):
        FileExchange(root)
    os.unlink(root / "outbox")
    exchange = FileExchange(root, poll_interval=0.01)
    # swapped for a link after start: the next task is refused, nothing written there
    os.rmdir(exchange.outbox)
    os.symlink(elsewhere, exchange.outbox)
    with pytest.raises(ExchangeUnsafe, match="outbox"):
        await _answer(exchange, Task("t1", "hello"))
    assert os.listdir(elsewhere) == []
    # a linked archive: the pair stays put rather than moving outside
    os.unlink(exchange.outbox)
    os.mkdir(exchange.outbox, 0o700)
    (exchange.results / "t2.txt").write_text("task: t2\n\nok")
    await _answer(exchange, Task("t2", "hello"))
    os.rmdir(exchange.archive_dir)
    os.symlink(elsewhere, exchange.archive_dir)
    with pytest.raises(ExchangeUnsafe, match="archive"):
        await exchange.archive(Task("t2", "hello"))
    assert os.listdir(elsewhere) == []
    assert sorted(os.listdir(exchange.outbox)) == ["t2.txt"]


async def test_files_not_named_for_a_task_are_left_alone_and_reported_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue #48: one such file in ``outbox/`` or ``results/`` made every start of an exchange
    worker fail (its name read as a task id). They are skipped, named in a warning (escaped),
    and the finished task's files beside them are archived as before."""
    from tether.bridge import SqliteStore

    exchange = _exchange(tmp_path)
    bad = ["a..b", "x y", "-dash", "n" * 250, "line\nbreak", ".."]
    store = await SqliteStore.open(tmp_path / "custody.db")
    try:
        await store.ingest(Task("done", "a"))
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None
        await store.complete(claim, "A")
        for folder in ("outbox", "results"):
            for name in ["done", *bad]:
                (exchange.root / folder / f"{name}.txt").write_text("x")
        with caplog.at_level(logging.WARNING, logger="tether.bridge.pool.files"):
            assert await exchange.archive_finished(store) == ["done"]
            assert await exchange.archive_finished(store) == []  # a second start too
    finally:
        await store.aclose()
    for folder in ("outbox", "results"):
        assert sorted(os.listdir(exchange.root / folder)) == sorted(f"{n}.txt" for n in bad)
    assert sorted(os.listdir(exchange.root / "archive")) == ["done.result.txt", "done.task.txt"]
    [first, *_] = [r.getMessage() for r in caplog.records if "not a task's file" in r.getMessage()]
    assert "'line\\nbreak.txt'" in first
    assert "\n" not in first
