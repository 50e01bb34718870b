"""Processes on one SQLite file hear each other's work and results at once (the news file).

Two stores opened on one file in this test stand for two processes: each has its own tag, so
each hears only the other's news. The waits are real time but short: a look every
``POLL_S``; a wait that must stay silent waits a few looks.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import trio

from tether.bridge import SqliteStore, Task
from tether.bridge.stores.sqlite import _news
from tether.bridge.stores.sqlite._news import news_path
from tether.bridge.stores.sqlite._readonly import open_readonly

HEARD_WITHIN = 10.0  # seconds: a look every 0.5 s at most, on a busy machine
SILENT_FOR = 2 * _news.POLL_S


async def test_work_and_results_of_one_process_wake_the_other_and_not_itself(
    tmp_path: Path,
) -> None:
    db = tmp_path / "custody.db"
    bridge = await SqliteStore.open(db)
    worker = await SqliteStore.open(db)
    try:
        for store in (bridge, worker):  # each waiter starts from the file as it is now
            assert not await store.wait_for_work(0)
            assert not await store.wait_for_results(0)

        await bridge.ingest(Task("t1", "hi"))
        with trio.fail_after(HEARD_WITHIN):
            assert await worker.wait_for_work(HEARD_WITHIN)
        assert not await bridge.wait_for_work(SILENT_FOR)  # its own news: it knows already

        await bridge.assign("t1", "blue-w1")  # a lead here, the worker over there
        with trio.fail_after(HEARD_WITHIN):
            assert await worker.wait_for_work(HEARD_WITHIN)

        [claim] = await worker.claim_many("blue-w1", 1)
        assert not await bridge.wait_for_work(SILENT_FOR)  # a claim makes no work
        await worker.complete(claim, "hello")
        with trio.fail_after(HEARD_WITHIN):
            assert await bridge.wait_for_results(HEARD_WITHIN)
        assert not await worker.wait_for_results(SILENT_FOR)
        assert not await worker.wait_for_work(SILENT_FOR)  # and no work came of it
    finally:
        await worker.aclose()
        await bridge.aclose()
    assert stat.S_IMODE(news_path(db).stat().st_mode) == 0o600


async def test_a_rewound_news_file_counts_as_news(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_news, "ROTATE_AT", 16)  # four records
    db = tmp_path / "custody.db"
    one = await SqliteStore.open(db)
    other = await SqliteStore.open(db)
    try:
        for n in range(3):
            await one.ingest(Task(f"t{n}", "x"))
        assert not await other.wait_for_results(0)  # it looked: 12 bytes of work, no result
        for n in range(3, 6):
            await one.ingest(Task(f"t{n}", "x"))
        assert news_path(db).stat().st_size < 12  # rewound on the way
        with trio.fail_after(HEARD_WITHIN):
            assert await other.wait_for_results(HEARD_WITHIN)  # shorter than its last look
    finally:
        await other.aclose()
        await one.aclose()


async def test_a_verb_that_only_reads_makes_no_news_file(tmp_path: Path) -> None:
    db = tmp_path / "custody.db"
    store = await SqliteStore.open(db)
    await store.ingest(Task("t1", "x"))
    await store.aclose()
    news_path(db).unlink()
    reader = await open_readonly(db)
    try:
        assert await reader.state("t1") is not None
        assert not await reader.wait_for_work(0.01)
    finally:
        await reader.aclose()
    assert not news_path(db).exists()
