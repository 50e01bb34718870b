"""A pydantic-ai ``Agent`` as a tether agent: an asyncio framework, run unchanged on Trio
through ``tether.bridge.asyncio_agent`` (trio-asyncio underneath).

What it shows:

- the handler is plain asyncio code (``async with agent.run_stream(...)``); a run timeout, a
  newer message of the room (``replace``: barge-in), an operator's cancel or a soft stop
  cancels it like any run;
- its streamed text goes to ``progress_of(task)``: the person sees the reply being written;
- the room's conversation becomes the agent's message history (``history_of``:
  ``conversation_of``), and its tool calls are durable steps (``step``: ``run_of``, reached
  from the asyncio side through ``trio_as_asyncio``; see docs/guide/asyncio-agents.md).

Run it behind a bridge: ``pip install 'tether[asyncio]'``, then ``tether bridge run --agent
pydantic_ai_agent:factory`` with examples/ on ``PYTHONPATH``. ``TETHER_PYDANTIC_AI_MODEL``
names the model the pydantic-ai way (``openai:gpt-4o`` with ``pydantic-ai-slim[openai]``);
the default ``test`` is pydantic-ai's ``TestModel``, which needs no network.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.test import TestModel

from tether import Session
from tether.bridge import (
    AgentFactory,
    Conversation,
    Task,
    asyncio_agent,
    conversation_of,
    progress_of,
    run_of,
    trio_as_asyncio,
)

MODEL_ENV = "TETHER_PYDANTIC_AI_MODEL"
INSTRUCTIONS = "You answer in one or two sentences. Use the weather tool for the weather."


class Turn(Protocol):
    """A turn of a room's conversation as ``(await conversation_of(task)).history`` gives it."""

    @property
    def role(self) -> str: ...

    @property
    def text(self) -> str: ...


def messages_from(history: Sequence[Turn]) -> list[ModelMessage]:
    """The room's turns (oldest first) as pydantic-ai's message history."""
    messages: list[ModelMessage] = []
    for turn in history:
        if turn.role == "user":
            messages.append(ModelRequest(parts=[UserPromptPart(content=turn.text)]))
        elif turn.text:  # an assistant turn; an interrupted one keeps what the person saw
            messages.append(ModelResponse(parts=[TextPart(content=turn.text)]))
    return messages


async def history_of(task: Task) -> list[ModelMessage]:
    """The message history of ``task``'s room, read on demand (``await conversation_of``
    is Trio-side, so the asyncio side awaits it through ``trio_as_asyncio``)."""
    talk = await trio_as_asyncio(_read)(conversation_of(task))
    return messages_from(talk.history)


async def _read(talk: Awaitable[Conversation]) -> Conversation:
    return await talk


async def step(task: Task, name: str, fn: Callable[..., Any], *args: Any) -> Any:
    """A tool call as a durable step of ``task``'s run: recorded once, replayed after a crash
    (``run_of`` is Trio-side, so the asyncio side reaches it through ``trio_as_asyncio``)."""
    return await trio_as_asyncio(run_of(task).step)(_STEP_NAME.sub("-", name), fn, *args)


_STEP_NAME = re.compile(r"[^A-Za-z0-9_.:~-]")
"""What a step name may not hold (a city may have spaces)."""


def weather(city: str) -> str:
    """The weather API the tool calls (a stand-in)."""
    return f"sunny and 21 degrees in {city}"


def build_agent(model: Model | str) -> Agent[Task, str]:
    """The pydantic-ai agent; its dependencies are the tether task (so a tool knows its run)."""
    agent = Agent(model, deps_type=Task, output_type=str, instructions=INSTRUCTIONS)

    @agent.tool
    async def weather_in(ctx: RunContext[Task], city: str) -> str:
        """The weather in a city today."""
        return str(await step(ctx.deps, f"weather:{city}", weather, city))

    return agent


def make_factory(model: Model | str, **options: Any) -> AgentFactory:
    """A tether agent factory running ``build_agent(model)``; ``options`` go to
    ``asyncio_agent`` (``room_policy``, ``run_timeout``)."""
    agent = build_agent(model)

    async def handle(task: Task) -> str:  # asyncio code, all of it
        progress = progress_of(task)
        progress.status("thinking")
        async with agent.run_stream(
            task.body, deps=task, message_history=await history_of(task)
        ) as result:
            async for chunk in result.stream_text(delta=True, debounce_by=None):
                progress.stream(chunk)
            return await result.get_output()

    return asyncio_agent(handle, **options)


@functools.cache
def _from_env() -> AgentFactory:
    name = os.environ.get(MODEL_ENV, "test")
    model: Model | str = TestModel() if name == "test" else name
    return make_factory(model, room_policy="replace")


def factory(session: Session) -> None:
    """``--agent pydantic_ai_agent:factory``: the model named by ``TETHER_PYDANTIC_AI_MODEL``."""
    _from_env()(session)


factory.asyncio_loop = True  # type: ignore[attr-defined]  # the bridge opens one asyncio loop
factory.room_policy = "replace"  # type: ignore[attr-defined]  # a newer message barges in
