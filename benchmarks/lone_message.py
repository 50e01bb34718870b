"""A lone message, and a one-at-a-time conversation, through an embedded pool on SQLite (#49).

The public embedded path: a ``WorkerService`` (a lead and 4 workers, ``WorkerConfig``'s
defaults, ``synchronous=NORMAL``) on one ``SqliteStore``, in this process, fed by
``store.ingest``. Each message is timed from the call to ``ingest`` until its reply is durable:
the run's completing transaction has returned (a hook on the store's ``complete*`` methods
rings an event; no polling) and the WAL sync a delivery waits for before posting the reply has
run (under NORMAL a result commit is not synced by itself). The task's state is then read back
and must be ``result`` (untimed), and it is marked delivered (untimed) as a consumer would.

- ``lone``: the noop-like agent (returns ``"ok"``); ``lone-steps``: the agent runs three no-op
  ``run.step``s first. Messages go one at a time, each after a random pause of ``--pause``
  (20-50 ms), so each arrives at an idle pool as a real lone message does. p50/p99/max.
  Goal: p50 <= 2 ms, p99 <= 5 ms.
- ``talk``: ``--rooms`` rooms x ``--turns`` turns, one turn at a time (round robin over the
  rooms, no pause), each room already holding ``--prefill`` turns (made the same way, untimed:
  a turn reads 20 to 39 turns of history by default); the agent awaits its room's
  conversation and returns a new state (``Reply(body, state=...)``). Beside it ``langgraph``:
  LangGraph's ``SqliteSaver`` with the same rooms, prefill and turns, one at a time, a turn
  being ``get_tuple`` + ``put`` of a checkpoint with the messages so far plus the new pair (as
  ``conversation_cost.py`` part 2 runs it: WAL, SQLite's default ``synchronous=FULL``, read
  back from the connection). Turns/s and per-turn p50. Goal: tether >= 2x LangGraph's
  turns/s, p50 below LangGraph's.

Rounds interleave the variants (fresh files each); medians and spreads printed, and the
talk/langgraph ratio per round. ``--baseline DIR`` runs every variant a second time per round
with another checkout's tether (``DIR/.venv/bin/python`` running this file with ``--json``), so
each round has a before and an after back to back and a ratio of its own.

    nice uv run --group bench python benchmarks/lone_message.py [--messages 200] [--rounds 3]
        [--variants lone,lone-steps,talk,langgraph] [--rooms 20] [--turns 20] [--prefill 20]
        [--baseline ../wt-base]
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from tether import ChildSpec, Session, open_supervisor
from tether.bridge import (
    CustodyState,
    Reply,
    SqliteStore,
    Task,
    WorkerConfig,
    WorkerService,
    conversation_of,
    run_of,
)

VARIANTS = ("lone", "lone-steps", "talk", "langgraph")
COMPLETING = tuple(
    name
    for name in dir(SqliteStore)
    if name.startswith("complete") and callable(getattr(SqliteStore, name))
)
"""The store methods a run's outcome may go through (``complete``, ``complete_many``,
``complete_with_state``, ...: whichever this checkout's worker calls)."""


class _TimedStore(SqliteStore):
    """A ``SqliteStore`` that rings ``done`` when a completing transaction has returned: the
    benchmark hears the commit the moment the worker does, with no polling of its own."""

    done: trio.Event | None = None


def _ringing(name: str) -> Callable[..., Any]:
    method = getattr(SqliteStore, name)

    async def wrapper(self: _TimedStore, *args: Any, **kwargs: Any) -> Any:
        result = await method(self, *args, **kwargs)
        if self.done is not None:
            self.done.set()
        return result

    wrapper.__name__ = name
    return wrapper


for _name in COMPLETING:
    setattr(_TimedStore, _name, _ringing(_name))


# -- the agents ---------------------------------------------------------------------------------


def _noop() -> int:
    return 1


def plain_agent(session: Session) -> None:
    @session.on("task")
    async def reply(task: Task) -> str:
        return "ok"


def steps_agent(session: Session) -> None:
    @session.on("task")
    async def reply(task: Task) -> str:
        run = run_of(task)
        for name in ("a", "b", "c"):
            await run.step(name, _noop)
        return "ok"


def talking_agent(session: Session) -> None:
    @session.on("task")
    async def reply(task: Task) -> Reply:
        # ``conversation_of`` is becoming awaitable (issue #49); either form works here
        found: Any = conversation_of(task)
        talk = await found if inspect.isawaitable(found) else found
        return Reply(
            f"reply after {len(talk.history)} turns", state={**talk.state, "n": talk.version + 1}
        )


AGENTS: dict[str, Callable[[Session], None]] = {
    "lone": plain_agent,
    "lone-steps": steps_agent,
    "talk": talking_agent,
}


# -- the embedded pool --------------------------------------------------------------------------


MISSED = [0]
"""Messages of this round whose outcome no ``COMPLETING`` hook heard (a checkout completing
through another method): their wait fell back to reading the state every ``BACKSTOP`` s."""
BACKSTOP = 0.5


@asynccontextmanager
async def embedded_pool(
    db: Path, factory: Callable[[Session], None]
) -> AsyncIterator[tuple[_TimedStore, WorkerConfig]]:
    """A ``WorkerService`` with its default settings on a fresh store at ``db``."""
    MISSED[0] = 0  # counted per round
    store = await _TimedStore.open(db)
    assert isinstance(store, _TimedStore)  # ``open`` builds ``cls``
    try:
        config = WorkerConfig(store=str(db), log_level="WARNING")
        service = WorkerService(config, store=store, factory=factory)
        async with open_supervisor(name="bench") as supervisor:
            await supervisor.start_child(
                ChildSpec("pool", service.run, shutdown_grace=service.stop_grace)
            )
            yield store, config  # leaving the block stops the pool (soft, then grace)
    finally:
        await store.aclose()


async def one_message(store: _TimedStore, task: Task) -> float:
    """Seconds from ``ingest`` to the reply durable; then checks it and marks it delivered."""
    store.done = done = trio.Event()
    start = time.perf_counter()
    await store.ingest(task)
    with trio.fail_after(60):
        while True:
            with trio.move_on_after(BACKSTOP):
                await done.wait()
            if await _is_result(store, task.id):
                if not done.is_set():  # the backstop met the commit before the hook rang?
                    with trio.move_on_after(0.05):
                        await done.wait()
                    MISSED[0] += not done.is_set()
                break
            if done.is_set():  # another task's outcome (none expected here)
                store.done = done = trio.Event()
    await _sync(store)
    elapsed = time.perf_counter() - start
    store.done = None
    await store.mark_delivered(task.id)
    return elapsed


async def _is_result(store: SqliteStore, id: str) -> bool:
    return await store.state(id) is CustodyState.RESULT


async def _sync(store: SqliteStore) -> None:
    """The WAL sync a delivery runs before it posts a reply (under FULL the commit synced)."""
    writer = getattr(getattr(store, "db", None), "writer", None)
    if writer is None or not hasattr(writer, "sync"):
        raise SystemExit("this checkout's SqliteStore has no db.writer.sync(): update _sync")
    if writer.barrier is not None:
        await writer.sync()


async def lone_round(db: Path, variant: str, messages: int, pause: tuple[float, float]) -> Any:
    rng = random.Random(49)
    async with embedded_pool(db, AGENTS[variant]) as (store, config):
        await one_message(store, Task("warm-up", "hello"))  # the pool's first look is not timed
        latencies = []
        for i in range(messages):
            await trio.sleep(rng.uniform(*pause))
            latencies.append(await one_message(store, Task(f"m{i}", f"message {i}")))
        return {"latencies": latencies, "settings": _settings(config), "missed": MISSED[0]}


async def talk_round(db: Path, rooms: int, turns: int, prefill: int) -> Any:
    async with embedded_pool(db, talking_agent) as (store, config):
        for i in range(-prefill, 0):  # untimed: each room's earlier turns, through the pool
            for k in range(rooms):
                await one_message(store, Task(f"r{k}-t{i}", _said(i), room=f"room-{k}"))
        latencies = []
        start = time.perf_counter()
        for i in range(turns):
            for k in range(rooms):
                task = Task(f"r{k}-t{i}", _said(i), room=f"room-{k}")
                latencies.append(await one_message(store, task))
        elapsed = time.perf_counter() - start
        return {
            "latencies": latencies,
            "rate": rooms * turns / elapsed,
            "settings": _settings(config),
            "missed": MISSED[0],
        }


def _said(i: int) -> str:
    return f"user message {i} " * 4


def _settings(config: WorkerConfig) -> str:
    return (
        f"WorkerService: {config.workers} workers x {config.concurrency}, lead={config.lead}, "
        f"sweep_interval={config.sweep_interval}, poll_interval={config.poll_interval}, "
        f"history_turns={config.history_turns}, synchronous={config.synchronous}"
    )


def langgraph_round(db: Path, rooms: int, turns: int, prefill: int) -> Any:
    """LangGraph's turns, one at a time, as ``conversation_cost.langgraph_turns`` makes one."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(db, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()  # WAL
    (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
    (level,) = conn.execute("PRAGMA synchronous").fetchone()
    assert (mode, level) == ("wal", 2), (mode, level)  # WAL, FULL: each put's commit synced
    configs: list[Any] = [
        {"configurable": {"thread_id": f"room-{k}", "checkpoint_ns": ""}} for k in range(rooms)
    ]
    latencies: list[float] = []
    start = 0.0
    for i in range(-prefill, turns):  # the first ``prefill`` turns of each room untimed
        if i == 0:
            latencies.clear()
            start = time.perf_counter()
        for k in range(rooms):
            t0 = time.perf_counter()
            loaded = saver.get_tuple(configs[k])
            base = loaded.checkpoint if loaded is not None else empty_checkpoint()
            history = list(base["channel_values"].get("messages", []))
            history += [
                {"role": "user", "content": _said(i)},
                {"role": "assistant", "content": f"reply after {i} turns"},
            ]
            nxt = empty_checkpoint()
            step = prefill + i + 1
            nxt["channel_values"] = {"messages": history, "state": {"n": step}}
            nxt["channel_versions"] = {"messages": step, "state": step}
            configs[k] = saver.put(
                configs[k], nxt, {"source": "loop", "step": step}, {"messages": step}
            )
            latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    conn.close()
    return {
        "latencies": latencies,
        "rate": rooms * turns / elapsed,
        "settings": "LangGraph SqliteSaver: setup() (WAL), synchronous=FULL (read back), "
        "get_tuple + put per turn",
    }


def run_variant(variant: str, args: argparse.Namespace) -> Any:
    """One round of ``variant`` on fresh files: a dict of latencies (s), rate, settings."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "custody.db"
        if variant == "langgraph":
            return langgraph_round(db, args.rooms, args.turns, args.prefill)
        if variant == "talk":
            return trio.run(talk_round, db, args.rooms, args.turns, args.prefill)
        pause = (args.pause[0] / 1e3, args.pause[1] / 1e3)
        return trio.run(lone_round, db, variant, args.messages, pause)


def baseline_variant(checkout: Path, variant: str, args: argparse.Namespace) -> Any:
    """``run_variant`` in another checkout's tether (its own ``.venv``, this file's code)."""
    python = checkout / ".venv" / "bin" / "python"
    command = [str(python), __file__, "--json", "--variants", variant, *_passed(args)]
    out = subprocess.run(command, cwd=checkout, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _passed(args: argparse.Namespace) -> list[str]:
    return [
        f"--messages={args.messages}",
        f"--rooms={args.rooms}",
        f"--turns={args.turns}",
        f"--prefill={args.prefill}",
        f"--pause={args.pause[0]},{args.pause[1]}",
    ]


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3


def _spread(values: list[float], digits: int = 2) -> str:
    return (
        f"median {statistics.median(values):.{digits}f} "
        f"[{min(values):.{digits}f}-{max(values):.{digits}f}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--rooms", type=int, default=20)
    parser.add_argument("--turns", type=int, default=20, help="timed turns per room")
    parser.add_argument("--prefill", type=int, default=20, help="untimed turns per room first")
    parser.add_argument(
        "--pause",
        default="20,50",
        type=lambda s: tuple(float(x) for x in s.split(",")),
        help="ms: the random idle pause before each lone message, low,high",
    )
    parser.add_argument("--baseline", type=Path, help="another checkout to measure beside")
    parser.add_argument("--json", action="store_true", help="one round, one JSON line")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(sorted(unknown))}; known: {VARIANTS}")
    if "langgraph" in variants and importlib.util.find_spec("langgraph") is None:
        print("skipped langgraph: not installed (uv sync --group bench)", file=sys.stderr)
        variants.remove("langgraph")
    if args.json:
        [variant] = variants
        print(json.dumps(run_variant(variant, args)))
        return
    baseline = args.baseline.resolve() if args.baseline is not None else None
    if baseline is not None and not (baseline / ".venv" / "bin" / "python").exists():
        parser.error(f"--baseline {baseline}: no .venv/bin/python there (uv sync there first)")
    sides = ["here", "baseline"] if baseline is not None else ["here"]
    got: dict[tuple[str, str], list[Any]] = {}
    settings: dict[tuple[str, str], str] = {}
    for r in range(args.rounds):
        line = []
        for variant in variants:
            order = sides if r % 2 == 0 else sides[::-1]
            for side in order if variant != "langgraph" else ["here"]:
                if side == "baseline":
                    assert baseline is not None
                    result = baseline_variant(baseline, variant, args)
                else:
                    result = run_variant(variant, args)
                got.setdefault((variant, side), []).append(result)
                if result.get("missed"):
                    print(
                        f"  note: {result['missed']} {variant}[{side}] outcome(s) not heard by "
                        f"the completion hook: waited by state reads every {BACKSTOP} s",
                        flush=True,
                    )
                settings[variant, side] = result["settings"]
                lat = result["latencies"]
                rate = f" {result['rate']:.0f}/s" if "rate" in result else ""
                line.append(f"{variant}[{side}] p50 {_ms(lat, 0.5):.2f} ms{rate}")
        print(f"round {r + 1}/{args.rounds}: " + "; ".join(line), flush=True)
    print(
        f"\nsettings: SQLite {sqlite3.sqlite_version}; {args.messages} lone messages a round, "
        f"pause {args.pause[0]:g}-{args.pause[1]:g} ms before each; talk: {args.rooms} rooms x "
        f"{args.turns} turns, one at a time, after {args.prefill} untimed turns per room; "
        f"{args.rounds} interleaved rounds, fresh files"
    )
    for (variant, side), text in settings.items():
        print(f"  {variant}[{side}]: {text}")
    print("\nper round: p50 / p99 / max in ms (median [min-max] over rounds)")
    for (variant, side), results in got.items():
        p50 = [_ms(x["latencies"], 0.5) for x in results]
        p99 = [_ms(x["latencies"], 0.99) for x in results]
        top = [max(x["latencies"]) * 1e3 for x in results]
        rate = ""
        if "rate" in results[0]:
            rate = f"; turns/s {_spread([x['rate'] for x in results], 0)}"
        goal = "  (goal p50 <= 2, p99 <= 5)" if variant.startswith("lone") else ""
        missed = sum(x.get("missed", 0) for x in results)
        print(
            f"  {variant + '[' + side + ']':<20} p50 {_spread(p50)}  p99 {_spread(p99)}  "
            f"max {_spread(top)}{rate}{goal}"
            + ("" if variant == "langgraph" else f"  hook missed {missed}")
            + (" (those waits COARSE: state reads)" if missed else "")
        )
    if ("talk", "here") in got and ("langgraph", "here") in got:
        pairs = list(zip(got["talk", "here"], got["langgraph", "here"], strict=True))
        ratio = [t["rate"] / g["rate"] for t, g in pairs]
        p50s = [_ms(t["latencies"], 0.5) / _ms(g["latencies"], 0.5) for t, g in pairs]
        print(f"  talk / langgraph turns/s per round: {_spread(ratio)} (goal >= 2)")
        print(f"  talk p50 / langgraph p50 per round: {_spread(p50s)} (goal < 1)")
    if baseline is not None:
        print(f"\nhere (this checkout) / baseline ({baseline}), per round:")
        for variant in variants:
            if (variant, "baseline") not in got:
                continue
            pairs = list(zip(got[variant, "here"], got[variant, "baseline"], strict=True))
            p50 = [_ms(a["latencies"], 0.5) / _ms(b["latencies"], 0.5) for a, b in pairs]
            p99 = [_ms(a["latencies"], 0.99) / _ms(b["latencies"], 0.99) for a, b in pairs]
            print(f"  {variant:<12} p50 {_spread(p50)}  p99 {_spread(p99)}")
            if "rate" in pairs[0][0]:
                rates = [a["rate"] / b["rate"] for a, b in pairs]
                print(f"  {variant:<12} turns/s {_spread(rates)}")


if __name__ == "__main__":
    main()
