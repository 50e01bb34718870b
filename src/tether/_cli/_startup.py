"""What ``tether bridge run`` and ``tether worker run`` do before their service starts: refuse an
agent they cannot run, a gateway token file the bridge cannot use and a ``--store`` file that is
no tether store (each exit 2, before anything is printed or created), find the agent's module in
the working directory as ``python -m`` does, then say where the admin endpoint and the operator
page listen."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import trio

from .._plumbing._token_file import TokenFileError, read_token
from ..bridge.pool._agent import AgentFactory, AgentLoadError, check_agent, load_agent
from ..bridge.service._config import ConfigError
from ..bridge.service._settings import ProcessSettings


def load_checked_agent(spec: str) -> AgentFactory:
    """The factory named by ``spec`` (module:factory), checked as a worker will use it."""
    added = _working_directory_on_path()
    try:
        factory = load_agent(spec)
        if added is not None:
            _say_if_found_in(added, spec.partition(":")[0])
        trio.run(check_agent, spec, factory)  # its policy, before anything is created
    except AgentLoadError as exc:
        raise ConfigError(str(exc)) from None
    return factory


def _working_directory_on_path() -> str | None:
    """Put the working directory first on the import path unless it is there already (as
    ``python -m`` and ``-c`` do); returns it if it was added."""
    cwd = os.getcwd()
    here = os.path.realpath(cwd)
    if any(os.path.realpath(entry or os.curdir) == here for entry in sys.path):
        return None
    sys.path.insert(0, cwd)
    return cwd


def _say_if_found_in(folder: str, module_name: str) -> None:
    """One line when the agent came from the working directory: a module of the same name
    installed elsewhere is shadowed by it, so the choice is shown, not silent."""
    origin = getattr(sys.modules.get(module_name), "__file__", None)
    if origin is not None and Path(origin).resolve().is_relative_to(Path(folder).resolve()):
        print(
            f"tether: agent module {module_name} from the working directory ({origin}; "
            "added to the import path, as python -m does)",
            file=sys.stderr,
            flush=True,
        )


def check_token_file(path: Path) -> None:
    """Refuse a gateway token file the bridge could not use (missing, empty, too open): bad
    configuration (exit 2), not the gateway's refusal (3), and before anything is printed or
    created, so a failed start leaves no empty store behind."""
    try:
        read_token(path)
    except TokenFileError as exc:
        raise ConfigError(f"cannot use the gateway token: {exc}") from None


def check_store_file(settings: ProcessSettings) -> None:
    """Refuse a ``--store`` file that is not a tether store before the banner and the first log
    line: check first, then announce, so the one error reads as one line (the open checks again)."""
    from ..bridge.stores.sqlite._readonly import NotAStore, check_store

    if settings.store_is_url:
        return  # a PostgreSQL schema is checked by its open, which needs the server
    path = Path(settings.store)
    if path.is_dir():
        raise ConfigError(f"store {path} is a directory; give the path of a SQLite file")
    if path.is_file() and path.stat().st_size > 0:
        try:
            check_store(path)
        except NotAStore as exc:
            raise ConfigError(str(exc)) from None


def admin_announcer(program: str, host: str, token_file: Path) -> Callable[[int], None]:
    """A callback printing the admin endpoint's URL once it listens (its port may be 0), and
    the operator page's: the token itself is never printed, only how a link carries it."""

    def announce(port: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{port}"
        print(
            f"{program}: admin endpoint {url} (token in {token_file})\n"
            f"{program}: operator page {url}/ops (paste the admin token, or open "
            f"{url}/ops#token=<the admin token>)",
            file=sys.stderr,
            flush=True,
        )

    return announce
