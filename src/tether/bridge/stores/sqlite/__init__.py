"""The embedded custody store: one SQLite file, WAL, one writer thread with group commit.

``_store``: :class:`SqliteStore`, a facade over its parts (``_custody``, ``_operator``,
``_retention``, ``_steps``, ``_asks``, ``_limits``, ``_tenants``, ``_conversations``), each
over ``_db`` (the writer and the reader); ``_rows``: what the parts read alike; ``_sql``: the
custody statements; ``_ready``: the ready read; ``_schema``: migrations (``PRAGMA
user_version``); ``_connection``: opening the file; ``_readonly``: the inspecting verbs'
read-only open; ``_access``: why a file could not be opened, in words. The writer thread is
``tether._plumbing._sqlite_writer``.
"""
