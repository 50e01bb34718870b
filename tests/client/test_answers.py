"""``read_bounded``: an answer framed by its ``Content-Length`` is read whole in one go
(issue #49: no copy of each response), and still never past the client's limit."""

from __future__ import annotations

import httpx
import pytest

from tether.bridge.client._answers import OverCap, read_bounded


async def read(response: httpx.Response, max_bytes: int) -> httpx.Response:
    transport = httpx.MockTransport(lambda request: response)
    async with httpx.AsyncClient(transport=transport) as http:
        return await read_bounded(http, http.build_request("GET", "http://g.test/"), max_bytes, "x")


async def test_a_framed_answer_within_the_limit_is_read_whole() -> None:
    got = await read(httpx.Response(200, content=b'{"tasks": []}'), 13)
    assert (got.status_code, got.content, got.is_closed) == (200, b'{"tasks": []}', True)


async def test_a_framed_answer_longer_than_it_declares_is_still_refused() -> None:
    """A transport that does not hold the body to its ``Content-Length`` cannot slip more
    than ``max_bytes`` past the client."""
    lying = httpx.Response(200, headers={"Content-Length": "10"}, content=b"x" * 100)
    with pytest.raises(OverCap, match="went on past it"):
        await read(lying, 50)


async def test_a_compressed_answer_is_counted_as_it_inflates() -> None:
    """A small gzip body may inflate past the limit: it takes the streaming path, which
    counts the decoded bytes."""
    import gzip

    packed = gzip.compress(b"x" * 10_000)
    response = httpx.Response(200, headers={"Content-Encoding": "gzip"}, content=packed)
    assert int(response.headers["Content-Length"]) < 1000
    with pytest.raises(OverCap, match="went on past it"):
        await read(response, 1000)
