"""The distributed custody store: PostgreSQL shared by many bridges and workers on many hosts.

``_store``: :class:`PostgresStore`'s operations; ``_sql``: its statements (claims with ``FOR
UPDATE SKIP LOCKED``, fencing in the ``WHERE``); ``_schema``: migrations; ``_connection``: the
pool and its failures; ``_dsn``: DSN rules and redaction; ``_listen``: LISTEN/NOTIFY wake-ups;
``_throwaway``: a disposable local server for tests and demos.

Only ``_dsn`` is imported eagerly: the rest needs psycopg (the optional ``postgres`` extra)
and loads on first use.
"""

import typing as _typing

from ._dsn import redact_dsn as redact_dsn

if _typing.TYPE_CHECKING:
    from ._store import PostgresStore as PostgresStore
    from ._store import StoreConnectionLost as StoreConnectionLost
    from ._store import StoreTimeout as StoreTimeout

__all__ = ["PostgresStore", "StoreConnectionLost", "StoreTimeout", "redact_dsn"]

_NEEDS_PSYCOPG = frozenset({"PostgresStore", "StoreConnectionLost", "StoreTimeout"})


def __getattr__(name: str) -> object:
    if name in _NEEDS_PSYCOPG:
        from . import _store

        return getattr(_store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
