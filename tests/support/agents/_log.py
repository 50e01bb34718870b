"""How the test agents leave evidence their tests read: one line appended to the file an
environment variable names, in one ``write`` with ``O_APPEND`` (whole lines, whatever the
processes writing beside it, and none lost to a SIGKILL after the write)."""

from __future__ import annotations

import os


def append_line(variable: str, line: str) -> None:
    """Append ``line`` and a newline to the file ``$variable`` names (created 0600)."""
    fd = os.open(os.environ[variable], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)
