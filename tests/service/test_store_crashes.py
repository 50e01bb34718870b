"""``tether store status`` and ``store show`` show crash accounting (issue #16, item 3): the
suspects (tasks in flight when a worker process died, which run alone) with their crash
counts, and a task's crashes in its record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tether._cli._main import main
from tether.bridge import SqliteStore, Task


async def _crashed(path: Path) -> None:
    """Worker ``b-w1`` held two tasks when its process died; it came back under its name."""
    async with await SqliteStore.open(path) as store:
        await store.ingest_many([Task("hit", "x"), Task("also", "y"), Task("calm", "z")])
        await store.beat("b-w1", "worker", 4)
        assert len(await store.claim_many("b-w1", 2, leaderless=True)) == 2
        assert len(await store.recover_claims("b-w1")) == 2  # the restart's first step


def test_status_lists_the_suspects_with_their_crash_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custody.db"
    trio.run(_crashed, path)
    assert main(["store", "status", "--store", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    at = out.index(
        "suspects (in flight when a worker process died; each runs in a quarantine process, "
        "or alone in its process where none can start): 2"
    )
    assert sorted(out[at + 1 : at + 3]) == [
        "  also  pending  crashes 1 (0 alone)  run 2 (1 crash, not a failed attempt)",
        "  hit  pending  crashes 1 (0 alone)  run 2 (1 crash, not a failed attempt)",
    ]
    assert main(["store", "status", "--store", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["suspects"] == 2
    assert {(e["id"], e["crash_count"], e["crashes_alone"]) for e in doc["suspect_tasks"]} == {
        ("hit", 1, 0),
        ("also", 1, 0),
    }
    calm = next(e for e in doc["oldest_in_flight"] if e["id"] == "calm")
    assert calm["crash_count"] == 0


def test_show_says_how_often_the_task_lost_its_worker_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custody.db"
    trio.run(_crashed, path)
    assert main(["store", "show", "hit", "--store", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "task hit: pending, run 2 (1 crash, not a failed attempt)"
    assert (
        "  crashes     1 (0 while running alone), a suspect: it runs in a quarantine process, "
        "or alone in its process where none can start"
    ) in out
    journal = out[out.index("journal:") + 1 :]
    last = journal[-1].split(" ago  ", 1)[1]
    assert last.startswith(
        "claimed -> pending  attempt 1  by reconciler (worker b-w1): lease of worker "
    )
    assert "the worker restarted in a new process" in last


async def _quarantine_deaths(path: Path) -> None:
    """``hit`` killed its quarantine process once (SIGSEGV); ``dead`` twice (SIGKILL)."""
    await _crashed(path)
    async with await SqliteStore.open(path) as store:
        await store.ingest(Task("dead", "poison"))
        await store.beat("d-w1", "worker", 4)
        assert len(await store.claim_many("d-w1", 4, leaderless=True, quarantine=0)) == 2
        await store.recover_claims("d-w1")  # "calm" and "dead" are suspects now too
        deaths = {
            ("hit", 0): "its quarantine process was killed by SIGSEGV",
            ("dead", 0): "its quarantine process was killed by SIGKILL",
            ("dead", 1): "its quarantine process was killed by SIGKILL",
        }
        for round in range(2):
            for claim in await store.claim_many("q-w1", 4, leaderless=True, quarantine=4):
                death = deaths.get((claim.task.id, round))
                if death is None:
                    await store.release(claim)
                else:
                    await store.quarantine_death(claim, death, max_deaths=2)


def test_status_and_show_list_quarantine_deaths_with_their_signals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custody.db"
    trio.run(_quarantine_deaths, path)
    assert main(["store", "status", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        "  hit  pending  crashes 2 (0 alone)  run 3 (2 crashes, not failed attempts)  "
        "quarantine deaths 1 (last: its "
        "quarantine process was killed by SIGSEGV)"
    ) in out
    assert (
        "run 3 (3 crashes, not failed attempts): quarantine: killed its quarantine process 2 "
        "times (last: its quarantine process was killed by SIGKILL); max_quarantine_deaths 2 "
        "reached"
    ) in out
    assert main(["store", "show", "dead", "--store", str(path)]) == 0
    shown = capsys.readouterr().out.splitlines()
    at = shown.index("  quarantine  2 death(s) of its quarantine process")
    assert "killed by SIGKILL in run 2: death 1 of 2" in shown[at + 1]
    assert "killed its quarantine process 2 times" in shown[at + 2]
