"""Private directories (0700) and files (0600) for everything tether keeps on disk.

Every missing component is made 0700 whatever the umask, and a file is 0600 before anything writes
to it. See docs/guide/design.md, "Private files and directories".
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("tether.fs")

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def shared_writable(mode: int) -> bool:
    """Whether a directory with ``mode`` lets group or others replace entries in it."""
    return bool(mode & (stat.S_IWGRP | stat.S_IWOTH)) and not mode & stat.S_ISVTX


def ensure_private_dir(path: str | os.PathLike[str]) -> Path:
    """Make ``path`` a directory, creating each missing component with mode 0700; return it.

    Existing directories are left as they are (never loosened, never tightened); the nearest
    existing one is checked with ``shared_writable`` and a WARNING is logged if it is. Raises
    ``NotADirectoryError`` naming the component that exists but is not a directory. Blocking.
    """
    target = Path(path)
    missing: list[Path] = []
    current = target.absolute()
    while not current.exists():
        if current.is_symlink():  # a dangling link: mkdir would fail obscurely
            raise NotADirectoryError(f"{current} is a dangling symlink, not a directory")
        missing.append(current)
        current = current.parent
    if not current.is_dir():
        raise NotADirectoryError(f"cannot create {target}: {current} is not a directory")
    existing_mode = current.stat().st_mode
    if shared_writable(existing_mode):
        log.warning(
            "%s is writable by group or others (mode %04o, no sticky bit): others could "
            "replace the private files tether keeps under it",
            current,
            stat.S_IMODE(existing_mode),
        )
    for directory in reversed(missing):
        try:
            os.mkdir(directory, PRIVATE_DIR_MODE)
        except FileExistsError:  # created concurrently: leave it to its creator
            if not directory.is_dir():
                raise NotADirectoryError(f"{directory} exists and is not a directory") from None
            continue
        os.chmod(directory, PRIVATE_DIR_MODE)  # mkdir's mode went through the umask
    return target


def create_private_file(path: str | os.PathLike[str]) -> bool:
    """Create ``path`` empty with mode 0600 unless it exists; True when this call created it.

    Uses ``O_CREAT | O_EXCL`` (no symlink is followed, no existing file is touched) and sets
    the mode exactly, whatever the umask. Its directory must exist (``ensure_private_dir``).
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
    finally:
        os.close(fd)
    return True


def restrict_file(path: str | os.PathLike[str]) -> None:
    """Take group and other permissions off an existing file of ours (an older, looser one)."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o077:
        log.warning("%s had mode %04o; setting 0600", path, mode)
        os.chmod(path, mode & 0o700)


def read_private_file(path: Path, what: str, error: type[Exception]) -> bytes:
    """The bytes of a secret file (a token, a password) that only its owner may read.

    Refuses, with ``error`` naming ``what`` and ``path``, a missing or unreadable file, one
    that is not a regular file, and one that group or others can access (0600 expected).
    """
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} {path} is not a regular file")
        if st.st_mode & 0o077:
            raise error(
                f"{what} {path} is accessible by group or others "
                f"(mode {stat.S_IMODE(st.st_mode):04o}); run: chmod 600 {path}"
            )
        return path.read_bytes()
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist") from None
    except PermissionError:
        raise error(f"{what} {path} is not readable") from None
