"""Replace a small file atomically and durably: readers see the old or the new content, never half.

tmp file in the same directory + fsync + rename + fsync of the directory, so a crash at any
point leaves either version on disk, and the rename itself survives power loss.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Atomically replace ``path`` with ``data`` (created with ``mode``; blocking: use a thread)."""
    directory = path.parent
    tmp = directory / f".{path.name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # O_CREAT's mode is filtered by the umask; be exact
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
