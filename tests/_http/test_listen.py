"""Starting an HTTP server on a port another process holds names the port."""

from __future__ import annotations

import errno
import socket

import pytest
import trio

from tether._http._asgi import ListenError, hypercorn_config, start_hypercorn


async def app(scope: object, receive: object, send: object) -> None:
    raise AssertionError("never called")


async def test_a_port_in_use_is_named_in_the_error() -> None:
    """Issue 32.9: the bridge and the gateway said only "[Errno 98] Address already in use"."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = hypercorn_config("127.0.0.1", port, graceful_timeout=1.0, errorlog="t.http")
        async with trio.open_nursery() as nursery:
            with pytest.raises(ListenError) as info:
                await start_hypercorn(nursery, app, config, what="the admin endpoint")
    assert info.value.errno == errno.EADDRINUSE
    assert str(info.value) == (
        f"the admin endpoint cannot listen on 127.0.0.1:{port}: address already in use "
        "(another process holds the port)"
    )
