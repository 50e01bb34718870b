"""Small structured-concurrency helpers shared by the runtime, sessions and supervisors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio


@asynccontextmanager
async def open_nursery_unwrapped() -> AsyncIterator[trio.Nursery]:
    """A nursery whose body's own exception comes out as itself, not in an ExceptionGroup.

    Trio wraps everything a nursery collects in a group (strict exception groups). For a
    context manager that users write ``try/except`` around, an error raised by *their* block
    should stay that error; errors from child tasks are still reported as a group.
    """
    body_exc: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            try:
                yield nursery
            except BaseException as exc:
                body_exc = exc
                raise
    except BaseExceptionGroup as group:
        if body_exc is not None and len(group.exceptions) == 1 and group.exceptions[0] is body_exc:
            raise body_exc from body_exc.__cause__
        raise
