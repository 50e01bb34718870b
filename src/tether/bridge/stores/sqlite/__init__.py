"""The embedded custody store: one SQLite file, WAL, one writer thread with group commit.

``_store``: :class:`SqliteStore`; ``_schema``: migrations (``PRAGMA user_version``);
``_writer``: the writer thread that batches many transitions into one durable commit.
"""

from ._schema import SchemaTooNew as SchemaTooNew
from ._store import SqliteStore as SqliteStore

__all__ = ["SchemaTooNew", "SqliteStore"]
