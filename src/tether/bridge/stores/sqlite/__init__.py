"""The embedded custody store: one SQLite file, WAL, one writer thread with group commit.

``_store``: :class:`SqliteStore`'s operations; ``_sql``: its statements; ``_ready``: the ready
read; ``_schema``: migrations (``PRAGMA user_version``); ``_connection``: opening the file;
``_readonly``: the inspecting verbs' read-only open; ``_access``: why a file could not be
opened, in words. The writer thread is ``tether._plumbing._sqlite_writer``.
"""
