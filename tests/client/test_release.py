"""``GatewayClient.release_leases``: optional, bounded, never a retry spin (network faked)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import trio
from trio.testing import MockClock

from tether.bridge import GatewayClient
from tether.bridge.client import GatewayUnavailable
from tether.bridge.client._connection import LEASE_RELEASE_TIMEOUT

URL = "http://gateway.test"


class Recorder(httpx.AsyncBaseTransport):
    """Answers each request with ``answer(request)``; ``hang`` paths never answer."""

    def __init__(self, answer: httpx.Response | Exception | None) -> None:
        self.answer = answer
        self.requests: list[tuple[float, httpx.Request]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((trio.current_time(), request))
        if self.answer is None:
            await trio.sleep_forever()
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def client(transport: Recorder, token_path: Path) -> GatewayClient:
    return GatewayClient(URL, token_path, client_name="bridge-7", transport=transport)


async def test_release_names_the_client_and_returns_the_count(token_path: Path) -> None:
    transport = Recorder(httpx.Response(200, json={"client": "bridge-7", "released": 3, "new": 1}))
    async with client(transport, token_path) as gateway:
        assert await gateway.release_leases() == 3
    [(_, request)] = transport.requests
    assert (request.method, request.url.path) == ("POST", "/v1/leases/release")
    holder = gateway.lease_holder
    assert holder.startswith("bridge-7-")
    assert len(holder) == len("bridge-7-") + 6
    assert json.loads(request.content) == {"client": holder}
    assert request.headers["x-tether-client"] == holder


async def test_every_request_names_the_client(token_path: Path) -> None:
    transport = Recorder(httpx.Response(200, json={"tasks": []}))
    async with client(transport, token_path) as gateway:
        await gateway.poll_tasks(wait=0)
    assert transport.requests[0][1].headers["x-tether-client"] == gateway.lease_holder
    async with client(transport, token_path) as other:  # another bridge with the same name
        assert other.lease_holder != gateway.lease_holder


@pytest.mark.parametrize("status", [404, 405])
async def test_a_gateway_without_the_endpoint_is_asked_once(token_path: Path, status: int) -> None:
    transport = Recorder(httpx.Response(status, json={"error": "no such endpoint"}))
    async with client(transport, token_path) as gateway:
        assert await gateway.release_leases() is None
        assert await gateway.release_leases() is None
        assert gateway.release_supported is False
    assert len(transport.requests) == 1


async def test_a_gateway_that_does_not_answer_costs_at_most_the_bound(
    mock_clock: MockClock, token_path: Path
) -> None:
    transport = Recorder(None)
    async with client(transport, token_path) as gateway:
        started = trio.current_time()
        with pytest.raises(GatewayUnavailable, match="no answer"):
            await gateway.release_leases()
        assert trio.current_time() - started == pytest.approx(LEASE_RELEASE_TIMEOUT)
    assert len(transport.requests) == 1


async def test_an_unreachable_gateway_is_tried_twice_quickly_then_given_up(
    mock_clock: MockClock, token_path: Path
) -> None:
    transport = Recorder(httpx.ConnectError("connection refused"))
    async with client(transport, token_path) as gateway:
        started = trio.current_time()
        with pytest.raises(GatewayUnavailable, match="connection refused"):
            await gateway.release_leases()
        assert trio.current_time() - started < 0.5
        assert gateway.release_supported is True  # maybe next time
    assert len(transport.requests) == 2


async def test_a_5xx_is_tried_twice_then_given_up(mock_clock: MockClock, token_path: Path) -> None:
    transport = Recorder(httpx.Response(503, json={"error": "busy"}))
    async with client(transport, token_path) as gateway:
        with pytest.raises(GatewayUnavailable, match="HTTP 503"):
            await gateway.release_leases()
    assert len(transport.requests) == 2


@pytest.mark.parametrize("bound", [0.0, -1.0, 61.0, float("nan")])
def test_a_release_bound_outside_0_to_60_s_is_refused(token_path: Path, bound: float) -> None:
    with pytest.raises(ValueError, match="release_timeout"):
        GatewayClient(URL, token_path, release_timeout=bound)
