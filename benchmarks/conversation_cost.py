"""What a conversation costs (issue #34), in two parts, same disk, same durability (SQLite WAL
with ``synchronous=FULL`` on every side):

1. **On the bridge's store path**: messages per second through ingest -> claim -> complete ->
   mark_delivered at ``--lanes`` concurrent lanes (one room each, as a pool's workers would
   run them; group commit shared), three ways, interleaved: ``no conversation`` (tasks of a
   room on a store whose conversation triggers are dropped: the path as it was before issue
   #34), ``turns`` (the triggers write the user and assistant turns; the handler reads
   nothing), ``history+state`` (each run also reads its conversation, ``--turns`` turns of
   history, and stores a new state with its reply: ``complete_with_state``). The cost is
   ``history+state`` against ``no conversation``. Goal: under 10% at 20 turns.
2. **Against LangGraph's SqliteSaver** (``langgraph-checkpoint-sqlite``, the ``bench``
   group), one thread, one conversation that already holds ``--turns`` turns: a LangGraph
   turn is ``get_tuple`` (load the thread's latest checkpoint) + ``put`` (a checkpoint with
   the messages so far plus the new user and assistant messages: one commit). tether's is
   ``conversation`` (the bounded read) + ``complete_with_state`` (the assistant turn, the
   state and the custody move: one commit); the whole turn (with the ingest and the claim
   that custody makes anyway: two more commits) is printed too. Goal: tether's read + commit
   at least 2x faster per turn.

Rounds interleave the sides on fresh files; medians and spreads (min..max) are printed with
the settings.

    nice uv run python benchmarks/conversation_cost.py [--messages 400] [--lanes 16]
        [--turns 20] [--rounds 5] [--langgraph-turns 200]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import trio

from tether.bridge import SqliteStore, Task


async def _prefill(store: SqliteStore, room: str, turns: int, prefix: str) -> None:
    """``turns`` turns of history in ``room`` (half messages, half replies) and a state."""
    for i in range(turns // 2):
        await store.ingest(Task(f"{prefix}-h{i}", f"earlier message {i} " * 4, room=room))
        claim = await store.claim(f"pre-{prefix}"[:60], leaderless=True)
        assert claim is not None
        await store.complete_with_state(claim, f"earlier reply {i} " * 8, {"n": i}, i)
        await store.mark_delivered(claim.task.id)


async def store_path(db: Path, *, mode: str, messages: int, lanes: int, turns: int) -> float:
    """Messages per second through the store path, ``lanes`` rooms at once."""
    async with await SqliteStore.open(db, synchronous="FULL", lease_s=600) as store:
        rooms = [f"room-{k}" for k in range(lanes)]
        for k, room in enumerate(rooms):
            await _prefill(store, room, turns, f"p{k}")
        if mode == "no conversation":
            await store._write(_drop_triggers)
        per_lane = messages // lanes

        async def lane(k: int) -> None:
            room = rooms[k]
            worker = f"w{k}"
            for i in range(per_lane):
                id = f"m{k}-{i}"
                await store.ingest(Task(id, f"message {i} of lane {k} " * 4, room=room))
                [claim] = await store.claim_many(worker, 1, leaderless=True)
                body = f"the reply to message {i} " * 8
                if mode == "history+state":
                    talk = await store.conversation(id, limit=turns)
                    assert len(talk.history) == turns
                    await store.complete_with_state(
                        claim, body, {**talk.state, "n": talk.version}, talk.version
                    )
                else:
                    await store.complete(claim, body)
                await store.mark_delivered(id)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for k in range(lanes):
                nursery.start_soon(lane, k)
        elapsed = time.perf_counter() - start
    return per_lane * lanes / elapsed


def _drop_triggers(conn: sqlite3.Connection) -> None:
    for name in ("turns_message", "turns_reply", "turns_delivered"):
        conn.execute(f"DROP TRIGGER {name}")


async def tether_turns(db: Path, *, turns: int, n: int) -> tuple[float, float]:
    """Seconds per turn: (read + commit, the whole turn with ingest and claim)."""
    async with await SqliteStore.open(db, synchronous="FULL", lease_s=600) as store:
        await _prefill(store, "r", turns, "p")
        read_commit = whole = 0.0
        for i in range(n):
            t0 = time.perf_counter()
            await store.ingest(Task(f"t{i}", f"user message {i} " * 4, room="r"))
            claim = await store.claim("w", leaderless=True)
            assert claim is not None
            t1 = time.perf_counter()
            talk = await store.conversation(claim.task.id, limit=turns)
            await store.complete_with_state(
                claim, f"assistant reply {i} " * 8, {**talk.state, "n": i}, talk.version
            )
            t2 = time.perf_counter()
            await store.mark_delivered(claim.task.id)
            read_commit += t2 - t1
            whole += t2 - t0
    return read_commit / n, whole / n


def langgraph_turns(db: Path, *, turns: int, n: int) -> float:
    """Seconds per turn of LangGraph's SqliteSaver: load the latest checkpoint, save the next
    one with the new user and assistant messages."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(db, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()  # WAL
    conn.execute("PRAGMA synchronous=FULL")
    config: Any = {"configurable": {"thread_id": "r", "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    messages: list[dict[str, str]] = []
    step = 0

    def turn(i: int) -> None:
        nonlocal config, step
        loaded = saver.get_tuple(config)
        base = loaded.checkpoint if loaded is not None else checkpoint
        history = list(base["channel_values"].get("messages", []))
        history += [
            {"role": "user", "content": f"user message {i} " * 4},
            {"role": "assistant", "content": f"assistant reply {i} " * 8},
        ]
        step += 1
        nxt = empty_checkpoint()
        nxt["channel_values"] = {"messages": history, "state": {"n": i}}
        nxt["channel_versions"] = {"messages": step, "state": step}
        config = saver.put(config, nxt, {"source": "loop", "step": step}, {"messages": step})

    for i in range(turns // 2):
        turn(-1 - i)
    del messages
    start = time.perf_counter()
    for i in range(n):
        turn(i)
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed / n


def _stats(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.1f} (min {min(values):.1f} .. max {max(values):.1f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--lanes", type=int, default=16)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--langgraph-turns", type=int, default=200)
    args = parser.parse_args()
    print(
        f"settings: SQLite WAL synchronous=FULL everywhere; part 1: {args.messages} messages "
        f"over {args.lanes} lanes (one room each), {args.turns} turns of history; part 2: "
        f"{args.langgraph_turns} turns after {args.turns} turns, one thread; "
        f"{args.rounds} interleaved rounds, fresh files each"
    )
    modes = ("no conversation", "turns", "history+state")
    rates: dict[str, list[float]] = {m: [] for m in modes}
    lg: list[float] = []
    rc: list[float] = []
    wh: list[float] = []
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        for r in range(args.rounds):
            for m in modes:
                db = Path(tmp) / f"p1-{r}-{m.replace('+', '_')}.db"
                rates[m].append(
                    trio.run(
                        partial(
                            store_path,
                            db,
                            mode=m,
                            messages=args.messages,
                            lanes=args.lanes,
                            turns=args.turns,
                        )
                    )
                )
            n = args.langgraph_turns
            lg.append(langgraph_turns(Path(tmp) / f"lg-{r}.db", turns=args.turns, n=n) * 1e6)
            a, b = trio.run(partial(tether_turns, Path(tmp) / f"t-{r}.db", turns=args.turns, n=n))
            rc.append(a * 1e6)
            wh.append(b * 1e6)
            print(f"round {r + 1}/{args.rounds} done", flush=True)
    print("\npart 1: messages/s through ingest -> claim -> complete -> delivered")
    for m in modes:
        print(f"  {m:<16} {_stats(rates[m])}")
    base = statistics.median(rates["no conversation"])
    for m in modes[1:]:
        cost = base / statistics.median(rates[m]) - 1
        print(f"  cost of {m} per message vs no conversation: {cost * 100:+.1f}% (goal < 10%)")
    print(f"\npart 2: microseconds per chat turn at {args.turns}+ turns")
    print(f"  langgraph SqliteSaver get_tuple + put   {_stats(lg)}")
    print(f"  tether conversation + complete_with_state {_stats(rc)}")
    print(f"  tether whole turn (ingest, claim, read, commit) {_stats(wh)}")
    ratio = statistics.median(lg) / statistics.median(rc)
    whole = statistics.median(lg) / statistics.median(wh)
    print(f"  tether read + commit: {ratio:.2f}x LangGraph's speed (goal >= 2x)")
    print(f"  tether whole turn: {whole:.2f}x LangGraph's speed")


if __name__ == "__main__":
    main()
