"""Custody backends: ``sqlite/`` (embedded, group commit) and ``postgres/`` (many hosts).

Each backend keeps its schema and helpers beside it and implements every role of
``tether.bridge.custody.Store``; :func:`open_store` picks one from a path or a URL.
``postgres`` needs the optional ``postgres`` extra (psycopg) and is imported on first use.
"""

from ._open import StoreConfigError as StoreConfigError
from ._open import open_store as open_store

__all__ = ["StoreConfigError", "open_store"]
