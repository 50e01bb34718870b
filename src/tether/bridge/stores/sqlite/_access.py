"""Why SQLite could not open a store file, said in words (SQLite itself says only "unable to
open database file" or "attempt to write a readonly database").

A store in WAL mode writes beside its file (``-wal`` and ``-shm``) even to read, so a
read-only filesystem, a directory without write permission or a read-only file all stop it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def unwritable_reason(path: Path) -> str | None:
    """What keeps this process from writing the store at ``path`` and beside it, or None."""
    directory = path.parent
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return (
                f"{directory} is on a read-only filesystem; a SQLite store writes its file and "
                f"the {path.name}-wal and {path.name}-shm files beside it"
            )
    except OSError:
        return None  # a missing directory: the error says so itself
    if not os.access(directory, os.W_OK):
        return (
            f"directory {directory} is not writable; a SQLite store creates "
            f"{path.name}-wal and {path.name}-shm beside its file"
        )
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if file.exists() and not os.access(file, os.W_OK):
            return f"{file} is read-only"
    return None


def explain_open_failure(path: Path, connect: Callable[[], T]) -> Callable[[], T]:
    """``connect``, whose SQLite error also says when the store's place is read-only."""

    def connect_explained() -> T:
        try:
            return connect()
        except sqlite3.OperationalError as exc:
            reason = unwritable_reason(path)
            if reason is None:
                raise
            raise sqlite3.OperationalError(f"{exc}: {reason}") from exc

    return connect_explained
