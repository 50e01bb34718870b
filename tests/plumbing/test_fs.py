"""Private directories and files: every created component 0700, every file 0600, any umask."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether._plumbing._fs import create_private_file, ensure_private_dir
from tether.bridge import SqliteStore, Task, ensure_token_file
from tether.bridge.client import ConnectionStatus
from tether.bridge.client._status_file import StatusFile
from tether.bridge.pool import FileExchange
from tether.gateway import GatewayStore


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o000, 0o077], ids=["umask022", "umask000", "umask077"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """Run the test under each umask (0 would loosen anything relying on the default)."""
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def test_every_missing_component_is_created_0700(tmp_path: Path, umask: int) -> None:
    target = tmp_path / "a" / "b" / "c"
    assert ensure_private_dir(target) == target
    for d in (tmp_path / "a", tmp_path / "a" / "b", target):
        assert mode(d) == 0o700, d


def test_a_relative_path_works_from_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: int
) -> None:
    monkeypatch.chdir(tmp_path)
    ensure_private_dir(Path("tether-data") / "gateway")
    assert mode(tmp_path / "tether-data") == 0o700
    assert mode(tmp_path / "tether-data" / "gateway") == 0o700


def test_existing_directories_are_neither_loosened_nor_tightened(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    tight = shared / "tight"
    tight.mkdir()
    os.chmod(tight, 0o711)
    ensure_private_dir(tight / "new")
    assert mode(shared) == 0o755
    assert mode(tight) == 0o711
    assert mode(tight / "new") == 0o700


def test_a_group_writable_parent_without_sticky_bit_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o775)
    with caplog.at_level(logging.WARNING, logger="tether.fs"):
        ensure_private_dir(open_dir / "mine")
    assert mode(open_dir / "mine") == 0o700
    assert [r.getMessage() for r in caplog.records] == [
        f"{open_dir} is writable by group or others (mode 0775, no sticky bit): others could "
        "replace the private files tether keeps under it"
    ]


def test_a_sticky_world_writable_parent_like_tmp_is_not_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sticky = tmp_path / "tmp-like"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    with caplog.at_level(logging.WARNING, logger="tether.fs"):
        ensure_private_dir(sticky / "mine")
        ensure_private_dir(tmp_path)  # exists and private
    assert caplog.records == []


def test_a_file_in_the_way_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match="file is not a directory"):
        ensure_private_dir(tmp_path / "file" / "sub")


def test_create_private_file_is_0600_and_leaves_an_existing_file_alone(
    tmp_path: Path, umask: int
) -> None:
    path = tmp_path / "secret"
    assert create_private_file(path) is True
    assert mode(path) == 0o600
    assert path.read_bytes() == b""
    path.write_text("kept")
    os.chmod(path, 0o640)
    assert create_private_file(path) is False
    assert path.read_text() == "kept"
    assert mode(path) == 0o640


def test_create_private_file_does_not_follow_a_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("x")
    os.chmod(victim, 0o644)
    (tmp_path / "link").symlink_to(victim)
    assert create_private_file(tmp_path / "link") is False
    assert victim.read_text() == "x"
    assert mode(victim) == 0o644


def _assert_private_tree(root: Path, files: set[str]) -> None:
    """``root`` and everything under it: directories 0700, files 0600; ``files`` among them."""
    seen = set()
    assert mode(root) == 0o700, root
    for p in root.rglob("*"):
        rel = str(p.relative_to(root))
        if p.is_dir():
            assert mode(p) == 0o700, rel
        else:
            assert mode(p) == 0o600, rel
            seen.add(rel)
    assert files <= seen


async def test_sqlite_store_files_are_private_right_after_open(tmp_path: Path, umask: int) -> None:
    store = await SqliteStore.open(tmp_path / "a" / "b" / "custody.db")
    try:
        _assert_private_tree(
            tmp_path / "a", {"b/custody.db", "b/custody.db-wal", "b/custody.db-shm"}
        )
        await store.ingest(Task("t1", "secret"))
        _assert_private_tree(tmp_path / "a", {"b/custody.db-wal"})
    finally:
        await store.aclose()


async def test_gateway_db_files_are_private_right_after_open(tmp_path: Path, umask: int) -> None:
    store = await GatewayStore.open(tmp_path / "g" / "h" / "gateway.db")
    try:
        _assert_private_tree(
            tmp_path / "g", {"h/gateway.db", "h/gateway.db-wal", "h/gateway.db-shm"}
        )
        await store.submit("room", "me", "hi", 1.0, None)
        _assert_private_tree(tmp_path / "g", {"h/gateway.db-wal"})
    finally:
        store.close()


async def test_token_status_and_exchange_trees_are_private(tmp_path: Path, umask: int) -> None:
    assert ensure_token_file(tmp_path / "tok" / "deep" / "token")
    await StatusFile(tmp_path / "status" / "deep" / "status.json").publish(
        ConnectionStatus(gateway="http://127.0.0.1:1", client="c")
    )
    FileExchange(tmp_path / "fx" / "deep" / "root")
    _assert_private_tree(tmp_path / "tok", {"deep/token"})
    _assert_private_tree(tmp_path / "status", {"deep/status.json"})
    _assert_private_tree(tmp_path / "fx", set())
    assert {p.name for p in (tmp_path / "fx" / "deep" / "root").iterdir()} == {
        "outbox",
        "results",
        "archive",
        "refused",
    }


@pytest.mark.parametrize("which", ["custody", "gateway"])
async def test_the_database_file_is_0600_before_sqlite_opens_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: int, which: str
) -> None:
    db = tmp_path / "new" / f"{which}.db"
    modes_at_connect: list[int] = []
    real_connect = sqlite3.connect

    def recording_connect(path: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        if Path(path) == db:
            modes_at_connect.append(mode(db))
        conn: sqlite3.Connection = real_connect(path, *args, **kwargs)
        return conn

    monkeypatch.setattr(sqlite3, "connect", recording_connect)
    if which == "custody":
        await (await SqliteStore.open(db)).aclose()
    else:
        (await GatewayStore.open(db)).close()
    connections = 2 if which == "custody" else 1  # the custody store: a writer and a reader
    assert modes_at_connect == [0o600] * connections  # no window with a looser mode
