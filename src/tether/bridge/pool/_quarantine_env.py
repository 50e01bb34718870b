"""The environment a quarantine child starts with: what Python and an agent's ordinary tools
need, plus the names the operator gives (``quarantine_env``), never the rest.

The child talks to its worker over a pipe only: it needs no store password (``PGPASSWORD``,
``PGPASSFILE``), no token file of the bridge, none of its settings, and every tool the agent
starts there inherits what the child has (issue #48).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

BASE_NAMES: Final = frozenset(
    {
        # where things are, who runs them, how text and time read
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TEMP",
        "TMP",
        # the interpreter and its environment (the agent's module must import)
        "VIRTUAL_ENV",
        # outbound HTTPS as the worker's own process makes it
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "all_proxy",
    }
)
"""Names a child always gets (when set)."""
BASE_PREFIXES: Final = ("LC_", "PYTHON")
"""Prefixes a child always gets: the locale's ``LC_*``, the interpreter's ``PYTHON*``."""

ENV_NAME_RULE: Final = "[A-Za-z_][A-Za-z0-9_]*, or such a prefix followed by *"
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?")


def check_env_names(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` (variable names, or prefixes ending ``*``), each checked; ``ValueError``
    naming the first that is neither."""
    checked = []
    for name in names:
        if _ENV_NAME.fullmatch(name) is None:
            raise ValueError(f"{name!r:.80} is not an environment variable name ({ENV_NAME_RULE})")
        checked.append(name)
    return tuple(dict.fromkeys(checked))


def child_environ(environ: Mapping[str, str], extra: Iterable[str]) -> dict[str, str]:
    """The part of ``environ`` a quarantine child gets: the base names and prefixes, and
    ``extra`` (names, or prefixes ending ``*``)."""
    names = set(BASE_NAMES)
    prefixes = list(BASE_PREFIXES)
    for name in extra:
        if name.endswith("*"):
            prefixes.append(name[:-1])
        else:
            names.add(name)
    starts = tuple(prefixes)
    return {k: v for k, v in environ.items() if k in names or k.startswith(starts)}
