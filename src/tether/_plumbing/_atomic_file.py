"""Replace a small file atomically and durably: readers see the old or the new content, never half.

tmp file + fsync + rename + fsync of the directory; the tmp file is created exclusively under a
random name, so a planted file cannot redirect the write. See docs/guide/design.md, "Private files
and directories".
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from pathlib import Path

_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_TMP_NAME = re.compile(r"\..+\.(?P<pid>[0-9]+)\.[0-9a-f]{12}\.tmp")
"""The tmp file of ``write_atomic_at``: ``.<name>.<pid of the writer>.<random>.tmp``."""


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Atomically replace ``path`` with ``data`` (created with ``mode``; blocking: use a thread)."""
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_atomic_at(dir_fd, path.name, data, mode)
    finally:
        os.close(dir_fd)


def write_atomic_at(dir_fd: int, name: str, data: bytes, mode: int = 0o600) -> None:
    """``write_atomic`` of the entry ``name`` in the directory open as ``dir_fd``."""
    tmp = f".{name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"  # _TMP_NAME
    fd = os.open(tmp, _TMP_FLAGS, mode, dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode)  # O_CREAT's mode is filtered by the umask; be exact
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)


def remove_stale_tmp_at(dir_fd: int) -> list[str]:
    """Delete the tmp files that ``write_atomic_at`` left in the directory open as ``dir_fd``
    when its process was killed mid-write; returns their names.

    Only a tmp file whose writer (the pid in its name) is gone is removed: a live process may
    be writing it now. Every other entry is left alone (blocking: use a thread)."""
    removed = []
    for entry in os.listdir(dir_fd):
        match = _TMP_NAME.fullmatch(entry)
        if match is None or _alive(int(match["pid"])):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(entry, dir_fd=dir_fd)
            removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process, or no pid at all: not ours to judge
    return True
