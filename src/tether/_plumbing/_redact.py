"""One redaction for every URL or DSN tether prints, logs or writes to a status file.

``redact_url`` keeps the place readable (scheme, host, port, path, database, user) and drops every
credential. Standard library only (psycopg's conninfo parser when it is installed).
"""

from __future__ import annotations

import re
from typing import Any, Final
from urllib.parse import parse_qsl, quote, urlsplit

REDACTED: Final = "[redacted]"
POSTGRES_SCHEMES: Final = ("postgresql://", "postgres://")
_CONNINFO_RE: Final = re.compile(
    r"\s*(host|hostaddr|port|dbname|user|password|passfile|service|sslmode|options"
    r"|connect_timeout|application_name)\s*="
)
_CONNINFO_PAIR: Final = re.compile(r"(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S*)")
SECRET_KEY: Final = re.compile(r"(?i)pass|pwd|token|secret|key|auth|sig|credential")


def is_conninfo(value: str) -> bool:
    """A libpq ``key=value`` string starting with a connection keyword (``host=db ...``)."""
    return _CONNINFO_RE.match(value) is not None


def parse_dsn(dsn: str) -> dict[str, Any] | None:
    """The parts of a PostgreSQL DSN (URL or ``key=value``), None if it cannot be parsed."""
    try:  # libpq's own parser (psycopg is the optional 'postgres' extra)
        from psycopg.conninfo import conninfo_to_dict

        return conninfo_to_dict(dsn)
    except ImportError:
        pass
    except Exception:
        return None
    if not dsn.lower().startswith(POSTGRES_SCHEMES):
        return {key: value.strip("'") for key, value in _CONNINFO_PAIR.findall(dsn)} or None
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


def redact_dsn(dsn: str) -> str:
    """A description of a PostgreSQL ``dsn`` without its password or other options."""
    parts = parse_dsn(dsn)
    if parts is None:
        return "postgresql://<unparsable DSN>"
    user = parts.get("user")
    where = f"{user}@" if user else ""
    where += ",".join(_host_ports(parts))
    return f"postgresql://{where}/{parts.get('dbname') or ''}"


def _host_ports(parts: dict[str, Any]) -> list[str]:
    """``host:port`` for each server of a (multi-host) DSN, as a URL names them: libpq pairs
    a list of hosts with one port for all or with a list of as many."""
    hosts = str(parts.get("host") or parts.get("hostaddr") or "localhost").split(",")
    ports = str(parts.get("port") or "").split(",")
    if len(ports) == 1:
        ports = ports * len(hosts)
    elif len(ports) != len(hosts):  # libpq refuses it; show what was given
        return [f"{','.join(hosts)}:{','.join(ports)}"]
    return [
        (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
        for host, port in zip(hosts, ports, strict=True)
    ]


def redact_url(value: str) -> str:
    """``value`` safe to show: a PostgreSQL DSN as ``redact_dsn``; another URL without its
    user information (``[redacted]@``), with secret-looking query values (``token``,
    ``password``, ``key``, ...) redacted and the fragment dropped; anything else (a file
    path) unchanged."""
    if value.lower().startswith(POSTGRES_SCHEMES) or is_conninfo(value):
        return redact_dsn(value)
    if "://" not in value:
        return value
    try:
        url = urlsplit(value)
        port = url.port
        host = url.hostname or ""
    except ValueError:
        return f"{value.split('://', 1)[0][:20]}://<unparsable URL>"
    where = f"[{host}]" if ":" in host else host
    if "@" in url.netloc:
        where = f"{REDACTED}@{where}"
    if port is not None:
        where += f":{port}"
    shown = f"{url.scheme}://{where}{url.path}"
    if url.query:
        pairs = parse_qsl(url.query, keep_blank_values=True)
        shown += "?" + "&".join(
            f"{quote(k)}={REDACTED if SECRET_KEY.search(k) else quote(v)}" for k, v in pairs
        )
    return shown
