"""``tether store status``: counts per state, oldest in flight, dead letters with reasons."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tether._cli._main import main
from tether.bridge import SqliteStore, Task


async def _fill(path: Path) -> None:
    async with await SqliteStore.open(path, max_attempts=1) as store:
        for i in range(4):
            await store.ingest(Task(id=f"t{i}", body=f"b{i}", room="lobby"))
        first = await store.claim("w1", leaderless=True)
        assert first is not None
        await store.fail(first, "agent crashed: ZeroDivisionError: division by zero")
        second = await store.claim("w2", leaderless=True)
        assert second is not None
        await store.complete(second, "done")


def test_status_shows_counts_oldest_in_flight_and_dead_letters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custody.db"
    trio.run(_fill, path)
    assert main(["store", "status", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "pending           2" in out
    assert "result            1" in out
    assert "dead              1" in out
    assert "in custody        3" in out
    # oldest first: t1 (the result) was ingested before t2 and t3
    lines = out.splitlines()
    oldest = lines.index("oldest in flight:")
    assert lines[oldest + 1].startswith("  t1  result by w2")
    assert "t0" in out
    assert "division by zero" in out
    assert "dead letters: 1 (1 not yet reported to the gateway), newest first:" in out


def test_status_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "custody.db"
    trio.run(_fill, path)
    assert main(["store", "status", "--store", str(path), "--json", "--limit", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["counts"] == {
        "pending": 2,
        "assigned": 0,
        "claimed": 0,
        "result": 1,
        "delivered": 0,
        "dead": 1,
        "waiting": 0,
    }
    assert [e["id"] for e in doc["oldest_in_flight"]] == ["t1", "t2"]
    [dead] = doc["dead_letters"]
    assert dead["id"] == "t0"
    assert "ZeroDivisionError" in dead["reason"]
    assert doc["dead_unreported"] == 1


def test_a_missing_store_is_a_usage_error_not_a_new_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nowhere" / "custody.db"
    assert main(["store", "status", "--store", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "no custody store at" in err
    assert not path.parent.exists()


async def _queues(path: Path) -> None:
    async with await SqliteStore.open(path) as store:
        await store.ingest(Task("d1", "x"))
        for i in range(3):
            await store.ingest(Task(f"r{i}", "x", headers={"queue": "research"}))
        await store.beat("w1", "worker", 4)  # serves default: research has nobody


def test_status_names_a_queue_no_live_worker_serves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custody.db"
    trio.run(_queues, path)
    assert main(["store", "status", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        "queue research: 3 pending, no live worker serves it (start one with --queues research)"
        in out
    )
    assert "queue default" not in out
    assert main(["store", "status", "--store", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["unserved"] == {"research": 3}
