"""A service as a process: the runtime (signals, registry, root supervisor) around its ``run``,
one path for ``tether bridge run`` and ``tether worker run``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from ... import ChildSpec, open_runtime, wait_stop_requested
from ..._core._util import open_nursery_unwrapped


async def run_until_signal(
    name: str,
    run: Callable[..., Awaitable[None]],
    running: Callable[[], bool],
    *,
    grace: float,
    stop_grace: float,
) -> None:
    """Run the service ``run`` under ``open_runtime`` until it returns: SIGINT/SIGTERM stop it
    gracefully. A failure before the service reported ready (``running()`` still false) is
    raised from the start; one after it, once the runtime closed."""
    done = trio.Event()
    error: list[BaseException] = []

    async def service(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await run(task_status=task_status)
        except Exception as exc:
            if not running():
                raise  # a start-up failure: start_child raises it below
            error.append(exc)
        finally:
            done.set()

    async with open_runtime(grace=grace) as runtime:
        await runtime.supervisor.start_child(
            ChildSpec(name, service, restart="temporary", shutdown_grace=stop_grace)
        )
        await done.wait()
    if error:
        raise error[0]


def until_stopped(
    run: Callable[..., Awaitable[None]],
) -> Callable[..., Awaitable[None]]:
    """Wrap a service that ignores soft stops: a stop request ends it cleanly (the bridge's and
    the worker process's children that have nothing to finish)."""

    async def stoppable(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with open_nursery_unwrapped() as nursery:
            await nursery.start(run)
            task_status.started()
            await wait_stop_requested()
            nursery.cancel_scope.cancel()

    return stoppable
