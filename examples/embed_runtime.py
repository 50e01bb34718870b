"""Embedding tether's runtime in an existing Trio application.

Your application keeps its own ``main``; ``open_runtime()`` wraps the part that runs your
services, and gives you:

- a supervisor for them: each service is a ``ChildSpec`` (``async def run(...,
  task_status=...)`` calling ``task_status.started()`` when ready), restarted with backoff
  when it crashes; here a TCP echo server and a nested supervisor for two periodic jobs;
- a graceful stop on SIGINT/SIGTERM: each service gets a soft stop
  (``tether.wait_stop_requested()``) and its ``shutdown_grace``, then the process exits 0;
  a second signal stops at once;
- the live task tree, with each task's await stack, in the log on SIGUSR1
  (``kill -USR1 <pid>``): what is it doing right now, without a debugger.

Run it: ``uv run python examples/embed_runtime.py``, then in another shell
``kill -USR1 <pid>`` (the pid is on the first line) and ``kill <pid>``.
"""

from __future__ import annotations

import logging
import os
import sys

import trio
import trio_util

import tether

log = logging.getLogger("app")


async def echo_server(*, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """A TCP echo service on 127.0.0.1; reports its port as ready, stops on a soft stop."""

    async def echo(stream: trio.SocketStream) -> None:
        async with stream:
            async for data in stream:
                await stream.send_all(data)

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    task_status.started(port)
    async with trio_util.move_on_when(tether.wait_stop_requested):
        await trio.serve_listeners(echo, listeners)
    log.info("echo server: stopped accepting")


async def periodic(
    name: str, period: float, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """A job that runs every ``period`` seconds until asked to stop."""
    task_status.started()
    async with trio_util.move_on_when(tether.wait_stop_requested):
        while True:
            await trio.sleep(period)
            log.debug("%s: tick", name)


async def jobs(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """A supervisor of its own, as one child of the root: a subtree of services."""
    async with tether.open_supervisor(name="jobs", strategy="one_for_all") as sup:
        await sup.start_child(tether.ChildSpec("cache-warmer", periodic, "cache-warmer", 0.5))
        await sup.start_child(tether.ChildSpec("metrics-flush", periodic, "metrics-flush", 1.0))
        task_status.started()
        await tether.wait_stop_requested()


async def main() -> None:
    # ... your application's own set-up ...
    async with tether.open_runtime(grace=2.0) as rt:
        port = await rt.supervisor.start_child(tether.ChildSpec("echo-server", echo_server))
        await rt.supervisor.start_child(tether.ChildSpec("jobs", jobs))
        print(f"ready: pid {os.getpid()}, echo server on 127.0.0.1:{port}", flush=True)
        await trio.sleep_forever()  # until SIGINT/SIGTERM: then a graceful stop
    print("stopped cleanly", flush=True)


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    trio.run(main)
