"""The embedded custody store: one SQLite file, WAL, one writer thread with group commit.

``_store``: :class:`SqliteStore`; ``_schema``: migrations (``PRAGMA user_version``);
``_connect``: opening the file; ``_access``: why it could not be opened, in words. The writer
thread that batches many transitions into one durable commit is
``tether._plumbing._sqlite_writer``. ``tether.bridge`` exports the public names.
"""
