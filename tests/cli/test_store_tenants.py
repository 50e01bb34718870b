"""``tether store tenants`` (issue #38, fair shares): the real CLI on a real SQLite store.
``tenants set`` gives a tenant a weight in the store, and the tasks taken in after take turns
by it; ``tenants`` shows each tenant's weight and pending tasks, and reads only."""

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


def test_tenants_set_weighs_the_turns_and_tenants_shows_them_reading_only(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--store", str(db)]
    assert main(["store", "tenants", *args]) == 0
    assert "no tenants" in capsys.readouterr().out
    assert main(["store", "tenants", "set", "acme", "--weight", "3", *args]) == 0
    assert capsys.readouterr().out.splitlines()[1].split() == ["acme", "3", "0"]

    async def use() -> list[str]:
        async with await SqliteStore.open(db) as store:
            for i in range(6):
                await store.ingest(Task(f"acme{i}", "x", headers={"tenant": "acme"}))
            for i in range(2):
                await store.ingest(Task(f"solo{i}", "x", headers={"tenant": "solo"}))
            claims = await store.claim_many("w1", 4, leaderless=True)
            return [c.task.id for c in claims]

    # acme's turns come every third of a step, solo's every step from the clock (acme0's)
    assert trio.run(use) == ["acme0", "acme1", "acme2", "acme3"]
    before = db.read_bytes()
    assert main(["store", "tenants", *args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {
        "schema_version": 1,
        "tenants": [
            {"tenant": "acme", "weight": 3.0, "pending": 2},
            {"tenant": "solo", "weight": 1.0, "pending": 2},
        ],
    }
    assert main(["store", "tenants", *args]) == 0
    assert capsys.readouterr().out.splitlines()[2].split() == ["solo", "1", "2"]
    assert db.read_bytes() == before


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["bad name", "--weight", "1"], "tenant 'bad name'"),
        (["acme", "--weight", "0"], "weight must be finite and > 0"),
    ],
)
def test_tenants_set_refuses_bad_usage_with_one_line_and_exit_2(
    db: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(["store", "tenants", "set", *extra, "--store", str(db)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1
