"""``tether store retry ID --from-step``, ``tether store fork`` and ``tether store list
--version`` (issue #53): the real CLI on a real SQLite store. A rewind and a fork print what
they did, a refusal is one line on stderr (exit 1), bad usage exit 2 with nothing changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tether._cli import main
from tether.bridge import CustodyState, SqliteStore, Task

S = CustodyState


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """t1: dead, steps a, b, c recorded by version 1.0; w1: waiting, step a by version 2.0."""
    path = tmp_path / "custody.db"

    async def fill() -> None:
        async with await SqliteStore.open(path) as store:
            for id in ("t1", "w1"):
                await store.ingest(Task(id, f"hello {id}", room=f"room-{id}"))
                claim = await store.claim("w", leaderless=True)
                assert claim is not None
                names = ("a", "b", "c") if id == "t1" else ("a",)
                for name in names:
                    version = "1.0" if id == "t1" else "2.0"
                    await store.record_step(claim, name, '"x"', version=version)
                if id == "t1":
                    await store.fail(claim, "boom", permanent=True)
                else:
                    await store.park(claim, store.clock() + 3600, "sleeping")

    trio.run(fill)
    return path


async def _steps(path: Path, id: str) -> list[str]:
    async with await SqliteStore.open(path) as store:
        return [s.name for s in await store.steps(id)]


def test_a_rewind_drops_the_later_steps_and_redrives(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ["--store", str(db)]
    assert main(["store", "retry", "t1", "--from-step", "b", "--reason", "try again", *store]) == 0
    out = capsys.readouterr().out
    assert "task 't1' re-driven: dead -> pending" in out
    assert "rewound and re-drove 1 task(s)" in out
    assert trio.run(_steps, db, "t1") == ["a"]
    # a task not dead is refused, one line, nothing changed
    assert main(["store", "retry", "w1", "--from-step", "a", *store]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "only a dead task is rewound" in err[0]
    assert trio.run(_steps, db, "w1") == ["a"]


def test_a_fork_copies_the_earlier_steps_into_a_new_task(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ["--store", str(db)]
    assert main(["store", "fork", "t1", "--from-step", "c", "--room", "branch", *store]) == 0
    assert capsys.readouterr().out.strip() == (
        "forked task t1 at step 'c' into t1~fork1 (2 record(s) copied)"
    )
    assert trio.run(_steps, db, "t1~fork1") == ["a", "b"]
    assert trio.run(_steps, db, "t1") == ["a", "b", "c"]
    assert main(["store", "fork", "t1", "--from-step", "nope", *store]) == 1
    assert "no recorded step 'nope'" in capsys.readouterr().err


def test_list_version_shows_the_runs_in_flight_per_version(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["store", "list", "--version", "2.0", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert "2.0: 1" in out  # t1 is dead: not in flight
    assert "1 run(s) in flight began under version 2.0" in out
    assert "w1  waiting" in out
    assert main(["store", "list", "--version", "1.0", "--json", "--store", str(db)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["version"], doc["tasks"], doc["in_flight"]) == ("1.0", [], {"2.0": 1})


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["retry", "t1", "w1", "--from-step", "a"], "--from-step rewinds one task"),
        (["retry", "--dead", "--from-step", "a"], "--from-step rewinds one task"),
        (["retry", "t1", "--fresh", "--from-step", "a"], "--from-step rewinds one task"),
        (["retry", "t1", "--from-step", "no way"], "--from-step: step name"),
        (["fork", "t1", "--from-step", "a", "--room", ""], "--room"),
        (["list", "--version", "bad version"], "--version: agent version"),
    ],
)
def test_bad_usage_is_one_line_exit_2_and_changes_nothing(
    db: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    assert main(["store", *args, "--store", str(db)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert says in err[0]
    assert trio.run(_steps, db, "t1") == ["a", "b", "c"]
