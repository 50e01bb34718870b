"""examples/chat_agent.py against a small OpenAI-compatible server on 127.0.0.1 (hypercorn):
whole and streamed replies, each failure's error and what the bridge makes of it."""

from __future__ import annotations

import email.utils
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any

import chat_agent
import httpx
import pytest
import trio

from tether.bridge import CustodyState, Permanent, Progress, Retry, SqliteStore, Task, write_token
from tether.bridge.pool import PoolWorker

from ._fake_model import KEY, FakeModel, fake_model

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "chat_agent.py"


def settings_for(model: FakeModel, key_file: Path, **overrides: Any) -> chat_agent.ChatSettings:
    return chat_agent.ChatSettings(model.url, "test-model", key_file, **overrides)


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "api-key"
    write_token(path, KEY)
    return path


def user(text: str) -> list[chat_agent.Message]:
    return [{"role": "user", "content": text}]


async def test_a_streamed_reply_reaches_progress_token_by_token(key_file: Path) -> None:
    seen: list[str] = []

    class Watching(Progress):
        def stream(self, chunk: str) -> None:
            seen.append(chunk)
            super().stream(chunk)

    progress = Watching()
    async with fake_model() as model:
        reply = await chat_agent.chat(
            settings_for(model, key_file), user("hi there"), progress=progress
        )
    assert reply == "you said: hi there"
    assert seen == ["you", " said:", " hi", " there"]  # each SSE chunk as it came
    assert progress.partial == reply
    assert model.requests == [
        (
            f"Bearer {KEY}",
            {
                "model": "test-model",
                "messages": [{"role": "user", "content": "hi there"}],
                "stream": True,
            },
        )
    ]


async def test_a_server_that_does_not_stream_still_answers(key_file: Path) -> None:
    progress = Progress()
    async with fake_model() as model:
        reply = await chat_agent.chat(
            settings_for(model, key_file), user("whole"), progress=progress
        )
    assert reply == progress.partial == "you said: whole"
    assert model.requests[0][1]["stream"] is True


async def test_without_streaming_the_whole_reply_comes_at_once(key_file: Path) -> None:
    async with fake_model() as model:
        settings = settings_for(model, key_file, stream=False)
        assert await chat_agent.chat(settings, user("hello")) == "you said: hello"
        with pytest.raises(chat_agent.ChatProtocolError, match="something not JSON"):
            await chat_agent.chat(settings, user("garbage"))
        with pytest.raises(chat_agent.ChatProtocolError, match=r"without choices\[0\]\.message"):
            await chat_agent.chat(settings, user("empty"))
    assert model.requests[0] == (
        f"Bearer {KEY}",
        {"model": "test-model", "messages": [{"role": "user", "content": "hello"}]},
    )


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        ("busy", chat_agent.ChatBusy, r"busy \(HTTP 429, retry after 7s\): Rate limit reached$"),
        ("down", chat_agent.ChatBusy, r"busy \(HTTP 503\): upstream overloaded$"),
        ("broken", chat_agent.ChatUnavailable, r"unavailable \(HTTP 500\): internal error$"),
        ("bad", chat_agent.ChatRequestError, r"\(HTTP 400\): model 'nope' does not exist$"),
        ("garbage", chat_agent.ChatProtocolError, "answered 200 with something not JSON"),
        ("empty", chat_agent.ChatProtocolError, r"without choices\[0\]\.message"),
        ("badevent", chat_agent.ChatProtocolError, "streamed an event that is not JSON"),
        ("cut", chat_agent.ChatProtocolError, r"stream ended before \[DONE\]"),
        ("midfail", chat_agent.ChatUnavailable, "failed while streaming: overloaded$"),
    ],
)
async def test_each_failure_is_one_clear_error(
    key_file: Path, text: str, error: type[Exception], message: str
) -> None:
    async with fake_model() as model:
        with pytest.raises(error, match=message):
            await chat_agent.chat(settings_for(model, key_file), user(text))


async def test_what_the_bridge_makes_of_each_failure(key_file: Path) -> None:
    """429/503 are ``Retry`` (after the server's ``Retry-After``), another 4xx is
    ``Permanent``, the rest are plain failures (the bridge's backoff, then a dead letter)."""

    async def failure(settings: chat_agent.ChatSettings, text: str) -> Exception:
        with pytest.raises(chat_agent.ChatError) as caught:
            await chat_agent.chat(settings, user(text))
        return caught.value

    async with fake_model() as model:
        settings = settings_for(model, key_file)
        busy = await failure(settings, "busy")
        assert isinstance(busy, Retry)
        assert busy.after == 7.0
        down = await failure(settings, "down")
        assert isinstance(down, Retry)
        assert down.after is None
        bad = await failure(settings, "bad")
        assert isinstance(bad, Permanent)
        assert (
            bad.reason
            == "the model API refused the request (HTTP 400): model 'nope' does not exist"
        )
        for text in ("broken", "cut"):
            plain = await failure(settings, text)
            assert not isinstance(plain, Retry | Permanent)


def response_with(retry_after: str | None) -> httpx.Response:
    headers = {} if retry_after is None else {"Retry-After": retry_after}
    return httpx.Response(429, headers=headers)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("1", 1.0),
        ("120", 120.0),
        (" 2.5 ", 2.5),
        ("0", 0.0),
        ("999999", chat_agent.MAX_RETRY_AFTER),
        (email.utils.formatdate(1_000_030, usegmt=True), 30.0),
        (email.utils.formatdate(999_000, usegmt=True), 0.0),  # a date already past: now
        (None, None),
        ("", None),
        ("-5", None),
        ("nan", None),
        ("soon", None),
        ("Wed, 21 Oct 2015 07:28:00", None),  # no zone: not an HTTP date
    ],
)
def test_retry_after_reads_seconds_or_an_http_date(
    header: str | None, seconds: float | None
) -> None:
    assert chat_agent.retry_after(response_with(header), now=1_000_000) == seconds


async def test_a_refused_key_is_an_auth_error(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong-key"
    write_token(wrong, "sk-wrong")
    async with fake_model() as model:
        with pytest.raises(chat_agent.ChatAuthError, match=r"HTTP 401\): Incorrect API key"):
            await chat_agent.chat(settings_for(model, wrong), user("hello"))


@pytest.mark.parametrize("text", ["slow", "stall"])
async def test_a_hanging_model_ends_at_the_run_time_limit(key_file: Path, text: str) -> None:
    progress = Progress()
    async with fake_model() as model:
        start = trio.current_time()
        # the stalling stream's first token must reach the agent before the limit, also on a
        # loaded machine: a wider limit there (the test waits it out either way)
        limit = 3.0 if text == "stall" else 0.5
        settings = settings_for(model, key_file, run_timeout=limit)
        with pytest.raises(chat_agent.ChatTimeout, match=rf"within {limit:g}s"):
            await chat_agent.chat(settings, user(text), progress=progress)
        assert trio.current_time() - start < 10  # the server never finishes
    assert progress.partial == ("Once" if text == "stall" else "")


async def test_an_unreachable_api_is_unavailable(key_file: Path) -> None:
    async with fake_model() as model:
        url = model.url  # the server is gone once the block ends
    settings = chat_agent.ChatSettings(url, "m", key_file)
    with pytest.raises(chat_agent.ChatUnavailable, match="cannot reach the model API at http"):
        await chat_agent.chat(settings, user("hello"))


def test_settings_from_the_environment() -> None:
    env = {"TETHER_CHAT_BASE_URL": "http://x/v1", "TETHER_CHAT_MODEL": "m"}
    settings = chat_agent.ChatSettings.from_env(env)
    assert (settings.run_timeout, settings.stream, settings.api_key_file) == (60.0, True, None)
    off = chat_agent.ChatSettings.from_env({**env, "TETHER_CHAT_STREAM": "0"})
    assert off.stream is False
    with pytest.raises(ValueError, match="TETHER_CHAT_STREAM='maybe' must be"):
        chat_agent.ChatSettings.from_env({**env, "TETHER_CHAT_STREAM": "maybe"})
    for bad in ("soon", "0", "-1", "inf"):
        with pytest.raises(ValueError, match=f"TETHER_CHAT_RUN_TIMEOUT='{bad}' must be seconds"):
            chat_agent.ChatSettings.from_env({**env, "TETHER_CHAT_RUN_TIMEOUT": bad})


async def settled(store: SqliteStore, n: int) -> None:
    """Wait until ``n`` tasks have an outcome (a result or a dead letter)."""
    with trio.fail_after(30):
        while True:
            counts = await store.counts()
            if counts[CustodyState.RESULT] + counts[CustodyState.DEAD] == n:
                return
            await trio.sleep(0.02)


async def test_as_a_bridge_agent_a_429_waits_out_retry_after_and_a_400_is_dead_at_once(
    key_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with fake_model() as model:
        monkeypatch.setenv("TETHER_CHAT_BASE_URL", model.url)
        monkeypatch.setenv("TETHER_CHAT_MODEL", "test-model")
        monkeypatch.setenv("TETHER_CHAT_API_KEY_FILE", str(key_file))
        async with await SqliteStore.open(tmp_path / "custody.db", max_attempts=3) as store:
            await store.ingest_many(
                [Task("t1", "hello"), Task("t2", "bad"), Task("t3", "busy once")]
            )
            worker = PoolWorker(store, "w1", chat_agent.factory, poll_interval=0.02)
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                with trio.fail_after(30):  # the 429 puts t3 back, not claimable before 1 s
                    while (waiting := await store.get("t3")) is None or waiting.attempt < 2:  # noqa: ASYNC110
                        await trio.sleep(0.02)
                await settled(store, 3)
                worker.request_stop()
            results = {r.task.id: r.body for r in await store.ready_results()}
            assert results == {"t1": "you said: hello", "t3": "you said: busy once"}
            dead = await store.get("t2")
            assert dead is not None
            assert dead.state is CustodyState.DEAD
            assert dead.attempt == 1  # Permanent: no attempt burnt on a hopeless request
            assert dead.reason is not None
            assert "refused the request (HTTP 400): model 'nope' does not exist" in dead.reason
            journal = await store.journal("t3")
            # the 429 paused chat:test-model for every process on the store, as long
            [paused] = await store.limit_views()
            assert paused.spec.key == "chat:test-model"
    assert waiting.state is CustodyState.PENDING
    assert waiting.not_before is not None
    (failed,) = [
        e for e in journal if e.src is CustodyState.CLAIMED and e.dst is CustodyState.PENDING
    ]
    assert failed.reason is not None
    assert "HTTP 429, retry after 1s" in failed.reason
    assert waiting.not_before - failed.at == pytest.approx(1.0, abs=0.01)
    (again,) = [e for e in journal if e.dst is CustodyState.CLAIMED and e.attempt == 2]
    assert again.at >= waiting.not_before  # the store kept it until the server's time
    assert model.seen["busy once"] == 2
    system, _ = model.requests[0][1]["messages"]
    assert system["role"] == "system"


async def test_as_a_bridge_agent_the_model_gets_the_rooms_history(
    key_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with fake_model() as model:
        monkeypatch.setenv("TETHER_CHAT_BASE_URL", model.url)
        monkeypatch.setenv("TETHER_CHAT_MODEL", "test-model")
        monkeypatch.setenv("TETHER_CHAT_API_KEY_FILE", str(key_file))
        monkeypatch.setenv("TETHER_CHAT_STREAM", "0")
        async with await SqliteStore.open(tmp_path / "custody.db") as store:
            worker = PoolWorker(store, "w1", chat_agent.factory, poll_interval=0.02)
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                for id, text in (("a", "weather in Paris?"), ("b", "and in Rome?")):
                    await store.ingest(Task(id, text, room="r"), room_policy="serial")
                    with trio.fail_after(30):
                        while await store.state(id) is not CustodyState.RESULT:  # noqa: ASYNC110
                            await trio.sleep(0.02)
                    await store.mark_delivered(id)
                worker.request_stop()
    _, last = model.requests[-1]
    assert last["messages"][1:] == [
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": "you said: weather in Paris?"},
        {"role": "user", "content": "and in Rome?"},
    ]


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
            "chat agent: the model API is busy (HTTP 429, retry after 7s): Rate limit reached"
        ]
    unset = await trio.run_process(
        [sys.executable, str(SCRIPT), "hello"],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("TETHER_CHAT")},
    )
    assert (unset.returncode, unset.stderr) == (2, b"chat agent: set TETHER_CHAT_BASE_URL\n")
