"""The distributed custody store: PostgreSQL shared by many bridges and workers on many hosts.

``_store``: :class:`PostgresStore`, a facade over its parts (``_custody``, ``_operator``,
``_retention``, ``_steps``, ``_asks``, ``_limits``, ``_tenants``, ``_conversations``), each
over ``_db`` (the pool, ``run`` and ``cas``); ``_rows``: what the parts read alike; ``_sql``:
the custody statements (claims with ``FOR UPDATE SKIP LOCKED``, fencing in the ``WHERE``);
``_schema``: migrations; ``_connection``: the pool and its failures; ``_dsn``: DSN rules and
redaction; ``_listen``: LISTEN/NOTIFY wake-ups; ``_throwaway``: a disposable local server for
tests and demos.

Everything but ``_dsn`` needs psycopg (the optional ``postgres`` extra); ``tether.bridge``
exports the public names and loads them on first use.
"""
