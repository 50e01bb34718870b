"""``tether store show ID``: the record and its custody journal as a timeline (issue #16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tether._cli._main import main
from tether.bridge import SqliteStore, Task


async def _history(path: Path) -> None:
    async with await SqliteStore.open(path) as store:
        await store.ingest(Task("flaky", "hi", room="lobby"))
        await store.assign("flaky", "w1")
        claim = await store.claim("w1")
        assert claim is not None
        await store.fail(claim, "ConnectionError: 503", retry_after=300)


def test_show_prints_the_record_and_every_move(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custody.db"
    trio.run(_history, path)
    assert main(["store", "show", "flaky", "--store", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "task flaky: pending, attempt 2"
    assert any(line.startswith("  next try    in ") for line in out)
    assert "  reason      ConnectionError: 503" in out
    journal = out[out.index("journal:") + 1 :]
    assert [line.split(" ago  ", 1)[1] for line in journal] == [
        "ingested -> pending  attempt 1  by bridge",
        "pending -> assigned  attempt 1  by lead (worker w1)",
        "assigned -> claimed  attempt 1  by worker w1",
        "claimed -> pending  attempt 1  by worker w1: ConnectionError: 503",
    ]
    assert main(["store", "show", "flaky", "--store", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["record"]["state"] == "pending"
    assert [e["dst"] for e in doc["journal"]] == ["pending", "assigned", "claimed", "pending"]


def test_show_of_an_unknown_or_malformed_id_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custody.db"
    trio.run(_history, path)
    assert main(["store", "show", "nope", "--store", str(path)]) == 1
    assert capsys.readouterr().err.strip() == f"tether: no task 'nope' in the store {path}"
    assert main(["store", "show", "bad id", "--store", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tether: ")
    assert "\n" not in err


async def _cancelled(path: Path, body: str) -> None:
    async with await SqliteStore.open(path) as store:
        await store.ingest(Task("long", body, room="lobby"))
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None


def test_show_prints_the_message_bounded_and_an_operator_s_move_plainly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 32.9: the message itself was missing, an operator's cancel read "by operator
    w1: operator: cancelled: cancelled by an operator" (w1 held the task; it is no operator)."""
    path = tmp_path / "custody.db"
    body = "line one\nline two " + "x" * 600
    trio.run(_cancelled, path, body)
    assert main(["store", "cancel", "long", "--store", str(path)]) == 0
    capsys.readouterr()
    assert main(["store", "show", "long", "--store", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    (message,) = [line for line in out if line.startswith("  message     ")]
    shown = message.removeprefix("  message     ")
    assert shown.startswith("line one\\nline two xxx")  # on its line: the newline escaped
    assert shown.endswith("... (218 more characters)"), shown
    assert len(shown) < 440
    journal = out[out.index("journal:") + 1 :]
    assert journal[-1].split(" ago  ", 1)[1] == (
        "claimed -> dead  attempt 1  by operator (worker w1): cancelled: no reason given"
    )
