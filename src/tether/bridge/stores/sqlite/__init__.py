"""The embedded custody store: one SQLite file, WAL, one writer thread with group commit.

``_store``: :class:`SqliteStore`'s operations; ``_sql``: its statements; ``_ready``: the ready
read; ``_schema``: migrations (``PRAGMA user_version``); ``_connection``: opening the file.
"""

from ._schema import SchemaTooNew as SchemaTooNew
from ._store import SqliteStore as SqliteStore

__all__ = ["SchemaTooNew", "SqliteStore"]
