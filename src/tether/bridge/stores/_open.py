"""Pick the custody backend from one setting: a file path (SQLite) or a ``postgresql://`` URL.

``tether bridge run --store PATH_OR_URL`` (or the config file's ``store``) goes through
``open_store``. A PostgreSQL password never rides in the URL (it would show in ``ps``, shell
history and config dumps): it comes from ``--store-password-file`` (a private file, like the
bearer token) or libpq's own environment (``PGPASSWORD``, ``PGPASSFILE``, ``~/.pgpass``).
Messages name the database with ``redact_dsn``, never the raw string.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from ..._plumbing._config_error import ConfigError
from ..._plumbing._fs import read_private_file
from ..custody._roles import Store
from .postgres._dsn import (
    dsn_has_password,
    is_postgres_dsn,
    redact_dsn,
    scrub_dsn,
    unparsable_reason,
)
from .sqlite._store import Synchronous

log = logging.getLogger("tether.bridge.store")


class StoreConfigError(ConfigError):
    """The store setting (path, URL, password file, schema) is unusable; says which and why.

    A ``ConfigError``, so the CLI reports it in one line and exits 2 like any bad setting."""


class StoreOpenError(RuntimeError):
    """Opening a PostgreSQL store failed with an error whose text showed the DSN: the same
    error with the DSN redacted (the original is not chained, so no traceback shows it)."""


def read_password_file(path: Path) -> str:
    """The password in ``path``: one line, the file private to its owner (0600)."""
    data = read_private_file(path, "password file", StoreConfigError)
    try:
        raw = data.decode("utf-8")
    except UnicodeDecodeError:
        raise StoreConfigError(f"password file {path} is not UTF-8 text") from None
    password = raw.removesuffix("\n").removesuffix("\r")
    if not password or "\n" in password or "\r" in password or "\0" in password:
        raise StoreConfigError(f"password file {path} must hold one non-empty line")
    return password


async def open_store(
    url_or_path: str | os.PathLike[str],
    *,
    password_file: Path | None = None,
    schema: str = "tether",
    clock: Callable[[], float] = time.time,
    lease_s: float = 60.0,
    max_attempts: int = 5,
    must_exist: bool = False,
    read_only: bool = False,
    synchronous: Synchronous = "NORMAL",
    **options: Any,
) -> Store:
    """Open the custody store ``url_or_path`` names: ``SqliteStore`` or ``PostgresStore``.

    A file that holds anything but a tether store is refused, never made one. ``must_exist``
    refuses to create a store (for tools that change one): a missing or empty SQLite file, or
    a PostgreSQL schema that was never created.
    ``read_only`` (for tools that inspect) also refuses a store of an older schema rather than
    migrate it, and changes nothing: no file mode, no ``-wal`` or ``-shm`` file where none was;
    every write fails. ``synchronous``: NORMAL (durable at promises) or FULL (every commit
    durable); on PostgreSQL NORMAL commits what promises nothing with ``synchronous_commit=off``
    (OFF and EXTRA are SQLite's own). Other ``options`` go to the
    backend's ``open`` (e.g. ``pool_size`` for PostgreSQL).
    """
    common: dict[str, Any] = {"clock": clock, "lease_s": lease_s, "max_attempts": max_attempts}
    target = os.fspath(url_or_path)
    if not target:
        raise StoreConfigError("the store setting is empty: give a file path or postgresql:// URL")
    if isinstance(url_or_path, str) and is_postgres_dsn(target):
        return await _open_postgres(
            target, password_file, schema, must_exist, read_only, synchronous, common, options
        )
    if password_file is not None:
        raise StoreConfigError(
            f"--store-password-file is for a postgresql:// store, but the store is a file: {target}"
        )
    if schema != "tether":
        raise StoreConfigError("--store-schema is for a postgresql:// store")
    return await _open_sqlite(target, must_exist, read_only, synchronous, common, options)


async def _open_postgres(
    target: str,
    password_file: Path | None,
    schema: str,
    must_exist: bool,
    read_only: bool,
    synchronous: Synchronous,
    common: dict[str, Any],
    options: dict[str, Any],
) -> Store:
    """``open_store`` of a ``postgresql://`` URL: every error says the URL redacted."""
    unparsable = unparsable_reason(target)
    if unparsable is not None:
        raise StoreConfigError(unparsable)
    shown = redact_dsn(target)
    try:
        from .postgres._schema import NoSuchStore
        from .postgres._store import PostgresStore
    except ImportError as exc:
        raise StoreConfigError(
            f"the store {shown} needs PostgreSQL support: install tether[postgres] ({exc})"
        ) from None
    if dsn_has_password(target):
        raise StoreConfigError(
            f"the store URL {shown} carries a password; remove it and use "
            "--store-password-file (a 0600 file) or the PGPASSWORD environment variable"
        )
    password = None if password_file is None else read_password_file(password_file)
    try:
        store = await PostgresStore.open(
            target,
            schema=schema,
            password=password,
            create=not (must_exist or read_only),
            read_only=read_only,
            synchronous=synchronous,
            **common,
            **options,
        )
    except (ValueError, NoSuchStore) as exc:
        raise StoreConfigError(scrub_dsn(str(exc), target)) from None
    except Exception as exc:  # every error passes through redact_dsn (issue #48)
        scrubbed = scrub_dsn(str(exc), target)
        if scrubbed != str(exc):
            raise StoreOpenError(f"the store {shown} did not open: {scrubbed}") from None
        raise
    log.info("custody store: PostgreSQL %s, schema %s", shown, schema)
    return store


async def _open_sqlite(
    target: str,
    must_exist: bool,
    read_only: bool,
    synchronous: Synchronous,
    common: dict[str, Any],
    options: dict[str, Any],
) -> Store:
    """``open_store`` of a file path: anything but a tether store is refused."""
    from .sqlite._readonly import NotAStore, check_store, open_readonly
    from .sqlite._store import SqliteStore

    path = trio.Path(target)
    if await path.is_dir():
        raise StoreConfigError(f"store {target} is a directory; give the path of a SQLite file")
    if (must_exist or read_only) and not await path.is_file():
        raise StoreConfigError(
            f"no custody store at {target} (is --store right? a bridge creates the store on "
            "its first start: run `tether bridge run` once)"
        )
    try:
        if read_only:
            return await open_readonly(Path(target), **common)
        # before the open, which would tighten and migrate any file (an empty one is made a
        # store, unless it must already be one)
        if must_exist or (await path.is_file() and (await path.stat()).st_size > 0):
            await trio.to_thread.run_sync(check_store, Path(target))
    except NotAStore as exc:
        raise StoreConfigError(str(exc)) from None
    sqlite = await SqliteStore.open(target, synchronous=synchronous, **common, **options)
    log.info("custody store: SQLite %s", target)
    return sqlite
