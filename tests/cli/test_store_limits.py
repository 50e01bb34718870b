"""``tether store limits`` (issue #38): the real CLI on a real SQLite store. ``limits set``
declares a key's limit in the store; ``limits`` shows each key's rate, tokens left, permits in
flight, pause and waiters, and reads only (the file is unchanged)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tether._cli import main
from tether.bridge import SqliteStore, Task


@pytest.fixture
def db(new_store: Path) -> Path:
    return new_store


def test_limits_set_declares_and_limits_shows_in_flight_pause_and_waiters_reading_only(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--store", str(db)]
    assert main(["store", "limits", *args]) == 0
    assert "no limits declared" in capsys.readouterr().out
    set_ = ["store", "limits", "set", "openai:gpt-4o", "--rate", "500/min", "--burst", "50"]
    assert main([*set_, "--concurrency", "2", *args]) == 0
    assert "openai:gpt-4o" in capsys.readouterr().out

    async def use() -> None:
        async with await SqliteStore.open(db) as store:
            for id in ("a", "b", "c"):
                await store.ingest(Task(id, "x"))
            claims = await store.claim_many("w1", 3, leaderless=True)
            for claim in claims:
                await store.acquire_permit(claim, "openai:gpt-4o", 10)
            await store.pause_limit("openai:gpt-4o", store.clock() + 600)

    trio.run(use)
    before = db.read_bytes()
    assert main(["store", "limits", *args, "--json"]) == 0
    [doc] = json.loads(capsys.readouterr().out)["limits"]
    assert doc["key"] == "openai:gpt-4o"
    assert doc["rate_per_s"] == pytest.approx(500 / 60)
    assert (doc["burst"], doc["concurrency"], doc["in_flight"], doc["waiters"]) == (50, 2, 2, 1)
    assert 20 <= doc["tokens"] < 31  # 50 - 2 x 10, refilled a little since
    assert 590 < doc["paused_for_s"] <= 600
    assert main(["store", "limits", *args]) == 0
    line = capsys.readouterr().out.splitlines()[1].split()
    assert line[0] == "openai:gpt-4o"
    assert line[4:7] == ["2", "2", "1"]  # cap, held, waiting
    assert db.read_bytes() == before


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["bad key", "--concurrency", "1"], "limit key 'bad key'"),
        (["k", "--rate", "5/fortnight"], "rate '5/fortnight' must be N/s"),
        (["k"], "needs --rate or --concurrency"),
        (["k", "--concurrency", "0"], "concurrency must be an int >= 1"),
        (["k", "--burst", "3", "--concurrency", "1"], "give --rate too"),
    ],
)
def test_limits_set_refuses_bad_usage_with_one_line_and_exit_2(
    db: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(["store", "limits", "set", *extra, "--store", str(db)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1
