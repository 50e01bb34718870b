"""What ``tether bridge run`` and ``tether worker run`` do before their service starts: refuse an
agent they cannot run (exit 2) before anything is created, then say where the admin endpoint
listens."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import trio

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
