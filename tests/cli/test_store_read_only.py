"""The store verbs touch nothing they are pointed at by mistake (issue #32, item 1).

``tether store status|list|show`` open the store read-only: they never create, migrate or
chmod anything, and refuse a file that is not a tether store in one line (exit 2). ``retry``
and ``cancel`` write, but only to a file that already is a tether store. A ``bridge run`` that
cannot start leaves no store behind. The real CLI (``main``) on real files; each test compares
the folder (names, modes, bytes) before and after.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
import trio

from tether._cli import main
from tether.bridge import SqliteStore, Task, write_token
from tether.bridge.stores.sqlite._schema import MIGRATIONS, SCHEMA_VERSION, _statements

INSPECT = (
    ("store", "status"),
    ("store", "list", "--state", "pending"),
    ("store", "show", "t1"),
)
WRITE = (("store", "retry", "t1"), ("store", "cancel", "t1"))
HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"


def _folder(path: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``path``: its mode and a digest of its bytes."""
    return {
        str(f.relative_to(path)): (f.stat().st_mode, hashlib.sha256(f.read_bytes()).hexdigest())
        for f in sorted(path.rglob("*"))
        if f.is_file()
    }


def _tables(path: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        return [name for (name,) in rows]
    finally:
        conn.close()


def _hosts_copy(folder: Path) -> tuple[Path, str]:
    path = folder / "hosts"
    source = Path("/etc/hosts")
    path.write_bytes(source.read_bytes() if source.is_file() else HOSTS.encode())
    return path, "is not a SQLite database"


def _app_db(folder: Path) -> tuple[Path, str]:
    path = folder / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    return path, "is not a tether custody store (found tables: t, users)"


def _empty_db(folder: Path) -> tuple[Path, str]:
    path = folder / "blank.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE gone (x)")
    conn.execute("DROP TABLE gone")
    conn.commit()
    conn.close()
    return path, "is not a tether custody store (found no tables)"


def _empty_file(folder: Path) -> tuple[Path, str]:
    path = folder / "custody.db"
    path.touch()
    return path, "is an empty file, not a tether custody store"


NOT_A_STORE = {
    "hosts-copy": _hosts_copy,
    "foreign-sqlite": _app_db,
    "sqlite-no-tables": _empty_db,
    "empty-file": _empty_file,
}


@pytest.mark.parametrize("verb", INSPECT + WRITE, ids=lambda v: "-".join(v[:2]))
@pytest.mark.parametrize("kind", sorted(NOT_A_STORE))
def test_a_file_that_is_no_tether_store_is_refused_in_one_line_and_left_as_it_was(
    tmp_path: Path, kind: str, verb: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    path, found = NOT_A_STORE[kind](tmp_path)
    path.chmod(0o644)
    tables = _tables(path) if kind.endswith("sqlite") else None
    before = _folder(tmp_path)
    assert main([*verb, "--store", str(path)]) == 2
    out, err = capsys.readouterr()
    assert err == f"tether: error: {path} {found}\n"
    assert out == ""
    assert _folder(tmp_path) == before  # no chmod, no -wal, -shm or -journal, no new table
    if tables is not None:
        assert _tables(path) == tables


async def _a_store(path: Path, *, leave_open: bool = False) -> SqliteStore:
    store = await SqliteStore.open(path, synchronous="NORMAL")
    await store.ingest(Task("t1", "hello"))
    if not leave_open:
        await store.aclose()
    return store


@pytest.mark.parametrize("verb", INSPECT, ids=lambda v: v[1])
def test_an_inspecting_verb_changes_no_mode_and_creates_no_file(
    tmp_path: Path, verb: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custody.db"
    trio.run(_a_store, path)
    path.chmod(0o644)  # looser than a bridge makes it: an inspecting verb leaves it so
    before = _folder(tmp_path)
    assert main([*verb, "--store", str(path)]) == 0
    assert "t1" in capsys.readouterr().out
    assert _folder(tmp_path) == before


def test_an_inspecting_verb_reads_a_store_another_process_holds_open(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """While the store is open elsewhere (its -wal holds the newest task), the verbs read it
    through the -wal and leave it writable."""
    path = tmp_path / "custody.db"
    trio.run(_a_store, path)
    holder = sqlite3.connect(path, isolation_level=None)  # keeps the -wal from a checkpoint
    try:
        holder.execute("SELECT count(*) FROM tasks").fetchone()

        async def add(id: str) -> None:
            async with await SqliteStore.open(path, synchronous="NORMAL") as store:
                await store.ingest(Task(id, "in the wal"))

        trio.run(add, "t2")
        assert Path(f"{path}-wal").stat().st_size > 0
        assert main(["store", "list", "--state", "pending", "--store", str(path)]) == 0
        assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]] == [
            "t1",
            "t2",
        ]
        assert main(["store", "status", "--store", str(path)]) == 0
        assert "pending           2" in capsys.readouterr().out
        trio.run(add, "t3")  # the writer was not disturbed
    finally:
        holder.close()


def test_an_inspecting_verb_works_in_a_read_only_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store in a directory nobody may write (a backup, a read-only mount) can be read."""
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "custody.db"
    trio.run(_a_store, path)
    before = _folder(folder)
    with _read_only(folder):
        for verb in INSPECT:
            assert main([*verb, "--store", str(path)]) == 0, capsys.readouterr().err
            assert "t1" in capsys.readouterr().out
    assert _folder(folder) == before


class _read_only:
    """``folder`` made read-only the way this machine allows: its write bit taken (anyone but
    root), or a read-only bind mount of it over itself (root: chmod does not stop root)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.mounted = False

    def __enter__(self) -> None:
        if os.geteuid() != 0:
            self.folder.chmod(0o500)
            return
        bind = subprocess.run(
            ["mount", "--bind", str(self.folder), str(self.folder)], capture_output=True
        )
        if bind.returncode != 0:
            pytest.skip(f"root without mount: no read-only directory ({bind.stderr!r})")
        self.mounted = True
        subprocess.run(["mount", "-o", "remount,bind,ro", str(self.folder)], check=True)

    def __exit__(self, *exc: object) -> None:
        if self.mounted:
            subprocess.run(["umount", str(self.folder)], check=True)
        else:
            self.folder.chmod(0o700)


def _older_store(path: Path, version: int) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for migration in MIGRATIONS[:version]:
            for statement in _statements(migration):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {version}")
    finally:
        conn.close()


def _user_version(path: Path) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("verb", INSPECT, ids=lambda v: v[1])
def test_an_inspecting_verb_refuses_an_older_schema_rather_than_migrate_it(
    tmp_path: Path, verb: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custody.db"
    _older_store(path, 5)
    before = _folder(tmp_path)
    assert main([*verb, "--store", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"tether: error: {path} is a tether custody store of schema version 5")
    assert f"this tether reads version {SCHEMA_VERSION}" in err
    assert _folder(tmp_path) == before
    assert _user_version(path) == 5


def test_a_writing_verb_migrates_an_older_tether_store_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custody.db"
    _older_store(path, 5)
    assert main(["store", "retry", "--dead", "--store", str(path)]) == 0
    assert capsys.readouterr().out == "no dead tasks\n"
    assert _user_version(path) == SCHEMA_VERSION


def test_a_bridge_that_cannot_start_leaves_no_store_and_prints_no_banner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No token file: the one error line, and the folder as it was (no tether-data/); a token
    file the bridge cannot use is bad configuration (exit 2), not the gateway's refusal (3)."""
    monkeypatch.chdir(tmp_path)
    for name in [k for k in os.environ if k.startswith("TETHER_")]:
        monkeypatch.delenv(name)
    assert main(["bridge", "run"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "tether: error: cannot use the gateway token: token file "
        "tether-data/gateway/token does not exist\n"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["hosts-copy", "foreign-sqlite"])
def test_a_bridge_refuses_a_store_file_that_is_not_a_tether_store(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not only the store verbs: a bridge pointed at another program's file leaves it as it was
    (it chmodded it, and created its tables inside another program's database)."""
    monkeypatch.chdir(tmp_path)  # the echo agent is not "from the working directory"
    path, found = NOT_A_STORE[kind](tmp_path)
    path.chmod(0o644)
    token = tmp_path / "token"
    write_token(token, "a-token")
    before = _folder(tmp_path)
    argv = ["bridge", "run", "--token-file", str(token), "--store", str(path)]
    assert main([*argv, "--gateway", "http://127.0.0.1:9"]) == 2
    # checked before the banner and the first log line: one error reads as one line
    assert capsys.readouterr().err == f"tether: error: {path} {found}\n"
    assert _folder(tmp_path) == before


@pytest.mark.parametrize("kind", ["hosts-copy", "foreign-sqlite"])
def test_a_worker_process_refuses_a_store_file_that_is_not_a_tether_store_in_one_line(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path, found = NOT_A_STORE[kind](tmp_path)
    path.chmod(0o644)
    before = _folder(tmp_path)
    assert main(["worker", "run", "--store", str(path)]) == 2
    assert capsys.readouterr().err == f"tether: error: {path} {found}\n"
    assert _folder(tmp_path) == before
