"""Run the reference gateway: hypercorn on Trio, serving :class:`GatewayApp` from SQLite."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from .._core._util import open_nursery_unwrapped
from .._http._asgi import hypercorn_config, start_hypercorn
from .._http._auth import TokenSource
from ._app import AppLimits, GatewayApp
from ._store import GatewayStore

log = logging.getLogger("tether.gateway")

DEFAULT_PORT = 8765


@attrs.frozen
class GatewaySettings:
    """Where the gateway listens, where it keeps its data, and what it accepts.

    ``port=0`` picks a free port (``serve`` reports the one it got). ``user_token_file``
    (optional) holds a second token that opens only the user side (messages, the page).
    ``lease`` is how long a handed-out task waits for its ack before it is redelivered.
    """

    token_file: Path
    db: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    user_token_file: Path | None = None
    lease: float = 30.0
    limits: AppLimits = attrs.field(factory=AppLimits)
    graceful_timeout: float = 5.0

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be within 0-65535, got {self.port}")
        if not self.lease > 0:
            raise ValueError(f"lease must be > 0 seconds, got {self.lease}")


async def serve(
    settings: GatewaySettings,
    *,
    clock: Callable[[], float] = time.time,
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled, or until ``shutdown_trigger()`` returns (then gracefully).

    Reports the bound port through ``task_status`` once it accepts connections, so
    ``port = await nursery.start(serve, settings)`` is ready to use. A graceful shutdown
    answers pending long polls at once and lets in-flight requests finish (up to
    ``graceful_timeout``). ``clock`` (wall-clock seconds) stamps messages and leases.
    """
    worker_tokens = TokenSource(settings.token_file)
    user_tokens = (
        None if settings.user_token_file is None else TokenSource(settings.user_token_file)
    )
    # a bad token file is a startup error, not a 503 on every request
    await trio.to_thread.run_sync(worker_tokens.current)
    if user_tokens is not None:
        await trio.to_thread.run_sync(user_tokens.current)
    store = await GatewayStore.open(settings.db)
    try:
        app = GatewayApp(
            store,
            worker_tokens,
            user_tokens,
            lease=settings.lease,
            limits=settings.limits,
            clock=clock,
        )
        asgi_app: Any = app  # hypercorn's own ASGI types are narrower than a plain callable
        async with open_nursery_unwrapped() as nursery:
            config = hypercorn_config(
                settings.host,
                settings.port,
                graceful_timeout=settings.graceful_timeout,
                errorlog="tether.gateway.http",
            )
            port, bind, stop = await start_hypercorn(nursery, asgi_app, config, what="the gateway")
            log.info("gateway listening on %s (database %s)", bind, settings.db)
            task_status.started(port)
            if shutdown_trigger is not None:
                await shutdown_trigger()
                log.info("gateway shutting down")
                app.close()
                stop.set()
    finally:
        store.close()
