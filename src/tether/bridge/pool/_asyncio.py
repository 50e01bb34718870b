"""Agents written for asyncio: ``asyncio_agent(handle)`` runs an asyncio coroutine function as
an agent's task handler, through trio-asyncio (the ``asyncio`` extra, imported on first use).

Trio's cancellation of the run (timeout, supersede, operator cancel, soft stop) cancels the
asyncio task. A bridge opens one asyncio loop per process around its workers (``loop_for``);
a run outside one opens its own (about 7 times dearer: see docs/guide/asyncio-agents.md).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from types import EllipsisType, ModuleType
from typing import Any, Final, ParamSpec, TypeVar

from ..._session import Session
from ..custody._rooms import RoomPolicy
from ..custody._rules import Task
from ..runs._reply import Reply
from ._agent import TASK_EVENT, AgentFactory

P = ParamSpec("P")
T = TypeVar("T")

AsyncioHandler = Callable[[Task], Coroutine[Any, Any, Reply | str]]
"""``async def handle(task) -> Reply | str``, written for asyncio."""

NEEDS_LOOP: Final = "asyncio_loop"
"""The attribute of a factory whose runs need an asyncio loop (``loop_for`` opens one)."""

MISSING: Final = (
    "asyncio agents need trio-asyncio: install the 'asyncio' extra (pip install 'tether[asyncio]')"
)


def _trio_asyncio() -> ModuleType:
    """trio_asyncio, imported; it patches asyncio's running-loop lookups as it is imported, so
    a module that copied them before (anyio's asyncio backend does ``from asyncio import
    get_running_loop``; anyio's pytest plugin imports it early) gets the patched ones too, or
    it finds no loop inside trio-asyncio ("RuntimeError: no running event loop")."""
    import asyncio

    import trio_asyncio

    early = sys.modules.get("anyio._backends._asyncio")
    if early is not None:
        for name in ("get_running_loop", "current_task"):
            if getattr(early, name, None) is not getattr(asyncio, name):
                setattr(early, name, getattr(asyncio, name))
    return trio_asyncio  # type: ignore[no-any-return]


def _require_trio_asyncio() -> None:
    if importlib.util.find_spec("trio_asyncio") is None:
        raise ImportError(MISSING)


def asyncio_agent(
    handle: AsyncioHandler,
    *,
    policy: str = "concurrent",
    room_policy: RoomPolicy | None = None,
    run_timeout: float | EllipsisType | None = ...,
) -> AgentFactory:
    """An agent factory whose task handler is ``handle``, an asyncio coroutine function
    (``async def handle(task) -> Reply | str``) run on an asyncio loop inside Trio.

    ``policy``, ``room_policy`` and ``run_timeout`` are what a plain factory says with its
    handler's policy and its attributes (see ``load_agent``); ``run_timeout`` left out: the
    worker's."""
    if not inspect.iscoroutinefunction(handle):
        raise TypeError(
            f"asyncio_agent takes an async def function (an asyncio coroutine function), "
            f"got {handle!r}"
        )
    _require_trio_asyncio()
    name = getattr(handle, "__name__", "handle")

    def factory(session: Session) -> None:
        async def run(task: Task) -> Reply | str:
            return await run_on_asyncio(handle, task)

        run.__name__ = name
        session.add_handler(TASK_EVENT, run, policy=policy)  # type: ignore[arg-type]

    factory.__qualname__ = f"asyncio_agent({getattr(handle, '__qualname__', name)})"
    attributes: dict[str, object] = {NEEDS_LOOP: True}
    if room_policy is not None:
        attributes["room_policy"] = room_policy
    if run_timeout is not ...:
        attributes["run_timeout"] = run_timeout
    for key, value in attributes.items():
        setattr(factory, key, value)
    return factory


async def run_on_asyncio(
    fn: Callable[P, Coroutine[Any, Any, T]], *args: P.args, **kwargs: P.kwargs
) -> T:
    """``await fn(*args)`` as an asyncio task on the loop around this Trio task (one of its own
    if there is none); a Trio cancellation of the caller cancels that task."""
    trio_asyncio = _trio_asyncio()
    call = functools.partial(fn, *args, **kwargs)
    if trio_asyncio.current_loop.get() is not None:
        return await trio_asyncio.aio_as_trio(call)()  # type: ignore[no-any-return]
    async with trio_asyncio.open_loop():
        return await trio_asyncio.aio_as_trio(call)()  # type: ignore[no-any-return]


def trio_as_asyncio(fn: Callable[..., Awaitable[T]]) -> Callable[..., Coroutine[Any, Any, T]]:
    """From asyncio code in a run: ``await trio_as_asyncio(fn)(*args)`` runs ``fn``, a Trio-side
    async function of tether (a run's steps and waits, a conversation's reads), as a Trio task
    and returns its result; cancelling the asyncio task cancels it."""
    _require_trio_asyncio()

    @functools.wraps(fn)
    async def call(*args: Any, **kwargs: Any) -> T:
        return await _trio_asyncio().trio_as_aio(fn)(*args, **kwargs)  # type: ignore[no-any-return]

    return call


@asynccontextmanager
async def loop_for(*factories: AgentFactory) -> AsyncIterator[None]:
    """One asyncio loop around a process's workers if any of ``factories`` needs one (their
    runs share it); nothing at all, not even the import, otherwise."""
    if not any(getattr(factory, NEEDS_LOOP, False) for factory in factories):
        yield
        return
    async with _trio_asyncio().open_loop():
        yield
