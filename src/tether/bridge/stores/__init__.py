"""Custody backends: ``sqlite/`` (embedded, group commit) and ``postgres/`` (many hosts).

Each backend keeps its schema and helpers beside it and implements every role of
``tether.bridge.custody.Store``; ``_open.open_store`` picks one from a path or a URL.
``postgres`` needs the optional ``postgres`` extra (psycopg) and is imported on first use.

A room, not a tier: ``tether.bridge`` exports its public names.
"""
