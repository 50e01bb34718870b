"""PostgreSQL settings: tell a DSN from a path, never show a password, check schema names.

A DSN may carry a password (``postgresql://u:secret@h/db`` or ``password=secret``). Anything
tether logs or puts in an error message goes through ``redact_dsn`` first.
"""

from __future__ import annotations

import re
from typing import Any, Final

URL_SCHEMES: Final = ("postgresql://", "postgres://")
_SHOWN_KEYS: Final = ("host", "hostaddr", "port", "dbname", "user")


_CONNINFO_RE: Final = re.compile(r"\s*(host|hostaddr|port|dbname|user|service)\s*=")


def is_postgres_dsn(value: str) -> bool:
    """Does ``value`` name a PostgreSQL database rather than a SQLite file path?

    A ``postgresql://`` (or ``postgres://``) URL, or a libpq ``key=value`` string that starts
    with a connection keyword (``host=db dbname=chat``): no sane file path looks like that.
    """
    return value.lower().startswith(URL_SCHEMES) or _CONNINFO_RE.match(value) is not None


def _parse(dsn: str) -> dict[str, Any] | None:
    try:  # libpq's own parser (psycopg is the optional 'postgres' extra)
        from psycopg.conninfo import conninfo_to_dict

        return conninfo_to_dict(dsn)
    except ImportError:
        pass
    except Exception:
        return None
    from urllib.parse import urlsplit

    try:
        url = urlsplit(dsn)
        return {
            "host": url.hostname,
            "port": url.port,
            "user": url.username,
            "password": url.password,
            "dbname": url.path.lstrip("/"),
        }
    except ValueError:
        return None


def dsn_has_password(dsn: str) -> bool:
    """Does the DSN itself carry a password (which would show in ``ps`` and shell history)?"""
    parts = _parse(dsn)
    return bool(parts and parts.get("password"))


def redact_dsn(dsn: str) -> str:
    """A description of ``dsn`` without its password or other options: safe to log."""
    parts = _parse(dsn)
    if parts is None:
        return "postgresql://<unparsable DSN>"
    host = str(parts.get("host") or parts.get("hostaddr") or "localhost")
    port = parts.get("port")
    user = parts.get("user")
    where = f"{user}@" if user else ""
    where += f"[{host}]" if ":" in host and "," not in host else host
    if port:
        where += f":{port}"
    return f"postgresql://{where}/{parts.get('dbname') or ''}"


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
