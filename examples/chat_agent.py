"""A chat agent over an OpenAI-compatible HTTP API (``POST {base_url}/chat/completions``).

As a bridge agent: put ``examples/`` on ``PYTHONPATH`` and run
``tether bridge run --agent chat_agent:factory`` with the settings in the environment:

- ``TETHER_CHAT_BASE_URL`` (e.g. ``http://127.0.0.1:8000/v1`` for a local server),
- ``TETHER_CHAT_MODEL``,
- ``TETHER_CHAT_API_KEY_FILE`` (optional: a file holding the key, never the key itself),
- ``TETHER_CHAT_RUN_TIMEOUT`` (seconds for a whole run; default 60).

On its own: ``uv run python examples/chat_agent.py "hello"`` prints the reply.

What it shows:

- **A run time limit.** ``chat()`` runs under ``trio.move_on_after(run_timeout)``: a model that
  hangs ends as ``ChatTimeout``, and the bridge fails that attempt (retried, then a dead
  letter with the reason) instead of holding the task until its lease runs out.
- **A clear error mapping.** ``error_for(response)`` turns each HTTP answer into one exception
  with one readable sentence: ``ChatAuthError`` (401/403: fix the key), ``ChatUnavailable``
  (429, 5xx, connection errors, request timeouts: worth retrying), ``ChatRequestError`` (any
  other 4xx: the request itself is wrong), ``ChatProtocolError`` (a 200 that is not a chat
  completion).

Two more are planned and each lands as one function here (tether issues #16 and #17, being
built now):

- ``Retry(after=)`` on 429/503: a new ``retry_after(response)`` reads ``Retry-After``, and
  ``error_for`` returns ``Retry(after=...)`` for those two codes instead of
  ``ChatUnavailable``, so the bridge retries after the server's delay without burning an
  attempt.
- Streaming tokens as progress: ``stream_reply(client, settings, messages, progress)`` posts
  with ``"stream": true`` (``request_body(..., stream=True)``), reads the ``data:`` lines and
  reports each token to ``progress``; ``chat()`` calls it instead of ``complete()``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from tether import Session
from tether.bridge import Task, read_token

Message = dict[str, str]


class ChatError(Exception):
    """The model could not answer; the message says why in one sentence."""


class ChatAuthError(ChatError):
    """The API refused the key (401/403)."""


class ChatUnavailable(ChatError):
    """Busy (429), failing (5xx), unreachable or too slow to answer one request: retry later."""


class ChatRequestError(ChatError):
    """The API refused the request itself (another 4xx)."""


class ChatProtocolError(ChatError):
    """A 200 answer that is not a chat completion."""


class ChatTimeout(ChatError):
    """No reply within the run's time limit."""


@attrs.frozen
class ChatSettings:
    """Where the model is and how long a run may take."""

    base_url: str
    model: str
    api_key_file: Path | None = None
    run_timeout: float = 60.0
    request_timeout: float = 30.0
    system_prompt: str = "You are a helpful assistant. Answer briefly."

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
            raise ValueError(
                f"chat agent: TETHER_CHAT_RUN_TIMEOUT={timeout!r} is not a number"
            ) from None
        return cls(base_url, model, Path(key_file) if key_file else None, run_timeout)


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


def error_for(response: httpx.Response) -> ChatError:
    """The exception for a non-200 answer (#16 adds ``Retry(after=)`` for 429/503 here)."""
    status, reason = response.status_code, api_reason(response)
    if status in (401, 403):
        return ChatAuthError(f"the model API refused the key (HTTP {status}): {reason}")
    if status == 429 or status >= 500:
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


async def complete(
    client: httpx.AsyncClient, settings: ChatSettings, messages: list[Message]
) -> str:
    """One request, the whole reply at once."""
    try:
        response = await client.post("chat/completions", json=request_body(settings, messages))
    except httpx.TimeoutException:
        raise ChatUnavailable(
            f"the model API did not answer within {settings.request_timeout:g}s"
        ) from None
    except httpx.TransportError as exc:
        raise ChatUnavailable(f"cannot reach the model API at {settings.base_url}: {exc}") from None
    if response.status_code != 200:
        raise error_for(response)
    try:
        payload = response.json()
    except ValueError:
        raise ChatProtocolError("the model API answered 200 with something not JSON") from None
    return parse_reply(payload)


async def chat(
    settings: ChatSettings,
    messages: list[Message],
    *,
    transport: httpx.AsyncBaseTransport | None = None,
) -> str:
    """The model's reply to ``messages``, within ``settings.run_timeout`` seconds."""
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
            return await complete(client, settings, messages)
    raise ChatTimeout(f"no reply from the model within {settings.run_timeout:g}s")


def factory(session: Session) -> None:
    """The bridge's agent (``--agent chat_agent:factory``): one reply per task."""
    settings = ChatSettings.from_env()

    @session.on("task")
    async def answer(task: Task) -> str:
        return await chat(
            settings,
            [
                {"role": "system", "content": settings.system_prompt},
                {"role": "user", "content": task.body},
            ],
        )


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
