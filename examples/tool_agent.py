"""A tool-using agent: tools run as session handlers with their own time limits, and a newer
message barges in on the answer in progress.

Copy this file as a starting point. The parts:

- Each tool is a handler of the event ``tool:<name>`` on the agent's session, so every tool
  run is a task the session owns (seen in the task registry as ``<session>::tool:<name>::...``,
  cancelled with the session, counted in ``session.stats()``).
- Each tool has its own time limit (``trio.move_on_after``): a tool that takes too long
  answers "timed out" instead of holding the whole reply hostage, and the agent answers with
  what it has.
- The ``message`` handler has the ``replace`` policy: when the user writes again before the
  answer is ready, the run in progress is cancelled (its tool calls with it, since a cancelled
  ``session.call`` cancels its runs) and the newest message is answered. That is barge-in.
- ``plan`` stands in for the model: it decides which tools to call. A real agent asks its
  model (see ``chat_agent.py`` for the HTTP side) and loops while the model asks for tools.
- As a bridge agent (``--agent tool_agent:factory``) it **keeps what it learned in the room's
  state**: "I live in Porto" is remembered (``Reply(text, state=...)``, stored with the reply
  in one transaction), so a later "what is the weather?" in the same room, on any worker and
  after any restart, asks the weather tool about Porto (``(await conversation_of(task)).state``).

- As a bridge agent (``tether bridge run --agent tool_agent:factory``), each tool call is a
  durable step (``run_of(task).step``): a run resumed after a crash or a failed attempt gets
  the recorded tool answers back instead of calling the tools again (docs: durable runs).

Run it: ``uv run python examples/tool_agent.py`` (it plays a short scripted conversation).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

import attrs
import trio

import tether
from tether.bridge import Reply, Task, conversation_of, run_of

ToolFn = Callable[[str], Awaitable[str]]


@attrs.frozen
class Tool:
    """A tool the agent may call: ``fn(argument) -> text``, given at most ``limit`` seconds."""

    name: str
    fn: ToolFn
    limit: float


async def weather(city: str) -> str:
    await trio.sleep(0.5)  # a weather API call
    return f"sunny and 21 degrees in {city}"


async def search(query: str) -> str:
    await trio.sleep(10)  # a search backend having a bad day
    return f"top result for {query!r}"


async def clock(_: str) -> str:
    return f"it is {trio.current_time():.0f} seconds into the run"


TOOLS = (
    Tool("weather", weather, limit=2.0),
    Tool("search", search, limit=3.0),
    Tool("clock", clock, limit=1.0),
)


def plan(message: str, home: str | None = None) -> list[tuple[str, str]]:
    """Which tools to call for ``message``, with their argument (the model's job, scripted);
    ``home``: the city the person said they live in, for a weather question naming none."""
    calls = []
    if match := re.search(r"weather in (\w+)", message):
        calls.append(("weather", match.group(1)))
    elif "weather" in message and home is not None:
        calls.append(("weather", home))
    if match := re.search(r"search (?:for )?(.+)", message):
        calls.append(("search", match.group(1)))
    if "time" in message:
        calls.append(("clock", ""))
    return calls


def with_time_limit(tool: Tool) -> Callable[[str], Awaitable[str]]:
    """The tool's handler: its answer, or a note that it ran out of time."""

    async def run_tool(argument: str) -> str:
        with trio.move_on_after(tool.limit):
            return await tool.fn(argument)
        return f"({tool.name} timed out after {tool.limit:g}s)"

    run_tool.__name__ = tool.name
    return run_tool


def add_tool_agent(
    session: tether.Session,
    reply: Callable[[str], Awaitable[None]],
    tools: tuple[Tool, ...] = TOOLS,
) -> None:
    """Register the agent on ``session``: emit ``message`` events at it; replies go to
    ``reply``."""
    for tool in tools:
        session.add_handler(f"tool:{tool.name}", with_time_limit(tool))

    @session.on("message", policy="replace")
    async def answer(message: str) -> None:
        calls = plan(message)
        results: list[str] = [""] * len(calls)

        async def call_tool(i: int, name: str, argument: str) -> None:
            (results[i],) = await session.call(f"tool:{name}", argument)

        async with trio.open_nursery() as nursery:  # the tools run at the same time
            for i, (name, argument) in enumerate(calls):
                nursery.start_soon(call_tool, i, name, argument)
        await reply("; ".join(results) if results else f"you said: {message}")


def learned(message: str) -> dict[str, str]:
    """What ``message`` teaches the agent about the person (the model's job, scripted)."""
    if match := re.search(r"\bI live in (\w+)", message, re.IGNORECASE):
        return {"home": match.group(1)}
    return {}


def factory(session: tether.Session, tools: tuple[Tool, ...] = TOOLS) -> None:
    """The bridge agent (``--agent tool_agent:factory``): the same tools, what it learns about
    the person kept in the room's state, and each tool call a durable step named by its place
    in the plan and its tool (``tool:0:weather``), so a resumed run finds every answer its
    tools gave before and calls only the rest."""
    for tool in tools:
        session.add_handler(f"tool:{tool.name}", with_time_limit(tool))

    @session.on("task", policy="replace")
    async def answer(task: Task) -> Reply:
        run = run_of(task)
        state = dict((await conversation_of(task)).state)
        news = learned(task.body)
        state.update(news)
        calls = plan(task.body, home=state.get("home"))
        results: list[str] = [""] * len(calls)

        async def call_tool(i: int, name: str, argument: str) -> None:
            async def once() -> str:
                (text,) = await session.call(f"tool:{name}", argument)
                return str(text)

            results[i] = await run.step(f"tool:{i}:{name}", once)

        async with trio.open_nursery() as nursery:
            for i, (name, argument) in enumerate(calls):
                nursery.start_soon(call_tool, i, name, argument)
        if results:
            text = "; ".join(results)
        elif news:
            text = "noted: " + ", ".join(f"your {k} is {v}" for k, v in news.items())
        else:
            text = f"you said: {task.body}"
        return Reply(text, state=state if task.room is not None else None)  # kept per room


async def main() -> None:
    replies: list[str] = []

    async def reply(text: str) -> None:
        replies.append(text)
        print(f"agent: {text}")

    async with tether.open_runtime(handle_signals=False), tether.open_session("chat") as session:
        add_tool_agent(session, reply)
        for message, pause in [
            ("what is the weather in Paris", 1.0),  # answered after the weather tool
            ("search for trio nurseries and the weather in Oslo", 4.0),  # search times out
            ("weather in Rome", 0.2),  # ... the user changes their mind at once:
            ("no, the weather in Lisbon", 1.0),  # barge-in: Rome is cancelled
        ]:
            print(f"user:  {message}")
            session.emit("message", message)
            await trio.sleep(pause)
    print(session.stats())


if __name__ == "__main__":
    trio.run(main)
