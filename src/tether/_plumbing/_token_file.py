"""Bearer tokens kept in files: read strictly (one line of printable ASCII), created 0600 in a 0700
directory; a file that group or others can read is refused, like an ssh key."""

from __future__ import annotations

import secrets
from pathlib import Path

from ._atomic_file import write_atomic
from ._fs import ensure_private_dir, read_private_file
from ._logging import register_secret


class TokenFileError(Exception):
    """The token file is missing, unreadable, too open, or holds no valid token."""


def read_token(path: Path) -> str:
    """The token in ``path`` (blocking; a few syscalls on a tiny file)."""
    raw = read_private_file(path, "token file", TokenFileError)
    token = raw.strip()
    if not token:
        raise TokenFileError(f"token file {path} is empty")
    if len(token) > 4096 or any(not 0x21 <= b <= 0x7E for b in token):
        raise TokenFileError(
            f"token file {path} must hold one token of printable ASCII without spaces"
        )
    secret = token.decode("ascii")
    register_secret(secret)  # whatever logs it by mistake later prints [redacted]
    return secret


def write_token(path: Path, token: str) -> None:
    """Atomically write ``token`` to ``path`` (0600), e.g. to rotate it."""
    if not token or any(not 0x21 <= ord(c) <= 0x7E for c in token):
        raise ValueError("a token must be non-empty printable ASCII without spaces")
    register_secret(token)
    write_atomic(path, (token + "\n").encode("ascii"), mode=0o600)


def ensure_token_file(path: Path) -> bool:
    """Create ``path`` with a fresh random token if it does not exist; True when created.

    Missing parent directories are created 0700 (every one of them).
    """
    if path.exists():
        return False
    ensure_private_dir(path.parent)
    write_token(path, secrets.token_urlsafe(32))
    return True
