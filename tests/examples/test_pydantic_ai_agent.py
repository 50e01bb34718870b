"""examples/pydantic_ai_agent.py behind a real bridge (in process) and the reference gateway on
127.0.0.1, with pydantic-ai's ``FunctionModel`` (no network): the model calls the weather tool,
then streams its answer; the gateway shows the partial text while it is written (progress from
the asyncio side), then the reply. The room's turns become pydantic-ai's message history."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pydantic_ai_agent
import trio
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from support.gateway import RunningGateway
from support.service_fixtures import gateway as gateway
from support.service_fixtures import http as http
from support.service_fixtures import store as store
from support.service_fixtures import token_file as token_file
from support.waiting import wait_until
from tether import ChildSpec, open_runtime
from tether.bridge import BridgeConfig, BridgeService, SqliteStore, trio_as_asyncio


@attrs.frozen
class Turn:
    role: str
    text: str


def test_the_rooms_turns_become_the_message_history() -> None:
    turns = [Turn("user", "hi"), Turn("assistant", "hello"), Turn("assistant", "")]
    messages = pydantic_ai_agent.messages_from(turns)
    assert [type(m) for m in messages] == [ModelRequest, ModelResponse]
    parts = [part for message in messages for part in message.parts]
    assert [type(p) for p in parts] == [UserPromptPart, TextPart]
    assert [getattr(p, "content", None) for p in parts] == ["hi", "hello"]


async def test_a_pydantic_ai_agent_streams_through_a_bridge_and_calls_its_tool(
    gateway: RunningGateway, token_file: Path, store: SqliteStore, tmp_path: Path
) -> None:
    release = trio.Event()
    seen: list[list[ModelMessage]] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        seen.append(messages)
        returns = [
            part
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        ]
        if not returns:  # first the model asks for the tool
            calls: DeltaToolCalls = {0: DeltaToolCall("weather_in", '{"city": "Paris"}')}
            yield calls
            return
        yield "It is "
        await trio_as_asyncio(release.wait)()  # the asyncio side waits on a Trio event
        yield str(returns[0].content) + "."

    factory = pydantic_ai_agent.make_factory(FunctionModel(stream_function=model))
    config = BridgeConfig(
        gateway=gateway.url,
        token_file=token_file,
        workers=1,
        poll_wait=0.5,
        grace=1.0,
    )
    service = BridgeService(config, store=store, factory=factory)
    task_id = await gateway.submit("what is the weather in Paris?", room="r")
    async with open_runtime(handle_signals=False) as runtime:
        await runtime.supervisor.start_child(
            ChildSpec("bridge", service.run, shutdown_grace=service.stop_grace)
        )

        async def writing() -> bool:
            view = await gateway.message(task_id)
            return bool(view["partial"] == "It is " and view["reply"] is None)

        await wait_until(writing, within=20, step=0.02)
        release.set()

        async def answered() -> bool:
            return bool((await gateway.message(task_id))["status"] == "answered")

        await wait_until(answered, within=20, step=0.02)
        view = await gateway.message(task_id)
    assert view["reply"] == "It is sunny and 21 degrees in Paris."
    assert len(seen) == 2  # the tool call, then the answer with its result
