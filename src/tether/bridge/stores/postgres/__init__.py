"""The distributed custody store: PostgreSQL shared by many bridges and workers on many hosts.

``_store``: :class:`PostgresStore` (claims with ``FOR UPDATE SKIP LOCKED``, fencing in the
``WHERE``); ``_schema``: migrations; ``_dsn``: DSN rules and redaction; ``_listen``:
LISTEN/NOTIFY wake-ups; ``_throwaway``: a disposable local server for tests and demos.

Everything but ``_dsn`` needs psycopg (the optional ``postgres`` extra); ``tether.bridge``
exports the public names and loads them on first use.
"""
