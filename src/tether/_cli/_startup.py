"""What ``tether bridge run`` and ``tether worker run`` do before their service starts.

Both refuse an agent they cannot run as a configuration error (exit 2) before anything is
created: an unknown module, a factory that raises, or a handler policy that skips runs; the
bridge also a gateway token file it cannot use. Both say where their admin endpoint listens
once it does.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import trio

from .._plumbing._token_file import TokenFileError, read_token
from ..bridge.client._client import GatewayAuthError
from ..bridge.pool._agent import AgentFactory, AgentLoadError, check_agent, load_agent
from ..bridge.service._config import ConfigError


def load_checked_agent(spec: str) -> AgentFactory:
    """The factory named by ``spec`` (module:factory), checked as a worker will use it."""
    try:
        factory = load_agent(spec)
        trio.run(check_agent, spec, factory)  # its policy, before anything is created
    except AgentLoadError as exc:
        raise ConfigError(str(exc)) from None
    return factory


def check_token_file(path: Path) -> None:
    """Refuse a gateway token file the bridge could not use, as its client would (exit 3),
    before anything is printed or created: a failed start leaves no empty store behind."""
    try:
        read_token(path)
    except TokenFileError as exc:
        raise GatewayAuthError(f"cannot use the gateway token: {exc}") from None


def admin_announcer(program: str, host: str, token_file: Path) -> Callable[[int], None]:
    """A callback printing the admin endpoint's URL once it listens (its port may be 0)."""

    def announce(port: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        print(
            f"{program}: admin endpoint http://{shown}:{port} (token in {token_file})",
            file=sys.stderr,
            flush=True,
        )

    return announce
