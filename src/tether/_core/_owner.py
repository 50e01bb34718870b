"""Owner labels: which session, service or scope a task belongs to, in a context variable Trio
copies into every task spawned below; the registry reads it once, in ``task_spawned``."""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import trio

from ._context import OWNER


def current_owner() -> str | None:
    """The owner label of the running code (None when nobody claimed it)."""
    return OWNER.get()


@contextmanager
def owned_by(label: str) -> Iterator[None]:
    """Tasks spawned inside this block (and their descendants) carry ``label`` as owner."""
    token = OWNER.set(label)
    try:
        yield
    finally:
        OWNER.reset(token)


def _start_soon_as(
    label: str,
    nursery: trio.Nursery,
    fn: Callable[..., Awaitable[Any]],
    args: tuple[Any, ...],
    name: object,
) -> None:
    OWNER.set(label)
    nursery.start_soon(fn, *args, name=name)


def start_soon_owned(
    nursery: trio.Nursery,
    label: str,
    fn: Callable[..., Awaitable[Any]],
    *args: Any,
    name: object = None,
) -> None:
    """``nursery.start_soon`` with the new task tagged as owned by ``label``.

    The label is set in a throwaway copy of the caller's context, so the caller's own
    owner is untouched.
    """
    contextvars.copy_context().run(_start_soon_as, label, nursery, fn, args, name)
