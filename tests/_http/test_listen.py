"""Starting an HTTP server on a port another process holds names the port."""

from __future__ import annotations

import errno
import logging
import socket

import pytest
import trio

from tether._http._asgi import ListenError, hypercorn_config, start_hypercorn
from tether._http._loopback import is_loopback


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


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("example.org", False),
    ],
)
def test_loopback_addresses_are_told_from_the_others(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


async def test_a_server_bound_off_loopback_warns_once_that_it_is_plain_http(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue #48: ``--host 0.0.0.0`` served bearer tokens over plain HTTP without a word."""
    with caplog.at_level(logging.WARNING, logger="tether.http"):
        for host in ("127.0.0.1", "0.0.0.0"):
            config = hypercorn_config(host, 0, graceful_timeout=1.0, errorlog="t.http")
            async with trio.open_nursery() as nursery:
                port, _, stop = await start_hypercorn(nursery, app, config, what="the gateway")
                stop.set()
    [warning] = [r for r in caplog.records if r.name == "tether.http"]
    assert warning.levelno == logging.WARNING
    said = warning.getMessage()
    assert f"the gateway listens on 0.0.0.0:{port} beyond this machine" in said
    assert "plain HTTP" in said
    assert "TLS" in said


def test_a_server_keeps_an_idle_connection_longer_than_a_client_would_reuse_it() -> None:
    """A client that reuses a pooled connection just before its own expiry must never meet a
    server closing it that instant ("Server disconnected without sending a response": seen
    by a test's poll of the gateway under load, with both sides at 5 s)."""
    import httpx

    config = hypercorn_config("127.0.0.1", 0, graceful_timeout=1.0, errorlog="test")
    client_expiry = httpx.Limits().keepalive_expiry
    assert client_expiry is not None
    assert config.keep_alive_timeout >= 2 * client_expiry
