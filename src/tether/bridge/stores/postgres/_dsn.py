"""PostgreSQL settings: tell a DSN from a path, never show a password, check schema names.

A DSN may carry a password (``postgresql://u:secret@h/db`` or ``password=secret``). Anything
tether logs or puts in an error message goes through ``redact_dsn`` first
(``tether._plumbing._redact``: the one redaction for DSNs and URLs).
"""

from __future__ import annotations

import re
from typing import Final

from ...._plumbing._redact import POSTGRES_SCHEMES, REDACTED, SECRET_KEY, is_conninfo, parse_dsn
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


def unparsable_reason(dsn: str) -> str | None:
    """Why ``dsn``, which looks like PostgreSQL's, cannot be parsed (never quoting it: a
    password in it cannot be told apart), or None if it can. Such a DSN would slip past the
    password check, and libpq's error would print it whole (issue #48)."""
    if parse_dsn(dsn) is not None:
        return None
    scheme = dsn.split("://", 1)[0] if "://" in dsn else ""
    hint = (
        "its scheme must be postgresql:// or postgres://, in lower case"
        if scheme and f"{scheme.lower()}://" in URL_SCHEMES and scheme != scheme.lower()
        else "a URL postgresql://user@host:port/dbname (user and password percent-encoded) "
        "or key=value pairs (host=... dbname=...)"
    )
    return f"the store setting looks like a PostgreSQL DSN but cannot be parsed: {hint}"


def scrub_dsn(text: str, dsn: str) -> str:
    """``text`` (an error's) with ``dsn`` shown as ``redact_dsn`` shows it and every secret
    value the DSN holds (``password``, ``sslpassword``, ...) redacted."""
    text = text.replace(dsn, redact_dsn(dsn))
    for key, value in (parse_dsn(dsn) or {}).items():
        if value and SECRET_KEY.search(key) and len(str(value)) >= 3:
            text = text.replace(str(value), REDACTED)
    return text


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
