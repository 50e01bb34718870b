"""A lock a process holds for its lifetime: a file with a POSIX record lock, holding the pid.

The kernel frees the lock when its process dies, however it dies, so a crash leaves no stale
lock and a restart takes it at once; a record lock belongs to the process (a child it forks
does not hold it, unlike ``flock``'s), and nothing else in the process opens the file (closing
any descriptor of it would free the lock). The file names the holder's pid for whoever is
refused, and goes away on a clean release (whoever opened it just before re-checks that the
name is still the file they locked, so no two processes ever hold the lock by two names). The
kernel lets a process take its own record lock twice, so the process keeps its own list too:
a second holder in the same process is refused like one in another process.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

_HELD: set[Path] = set()
"""The locks this process holds (their absolute paths)."""


class LockHeld(Exception):
    """Another live process holds the lock (``pid``: its process id, if it wrote it yet)."""

    def __init__(self, path: Path, pid: int | None) -> None:
        super().__init__(f"{path} is locked by {'a process' if pid is None else f'pid {pid}'}")
        self.path = path
        self.pid = pid


def _pid_in(fd: int) -> int | None:
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def _acquire(path: Path) -> int:
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EACCES, errno.EAGAIN):
                    raise
                raise LockHeld(path, _pid_in(fd)) from None
            held = os.fstat(fd)
            try:
                now = os.stat(path)
                same = (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd
        os.close(fd)  # its holder removed it between our open and our lock: take the new one


@contextlib.contextmanager
def hold_lock(path: Path) -> Iterator[None]:
    """Hold the lock ``path`` for the block, or raise ``LockHeld`` at once."""
    path = path.absolute()
    if path in _HELD:
        raise LockHeld(path, os.getpid())
    fd = _acquire(path)
    _HELD.add(path)
    try:
        yield
    finally:
        _HELD.discard(path)
        try:
            os.unlink(path)  # while still held: see the module docstring
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)
