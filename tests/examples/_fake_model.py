"""A small OpenAI-compatible server for the chat agent's tests, on 127.0.0.1 (hypercorn).

``POST /v1/chat/completions`` answers according to the last message's text, over real HTTP:
a whole JSON reply, or with ``"stream": true`` a real server-sent event stream (``data:``
lines, ``data: [DONE]``), each chunk sent as its own body part. What each text gets:

- anything else: ``you said: <text>`` (streamed word by word when asked to stream, except
  ``whole``: a server that does not stream);
- ``busy``: 429 with ``Retry-After: 7``; ``busy once``: 429 with ``Retry-After: 1`` the
  first time, a reply after; ``down``: 503 without ``Retry-After``; ``broken``: 500;
- ``bad``: 400 (the request can never succeed); ``garbage``/``empty``: a 200 that is not a
  chat completion;
- ``story``: streams ``Once upon``, then waits for ``FakeModel.release`` before ``a time.``
  (a test sees the partial reply first, with no timing guess);
- ``cut``: streams ``Once`` and ends without ``[DONE]``; ``midfail``: streams an error event;
  ``badevent``: streams an event that is not JSON;
- ``slow``: never answers; ``stall``: streams ``Once`` and then nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import hypercorn.config
import hypercorn.trio
import trio

KEY = "sk-test-key"
Send = Any


def chunk(content: str | None = None, *, role: str | None = None, finish: bool = False) -> bytes:
    delta: dict[str, str] = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    payload = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": "stop" if finish else None}],
    }
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


@attrs.define(eq=False)
class FakeModel:
    """The server's state: every request it got, and the event that lets ``story`` finish."""

    url: str = ""
    requests: list[tuple[str | None, Any]] = attrs.field(factory=list)
    seen: Counter[str] = attrs.field(factory=Counter)
    release: trio.Event = attrs.field(factory=trio.Event)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        auth = headers.get("authorization")
        request = json.loads(body)
        self.requests.append((auth, request))
        text = request["messages"][-1]["content"]
        self.seen[text] += 1
        if scope["path"] != "/v1/chat/completions":
            await answer(send, 404, {"error": {"message": "no such route"}})
        elif auth != f"Bearer {KEY}":
            await answer(send, 401, {"error": {"message": "Incorrect API key provided"}})
        elif text == "busy":
            limited = {"error": {"message": "Rate limit reached"}}
            await answer(send, 429, limited, [(b"retry-after", b"7")])
        elif text == "busy once" and self.seen[text] == 1:
            limited = {"error": {"message": "Rate limit reached"}}
            await answer(send, 429, limited, [(b"retry-after", b"1")])
        elif text == "down":
            await answer(send, 503, b"upstream   overloaded\n")
        elif text == "broken":
            await answer(send, 500, {"error": {"message": "internal error"}})
        elif text == "bad":
            await answer(send, 400, {"error": {"message": "model 'nope' does not exist"}})
        elif text == "garbage":
            await answer(send, 200, b"<html>not json</html>")
        elif text == "empty":
            await answer(send, 200, {"choices": []})
        elif text == "slow":
            await trio.sleep_forever()
        elif request.get("stream") and text != "whole":
            await self.stream(send, text)
        else:
            reply = {
                "choices": [{"message": {"role": "assistant", "content": f"you said: {text}"}}]
            }
            await answer(send, 200, reply)

    async def stream(self, send: Send, text: str) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )

        async def part(data: bytes, more: bool = True) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": more})

        await part(b": keep-alive\n\n" + chunk(role="assistant"))
        if text == "story":
            await part(chunk("Once") + chunk(" upon"))
            await self.release.wait()
            await part(chunk(" a") + chunk(" time."))
        elif text == "cut":
            await part(chunk("Once"), more=False)
            return
        elif text == "badevent":
            await part(chunk("Once") + b"data: {not json\n\n")
        elif text == "midfail":
            await part(chunk("Once") + b'data: {"error": {"message": "overloaded"}}\n\n')
        elif text == "stall":
            await part(chunk("Once"))
            await trio.sleep_forever()
        else:
            for i, word in enumerate(f"you said: {text}".split(" ")):
                await part(chunk(word if i == 0 else " " + word))
        await part(chunk(finish=True) + DONE, more=False)


async def answer(
    send: Send, status: int, payload: Any, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": data})


@asynccontextmanager
async def fake_model() -> AsyncIterator[FakeModel]:
    model = FakeModel()
    app: Any = model  # a plain ASGI callable (hypercorn's types want its own scope classes)
    config = hypercorn.config.Config()
    config.bind = ["127.0.0.1:0"]
    config.graceful_timeout = 0.2
    config.accesslog = None
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            partial(hypercorn.trio.serve, app, config, shutdown_trigger=stop.wait)
        )
        model.url = binds[0] + "/v1"
        try:
            yield model
        finally:
            model.release.set()
            stop.set()
