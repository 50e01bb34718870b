"""examples/chat_agent.py against a small OpenAI-compatible server on 127.0.0.1 (hypercorn)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import chat_agent
import hypercorn.config
import hypercorn.trio
import pytest
import trio

from tether.bridge import CustodyState, PoolWorker, SqliteStore, Task, write_token

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "chat_agent.py"
KEY = "sk-test-key"
Send = Any


@attrs.define
class FakeModel:
    """An OpenAI-compatible ``/v1/chat/completions``; what to answer depends on the message."""

    url: str = ""
    requests: list[tuple[str | None, Any]] = attrs.field(factory=list)

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
        if scope["path"] != "/v1/chat/completions":
            await self.answer(send, 404, {"error": {"message": "no such route"}})
        elif auth != f"Bearer {KEY}":
            await self.answer(send, 401, {"error": {"message": "Incorrect API key provided"}})
        elif text == "busy":
            await self.answer(send, 429, {"error": {"message": "Rate limit reached"}})
        elif text == "down":
            await self.answer(send, 503, b"upstream   overloaded\n")
        elif text == "bad":
            await self.answer(send, 400, {"error": {"message": "model 'nope' does not exist"}})
        elif text == "garbage":
            await self.answer(send, 200, b"<html>not json</html>")
        elif text == "empty":
            await self.answer(send, 200, {"choices": []})
        else:
            if text == "slow":
                await trio.sleep(30)
            reply = {
                "choices": [{"message": {"role": "assistant", "content": f"you said: {text}"}}]
            }
            await self.answer(send, 200, reply)

    @staticmethod
    async def answer(send: Send, status: int, payload: Any) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
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
            stop.set()


def settings_for(model: FakeModel, key_file: Path, **overrides: Any) -> chat_agent.ChatSettings:
    return chat_agent.ChatSettings(model.url, "test-model", key_file, **overrides)


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "api-key"
    write_token(path, KEY)
    return path


def user(text: str) -> list[chat_agent.Message]:
    return [{"role": "user", "content": text}]


async def test_a_reply_and_the_request_the_api_received(key_file: Path) -> None:
    async with fake_model() as model:
        reply = await chat_agent.chat(settings_for(model, key_file), user("hello"))
    assert reply == "you said: hello"
    assert model.requests == [
        (
            f"Bearer {KEY}",
            {"model": "test-model", "messages": [{"role": "user", "content": "hello"}]},
        )
    ]


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        ("busy", chat_agent.ChatUnavailable, r"unavailable \(HTTP 429\): Rate limit reached$"),
        ("down", chat_agent.ChatUnavailable, r"unavailable \(HTTP 503\): upstream overloaded$"),
        ("bad", chat_agent.ChatRequestError, r"\(HTTP 400\): model 'nope' does not exist$"),
        ("garbage", chat_agent.ChatProtocolError, "answered 200 with something not JSON"),
        ("empty", chat_agent.ChatProtocolError, r"without choices\[0\]\.message"),
    ],
)
async def test_each_failure_is_one_clear_error(
    key_file: Path, text: str, error: type[Exception], message: str
) -> None:
    async with fake_model() as model:
        with pytest.raises(error, match=message):
            await chat_agent.chat(settings_for(model, key_file), user(text))


async def test_a_refused_key_is_an_auth_error(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong-key"
    write_token(wrong, "sk-wrong")
    async with fake_model() as model:
        with pytest.raises(chat_agent.ChatAuthError, match=r"HTTP 401\): Incorrect API key"):
            await chat_agent.chat(settings_for(model, wrong), user("hello"))


async def test_a_hanging_model_ends_at_the_run_time_limit(key_file: Path) -> None:
    async with fake_model() as model:
        start = trio.current_time()
        with pytest.raises(chat_agent.ChatTimeout, match=r"within 0\.5s"):
            await chat_agent.chat(settings_for(model, key_file, run_timeout=0.5), user("slow"))
        assert trio.current_time() - start < 10  # the server would have taken 30 s


async def test_an_unreachable_api_is_unavailable(key_file: Path) -> None:
    async with fake_model() as model:
        url = model.url  # the server is gone once the block ends
    settings = chat_agent.ChatSettings(url, "m", key_file)
    with pytest.raises(chat_agent.ChatUnavailable, match="cannot reach the model API at http"):
        await chat_agent.chat(settings, user("hello"))


async def test_as_a_bridge_agent_it_answers_tasks_and_fails_bad_ones(
    key_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with fake_model() as model:
        monkeypatch.setenv("TETHER_CHAT_BASE_URL", model.url)
        monkeypatch.setenv("TETHER_CHAT_MODEL", "test-model")
        monkeypatch.setenv("TETHER_CHAT_API_KEY_FILE", str(key_file))
        async with await SqliteStore.open(tmp_path / "custody.db", max_attempts=1) as store:
            await store.ingest_many([Task("t1", "hello"), Task("t2", "bad")])
            worker = PoolWorker(store, "w1", chat_agent.factory, poll_interval=0.05)
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)

                async def settled() -> bool:
                    counts = await store.counts()
                    return counts[CustodyState.RESULT] + counts[CustodyState.DEAD] == 2

                with trio.fail_after(30):
                    while not await settled():  # noqa: ASYNC110 (polling the store)
                        await trio.sleep(0.05)
                worker.request_stop()
            (result,) = await store.ready_results()
            assert (result.task.id, result.body) == ("t1", "you said: hello")
            assert await store.state("t2") is CustodyState.DEAD
    system, _ = model.requests[0][1]["messages"]
    assert system["role"] == "system"


@pytest.mark.slow
async def test_the_command_line_prints_the_reply_or_one_line_of_error(key_file: Path) -> None:
    async with fake_model() as model:
        env = {
            **os.environ,
            "TETHER_CHAT_BASE_URL": model.url,
            "TETHER_CHAT_MODEL": "test-model",
            "TETHER_CHAT_API_KEY_FILE": str(key_file),
        }
        run = partial(
            trio.run_process, capture_stdout=True, capture_stderr=True, check=False, env=env
        )
        ok = await run([sys.executable, str(SCRIPT), "hello"])
        assert (ok.returncode, ok.stdout, ok.stderr) == (0, b"you said: hello\n", b"")
        busy = await run([sys.executable, str(SCRIPT), "busy"])
        assert busy.returncode == 1
        assert busy.stderr.decode().splitlines() == [
            "chat agent: the model API is unavailable (HTTP 429): Rate limit reached"
        ]
    unset = await trio.run_process(
        [sys.executable, str(SCRIPT), "hello"],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("TETHER_CHAT")},
    )
    assert (unset.returncode, unset.stderr) == (2, b"chat agent: set TETHER_CHAT_BASE_URL\n")
