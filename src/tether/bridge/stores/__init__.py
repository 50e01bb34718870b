"""Custody backends: ``sqlite/`` (embedded, group commit) and ``postgres/`` (many hosts).

Both have the same files: ``_store`` (the store: a facade, ``_facade``, over its parts),
``_db`` (the one primitive the parts run on), one part per capability (``_custody``,
``_operator``, ``_retention``, ``_steps``, ``_asks``, ``_limits``, ``_tenants``,
``_conversations``), ``_sql``, ``_schema``, ``_connection``. Each part implements the
operations of one shared frame here (``_frame``, ``_operator_frame``, ``_retention``,
``_steps_frame``, ``_asks_frame``, ``_limits_frame``, ``_tenants_frame``, ``_conversations``:
check, run, log), so each store implements ``tether.bridge.custody.Store`` by its operations
alone; ``_open.open_store`` picks one from a path or a URL.
``postgres`` needs the optional ``postgres`` extra (psycopg) and is imported on first use.

A room, not a tier: ``tether.bridge`` exports its public names.
"""
