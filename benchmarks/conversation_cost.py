"""What a conversation costs (issue #34), in three parts, same disk, settings printed:

1. **On the bridge's store path**: messages per second through ingest -> claim -> complete ->
   (under NORMAL, the WAL sync delivery runs before it posts the reply) -> mark_delivered,
   tether as a user gets it (durable at promises), at ``--lanes`` concurrent lanes (one room
   each, as a pool's workers would run them; group commit shared), three ways, interleaved:
   ``no conversation`` (tasks of a room on a store whose conversation triggers are dropped: the
   path as it was before issue #34), ``turns`` (the triggers write the user and assistant
   turns; the run reads nothing, and since issue #49 pays nothing for it: the claim reads no
   history), ``history+state`` (the run reads its conversation on demand, as a worker's
   ``await conversation_of(task)`` does: one ``conversation(id, limit=--turns)`` query after
   the claim, and stores a new state with its reply: ``complete_with_state``). The cost is
   ``history+state`` against ``no conversation``. Goal: under 10% at 20 turns.
   ``--synchronous`` (NORMAL, the store's default, or FULL) applies to every side. The cost is
   printed per round (the sides ran back to back in it), median and spread.
2. **Against LangGraph's SqliteSaver** (``langgraph-checkpoint-sqlite``, the ``bench``
   group), each conversation already holding ``--turns`` turns, durable at the end of each
   turn on both sides: a LangGraph turn is ``get_tuple`` + ``put`` (a checkpoint with the
   messages so far plus the new user and assistant messages; ``setup()``'s WAL and SQLite's
   default ``synchronous=FULL``, read back from the connection: one synced commit; one ``put``
   per turn is what a graph run with ``durability="exit"`` writes, LangGraph's fewest);
   tether's is a claim, the on-demand read of the conversation (issue #49) +
   ``complete_with_state`` + the WAL sync delivery runs before it posts the reply
   (``synchronous=NORMAL``, the default). The whole turn (with the ingest, itself a
   promise, and the delivered mark) is printed too. One conversation, then ``--lanes`` at
   once (LangGraph's threads share the saver's connection under its lock; tether's lanes
   share group commits and syncs). Goal: tether's turn at least 2x faster (the ratio of
   each round, median and spread). For one conversation each call is timed too, beside an
   empty writer job (the thread round trip) and a bare WAL fsync, with the commits and
   syncs per turn: where a turn's time goes.

3. **On the whole bridge** (the goal's own words: the cost per message on the bridge): a
   reference gateway in its own process and a ``BridgeService`` (4 workers x 4), ``--bridge-
   messages`` posted first in 40 serial rooms that already hold ``--turns`` turns each:
   ``no conversation`` (the noop agent, the triggers dropped, ``--history-turns 0``) against
   ``turns only`` (the noop agent, the triggers kept, the history window ``--turns``: an
   agent that never reads its conversation; since issue #49 it pays no read for it) and
   ``history+state`` (an agent that awaits ``conversation_of`` and returns a new state, the
   history window ``--turns``). Messages per second and this process's CPU per message.
   ``--bridge-only`` runs part 3 alone and ``--bridge-sides`` picks its sides: the noop sides
   run on any checkout's code, so one file measures a before and an after.

Rounds interleave the sides on fresh files; medians and spreads (min..max) are printed.

    nice uv run python benchmarks/conversation_cost.py [--messages 400] [--lanes 16]
        [--turns 20] [--rounds 5] [--langgraph-turns 100] [--synchronous NORMAL]
        [--bridge-messages 600]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio

from bridge_throughput import TOKEN, gateway_process, submit_all
from tether import Session
from tether.bridge import (
    BridgeConfig,
    BridgeService,
    Reply,
    SqliteStore,
    Task,
    conversation_of,
)
from tether.bridge.stores.sqlite._connection import Synchronous


async def _prefill(store: SqliteStore, room: str, turns: int, prefix: str) -> None:
    """``turns`` turns of history in ``room`` (half messages, half replies) and a state."""
    for i in range(turns // 2):
        await store.ingest(
            Task(f"{prefix}-h{i}", f"earlier message {i} " * 4, room=room), room_policy="concurrent"
        )
        claim = await store.claim(f"pre-{prefix}"[:60], leaderless=True)
        assert claim is not None
        await store.complete_with_state(claim, f"earlier reply {i} " * 8, {"n": i}, i)
        await store.mark_delivered(claim.task.id)


async def store_path(
    db: Path,
    *,
    mode: str,
    messages: int,
    lanes: int,
    turns: int,
    synchronous: Synchronous,
    pages: list[float] | None = None,
) -> float:
    """Messages per second through the store path, ``lanes`` rooms at once. With ``pages``
    (an untimed run) the WAL is never checkpointed and the pages the messages wrote to it,
    per message, are appended to ``pages``: the write cost that no machine's speed blurs."""
    async with await SqliteStore.open(db, synchronous=synchronous, lease_s=600) as store:
        if pages is not None:
            await store.db.write(lambda conn: conn.execute("PRAGMA wal_autocheckpoint = 0"))
        rooms = [f"room-{k}" for k in range(lanes)]
        for k, room in enumerate(rooms):
            await _prefill(store, room, turns, f"p{k}")
        if mode == "no conversation":
            await store.db.write(_drop_triggers)
        per_lane = messages // lanes

        async def lane(k: int) -> None:
            room = rooms[k]
            worker = f"w{k}"
            for i in range(per_lane):
                id = f"m{k}-{i}"
                await store.ingest(
                    Task(id, f"message {i} of lane {k} " * 4, room=room), room_policy="concurrent"
                )
                [claim] = await store.claim_many(worker, 1, leaderless=True)  # as a worker
                body = f"the reply to message {i} " * 8
                if mode == "history+state":  # the run's first await conversation_of(task)
                    talk = await store.conversation(id, limit=turns)
                    assert len(talk.history) == turns
                    await store.complete_with_state(
                        claim, body, {**talk.state, "n": talk.version}, talk.version
                    )
                else:
                    await store.complete(claim, body)
                if synchronous == "NORMAL":
                    await store.db.writer.sync()  # delivery's barrier: the reply is posted after it
                await store.mark_delivered(id)

        wal = db.with_name(db.name + "-wal")
        written = wal.stat().st_size
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for k in range(lanes):
                nursery.start_soon(lane, k)
        elapsed = time.perf_counter() - start
        if pages is not None:
            (size,) = await store.db.write(lambda conn: conn.execute("PRAGMA page_size").fetchone())
            frame = size + 24  # each WAL frame: a 24-byte header and the page
            pages.append((wal.stat().st_size - written) / frame / (per_lane * lanes))
    return per_lane * lanes / elapsed


def _drop_triggers(conn: sqlite3.Connection) -> None:
    """The path as it was before issue #34: no turn counted, numbered, indexed or written
    (schema 24 and later keep a live task's turns on its row; earlier ones wrote rows)."""
    for name in ("turns_message", "turns_reply", "turns_delivered"):
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute("DROP INDEX IF EXISTS tasks_room_turns")


def _nothing(_conn: sqlite3.Connection) -> None:
    return None


Parts = dict[str, list[float]]
"""Seconds each call of a turn took (the one-conversation breakdown), by what it was."""


def _parts() -> Parts:
    return defaultdict(list)


async def tether_turns(
    db: Path, *, turns: int, n: int, lanes: int, synchronous: Synchronous, parts: Parts
) -> tuple[float, float]:
    """Seconds per turn with ``lanes`` conversations at once: (claim + the on-demand read of
    the conversation + commit + the WAL sync before the reply's post, the whole turn with
    ingest and delivery).
    Under NORMAL the sync is the barrier delivery runs before posting; under FULL every
    commit syncs already. ``parts`` gets each call's seconds, an empty writer job's and the
    bare WAL fsync's."""
    async with await SqliteStore.open(db, synchronous=synchronous, lease_s=600) as store:
        for k in range(lanes):
            await _prefill(store, f"r{k}", turns, f"p{k}")
        spent = [0.0, 0.0]

        async def lane(k: int) -> None:
            for i in range(n):
                t0 = time.perf_counter()
                await store.ingest(
                    Task(f"t{k}-{i}", f"user message {i} " * 4, room=f"r{k}"),
                    room_policy="concurrent",
                )
                t1 = time.perf_counter()
                [claim] = await store.claim_many(f"w{k}", 1, leaderless=True)
                talk = await store.conversation(claim.task.id, limit=turns)  # read on demand
                ta = time.perf_counter()
                await store.complete_with_state(
                    claim, f"assistant reply {i} " * 8, {**talk.state, "n": i}, talk.version
                )
                tb = time.perf_counter()
                if synchronous == "NORMAL":
                    await store.db.writer.sync()  # the promise: the reply is posted after it
                t2 = time.perf_counter()
                await store.mark_delivered(claim.task.id)
                spent[0] += t2 - t1
                spent[1] += time.perf_counter() - t0
                parts["claim + conversation"].append(ta - t1)
                parts["complete_with_state"].append(tb - ta)
                parts["sync (hop + WAL fsync)"].append(t2 - tb)

        commits, barriers = store.commits, store.db.writer.barriers
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for k in range(lanes):
                nursery.start_soon(lane, k)
        elapsed = time.perf_counter() - start
        parts["commits per turn"].append((store.commits - commits) / (n * lanes))
        parts["WAL fsyncs per turn"].append((store.db.writer.barriers - barriers) / (n * lanes))
        for _ in range(50):  # the bare round trip to the writer thread, and the bare barrier
            t0 = time.perf_counter()
            await store.db.writer.run(_nothing, readonly=True)
            parts["empty writer job (hop)"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert store.db.writer.barrier is not None or synchronous != "NORMAL"
            if store.db.writer.barrier is not None:
                store.db.writer.barrier()
                parts["WAL fsync alone (in this thread)"].append(time.perf_counter() - t0)
    # per turn: the wall time of the run over the turns, split as the lanes spent it
    whole = elapsed / (n * lanes)
    return whole * spent[0] / spent[1], whole


def langgraph_turns(
    db: Path, *, turns: int, n: int, lanes: int, synchronous: Synchronous, parts: Parts
) -> float:
    """Seconds per turn of LangGraph's SqliteSaver with ``lanes`` threads (one conversation,
    a thread id, each; the saver's one connection is shared under its lock, as documented):
    load the latest checkpoint, save the next one with the new user and assistant messages
    (one ``put`` per turn, as a graph run with ``durability="exit"`` makes: LangGraph's
    fewest writes per turn). ``parts`` gets each call's seconds and the settings read back."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(db, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()  # WAL
    conn.execute(f"PRAGMA synchronous={synchronous}")
    (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
    (level,) = conn.execute("PRAGMA synchronous").fetchone()
    assert mode == "wal"
    assert level == {"OFF": 0, "NORMAL": 1, "FULL": 2, "EXTRA": 3}[synchronous]

    def conversation(k: int, count: int, first: int) -> None:
        config: Any = {"configurable": {"thread_id": f"r{k}", "checkpoint_ns": ""}}
        loaded = saver.get_tuple(config)
        if loaded is not None:
            config = loaded.config
        for i in range(first, first + count):
            t0 = time.perf_counter()
            loaded = saver.get_tuple(config)
            t1 = time.perf_counter()
            base = loaded.checkpoint if loaded is not None else empty_checkpoint()
            history = list(base["channel_values"].get("messages", []))
            history += [
                {"role": "user", "content": f"user message {i} " * 4},
                {"role": "assistant", "content": f"assistant reply {i} " * 8},
            ]
            step = i + 1
            nxt = empty_checkpoint()
            nxt["channel_values"] = {"messages": history, "state": {"n": i}}
            nxt["channel_versions"] = {"messages": step, "state": step}
            t2 = time.perf_counter()
            config = saver.put(config, nxt, {"source": "loop", "step": step}, {"messages": step})
            if timed:
                parts["get_tuple"].append(t1 - t0)
                parts["build the checkpoint"].append(t2 - t1)
                parts["put (commit + fsync)"].append(time.perf_counter() - t2)

    timed = False
    for k in range(lanes):
        conversation(k, turns // 2, 0)
    timed = True
    start = time.perf_counter()
    with ThreadPoolExecutor(lanes) as pool:
        for done in [pool.submit(conversation, k, n, turns // 2) for k in range(lanes)]:
            done.result()
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed / (n * lanes)


BRIDGE_ROOMS = 40
BRIDGE_SIDES = ("no conversation", "turns only", "history+state")
"""Part 3's sides, in the order each round runs them."""
"""The rooms of part 3 (``bridge_throughput.submit_all``'s: ``i % 40``)."""


def conversing_agent(session: Session) -> None:
    """The ``history+state`` side's agent: reads its room's conversation and stores a new
    state with its reply (``--agent conversation_cost:conversing_agent``)."""

    @session.on("task")
    async def reply(task: Task) -> Reply:
        talk = await conversation_of(task)
        return Reply(f"ok after {len(talk.history)} turns", state={"n": talk.version + 1})


async def bridge_path(
    folder: Path, *, mode: str, messages: int, turns: int, synchronous: Synchronous
) -> tuple[float, float]:
    """(messages/s, CPU microseconds per message of this process) through the whole bridge:
    a reference gateway in its own process, 4 workers x 4, ``messages`` posted first in
    ``BRIDGE_ROOMS`` serial rooms that already hold ``turns`` turns each. ``no conversation``:
    the noop agent on a store without the conversation triggers, ``--history-turns 0``;
    ``turns only``: the noop agent, the triggers kept, ``--history-turns turns``;
    ``history+state``: ``conversing_agent``, ``--history-turns turns``."""
    async with (
        gateway_process(folder) as (url, _pid),
        httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
        ) as http,
    ):
        store = await SqliteStore.open(folder / "bridge.db", synchronous=synchronous)
        try:
            for k in range(BRIDGE_ROOMS):
                await _prefill(store, f"room-{k}", turns, f"p{k}")
            talk = mode == "history+state"
            if mode == "no conversation":
                await store.db.write(_drop_triggers)
            await submit_all(http, messages)
            config = BridgeConfig(
                gateway=url,
                token_file=folder / "token",
                store=str(folder / "bridge.db"),
                agent="conversation_cost:conversing_agent"
                if talk
                else "tether.agents.noop:factory",
                workers=4,
                concurrency=4,
                poll_wait=5.0,
                grace=2.0,
                synchronous=synchronous,
                history_turns=0 if mode == "no conversation" else turns,
                log_level="WARNING",
            )
            service = BridgeService(config, store=store)
            async with trio.open_nursery() as bridge:
                cpu, start = time.process_time(), time.perf_counter()
                await bridge.start(service.run)
                assert service.delivery is not None
                while service.delivery.stats.delivered < messages:  # noqa: ASYNC110 - a counter
                    await trio.sleep(0.005)  # in-process: no polling of the gateway
                elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
                bridge.cancel_scope.cancel()
        finally:
            await store.aclose()
    return messages / elapsed, cpu / messages * 1e6


def _stats(values: list[float], digits: int = 1) -> str:
    mid, low, high = statistics.median(values), min(values), max(values)
    return f"median {mid:.{digits}f} (min {low:.{digits}f} .. max {high:.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--lanes", type=int, default=16)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--langgraph-turns", type=int, default=100)
    parser.add_argument("--synchronous", choices=("NORMAL", "FULL"), default="NORMAL")
    parser.add_argument("--bridge-messages", type=int, default=600, help="0: skip part 3")
    parser.add_argument("--bridge-only", action="store_true", help="part 3 alone")
    parser.add_argument(
        "--bridge-sides",
        default=",".join(BRIDGE_SIDES),
        help=f"part 3's sides, comma-separated (default: {','.join(BRIDGE_SIDES)})",
    )
    args = parser.parse_args()
    sync: Synchronous = args.synchronous
    print(
        f"settings: SQLite {sqlite3.sqlite_version} WAL; part 1: tether synchronous={sync} "
        f"(the store's default is NORMAL: durable at promises, a WAL sync before the ingest's "
        f"ack and before the reply's post; FULL: every commit synced), {args.messages} "
        f"messages over {args.lanes} lanes (one room each), {args.turns} turns of history; "
        f"part 2, durable at the end of each turn on both sides: LangGraph SqliteSaver "
        f"(setup(): WAL, synchronous=FULL, SQLite's default) vs tether synchronous=NORMAL + "
        f"the WAL sync delivery runs before posting; {args.langgraph_turns} turns per "
        f"conversation after {args.turns}, 1 and {args.lanes} conversations at once; "
        f"{args.rounds} interleaved rounds, fresh files each"
    )
    modes = ("no conversation", "turns", "history+state")
    rates: dict[str, list[float]] = {m: [] for m in modes}
    widths = (1, args.lanes)
    lg: dict[int, list[float]] = {w: [] for w in widths}
    rc: dict[int, list[float]] = {w: [] for w in widths}
    wh: dict[int, list[float]] = {w: [] for w in widths}
    sides = tuple(side for side in BRIDGE_SIDES if side in args.bridge_sides.split(","))
    assert "no conversation" in sides, "part 3's costs are against 'no conversation'"
    bridge: dict[str, list[tuple[float, float]]] = {m: [] for m in sides}
    lg_parts, t_parts = _parts(), _parts()
    pages: dict[tuple[str, int], list[float]] = {(m, w): [] for m in modes for w in widths}
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        for (m, w), found in () if args.bridge_only else pages.items():  # untimed: WAL pages
            db = Path(tmp) / f"pages-{w}-{m.replace('+', '_').replace(' ', '_')}.db"
            trio.run(
                partial(
                    store_path,
                    db,
                    mode=m,
                    messages=16 * w,
                    lanes=w,
                    turns=args.turns,
                    synchronous=sync,
                    pages=found,
                )
            )
        for r in range(args.rounds):
            for m in () if args.bridge_only else modes:
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
                            synchronous=sync,
                        )
                    )
                )
            n = args.langgraph_turns
            for w in () if args.bridge_only else widths:
                lg[w].append(
                    langgraph_turns(
                        Path(tmp) / f"lg-{r}-{w}.db",
                        turns=args.turns,
                        n=n,
                        lanes=w,
                        synchronous="FULL",
                        parts=lg_parts if w == 1 else _parts(),
                    )
                    * 1e6
                )
                a, b = trio.run(
                    partial(
                        tether_turns,
                        Path(tmp) / f"t-{r}-{w}.db",
                        turns=args.turns,
                        n=n,
                        lanes=w,
                        synchronous="NORMAL",
                        parts=t_parts if w == 1 else _parts(),
                    )
                )
                rc[w].append(a * 1e6)
                wh[w].append(b * 1e6)
            for m in sides if args.bridge_messages else ():
                folder = Path(tmp) / f"p3-{r}-{m.replace('+', '_').replace(' ', '_')}"
                folder.mkdir()
                bridge[m].append(
                    trio.run(
                        partial(
                            bridge_path,
                            folder,
                            mode=m,
                            messages=args.bridge_messages,
                            turns=args.turns,
                            synchronous=sync,
                        )
                    )
                )
            print(f"round {r + 1}/{args.rounds} done", flush=True)
    if not args.bridge_only:
        _print_parts_1_2(args, rates, pages, lg, rc, wh, lg_parts, t_parts)
    if args.bridge_messages:
        _print_part_3(args, sides, bridge, sync)


def _print_parts_1_2(
    args: argparse.Namespace,
    rates: dict[str, list[float]],
    pages: dict[tuple[str, int], list[float]],
    lg: dict[int, list[float]],
    rc: dict[int, list[float]],
    wh: dict[int, list[float]],
    lg_parts: Parts,
    t_parts: Parts,
) -> None:
    modes, widths = tuple(rates), tuple(lg)
    print("\npart 1: messages/s through ingest -> claim -> complete -> delivered")
    for m in modes:
        print(f"  {m:<16} {_stats(rates[m])}")
    for w in widths:
        written = ", ".join(f"{m} {pages[m, w][0]:.1f}" for m in modes)
        print(f"  WAL pages written per message, {w} at once: {written}")
    for m in modes[1:]:  # each round's own ratio: the sides ran back to back in it
        costs = [(b / t - 1) * 100 for b, t in zip(rates["no conversation"], rates[m], strict=True)]
        print(f"  cost of {m} per message vs no conversation, %: {_stats(costs)} (goal < 10)")
    for w in widths:
        print(f"\npart 2: microseconds per chat turn at {args.turns}+ turns, {w} at once")
        print(f"  langgraph SqliteSaver get_tuple + put     {_stats(lg[w])}")
        print(f"  tether claim with conversation + commit + sync {_stats(rc[w])}")
        print(f"  tether whole turn (+ ingest, delivered)   {_stats(wh[w])}")
        ratios = [a / b for a, b in zip(lg[w], rc[w], strict=True)]
        wholes = [a / b for a, b in zip(lg[w], wh[w], strict=True)]
        print(f"  tether read + commit, x LangGraph's speed: {_stats(ratios, 2)} (goal >= 2)")
        print(f"  tether whole turn, x LangGraph's speed: {_stats(wholes, 2)}")
    print("\npart 2's one conversation, microseconds per call (all rounds' calls):")
    for side, parts in (("langgraph", lg_parts), ("tether", t_parts)):
        for what, seconds in parts.items():
            if what.endswith("per turn"):
                print(f"  {side:<9} {what:<34} {statistics.median(seconds):.2f}")
                continue
            us = [x * 1e6 for x in seconds]
            p10, p90 = statistics.quantiles(us, n=10)[0], statistics.quantiles(us, n=10)[-1]
            print(
                f"  {side:<9} {what:<34} median {statistics.median(us):7.1f} "
                f"(p10 {p10:.1f} .. p90 {p90:.1f})"
            )


def _print_part_3(
    args: argparse.Namespace,
    sides: tuple[str, ...],
    bridge: dict[str, list[tuple[float, float]]],
    sync: str,
) -> None:
    print(
        f"\npart 3: the whole bridge (gateway process, 4 x 4 workers, {BRIDGE_ROOMS} serial "
        f"rooms of {args.turns} turns, {args.bridge_messages} messages, synchronous={sync})"
    )
    for m in sides:
        rates3 = [rate for rate, _ in bridge[m]]
        cpus = [cpu for _, cpu in bridge[m]]
        print(f"  {m:<16} msgs/s {_stats(rates3)}; CPU us/msg {_stats(cpus)}")
    base_rate = statistics.median(rate for rate, _ in bridge["no conversation"])
    base_cpu = statistics.median(cpu for _, cpu in bridge["no conversation"])
    for m in sides[1:]:
        talk_rate = statistics.median(rate for rate, _ in bridge[m])
        talk_cpu = statistics.median(cpu for _, cpu in bridge[m])
        time_cost = (base_rate / talk_rate - 1) * 100
        cpu_cost = (talk_cpu / base_cpu - 1) * 100
        print(
            f"  cost of {m} per message on the bridge: time {time_cost:+.1f}%, "
            f"CPU {cpu_cost:+.1f}% (goal < 10%)"
        )


if __name__ == "__main__":
    main()
