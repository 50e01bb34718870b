"""The pages tether serves (the gateway's chat page, the admin endpoint's operator page) as
packaged files with one strict policy: same-origin scripts and styles only, nothing inline,
nothing external, never framed. One family: both pages load the shared ``base.css`` and
``base.js`` (the token, the status line, JSON calls) from here."""

from __future__ import annotations

import importlib.resources
from collections.abc import Mapping
from importlib.resources.abc import Traversable

import attrs

PAGE_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        b"img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-frame-options", b"DENY"),
]
"""Headers every page file is served with (the JSON answers need no CSP: nothing runs them)."""

CONTENT_TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
}


@attrs.frozen
class StaticFile:
    body: bytes
    content_type: bytes


def _read(root: Traversable, name: str) -> StaticFile:
    return StaticFile((root / name).read_bytes(), CONTENT_TYPES["." + name.rsplit(".", 1)[-1]])


def load_static(
    package: str, folder: str, routes: Mapping[str, str], *, shared_at: str
) -> dict[str, StaticFile]:
    """``routes`` (URL path -> file name in ``package``'s ``folder``), read once at start-up,
    plus the shared ``base.css`` and ``base.js`` under the path prefix ``shared_at`` (the page
    loads each before its own)."""
    root = importlib.resources.files(package) / folder
    files = {path: _read(root, name) for path, name in routes.items()}
    shared = importlib.resources.files("tether._http") / "static"
    for name in ("base.css", "base.js"):
        files[shared_at + name] = _read(shared, name)
    return files
