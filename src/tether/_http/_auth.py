"""Bearer tokens re-read whenever their file changes (one ``stat`` per request decides), so rotating
a token is writing the new one to the file."""

from __future__ import annotations

import hmac
import os
from pathlib import Path

import attrs

from .._plumbing._token_file import read_token


@attrs.define(eq=False)
class TokenSource:
    path: Path
    _seen: tuple[int, int, int] | None = attrs.field(default=None, init=False)
    _token: str = attrs.field(default="", init=False)

    def current(self) -> str:
        """The token in the file now (raises ``TokenFileError`` if it became unusable)."""
        st = os.stat(self.path)
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key != self._seen:
            self._token = read_token(self.path)
            self._seen = key
        return self._token

    def accepts(self, presented: str) -> bool:
        return hmac.compare_digest(presented.encode(), self.current().encode())


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()
