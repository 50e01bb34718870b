"""The latency the bridge adds to one message, at light load and at 80% of its maximum rate.

A reference gateway runs in a SEPARATE PROCESS (``bridge_throughput.gateway_process``: real
HTTP on 127.0.0.1, its own SQLite) and so does the load: a submitter process posts chat
messages on an open-loop schedule (message ``i`` at ``i / rate`` seconds, whatever the
answers do), so neither's work shares this process's GIL. Here runs one ``BridgeService``
(4 workers x 4 tasks, default intervals, ``synchronous=FULL``) whose agent notes, by the wall
clock both processes share, when each run starts and when it replies. Afterwards the
gateway's own database says when it accepted each message (``created_at``) and when it had the
reply (``answered_at``):

- **in**: accepted by the gateway -> the agent starts (poll, ingest commit, ack, the lead's
  assignment and the worker's claim; leaderless: the claim alone);
- **out**: the agent replies -> the gateway has the reply (the result's commit, delivery's
  post and the gateway storing it);
- **added**: in + out, the time the bridge adds end to end (the agent's own time left out).

Phases (each a fresh gateway, bridge and files): the maximum rate (``BURST`` messages queued
first, then drained), light load (``LIGHT_RATE`` msg/s for ``LIGHT_S`` s) and 80% of the
maximum (for ``LOADED_S`` s), with a lead and leaderless. p50/p99 in milliseconds; the goal at
light load is a p99 under 20 ms added. Before its load, the light phase's bridge idles for
``IDLE_S`` seconds and its CPU use is printed (wake-ups must not cost an idle bridge CPU: no
busy polling). The environment may set ``BURST``, ``LIGHT_RATE``, ``LIGHT_S``, ``LOADED_S``,
``IDLE_S``, ``MODES`` (``lead,leaderless``), ``PHASES`` (``max,light,loaded``) and
``MAX_RATE`` (the maximum the 80% phase takes when ``max`` is not run).

The disk is part of the path: every commit on it (the gateway's and the bridge's, four or
five per message) waits for an fsync, and a virtual disk stalls now and then (seen here: a
plain ``sqlite3`` loop of ``synchronous=FULL`` commits, p50 0.5 ms, pauses of 70-500 ms every
few seconds, the same instants in two processes at once). So the light phase runs twice:
on the disk (``tempfile``'s folder, ``TMPDIR``), with a probe process beside it committing to a
file of its own every 10 ms and noting how long each commit took, and in memory
(``/dev/shm``: an fsync returns at once), which is the bridge's own added time. The disk's
line says how many messages crossed a probe commit slower than 20 ms and the p99 of the others.
``STORAGE`` (``disk,memory``) picks the sides.

``TRACE=1`` also prints, per timed phase, the p50/p99 of each hop of a message's path (see
``Trace``): which step the added time goes to. The tracer wraps the store's and the gateway
client's methods in this process (a few microseconds a call).
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, nullcontext
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from bridge_throughput import TOKEN, gateway_process, post_message
from tether import Session
from tether.bridge import BridgeConfig, BridgeService, GatewayClient, SqliteStore, Task

BURST = int(os.environ.get("BURST", "1000"))
LIGHT_RATE = float(os.environ.get("LIGHT_RATE", "20"))
LIGHT_S = float(os.environ.get("LIGHT_S", "15"))
LOADED_S = float(os.environ.get("LOADED_S", "10"))
MODES = os.environ.get("MODES", "lead,leaderless").split(",")
TRACE = os.environ.get("TRACE", "") not in ("", "0")
PHASES = os.environ.get("PHASES", "max,light,loaded").split(",")
IDLE_S = float(os.environ.get("IDLE_S", "5"))
"""Seconds the light phase's bridge idles first, its CPU time measured (0: not measured)."""
STORAGE = os.environ.get("STORAGE", "disk,memory").split(",")
MEMORY_DIR = Path("/dev/shm")
PROBE_EVERY_S = 0.01
STALL_MS = 20.0
"""A probe commit slower than this is a disk stall (the goal's whole budget in one fsync)."""
MAX_RATE = float(os.environ.get("MAX_RATE", "0"))
"""Used for the 80% phase when the ``max`` phase is left out of ``PHASES``."""
WORKERS = 4
CONCURRENCY = 4
STALL_S = 30.0


@attrs.define
class Runs:
    """What the agent saw: wall-clock start and reply of each task id."""

    started: dict[str, float] = attrs.field(factory=dict)
    replied: dict[str, float] = attrs.field(factory=dict)

    def factory(self, session: Session) -> None:
        @session.on("task")
        async def note(task: Task) -> str:
            self.started[task.id] = time.time()
            self.replied[task.id] = time.time()
            return "ok"


HOPS: list[tuple[str, str, str]] = [
    # (hop, from mark, to mark); "created"/"answered" come from the gateway's database
    ("gw accept->poll answered", "created", "polled"),
    ("ingest commit", "polled", "ingested"),
    ("ack (not on the path)", "ingested", "acked"),
    ("commit->sweep starts", "ingested", "sweep"),
    ("sweep (assign commit)", "sweep", "assigned"),
    ("assigned->claim starts", "assigned", "claim"),
    ("commit->claim starts", "ingested", "claim"),
    ("claim commit", "claim", "claimed"),
    ("claimed->agent starts", "claimed", "started"),
    ("reply->complete commit", "replied", "completed"),
    ("completed->delivery read", "completed", "read"),
    ("delivery read->posted", "read", "posted"),
    ("reply->gateway answered_at", "replied", "answered"),
]


@attrs.define
class Trace:
    """Wall-clock marks of each task id along its path (``TRACE=1``): each wrapped call notes,
    for the ids it handled, when it returned (and, for the sweep and the claim, when it began).
    """

    marks: dict[str, dict[str, float]] = attrs.field(factory=lambda: defaultdict(dict))

    def note(self, ids: Any, mark: str, at: float | None = None) -> None:
        at = time.time() if at is None else at
        for id in ids:
            self.marks[id].setdefault(mark, at)

    def install(self) -> Callable[[], None]:
        """Wrap the methods; returns the function that puts them back."""
        saved: list[tuple[type, str, Any]] = []

        def wrap(cls: type, name: str, after: Callable[[Any, Any, float, Any], None]) -> None:
            original = getattr(cls, name)
            saved.append((cls, name, original))

            async def traced(self_: Any, *args: Any, **kwargs: Any) -> Any:
                began = time.time()
                value = await original(self_, *args, **kwargs)
                after(args, kwargs, began, value)
                return value

            setattr(cls, name, traced)

        wrap(GatewayClient, "poll_tasks", lambda a, k, b, v: self.note((t.id for t in v), "polled"))
        wrap(
            SqliteStore,
            "ingest_many",
            lambda a, k, b, v: self.note((t.id for t in a[0]), "ingested"),
        )
        wrap(GatewayClient, "ack_many", lambda a, k, b, v: self.note(a[0], "acked"))

        def assigned(a: Any, k: Any, began: float, value: Any) -> None:
            view, done = value
            ids = [t.id for t in view.pending]  # read in the sweep's transaction
            self.note(ids, "sweep", began)
            if done is not None:
                self.note(ids, "assigned")

        wrap(SqliteStore, "plan_and_assign", assigned)

        def claimed(a: Any, k: Any, began: float, value: Any) -> None:
            ids = [c.task.id for c in value]
            self.note(ids, "claim", began)
            self.note(ids, "claimed")

        wrap(SqliteStore, "claim_many", claimed)
        wrap(
            SqliteStore,
            "complete_many",
            lambda a, k, b, v: self.note((c.task.id for c, _ in a[0]), "completed"),
        )

        def read(a: Any, k: Any, began: float, value: Any) -> None:
            self.note((r.task.id for r in value), "read")

        wrap(SqliteStore, "ready_results", read)
        wrap(
            GatewayClient,
            "post_results",
            lambda a, k, b, v: self.note((r.id for r in a[0]), "posted"),
        )

        def restore() -> None:
            for cls, name, original in saved:
                setattr(cls, name, original)

        return restore

    def hops(self) -> list[tuple[str, list[float]]]:
        out = []
        for hop, start, end in HOPS:
            values = [m[end] - m[start] for m in self.marks.values() if start in m and end in m]
            if values:
                out.append((hop, values))
        return out


@attrs.frozen
class Phase:
    name: str
    rate: float
    """Messages per second handled (burst) or offered (the others)."""
    inbound: list[float]
    outbound: list[float]
    added: list[float]
    trace: Trace | None = None
    idle_cpu: float | None = None
    """CPU seconds per second this process (the bridge) used while idle, before the load."""
    probe: list[tuple[float, float]] | None = None
    """The disk probe's commits while the load ran: (wall-clock start, seconds taken)."""
    spans: list[tuple[float, float]] = attrs.field(factory=list)
    """Each message's (gateway accepted, gateway has the reply), wall clock."""

    def stalls(self) -> list[tuple[float, float]]:
        """The probe's commits slower than ``STALL_MS``: (start, end)."""
        return [(t, t + d) for t, d in self.probe or () if 1000 * d > STALL_MS]

    def clear_of_stalls(self) -> list[float]:
        """``added`` of the messages whose path overlapped no disk stall."""
        stalls = self.stalls()
        return [
            a
            for a, (s0, s1) in zip(self.added, self.spans, strict=True)
            if not any(t0 < s1 and s0 < t1 for t0, t1 in stalls)
        ]


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


async def _submit(url: str, rate: float, count: int) -> None:
    """Run the submitter process (``submit`` mode of this file) and wait for it."""
    command = [sys.executable, __file__, "submit", url, repr(rate), str(count)]
    await trio.run_process(command, stdout=subprocess.DEVNULL)


def _prober(path: str) -> None:
    """Commit one row every ``PROBE_EVERY_S`` (WAL, ``synchronous=FULL``), print each commit's
    start and duration, until killed: how long the disk's fsync took while the bridge ran."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute("CREATE TABLE IF NOT EXISTS probe (at REAL, body BLOB)")
    while True:
        began = time.time()
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO probe VALUES (?, randomblob(300))", (began,))
        db.execute("COMMIT")
        print(f"{began} {time.time() - began}", flush=True)
        time.sleep(PROBE_EVERY_S)


@asynccontextmanager
async def _disk_probe(folder: Path) -> AsyncIterator[list[tuple[float, float]]]:
    """Run ``_prober`` on a file in ``folder`` for the block; the list it yields is filled
    with the probe's notes once the block ends."""
    notes: list[tuple[float, float]] = []
    out = folder / "probe.txt"
    with out.open("wb") as sink:
        command = [sys.executable, __file__, "probe", str(folder / "probe.db")]
        proc = await trio.lowlevel.open_process(command, stdout=sink)
    try:
        yield notes
    finally:
        proc.kill()
        with trio.CancelScope(shield=True):
            await proc.wait()
    for line in out.read_text().splitlines():
        began, took = line.split()
        notes.append((float(began), float(took)))


async def _submitter(url: str, rate: float, count: int) -> None:
    """Post ``count`` messages, message ``i`` at ``i / rate`` s (``rate`` 0: all at once)."""
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
    ) as http:
        limiter = trio.CapacityLimiter(32)

        async def post(i: int) -> None:
            async with limiter:
                await post_message(http, i)

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for i in range(count):
                if rate > 0:
                    await trio.sleep_until(start + i / rate)
                nursery.start_soon(post, i)


async def _until_delivered(service: BridgeService, count: int) -> None:
    assert service.delivery is not None
    stats = service.delivery.stats
    seen, since = -1, time.perf_counter()
    while stats.delivered < count:
        if stats.delivered != seen:
            seen, since = stats.delivered, time.perf_counter()
        elif time.perf_counter() - since > STALL_S:
            raise RuntimeError(f"stalled at {seen} of {count} delivered")
        await trio.sleep(0.01)


async def phase(
    folder: Path, name: str, *, lead: bool, rate: float, count: int, probe: bool = False
) -> Phase:
    """One phase: ``rate`` 0 queues ``count`` messages first and measures the drain rate.
    ``probe``: a disk probe (``_disk_probe``) runs beside the load."""
    await trio.Path(folder).mkdir(parents=True)
    runs = Runs()
    trace = Trace() if TRACE and rate > 0 else None
    restore = trace.install() if trace is not None else None
    async with gateway_process(folder) as (url, _pid):
        if rate == 0:
            await _submit(url, 0, count)
        config = BridgeConfig(
            gateway=url,
            token_file=folder / "token",
            store=str(folder / "bridge.db"),
            agent="tether.agents.noop:factory",
            workers=WORKERS,
            concurrency=CONCURRENCY,
            grace=2.0,
            lead=lead,
            synchronous="FULL",
            log_level="WARNING",
        )
        store = await SqliteStore.open(folder / "bridge.db", synchronous="FULL")
        service = BridgeService(config, store=store, factory=runs.factory)
        try:
            async with trio.open_nursery() as bridge:
                await bridge.start(service.run)
                idle_cpu = None
                if " light" in name and IDLE_S > 0:
                    await trio.sleep(1.0)  # past the start-up
                    cpu = time.process_time()
                    await trio.sleep(IDLE_S)
                    idle_cpu = (time.process_time() - cpu) / IDLE_S
                async with _disk_probe(folder) if probe else nullcontext() as notes:
                    start = time.perf_counter()
                    if rate > 0:
                        bridge.start_soon(_submit, url, rate, count)
                    await _until_delivered(service, count)
                    elapsed = time.perf_counter() - start
                bridge.cancel_scope.cancel()
        finally:
            await store.aclose()
            if restore is not None:
                restore()
    with sqlite3.connect(folder / "gateway.db") as db:
        rows = db.execute("SELECT id, created_at, answered_at FROM tasks").fetchall()
    inbound, outbound, spans = [], [], []
    for id, created, answered in rows:
        spans.append((created, answered))
        inbound.append(runs.started[id] - created)
        outbound.append(answered - runs.replied[id])
        if trace is not None:
            trace.note([id], "created", created)
            trace.note([id], "answered", answered)
            trace.note([id], "started", runs.started[id])
            trace.note([id], "replied", runs.replied[id])
    added = [a + b for a, b in zip(inbound, outbound, strict=True)]
    rate = count / elapsed if rate == 0 else rate
    return Phase(name, rate, inbound, outbound, added, trace, idle_cpu, notes, spans)


def _hops(p: Phase) -> str:
    if p.trace is None:
        return ""
    return "".join(
        f"    {hop:<28} n={len(v):5d}  p50 {_ms(v, 0.5):6.1f}  p90 {_ms(v, 0.9):6.1f}  "
        f"p99 {_ms(v, 0.99):6.1f} ms\n"
        for hop, v in p.trace.hops()
    )


def _line(p: Phase) -> str:
    if p.name.endswith("max"):  # queued before the bridge started: only the rate means much
        return f"{p.name:<24} {p.rate:7.0f} msg/s  n={len(p.added):5d}  (drained a queue)"
    return (
        f"{p.name:<24} {p.rate:7.0f} msg/s  n={len(p.added):5d}  "
        f"in p50 {_ms(p.inbound, 0.5):6.1f} p99 {_ms(p.inbound, 0.99):6.1f}  "
        f"out p50 {_ms(p.outbound, 0.5):6.1f} p99 {_ms(p.outbound, 0.99):6.1f}  "
        f"added p50 {_ms(p.added, 0.5):6.1f} p99 {_ms(p.added, 0.99):6.1f} ms"
        + ("" if p.idle_cpu is None else f"  idle CPU {100 * p.idle_cpu:.1f}%")
        + _probe_line(p)
    )


def _probe_line(p: Phase) -> str:
    if not p.probe:
        return ""
    took = [d for _, d in p.probe]
    clear = p.clear_of_stalls()
    rest = f"p99 added of the other {len(clear)}: {_ms(clear, 0.99):.1f} ms" if clear else ""
    return (
        f"\n    disk probe: {len(took)} commits, p50 {_ms(took, 0.5):.1f} p99 "
        f"{_ms(took, 0.99):.1f} max {_ms(took, 1.0):.1f} ms; {len(p.stalls())} over "
        f"{STALL_MS:.0f} ms, crossed by {len(p.added) - len(clear)} messages; {rest}"
    )


async def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    results: list[Phase] = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in MODES:
            lead = mode == "lead"
            max_rate = MAX_RATE
            if "max" in PHASES or not max_rate:
                burst = await phase(
                    Path(tmp, mode, "burst"), f"{mode} max", lead=lead, rate=0, count=BURST
                )
                print(_line(burst), file=sys.stderr)
                results.append(burst)
                max_rate = burst.rate
            if "light" in PHASES:
                for storage in STORAGE:
                    if storage == "memory" and not await trio.Path(MEMORY_DIR).is_dir():
                        print(f"skipped {mode} light [memory]: no {MEMORY_DIR}", file=sys.stderr)
                        continue
                    with tempfile.TemporaryDirectory(
                        dir=MEMORY_DIR if storage == "memory" else None
                    ) as side:
                        light = await phase(
                            Path(side, mode, "light"),
                            f"{mode} light [{storage}]",
                            lead=lead,
                            rate=LIGHT_RATE,
                            count=round(LIGHT_RATE * LIGHT_S),
                            probe=storage == "disk",
                        )
                    print(_line(light), _hops(light), sep="\n", end="", file=sys.stderr)
                    results.append(light)
            if "loaded" in PHASES:
                loaded_rate = 0.8 * max_rate
                loaded = await phase(
                    Path(tmp, mode, "loaded"),
                    f"{mode} 80% load",
                    lead=lead,
                    rate=loaded_rate,
                    count=round(loaded_rate * LOADED_S),
                )
                print(_line(loaded), _hops(loaded), sep="\n", end="", file=sys.stderr)
                results.append(loaded)
    for p in results:
        print(_line(p))
        print(_hops(p), end="")
    for p in results:
        if " light" in p.name:
            verdict = "met" if _ms(p.added, 0.99) < 20 else "NOT met"
            print(f"{p.name}: p99 added {_ms(p.added, 0.99):.1f} ms (goal < 20 ms: {verdict})")


def _cli(argv: list[str]) -> Any:
    if argv[:1] == ["probe"]:
        return _prober(argv[1])
    if argv[:1] == ["submit"]:
        url, rate, count = argv[1], float(argv[2]), int(argv[3])
        return trio.run(_submitter, url, rate, count)
    return trio.run(main)


if __name__ == "__main__":
    _cli(sys.argv[1:])
