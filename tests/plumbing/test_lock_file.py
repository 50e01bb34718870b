"""``hold_lock``: one process holds it at a time, the refused one learns the holder's pid, a
lock left by a dead process is taken at once, a forked child does not hold its parent's lock,
and a release never lets two processes hold it by two names."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether._plumbing import _lock_file
from tether._plumbing._lock_file import LockHeld, hold_lock

HOLDER = """
import sys
from pathlib import Path
from tether._plumbing._lock_file import hold_lock
with hold_lock(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes our stdin
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding ``tmp_path / "x.lock"`` until its stdin closes."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / "x.lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None
        assert child.stdout.readline() == "held\n"  # a blocking read: the lock is held now
        try:
            yield child
        finally:
            child.kill()


def test_a_held_lock_refuses_another_process_naming_the_holder(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    path = tmp_path / "x.lock"
    assert path.read_text() == f"{holder.pid}\n"
    assert path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(LockHeld) as refused, hold_lock(path):
        pass  # pragma: no cover - refused before the block
    assert refused.value.pid == holder.pid
    assert path.read_text() == f"{holder.pid}\n"  # the refused one changed nothing
    assert holder.stdin is not None
    holder.stdin.close()  # a clean release removes the file
    assert holder.wait(timeout=30) == 0
    assert not path.exists()
    with hold_lock(path):
        assert path.read_text() == f"{os.getpid()}\n"
    assert not path.exists()


def test_a_lock_dies_with_its_process(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    holder.kill()  # SIGKILL: no release, the file stays with a dead pid in it
    holder.wait()
    path = tmp_path / "x.lock"
    assert path.read_text() == f"{holder.pid}\n"
    with hold_lock(path):
        assert path.read_text() == f"{os.getpid()}\n"


FORKER = """
import os
import sys
from pathlib import Path
from tether._plumbing._lock_file import hold_lock
with hold_lock(Path(sys.argv[1])):
    child = os.fork()
    if child == 0:
        sys.stdin.read()  # the forked helper lives on until the test closes the pipe
        os._exit(0)
    print(child, flush=True)
    sys.stdin.read()
"""


def test_a_forked_child_does_not_keep_a_killed_parents_lock(tmp_path: Path) -> None:
    """An agent's forked helper that outlives a killed bridge must not keep the next one out
    (an ``flock`` would stay held by the child's copy of the descriptor)."""
    path = tmp_path / "x.lock"
    with subprocess.Popen(
        [sys.executable, "-c", FORKER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as parent:
        assert parent.stdin is not None
        assert parent.stdout is not None
        try:
            helper = int(parent.stdout.readline())
            parent.kill()
            parent.wait()
            os.kill(helper, 0)  # still alive
            with hold_lock(path):
                assert path.read_text() == f"{os.getpid()}\n"
        finally:
            parent.kill()  # (the pipes close on leaving: the helper's stdin ends it)


def test_a_file_removed_under_a_newcomer_is_not_the_one_it_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder releases (unlinks) between a newcomer's open and its lock, and a third
    process creates the file anew: the newcomer must hold the file that has the name now."""
    path = tmp_path / "x.lock"
    path.write_text("")
    real_lockf = fcntl.lockf
    calls = 0

    def lockf(fd: int, cmd: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            path.unlink()
            path.write_text("")  # a new file under the name
        real_lockf(fd, cmd)

    monkeypatch.setattr(fcntl, "lockf", lockf)
    fd = _lock_file._acquire(path)
    try:
        assert calls == 2
        assert os.fstat(fd).st_ino == path.stat().st_ino
    finally:
        os.close(fd)
