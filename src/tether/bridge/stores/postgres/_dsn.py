"""PostgreSQL settings: tell a DSN from a path, never show a password, check schema names.

A DSN may carry a password (``postgresql://u:secret@h/db`` or ``password=secret``). Anything
tether logs or puts in an error message goes through ``redact_dsn`` first
(``tether._plumbing._redact``: the one redaction for DSNs and URLs).
"""

from __future__ import annotations

import re
from typing import Final

from ...._plumbing._redact import POSTGRES_SCHEMES, is_conninfo, parse_dsn
from ...._plumbing._redact import redact_dsn as redact_dsn

URL_SCHEMES: Final = POSTGRES_SCHEMES


def is_postgres_dsn(value: str) -> bool:
    """Does ``value`` name a PostgreSQL database rather than a SQLite file path?

    A ``postgresql://`` (or ``postgres://``) URL, or a libpq ``key=value`` string that starts
    with a connection keyword (``host=db dbname=chat``): no sane file path looks like that.
    """
    return value.lower().startswith(URL_SCHEMES) or is_conninfo(value)


def dsn_has_password(dsn: str) -> bool:
    """Does the DSN itself carry a password (which would show in ``ps`` and shell history)?"""
    parts = parse_dsn(dsn)
    return bool(parts and parts.get("password"))


SCHEMA_RULE: Final = "[a-z_][a-z0-9_]{0,47}"
_SCHEMA_RE: Final = re.compile(SCHEMA_RULE)


def check_schema(name: object) -> str:
    """Return ``name`` if it is a schema name tether accepts (lower case, no quoting needed)."""
    if not isinstance(name, str) or _SCHEMA_RE.fullmatch(name) is None or name.startswith("pg_"):
        raise ValueError(
            f"PostgreSQL schema name must match {SCHEMA_RULE} (lower-case letters, digits and _, "
            f"not starting with a digit or pg_, at most 48 characters); got {name!r:.80}"
        )
    return name
