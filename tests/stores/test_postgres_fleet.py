"""Many processes on one PostgreSQL: two bridge processes and six worker processes share one
schema; a worker (holding a lease) and a bridge are SIGKILLed mid-run, another worker stalls
past its leases. Every task must end delivered with exactly one stored result, no task is ever
completed twice, and every stale completion is fenced.

The bridges here are plain scripts on ``PostgresStore`` (ingest with replays, the reconciler,
delivery), not the bridge service: the same store calls, without a gateway.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio

from tether.bridge import CustodyState, PostgresStore

CHILD = Path(__file__).with_name("pg_fleet_child.py")
POOL_CHILD = Path(__file__).with_name("pg_pool_fleet_child.py")
TOTAL = 240
LEASE_S = 1.0


@attrs.define(eq=False)
class Child:
    name: str
    process: trio.Process
    fleet: Fleet
    lines: list[str] = attrs.field(factory=list)

    def seen(self, word: str) -> list[str]:
        return [line for line in self.lines if line.startswith(word + " ")]

    async def read(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        async for chunk in self.process.stdout:
            buffer += chunk
            *done, buffer = buffer.split(b"\n")
            self.lines += [line.decode() for line in done]
            self.fleet.changed.set()
        # a last line without its newline was cut by the kill: not a promise


@attrs.define(eq=False)
class Fleet:
    """Child processes that report what they do, one line at a time, on stdout."""

    children: dict[str, Child] = attrs.field(factory=dict)
    changed: trio.Event = attrs.field(factory=trio.Event)  # replaced after each wait

    def __getitem__(self, name: str) -> Child:
        return self.children[name]

    async def until(self, predicate: Callable[[], bool]) -> None:
        """Until ``predicate`` holds, re-checked whenever a child has said something."""
        while not predicate():
            await self.changed.wait()
            self.changed = trio.Event()


@asynccontextmanager
async def open_fleet(
    commands: Sequence[tuple[str, list[str]]], env: dict[str, str]
) -> AsyncIterator[Fleet]:
    """Start one process per (name, argv); on the way out SIGKILL those still running."""
    fleet = Fleet()
    try:
        async with trio.open_nursery() as nursery:
            for name, argv in commands:
                process = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, env=env)
                fleet.children[name] = child = Child(name, process, fleet)
                nursery.start_soon(child.read)
            yield fleet
            for child in fleet.children.values():
                if child.process.returncode is None:
                    child.process.send_signal(signal.SIGKILL)
    finally:
        for child in fleet.children.values():
            if child.process.returncode is None:
                child.process.kill()
            await child.process.wait()
            assert child.process.stdout is not None
            await child.process.stdout.aclose()


@pytest.mark.slow
async def test_two_bridges_and_six_workers_survive_sigkills(postgres_dsn: str) -> None:
    schema = f"fleet_{secrets.token_hex(4)}"
    watch = await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1)
    env = {**os.environ, "FLEET_DSN": postgres_dsn}
    roles = [("bridge", "b0"), ("bridge", "b1")]
    roles += [("holder", "w0")] + [("worker", f"w{k}") for k in range(1, 5)]
    roles += [("staller", "w5")]
    commands = [
        (name, [sys.executable, str(CHILD), mode, schema, name, str(TOTAL), str(LEASE_S)])
        for mode, name in roles
    ]
    async with open_fleet(commands, env) as fleet:
        with trio.fail_after(90):
            # kill w0 while it holds a lease, after it has done some work (it holds its sixth
            # claim until killed)
            w0, b0 = fleet["w0"], fleet["b0"]
            await fleet.until(lambda: bool(w0.seen("holding")))
            w0.process.send_signal(signal.SIGKILL)
            await fleet.until(lambda: len(b0.seen("delivered")) >= TOTAL // 4)
            b0.process.send_signal(signal.SIGKILL)
            # the store is the source of truth: poll it
            while (await watch.counts())[CustodyState.DELIVERED] < TOTAL:  # noqa: ASYNC110
                await trio.sleep(0.1)
            await fleet.until(lambda: bool(fleet["w5"].seen("fenced")))  # the staller wakes up
    children = list(fleet.children.values())
    by_name = fleet.children
    try:
        ids = {f"t{i}" for i in range(TOTAL)}
        counts = await watch.counts()
        assert counts[CustodyState.DELIVERED] == TOTAL
        assert sum(counts.values()) == TOTAL  # both bridges ingested every id: replays no-op
        completed = Counter(line.split()[1] for c in children for line in c.seen("completed"))
        assert max(completed.values()) == 1, "a task was completed twice"
        killed = by_name["w0"]
        unsure = {  # w0 may have completed these and died before saying so
            line.split()[1] for line in killed.seen("claimed")
        } - {line.split()[1] for line in killed.seen("completed")}
        assert unsure, "w0 was meant to die holding a lease"
        assert set(completed) | unsure >= ids
        for id in sorted(ids):
            rec = await watch.get(id)
            assert rec is not None
            assert rec.state is CustodyState.DELIVERED
            assert rec.result is not None
            assert rec.result.startswith(f"reply to {id} by ")
            name, attempt = rec.result.rsplit(" by ", 1)[1].split("#")
            assert (rec.owner, rec.attempt) == (name, int(attempt))  # the one stored result
            if id in completed:
                said = [line for line in by_name[name].seen("completed") if line.split()[1] == id]
                assert said == [f"completed {id} {attempt}"]
        # the lease w0 held when it died came back with the next attempt
        held = [await watch.get(id) for id in unsure]
        assert any(rec is not None and rec.attempt >= 2 for rec in held)
        fenced = by_name["w5"].seen("fenced")
        assert fenced, "the staller's late completion must be fenced"
        for line in fenced:
            _, id, attempt = line.split()
            rec = await watch.get(id)
            assert rec is not None
            assert rec.attempt > int(attempt) or rec.owner != "w5"
        workers_done = Counter(c.name for c in children for _line in c.seen("completed"))
        assert len(workers_done) >= 5  # the work really was shared
    finally:
        await watch.aclose()


@pytest.mark.slow
async def test_pool_leads_and_workers_on_postgres_survive_sigkills(postgres_dsn: str) -> None:
    """The pool's own services (two leads, six workers) on one PostgreSQL schema; a worker
    holding a task and a bridge (lead + reconciler + delivery) are SIGKILLed mid-run."""
    total = 200
    schema = f"pfleet_{secrets.token_hex(4)}"
    watch = await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1)
    env = {**os.environ, "FLEET_DSN": postgres_dsn}
    roles = [("bridge", "b0"), ("bridge", "b1"), ("holder", "w0")]
    roles += [("worker", f"w{k}") for k in range(1, 6)]
    commands = [
        (name, [sys.executable, str(POOL_CHILD), role, schema, name, str(total)])
        for role, name in roles
    ]
    async with open_fleet(commands, env) as fleet:
        w0, b0 = fleet["w0"], fleet["b0"]
        with trio.fail_after(90):
            # w0 holds its runs after three results: it dies holding one, for sure
            await fleet.until(lambda: bool(w0.seen("holding")))
            w0.process.send_signal(signal.SIGKILL)
            await fleet.until(lambda: len(b0.seen("delivered")) >= total // 4)
            b0.process.send_signal(signal.SIGKILL)
            # the store is the source of truth: poll it
            while (await watch.counts())[CustodyState.DELIVERED] < total:  # noqa: ASYNC110
                await trio.sleep(0.1)
    children = list(fleet.children.values())
    by_name = fleet.children

    def held(child: Child) -> set[str]:
        started = {line.split()[1] for line in child.seen("start")}
        return started - {line.split()[1] for line in child.seen("done")}

    try:
        counts = await watch.counts()
        assert counts[CustodyState.DELIVERED] == sum(counts.values()) == total
        done = Counter(line.split()[1] for c in children for line in c.seen("done"))
        assert max(done.values()) == 1, "a task's result was stored twice"
        lost_with_w0 = held(w0)
        assert lost_with_w0, "w0 was meant to die holding a task"
        assert set(done) | lost_with_w0 == {f"t{i}" for i in range(total)}
        for id in lost_with_w0:  # finished elsewhere on a later attempt (or by w0 just before)
            rec = await watch.get(id)
            assert rec is not None
            assert rec.owner != "w0" or id not in done
            if rec.owner != "w0":
                assert rec.attempt >= 2
        for id in done:
            rec = await watch.get(id)
            assert rec is not None
            assert rec.result == f"reply to {id} by {rec.owner}"
        assert sum(1 for c in children if c.seen("done")) >= 5  # the work really was shared
        assert by_name["b1"].seen("delivered"), "the surviving bridge took over delivery"
    finally:
        await watch.aclose()
