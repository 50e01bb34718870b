"""A chat agent over an OpenAI-compatible HTTP API (``POST {base_url}/chat/completions``).

As a bridge agent: put ``examples/`` on ``PYTHONPATH`` and run
``tether bridge run --agent chat_agent:factory`` with the settings in the environment:

- ``TETHER_CHAT_BASE_URL`` (e.g. ``http://127.0.0.1:8000/v1`` for a local server),
- ``TETHER_CHAT_MODEL``,
- ``TETHER_CHAT_API_KEY_FILE`` (optional: a file holding the key, never the key itself),
- ``TETHER_CHAT_RUN_TIMEOUT`` (seconds for a whole run; default 60),
- ``TETHER_CHAT_STREAM`` (``0`` asks for the whole reply at once; default: stream tokens).

On its own: ``uv run python examples/chat_agent.py "hello"`` prints the reply.

What it shows:

- **A conversation.** The messages sent to the model are the room's history
  (``(await conversation_of(task)).history``: the turns before this message, as the person saw them,
  a reply they interrupted marked so) and then this message: multi-turn, kept by the store.
- **Streaming tokens as progress.** ``stream_reply`` posts with ``"stream": true``, reads the
  server-sent events (``data: {...}`` lines, ``data: [DONE]`` at the end) and hands each token
  to the run's progress reporter (``progress_of(task)``): the gateway shows the reply as it is
  being written, and the whole text is returned as the one custodial reply. A stream cut
  before ``[DONE]`` is an error, never a truncated reply.
- **Retry when the server says when.** A 429 or 503 raises ``ChatBusy``, which is a
  ``tether.bridge.Retry`` with ``after`` read from ``Retry-After`` (``retry_after``: seconds
  or an HTTP date; capped at ``MAX_RETRY_AFTER``): the bridge puts the task back and nobody
  claims it before then. It still counts as an attempt (``--max-attempts`` bounds how long a
  task waits for a provider that stays busy). The key ``chat:<model>`` is paused as long
  for every bridge and worker on the store (``Retry(key=)``): the quota is spent for all.
- **Flow control.** Each call holds a permit of ``chat:<model>`` (``run_of(task).limit``):
  declare its rate and concurrency once (``tether store limits set chat:MODEL --rate
  500/min --concurrency 20``) and every process on the store keeps to it.
- **A hopeless request is dead at once.** Any other 4xx raises ``ChatRequestError``, a
  ``tether.bridge.Permanent``: dead-lettered now with the API's own words as the reason,
  without burning the remaining attempts on a request that cannot succeed.
- **A run time limit.** ``chat()`` runs under ``trio.move_on_after(run_timeout)``: a model that
  hangs (or streams, then stalls) ends as ``ChatTimeout``, and the bridge fails that attempt
  (retried, then a dead letter with the reason) instead of waiting for the bridge's own
  ``--run-timeout`` (default 600 s), which stays the backstop for any agent.
- **One clear error per failure.** ``ChatAuthError`` (401/403: fix the key; retried, since the
  key file is read again each run), ``ChatUnavailable`` (other 5xx, connection errors, a
  request timeout: retried after the bridge's backoff), ``ChatProtocolError`` (an answer that
  is not a chat completion). On the command line each is one line on stderr, exit 1.
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import attrs
import httpx
import trio

from tether import Session
from tether.bridge import (
    Conversation,
    Permanent,
    Progress,
    Retry,
    Task,
    conversation_of,
    progress_of,
    read_token,
    run_of,
)

Message = dict[str, str]

MAX_RETRY_AFTER: Final = 3600.0
"""The longest ``Retry-After`` honoured (seconds): a server asking for more gets this much, so
a wrong header cannot park a task for days."""


class ChatError(Exception):
    """The model could not answer; the message says why in one sentence."""


class ChatAuthError(ChatError):
    """The API refused the key (401/403)."""


class ChatUnavailable(ChatError):
    """Failing (5xx), unreachable or too slow to answer one request: retry later."""


class ChatBusy(ChatUnavailable, Retry):
    """429 or 503: the bridge retries after ``after`` seconds (the server's ``Retry-After``;
    ``None`` when it sent none: the bridge's backoff decides)."""


class ChatRequestError(ChatError, Permanent):
    """The API refused the request itself (another 4xx): it will never succeed."""


class ChatProtocolError(ChatError):
    """An answer that is not a chat completion (or a stream that broke off)."""


class ChatTimeout(ChatError):
    """No reply within the run's time limit."""


def _env_flag(environ: Mapping[str, str], name: str, default: bool) -> bool:
    raw = environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"chat agent: {name}={raw!r} must be 1/true/yes/on or 0/false/no/off")


@attrs.frozen
class ChatSettings:
    """Where the model is, how long a run may take, and whether to stream."""

    base_url: str
    model: str
    api_key_file: Path | None = None
    run_timeout: float = 60.0
    request_timeout: float = 30.0
    """Seconds one request may wait for the server (for a stream: between two chunks)."""
    system_prompt: str = "You are a helpful assistant. Answer briefly."
    stream: bool = True

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> ChatSettings:
        try:
            base_url, model = environ["TETHER_CHAT_BASE_URL"], environ["TETHER_CHAT_MODEL"]
        except KeyError as missing:
            raise ValueError(f"chat agent: set {missing.args[0]}") from None
        key_file = environ.get("TETHER_CHAT_API_KEY_FILE")
        timeout = environ.get("TETHER_CHAT_RUN_TIMEOUT", "60")
        try:
            run_timeout = float(timeout)
        except ValueError:
            run_timeout = math.nan
        if not (math.isfinite(run_timeout) and run_timeout > 0):
            raise ValueError(f"chat agent: TETHER_CHAT_RUN_TIMEOUT={timeout!r} must be seconds > 0")
        return cls(
            base_url,
            model,
            Path(key_file) if key_file else None,
            run_timeout,
            stream=_env_flag(environ, "TETHER_CHAT_STREAM", True),
        )


def request_body(settings: ChatSettings, messages: list[Message], *, stream: bool = False) -> Any:
    body: dict[str, Any] = {"model": settings.model, "messages": messages}
    if stream:
        body["stream"] = True
    return body


def api_reason(response: httpx.Response) -> str:
    """The API's own words: OpenAI-style ``{"error": {"message": ...}}``, else the text."""
    try:
        payload = response.json()
        message = payload["error"]["message"] if isinstance(payload["error"], dict) else None
        reason = str(message or payload["error"])
    except (ValueError, KeyError, TypeError):
        reason = response.text
    return " ".join(reason.split())[:200] or "no detail"


def retry_after(response: httpx.Response, *, now: float | None = None) -> float | None:
    """Seconds the server asks us to wait (``Retry-After``: delay-seconds, or an HTTP date,
    RFC 9110 10.2.3), at most ``MAX_RETRY_AFTER``; ``None`` if absent or unreadable (then the
    bridge's backoff decides). ``now``: the wall clock to measure a date from (tests)."""
    raw = response.headers.get("retry-after", "").strip()
    if not raw:
        return None
    try:  # delay-seconds (digits; a decimal is read too)
        seconds = float(raw)
    except ValueError:
        pass
    else:
        return min(seconds, MAX_RETRY_AFTER) if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is always GMT
        return None
    delay = when.timestamp() - (time.time() if now is None else now)
    return min(max(delay, 0.0), MAX_RETRY_AFTER)


def error_for(response: httpx.Response) -> ChatError:
    """The exception for a non-200 answer: what the bridge should do follows from its type."""
    status, reason = response.status_code, api_reason(response)
    if status in (401, 403):
        return ChatAuthError(f"the model API refused the key (HTTP {status}): {reason}")
    if status in (429, 503):
        after = retry_after(response)
        when = "" if after is None else f", retry after {after:g}s"
        return ChatBusy(f"the model API is busy (HTTP {status}{when}): {reason}", after=after)
    if status >= 500:
        return ChatUnavailable(f"the model API is unavailable (HTTP {status}): {reason}")
    return ChatRequestError(f"the model API refused the request (HTTP {status}): {reason}")


def parse_reply(payload: Any) -> str:
    try:
        content = payload["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ChatProtocolError("the model API answered 200 without choices[0].message") from None
    if not isinstance(content, str) or not content.strip():
        raise ChatProtocolError("the model API answered with an empty message")
    return content


def reply_of(response: httpx.Response) -> str:
    """The reply in a whole (not streamed) 200 answer."""
    try:
        payload = response.json()
    except ValueError:
        raise ChatProtocolError("the model API answered 200 with something not JSON") from None
    return parse_reply(payload)


def token_of(event: str) -> str | None:
    """The text of one streamed chunk (``choices[0].delta.content``; ``None`` when a chunk
    carries none, like the first one, which names the role, or the last with
    ``finish_reason``)."""
    try:
        payload = json.loads(event)
    except ValueError:
        raise ChatProtocolError("the model API streamed an event that is not JSON") from None
    if isinstance(payload, dict) and "error" in payload:  # a failure after the 200
        error = payload["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise ChatUnavailable(f"the model API failed while streaming: {message}")
    try:
        choice = payload["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise ChatProtocolError("the model API streamed a chunk without choices[0]") from None
    delta = choice.get("delta") if isinstance(choice, dict) else None
    content = delta.get("content") if isinstance(delta, dict) else None
    return content if isinstance(content, str) else None


DONE: Final = object()
"""What ``event_data`` returns for ``data: [DONE]``, the end of a stream."""


def event_data(line: str) -> str | object | None:
    """One line of a server-sent event stream: the payload of a ``data:`` line, ``DONE`` for
    ``data: [DONE]``, ``None`` for anything else (blank separators, ``: keep-alive``)."""
    if not line.startswith("data:"):
        return None
    data = line[len("data:") :].strip()
    return DONE if data == "[DONE]" else data


@asynccontextmanager
async def _posted(
    client: httpx.AsyncClient, settings: ChatSettings, body: Any
) -> AsyncIterator[httpx.Response]:
    """One request, its body read in the block; the transport's failures (also while the body
    streams in) as ``ChatUnavailable``."""
    try:
        async with client.stream("POST", "chat/completions", json=body) as response:
            yield response
    except httpx.TimeoutException:
        raise ChatUnavailable(
            f"the model API did not answer within {settings.request_timeout:g}s"
        ) from None
    except httpx.TransportError as exc:
        raise ChatUnavailable(f"cannot reach the model API at {settings.base_url}: {exc}") from None


async def complete(
    client: httpx.AsyncClient, settings: ChatSettings, messages: list[Message]
) -> str:
    """One request, the whole reply at once."""
    async with _posted(client, settings, request_body(settings, messages)) as response:
        await response.aread()
    if response.status_code != 200:
        raise error_for(response)
    return reply_of(response)


async def stream_reply(
    client: httpx.AsyncClient, settings: ChatSettings, messages: list[Message], progress: Progress
) -> str:
    """One streamed request: each token goes to ``progress`` as it arrives; the whole text is
    returned (the reply). A stream that ends without ``[DONE]`` was cut off: an error."""
    body = request_body(settings, messages, stream=True)
    async with _posted(client, settings, body) as response:
        if response.status_code != 200:
            await response.aread()
            raise error_for(response)
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            await response.aread()  # a server that does not stream answers the whole reply
            reply = reply_of(response)
            progress.stream(reply)
            return reply
        progress.clear()  # what people see is this reply only
        done, problem = False, None
        async for line in response.aiter_lines():
            # read to the end of the response (the server ends it after [DONE]): leaving the
            # loop early would abandon httpx's stream generators half-way
            if done or problem is not None:
                continue
            data = event_data(line)
            if data is DONE:
                done = True
            elif isinstance(data, str):
                try:
                    token = token_of(data)
                except ChatError as exc:
                    problem = exc
                else:
                    if token:
                        progress.stream(token)
        if problem is not None:
            raise problem
        if not done:
            raise ChatProtocolError("the model API's stream ended before [DONE] (cut off)")
    reply = progress.partial
    if not reply.strip():
        raise ChatProtocolError("the model API streamed an empty message")
    return reply


async def chat(
    settings: ChatSettings,
    messages: list[Message],
    *,
    progress: Progress | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> str:
    """The model's reply to ``messages``, within ``settings.run_timeout`` seconds; streamed
    token by token into ``progress`` when ``settings.stream``."""
    headers = {}
    if settings.api_key_file is not None:
        key = await trio.to_thread.run_sync(read_token, settings.api_key_file)
        headers["Authorization"] = f"Bearer {key}"
    with trio.move_on_after(settings.run_timeout):
        async with httpx.AsyncClient(
            base_url=settings.base_url.rstrip("/") + "/",
            headers=headers,
            timeout=settings.request_timeout,
            transport=transport,
        ) as client:
            if settings.stream:
                reporter = Progress() if progress is None else progress
                return await stream_reply(client, settings, messages, reporter)
            return await complete(client, settings, messages)
    raise ChatTimeout(f"no reply from the model within {settings.run_timeout:g}s")


def factory(session: Session) -> None:
    """The bridge's agent (``--agent chat_agent:factory``): one reply per task, streamed to
    the people waiting as it is written."""
    settings = ChatSettings.from_env()

    @session.on("task")
    async def answer(task: Task) -> str:
        progress = progress_of(task)
        progress.status(f"asking {settings.model}")
        messages = [
            {"role": "system", "content": settings.system_prompt},
            *history_messages(await conversation_of(task)),
            {"role": "user", "content": task.body},
        ]
        key = f"chat:{settings.model}"  # declare it: tether store limits set chat:MODEL ...
        async with run_of(task).limit(key):
            try:
                return await chat(settings, messages, progress=progress)
            except ChatBusy as exc:
                if exc.after is None or exc.key is not None:
                    raise
                # the server said when it takes work again: stop the key for every process
                raise ChatBusy(str(exc), after=exc.after, key=key) from None


INTERRUPTED: Final = " [interrupted by the user]"
"""Appended to a reply the person cut short (a barge-in), so the model knows they saw only
that much of it."""


def history_messages(conversation: Conversation) -> list[Message]:
    """The room's conversation before this message as chat messages, oldest first: the model
    answers "and in Rome?" knowing the question was about Paris (multi-turn)."""
    return [
        {
            "role": turn.role,
            "content": turn.text + (INTERRUPTED if turn.outcome == "interrupted" else ""),
        }
        for turn in conversation.history
    ]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print('usage: chat_agent.py "your message"', file=sys.stderr)
        return 2
    try:
        settings = ChatSettings.from_env()
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    messages = [
        {"role": "system", "content": settings.system_prompt},
        {"role": "user", "content": argv[0]},
    ]
    try:
        print(trio.run(chat, settings, messages))
    except ChatError as exc:
        print(f"chat agent: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
