"""How a setting's raw value (TOML, environment, flag) becomes a checked value: each parser
returns it or raises ``ValueError`` with the rule it broke; the loader adds setting and source."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..._plumbing._redact import redact_url
from ..custody._rules import queues_of
from ..custody._versions import check_version
from ..pool._quarantine_env import check_env_names
from ..runs._bounds import CEILINGS
from ..runs._retry import RetryBackoff
from ..stores.postgres._dsn import check_schema, is_postgres_dsn


def is_postgres_url(value: str) -> bool:
    """A ``postgresql://`` URL or a libpq ``key=value`` string, not a SQLite path."""
    return is_postgres_dsn(value)


def parse_text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    return value.strip()


def parse_path(name: str, value: Any) -> Path:
    if isinstance(value, Path):
        return value
    return Path(parse_text(name, value)).expanduser()


def parse_int(low: int, high: int) -> Callable[[str, Any], int]:
    def parse(name: str, value: Any) -> int:
        if isinstance(value, str) and re.fullmatch(r"\s*[0-9]+\s*", value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"must be an integer from {low} to {high}")
        return value

    return parse


_BYTE_UNITS = {"": 1, "b": 1, "kib": 1024, "k": 1024, "mib": 1 << 20, "m": 1 << 20}


def parse_bytes(name: str, value: Any) -> int:
    """A size bound (``max_step_bytes`` ...): bytes as an integer, or with ``KiB``/``MiB``
    (``256KiB``, ``1MiB``), from 1 to what the stores take (``runs._bounds.CEILINGS``)."""
    ceiling, why = CEILINGS[name]
    if isinstance(value, str):
        match = re.fullmatch(r"\s*([0-9]+)\s*([A-Za-z]*)\s*", value)
        unit = None if match is None else _BYTE_UNITS.get(match[2].lower())
        if match is not None and unit is not None:
            value = int(match[1]) * unit
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= ceiling:
        raise ValueError(
            f"must be a number of bytes from 1 to {ceiling:,} ({why}), e.g. 262144 or 256KiB"
        )
    return value


def parse_seconds(low: float, high: float) -> Callable[[str, Any], float]:
    def parse(name: str, value: Any) -> float:
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not low <= value <= high
        ):
            raise ValueError(f"must be a number of seconds from {low:g} to {high:g}")
        return float(value)

    return parse


def parse_url(name: str, value: Any) -> str:
    url = parse_text(name, value).rstrip("/")
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
        raise ValueError("must be an http:// or https:// URL")
    if "@" in url.split("://", 1)[1].split("/", 1)[0]:
        raise ValueError(
            "must not carry a user or password (user:password@): the gateway's token comes "
            "from --token-file"
        )
    if "?" in url or "#" in url:
        raise ValueError("must not carry a query or fragment (request paths are appended)")
    return url


def parse_agent(name: str, value: Any) -> str:
    spec = parse_text(name, value)
    if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", spec):
        raise ValueError("must look like module.path:factory")
    return spec


def parse_label(name: str, value: Any) -> str:
    text = parse_text(name, value)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}", text):
        raise ValueError("must be 1-128 characters from [A-Za-z0-9_.:-], starting alphanumeric")
    return text


def _parse_choice(
    fold: Callable[[str], str], options: tuple[str, ...]
) -> Callable[[str, Any], str]:
    """One of ``options``, read case-insensitively (``fold`` gives the case they are in)."""

    def parse(name: str, value: Any) -> str:
        text = fold(parse_text(name, value))
        if text not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return text

    return parse


def parse_upper_choice(*options: str) -> Callable[[str, Any], str]:
    return _parse_choice(str.upper, options)


def parse_store(name: str, value: Any) -> str:
    if isinstance(value, Path):
        return str(value)
    text = parse_text(name, value)
    if "://" in text and not is_postgres_url(text):
        raise ValueError("must be a file path or a postgresql:// URL")
    return text


def parse_env_names(name: str, value: Any) -> tuple[str, ...]:
    """Environment variable names (or prefixes ending ``*``): a TOML list, or one string
    separated by commas or spaces (a flag, ``TETHER_QUARANTINE_ENV``); empty: none."""
    items = value.replace(",", " ").split() if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise ValueError("must be environment variable names (a list, or one string)")
    return check_env_names(items)


def parse_queues(name: str, value: Any) -> tuple[str, ...]:
    """Queue names (issue #51): a TOML list, or one string separated by commas or spaces (a
    flag, ``TETHER_QUEUES``)."""
    items = value.replace(",", " ").split() if isinstance(value, str) else value
    if (
        not isinstance(items, list | tuple)
        or not items
        or not all(isinstance(i, str) for i in items)
    ):
        raise ValueError("must be one or more queue names (a list, or one string)")
    return queues_of(items)


def parse_schema(name: str, value: Any) -> str:
    return check_schema(parse_text(name, value))


def parse_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = parse_text(name, value).lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def parse_lower_choice(*options: str) -> Callable[[str, Any], str]:
    return _parse_choice(str.lower, options)


def parse_optional_port(name: str, value: Any) -> int | None:
    if value is None or value == "" or (isinstance(value, str) and value.lower() == "off"):
        return None
    return parse_int(0, 65535)(name, value)


def parse_optional_int(low: int, high: int) -> Callable[[str, Any], int | None]:
    def parse(name: str, value: Any) -> int | None:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        return parse_int(low, high)(name, value)

    return parse


def parse_host(name: str, value: Any) -> str:
    text = parse_text(name, value)
    if not re.fullmatch(r"[A-Za-z0-9.:-]{1,255}", text):
        raise ValueError("must be a host name or an IP address")
    return text


def parse_optional_pool_name(name: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    text = parse_text(name, value)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,55}", text):
        raise ValueError("must be 1-56 characters from [A-Za-z0-9_-], starting alphanumeric")
    return text


def parse_optional_version(name: str, value: Any) -> str | None:
    """An agent version (``--agent-version``), or None: the agent's own."""
    if value is None or value == "":
        return None
    return check_version(parse_text(name, value))


def parse_retry_backoff(name: str, value: Any) -> RetryBackoff:
    if isinstance(value, RetryBackoff):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    return RetryBackoff.parse(parse_text(name, value))


def parse_optional_seconds(low: float, high: float) -> Callable[[str, Any], float | None]:
    def parse(name: str, value: Any) -> float | None:
        if value is None or (isinstance(value, str) and value.strip().lower() in ("off", "none")):
            return None
        if value == 0 or (isinstance(value, str) and value.strip() in ("0", "0.0")):
            return None
        try:
            return parse_seconds(low, high)(name, value)
        except ValueError:
            raise ValueError(
                f"must be a number of seconds from {low:g} to {high:g}, or 0/off for no limit"
            ) from None

    return parse


def parse_optional_path(name: str, value: Any) -> Path | None:
    if value is None or value == "":
        return None
    return parse_path(name, value)


def shown(value: Any) -> str:
    """A setting's value for an error message: credentials redacted, at most 80 characters."""
    text = repr(str(value) if isinstance(value, Path) else value)
    if isinstance(value, str):
        text = repr(redact_url(value))
    return text if len(text) <= 80 else text[:77] + "..."
