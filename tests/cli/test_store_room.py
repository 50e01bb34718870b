"""``tether store room`` and ``tether store forget-room`` (issue #34): the real CLI on a real
SQLite store. ``room`` reads only (the file is unchanged); ``forget-room`` erases the room's
history, state and finished bodies, journalled as the operator's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tether._cli import main
from tether.bridge import SqliteStore, Task


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "custody.db"

    async def fill() -> None:
        async with await SqliteStore.open(path) as store:
            await store.ingest(Task("m1", "my pin is 1234", room="r"), room_policy="serial")
            claim = await store.claim("w1", leaderless=True)
            assert claim is not None
            await store.complete_with_state(claim, "noted", {"pin": "1234"}, 0)
            await store.mark_delivered("m1")
            await store.ingest(Task("m2", "what is my pin?", room="r"), room_policy="serial")

    trio.run(fill)
    return path


def test_room_shows_the_turns_and_the_state_and_changes_nothing(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = db.read_bytes()
    assert main(["store", "room", "r", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert "room r: 3 turn(s) kept; state version 1" in out
    assert "user       received     m1  my pin is 1234" in out
    assert "assistant  delivered    m1  noted" in out
    assert '"pin": "1234"' in out
    assert main(["store", "room", "r", "--store", str(db), "--json", "--limit", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["schema_version"], doc["turn_count"], doc["version"]) == (1, 3, 1)
    assert [t["text"] for t in doc["turns"]] == ["what is my pin?"]
    assert doc["state"] == {"pin": "1234"}
    assert db.read_bytes() == before


def test_room_of_an_unknown_room_exits_1_and_bad_usage_2(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["store", "room", "nowhere", "--store", str(db)]) == 1
    assert capsys.readouterr().err.strip() == (
        "tether: the store holds no conversation of room 'nowhere'"
    )
    assert main(["store", "room", "", "--store", str(db)]) == 2
    assert "room" in capsys.readouterr().err


def test_forget_room_erases_history_state_and_finished_bodies(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["store", "forget-room", "r", "--store", str(db)]) == 0
    assert "forgot room 'r': 3 turn(s)" in capsys.readouterr().out
    assert main(["store", "room", "r", "--store", str(db)]) == 1
    capsys.readouterr()
    assert main(["store", "show", "m1", "--store", str(db), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert "1234" not in json.dumps(shown)
    assert shown["journal"][-1]["actor"] == "operator"


def test_forget_room_says_plainly_what_it_did_not_erase(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 47.8: the reference gateway still serves every message and reply of the room
    (``GET /v1/messages/ID``); until it has a route to erase them, the verb says so."""
    assert main(["store", "forget-room", "r", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert "NOT erased: the gateway's own copy of the room's messages and replies" in out
    with pytest.raises(SystemExit):
        main(["store", "forget-room", "--help"])
    assert "not the gateway's own copy" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("verb", ["room", "forget-room"])
@pytest.mark.parametrize("name", ["", "x" * 300, "a\x00b"])
def test_a_bad_room_name_is_refused_in_the_clis_words(
    db: Path, capsys: pytest.CaptureFixture[str], verb: str, name: str
) -> None:
    """``forget-room ''`` answered "room must be None or a non-empty str": the library's
    words. The CLI names its own argument, and nothing changed."""
    before = db.read_bytes()
    assert main(["store", verb, name, "--store", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tether: error: ROOM must be a room name of 1 to 256 characters")
    assert "None" not in err
    assert " str" not in err
    assert err.count("\n") == 1
    assert db.read_bytes() == before
