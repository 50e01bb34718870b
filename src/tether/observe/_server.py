"""``serve_admin``: the admin endpoint on hypercorn (Trio), 127.0.0.1 by default."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio

from .._child import ChildSpec
from .._core._stop import wait_stop_requested
from .._core._util import open_nursery_unwrapped
from .._http._asgi import hypercorn_config, start_hypercorn
from .._http._auth import TokenSource
from .._plumbing._token_file import read_token
from ._app import AdminApp
from ._custody_cache import CustodyCache
from ._observed import Observed

log = logging.getLogger("tether.admin")

DEFAULT_ADMIN_PORT = 8766


@attrs.frozen
class AdminSettings:
    """Where the admin endpoint listens and which token file opens it.

    ``port=0`` picks a free port (``serve_admin`` reports it). The token file must exist and be
    private (0600): a missing or too open file is a start-up error, never an open endpoint.
    """

    token_file: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_ADMIN_PORT
    graceful_timeout: float = 2.0

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"admin port must be within 0-65535, got {self.port}")


async def serve_admin(
    observed: Observed,
    settings: AdminSettings,
    *,
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled (or until ``shutdown_trigger()`` returns); reports the bound port
    once it accepts connections: ``port = await nursery.start(serve_admin, observed, settings)``.
    """
    # a missing, empty or too open token file fails the start (TokenFileError)
    await trio.to_thread.run_sync(read_token, settings.token_file)
    tokens = TokenSource(settings.token_file)
    app: Any = AdminApp(observed, tokens)
    async with open_nursery_unwrapped() as nursery:
        config = hypercorn_config(
            settings.host,
            settings.port,
            graceful_timeout=settings.graceful_timeout,
            errorlog="tether.admin.http",
        )
        refreshing = trio.CancelScope()
        if observed.custody_cache is not None:  # the routes answer from its latest reading
            await nursery.start(_refresh, observed.custody_cache, refreshing)
        port, bind, stop = await start_hypercorn(nursery, app, config, what="the admin endpoint")
        log.info("admin endpoint listening on %s", bind)
        task_status.started(port)
        if shutdown_trigger is not None:
            await shutdown_trigger()
            stop.set()
            refreshing.cancel()  # the last reading stays for the requests still answered


async def _refresh(
    cache: CustodyCache,
    scope: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    with scope:
        await cache.run(task_status=task_status)


def admin_child(observed: Observed, settings: AdminSettings, *, name: str = "admin") -> ChildSpec:
    """The admin endpoint as a supervised child (its ``start_child`` returns the bound port);
    a soft stop lets in-flight requests finish."""
    return ChildSpec(
        name,
        partial(serve_admin, shutdown_trigger=wait_stop_requested),
        observed,
        settings,
        shutdown_grace=settings.graceful_timeout + 1.0,
    )
