"""``tether store list / retry / cancel`` (issue #16, item 4): the real CLI on a real store.

SQLite through ``main`` on a store file (PostgreSQL, as a process:
``test_store_operator_cli_postgres.py``). Refusals are one line each on stderr; exit 1 says
some were refused (the others moved), 2 bad usage (nothing moved).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tether._cli import main
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.custody import Store

S = CustodyState


async def fill_store(store: Store) -> None:
    """d1, d2 dead (two reasons), p1 pending, a1 assigned, c1 claimed, r1 result, v1 delivered."""
    for id in ("d1", "d2", "p1", "a1", "c1", "r1", "v1"):
        await store.ingest(Task(id, f"hello {id}"))
    await store.dead_letter("d1", "failed on attempt 5 of 5: ConnectionError: 503")
    await store.dead_letter("d2", "permanent failure on attempt 1: bad input")
    for id in ("c1", "r1", "v1"):
        await store.assign(id, "w1")
        claim = await store.claim("w1")
        assert claim is not None
        assert claim.task.id == id
        if id != "c1":
            await store.complete(claim, f"reply {id}")
    await store.mark_delivered("v1")
    await store.assign("a1", "w1")


async def _states(path: Path) -> dict[str, S | None]:
    async with await SqliteStore.open(path) as store:
        return {id: await store.state(id) for id in ("d1", "d2", "p1", "a1", "c1", "r1", "v1")}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "custody.db"

    async def fill() -> None:
        async with await SqliteStore.open(path) as store:
            await fill_store(store)

    trio.run(fill)
    return path


def test_list_prints_one_state_oldest_first_and_as_json(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["store", "list", "--state", "dead", "--store", str(db)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "2 dead task(s), oldest first:"
    assert out[1].startswith("  d1  attempt 1  age ")
    assert out[1].endswith("failed on attempt 5 of 5: ConnectionError: 503")
    assert out[2].split()[0] == "d2"
    assert main(["store", "list", "--state", "claimed", "--store", str(db), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["state"] == "claimed"
    assert [(t["task"]["id"], t["owner"]) for t in doc["tasks"]] == [("c1", "w1")]
    assert main(["store", "list", "--state", "pending", "--store", str(db), "--limit", "0"]) == 2
    assert "--limit" in capsys.readouterr().err
    assert main(["store", "list", "--state", "result", "--store", str(db), "--limit", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[0] == "r1"


def test_retry_moves_dead_tasks_and_refuses_the_rest_one_line_each(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["store", "retry", "d1", "v1", "p1", "nope", "--store", str(db)])
    assert code == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "task 'd1' re-driven: dead -> pending",
        "re-drove 1 task(s); 3 refused (see above), nothing changed for them",
    ]
    assert err.splitlines() == [
        "tether: task 'v1' not re-driven: it is delivered (its reply was confirmed to the "
        "gateway); nothing to re-drive",
        "tether: task 'p1' not re-driven: it is pending, not dead (still in the bridge's "
        "hands); nothing changed",
        "tether: task 'nope': no such task in the store",
    ]
    assert trio.run(_states, db) == {
        "d1": S.PENDING,
        "d2": S.DEAD,
        "p1": S.PENDING,
        "a1": S.ASSIGNED,
        "c1": S.CLAIMED,
        "r1": S.RESULT,
        "v1": S.DELIVERED,
    }
    assert main(["store", "retry", "d2", "--store", str(db), "--reason", "fixed"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "re-drove 1 task(s)"


def test_retry_dead_selects_by_reason_and_reports_progress(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["store", "retry", "--dead", "--reason-contains", "503", "--store", str(db)]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["re-drove 1 task(s)"]
    assert err.splitlines() == ["re-driven so far: 1"]
    assert trio.run(_states, db)["d1"] is S.PENDING
    assert trio.run(_states, db)["d2"] is S.DEAD
    assert main(args) == 0
    assert capsys.readouterr().out.strip() == "no dead tasks whose reason contains '503'"
    assert main(["store", "retry", "--dead", "--store", str(db)]) == 0
    assert trio.run(_states, db)["d2"] is S.PENDING


def test_cancel_moves_waiting_and_running_tasks_and_refuses_replies(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["store", "cancel", "p1", "a1", "c1", "r1", "v1", "d1", "--store", str(db)]
    assert main([*args, "--reason", "spam"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "task 'p1' cancelled: pending -> dead",
        "task 'a1' cancelled: assigned -> dead",
        "task 'c1' cancelled: claimed -> dead",
        "cancelled 3 task(s); 3 refused (see above), nothing changed for them",
    ]
    assert [line.split(":")[1].strip() for line in err.splitlines()] == [
        "task 'r1' not cancelled",
        "task 'v1' not cancelled",
        "task 'd1' not cancelled",
    ]
    states = trio.run(_states, db)
    assert [states[id] for id in ("p1", "a1", "c1", "r1", "v1")] == [
        S.DEAD,
        S.DEAD,
        S.DEAD,
        S.RESULT,
        S.DELIVERED,
    ]
    assert main(["store", "show", "c1", "--store", str(db)]) == 0
    show = capsys.readouterr().out
    assert "  reason      operator: cancelled: spam" in show
    assert "claimed -> dead  attempt 1  by operator (worker w1): cancelled: spam" in show


def test_retry_dead_leaves_cancelled_tasks_dead_unless_asked(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 33: people told "cancelled" never get a reply from a bulk re-drive."""
    assert main(["store", "cancel", "p1", "--reason", "spam", "--store", str(db)]) == 0
    assert main(["store", "retry", "--dead", "--store", str(db)]) == 0
    states = trio.run(_states, db)
    assert (states["d1"], states["d2"], states["p1"]) == (S.PENDING, S.PENDING, S.DEAD)
    capsys.readouterr()
    args = ["store", "retry", "--dead", "--include-cancelled", "--store", str(db)]
    assert main(args) == 0
    assert capsys.readouterr().out.splitlines() == ["re-drove 1 task(s)"]
    assert trio.run(_states, db)["p1"] is S.PENDING


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["retry"], "name the task ids"),
        (["retry", "d1", "--dead"], "not both"),
        (["retry", "d1", "--reason-contains", "x"], "with --dead"),
        (["retry", "d1", "--include-cancelled"], "with --dead"),
        (["retry", "d1", "bad id"], "task id"),
        (["cancel", "p1", "bad id"], "task id"),
        (["cancel", "p1", "--reason", " "], "--reason"),
    ],
)
def test_bad_usage_is_one_line_exit_2_and_changes_nothing(
    db: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    before = trio.run(_states, db)
    assert main(["store", *argv, "--store", str(db)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert says in err
    assert trio.run(_states, db) == before


def test_a_missing_store_is_not_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope" / "custody.db"
    assert main(["store", "cancel", "x", "--store", str(missing)]) != 0
    assert "\n" not in capsys.readouterr().err.strip()
    assert not missing.exists()
