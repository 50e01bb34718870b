"""Custody backends: ``sqlite/`` (embedded, group commit) and ``postgres/`` (many hosts).

Both have the same files (``_store``, ``_sql``, ``_schema``, ``_connection``) and share
``_frame`` (check, run, log), so each implements ``tether.bridge.custody.Store`` by its
operations alone; :func:`open_store` picks one from a path or a URL.
``postgres`` needs the optional ``postgres`` extra (psycopg) and is imported on first use.
"""

from ._open import StoreConfigError as StoreConfigError
from ._open import open_store as open_store

__all__ = ["StoreConfigError", "open_store"]
