"""``tether store room`` and ``tether store forget-room`` (issues #34, #53): the real CLI on a
real SQLite store. ``room`` reads only (the file is unchanged); ``forget-room`` erases the
room's text from the store and its files, journaled as the operator's, then asks the gateway,
and says in one line what it could not erase (no gateway configured, no route, no answer).
The whole path through a real gateway and bridge: tests/service/test_forget_room_process.py."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import trio

from tether._cli import main
from tether.bridge import SqliteStore, Task, write_token
from tether.bridge.service import _store_room


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


def _files_hold(db: Path, text: str) -> bool:
    """Does any file of the store (the database, its WAL, its shared memory) hold ``text``?"""
    return any(text.encode() in f.read_bytes() for f in db.parent.glob(db.name + "*"))


def test_forget_room_with_no_gateway_erases_custodys_copy_and_leaves_none_in_the_files(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _files_hold(db, "my pin is 1234")
    assert main(["store", "forget-room", "r", "--store", str(db), "--no-gateway"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "forgot room 'r' in the custody store: 3 turn(s), its state, the text of 2 task(s) "
        "(1 still in custody: cancelled first), 0 step record(s) and 0 question(s) erased"
    )
    assert "no copy is left in the store's files (deleted content zeroed, the WAL truncated)" in out
    assert "the gateway's copy of room 'r' was not asked for (--no-gateway)" in out
    for text in ("my pin is", "what is my pin", '"1234"'):
        assert not _files_hold(db, text), text
    assert main(["store", "room", "r", "--store", str(db)]) == 1
    capsys.readouterr()
    assert main(["store", "show", "m1", "--store", str(db), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert "1234" not in json.dumps(shown)
    assert shown["journal"][-1]["actor"] == "operator"


def test_forget_room_with_no_gateway_configured_says_so_in_one_line_and_exits_1(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --gateway, TETHER_GATEWAY or [bridge] gateway, and no local gateway's token file:
    the custody store's copy is erased, and one line says the gateway's was not, and how."""
    monkeypatch.chdir(tmp_path)  # no tether-data/gateway/token here
    for name in ("TETHER_GATEWAY", "TETHER_TOKEN_FILE", "TETHER_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    assert main(["store", "forget-room", "r", "--store", str(db)]) == 1
    captured = capsys.readouterr()
    assert "forgot room 'r' in the custody store" in captured.out
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(
        "NOT erased: the gateway's copy of room 'r': no gateway is configured for this verb"
    )
    assert "--gateway URL --token-file FILE" in captured.err
    assert not _files_hold(db, "my pin is")


def test_forget_room_with_an_unusable_gateway_token_changes_nothing_and_exits_2(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = db.read_bytes()
    missing = tmp_path / "no-token"
    argv = ["store", "forget-room", "r", "--store", str(db), "--gateway", "http://127.0.0.1:9"]
    assert main([*argv, "--token-file", str(missing)]) == 2
    assert "cannot use the gateway token" in capsys.readouterr().err
    assert db.read_bytes() == before


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    write_token(path, "a-worker-token")
    return path


@pytest.fixture
def old_gateway() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 that knows no route (a gateway older than the forget
    route, or one that never had it): every request is a 404."""

    class NoSuchRoute(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            body = b'{"error": "no such endpoint"}'
            self.send_response(404)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NoSuchRoute)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def test_forget_room_at_a_gateway_without_the_route_says_so_and_exits_1(
    db: Path, token: Path, old_gateway: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["store", "forget-room", "r", "--store", str(db), "--gateway", old_gateway]
    assert main([*argv, "--token-file", str(token)]) == 1
    captured = capsys.readouterr()
    assert "forgot room 'r' in the custody store" in captured.out
    assert captured.err == (
        f"NOT erased: the gateway's copy of room 'r' at {old_gateway}: it has no route to "
        "forget a room (POST /v1/rooms/<room>/forget answered 404): erase it there by the "
        "gateway's own means\n"
    )
    assert not _files_hold(db, "my pin is")


def test_forget_room_at_a_gateway_that_does_not_answer_gives_up_and_exits_1(
    db: Path, token: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_store_room, "GATEWAY_WAIT_S", 0.3)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        argv = ["store", "forget-room", "r", "--store", str(db), "--gateway", url]
        assert main([*argv, "--token-file", str(token)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"NOT erased: the gateway's copy of room 'r' at {url}: it did not")
    assert "answer within 0.3 s" in err
    assert "run the verb again when it does" in err


def test_forget_room_help_names_the_gateway_route_and_the_exit_codes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["store", "forget-room", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "POST /v1/rooms/<room>/forget" in shown
    assert "--no-gateway" in shown
    assert "3 forget-room: the gateway refused the token" in shown


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
