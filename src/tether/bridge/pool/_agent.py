"""Agents: a ``factory(session)`` that registers a ``"task"`` handler, and how ``--agent
module:factory`` is loaded.

A plain session handler, so an agent needs nothing pool-specific and every run is owned.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import inspect
import math
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from ..._session import Session, open_session
from ..custody._rooms import RoomPolicy, check_room_policy
from ..custody._versions import VersionError, check_version
from ..runs._reply import AgentError

AgentFactory = Callable[[Session], None]
"""Registers a ``"task"`` handler on an already-open session."""

TASK_EVENT: Final = "task"
TASK_POLICIES: Final = frozenset({"concurrent", "serial", "replace"})
"""Handler policies an agent may use. ``replace`` is the room policy ``replace`` (barge-in per
room, kept by the store across workers and bridges): the worker runs such a handler
``concurrent``, since a session-wide ``replace`` would cancel one room's run for another's
message. ``drop`` skips runs on purpose, which for a task queue means churning claims that
never finish."""

_SPEC_RE: Final = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*")


class AgentLoadError(ImportError):
    """``load_agent`` could not produce a factory; the message says which part was wrong."""


def load_agent(spec: str) -> AgentFactory:
    """Import ``"package.module:factory"`` and return the factory (a callable).

    Raises ``AgentLoadError`` with a one-line message for a malformed spec, a module that
    cannot be found, a module that fails as it is imported (the file and line where, and the
    error), a missing attribute, an attribute that is not callable, or an async function
    (a factory registers a handler at once; the handler is the async part).
    """
    if not isinstance(spec, str) or _SPEC_RE.fullmatch(spec) is None:
        raise AgentLoadError(
            f"agent spec {spec!r} must look like 'package.module:factory' "
            "(a dotted module path, a colon, an attribute name)"
        )
    module_name, _, attr_path = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not _is_package_of(exc.name, module_name):
            raise AgentLoadError(f"agent {spec!r}: {_where(exc)}") from exc
        raise AgentLoadError(
            f"agent {spec!r}: cannot import module {module_name!r}: {exc}"
        ) from exc
    except Exception as exc:  # the module's own code failed: say where, as Python would
        raise AgentLoadError(f"agent {spec!r}: {_where(exc)}") from exc
    obj: Any = module
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AgentLoadError(
                f"agent {spec!r}: module {module_name!r} has no attribute {attr_path!r}"
            ) from None
    if not callable(obj):
        raise AgentLoadError(
            f"agent {spec!r}: {attr_path!r} is a {type(obj).__name__}, not a callable factory"
        )
    if inspect.iscoroutinefunction(obj) or inspect.isasyncgenfunction(obj):
        raise AgentLoadError(f"agent {spec!r}: {ASYNC_FACTORY}")
    return obj  # type: ignore[no-any-return]


ASYNC_FACTORY: Final = (
    "the factory is an async function; it must be a plain function that registers an async "
    "handler: def factory(session): session.add_handler('task', handle)"
)


def _is_package_of(missing: str, module_name: str) -> bool:
    """Whether ``missing`` is ``module_name`` or a package on its path (the spec's own module
    is not there), rather than something the module imports."""
    return module_name == missing or module_name.startswith(missing + ".")


def _where(exc: BaseException) -> str:
    """``file, line N: Error: message`` for an error raised while a module was imported: the
    innermost frame outside the import machinery (for a SyntaxError, its own position)."""
    if isinstance(exc, SyntaxError):
        return f"{exc.filename}, line {exc.lineno}: syntax error: {exc.msg}"
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith("<frozen ") and frame.filename != __file__
    ]
    text = " ".join(str(exc).split())
    error = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    if not frames:
        return error
    return f"{frames[-1].filename}, line {frames[-1].lineno}: {error}"


def install_agent(session: Session, factory: AgentFactory) -> RoomPolicy | None:
    """Run ``factory(session)`` and check that it registered exactly one ``"task"`` handler,
    with a policy that runs every call (``concurrent`` or ``serial``) or ``replace``; return
    the room policy the agent declares (``agent_room_policy``), if any."""
    made = factory(session)  # type: ignore[func-returns-value]
    if inspect.isawaitable(made):  # an async __call__, or a partial of an async function
        if inspect.iscoroutine(made):
            made.close()  # never awaited, on purpose: no "never awaited" warning
        raise AgentError(
            f"agent factory {getattr(factory, '__qualname__', factory)!r}: {ASYNC_FACTORY}"
        )
    handlers = session.handler_names(TASK_EVENT)
    if len(handlers) != 1:
        what = "no" if not handlers else f"{len(handlers)}"
        raise AgentError(
            f"agent factory {getattr(factory, '__qualname__', factory)!r} registered {what} "
            f"handler(s) for the event {TASK_EVENT!r} on session {session.name!r}; it must "
            "register exactly one"
        )
    policy = session.handler_policies(TASK_EVENT)[0]
    if policy not in TASK_POLICIES:
        raise AgentError(
            f"agent factory {getattr(factory, '__qualname__', factory)!r} registered its "
            f"{TASK_EVENT!r} handler with policy {policy!r}, which cancels or skips runs; a "
            f"task must run to an outcome, so use one of {sorted(TASK_POLICIES)}"
        )
    declared = getattr(factory, "room_policy", None)
    if declared is not None:
        return _checked_policy(factory, declared)
    if policy == "replace":
        session.set_policy(TASK_EVENT, "concurrent")  # the store keeps replace, per room
        return "replace"
    return None


def _checked_policy(factory: AgentFactory, declared: object) -> RoomPolicy:
    try:
        return check_room_policy(declared)
    except ValueError as exc:
        raise AgentError(
            f"agent factory {getattr(factory, '__qualname__', factory)!r}: its room_policy "
            f"attribute is wrong: {exc}"
        ) from None


async def agent_room_policy(factory: AgentFactory) -> RoomPolicy | None:
    """The room policy an agent asks for, overriding the bridge's ``--room-policy``: its
    factory's ``room_policy`` attribute if set, else ``"replace"`` if it registers its task
    handler with the session policy ``replace`` (barge-in), else ``None`` (the bridge's).

    Ingest stores the policy with each task, so the bridge asks before it ingests; the
    factory is run once on a throwaway session to see its handler."""
    declared = getattr(factory, "room_policy", None)
    if declared is not None:
        return _checked_policy(factory, declared)
    async with open_session("room-policy-probe") as session:
        return install_agent(session, factory)


async def check_agent(spec: str, factory: AgentFactory) -> None:
    """Make the checks a worker makes at its start (``install_agent``) on a throwaway session,
    so an agent the bridge cannot use is refused before anything starts, as a configuration
    error (``AgentLoadError``) like an unknown module; a factory that raises is refused too."""
    try:
        async with open_session("agent-check") as session:
            install_agent(session, factory)
    except AgentError as exc:
        raise AgentLoadError(f"agent {spec!r}: {exc}") from None
    except Exception as exc:
        raise AgentLoadError(
            f"agent {spec!r}: its factory raised {type(exc).__name__}: {exc}"
        ) from exc


def agent_run_timeout(factory: AgentFactory, default: float | None) -> float | None:
    """The run timeout for ``factory``'s runs: its ``run_timeout`` attribute if it has one
    (seconds > 0, or None for no limit), else ``default``."""
    value = getattr(factory, "run_timeout", default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"run_timeout must be None or seconds > 0, got {value!r}")
    return float(value)


def agent_version(factory: object) -> str | None:
    """The version an agent's step records keep by default (issue #53; ``--agent-version``
    overrides it): its distribution's version if the factory's module belongs to an
    installed package, else ``sha:`` and a hash of the module's source file (any edit is a
    new version), else None (a module without a file: unversioned)."""
    module_name = getattr(factory, "__module__", None)
    module = None if module_name is None else sys.modules.get(module_name)
    if module is None:
        return None
    top = module.__name__.partition(".")[0]
    for dist in importlib.metadata.packages_distributions().get(top, ()):
        try:
            return check_version(importlib.metadata.version(dist))
        except (importlib.metadata.PackageNotFoundError, VersionError):
            continue
    path = getattr(module, "__file__", None)
    if path is None:
        return None
    try:
        source = Path(path).read_bytes()
    except OSError:
        return None
    return f"sha:{hashlib.sha256(source).hexdigest()[:12]}"
