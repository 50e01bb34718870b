"""Custody backends: ``sqlite/`` (embedded, group commit) and ``postgres/`` (many hosts).

Both have the same files (``_store``, ``_sql``, ``_schema``, ``_connection``) and share
``_frame`` (check, run, log), so each implements ``tether.bridge.custody.Store`` by its
operations alone; ``_open.open_store`` picks one from a path or a URL.
``postgres`` needs the optional ``postgres`` extra (psycopg) and is imported on first use.

A room, not a tier: ``tether.bridge`` exports its public names.
"""
