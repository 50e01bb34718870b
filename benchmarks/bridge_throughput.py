"""Messages per second through the whole bridge, beside the custody store's own rate.

- **bridge**: a reference gateway in a SEPARATE PROCESS (``tether gateway serve`` on a free port
  of 127.0.0.1, a token file; as a real gateway is remote, its HTTP and SQLite work does not
  share this process's GIL) and a ``BridgeService`` here (4 workers x 4 tasks, the noop agent,
  the default sweep/poll intervals, each durability mode of ``SYNCHRONOUS``). ``MESSAGES``
  messages are submitted first; the clock runs from the bridge's start until delivery has every
  reply confirmed by the gateway and marked delivered (read from the bridge's own delivery
  counter, so no stats polling loads either side; the gateway's count of answered tasks is
  checked after): poll -> commit -> ack -> assign -> claim -> agent -> complete -> post -> mark
  delivered, every step committed, every ack after its commit is durable, every task marked
  delivered only after the gateway confirmed it.
- **leaderless**: the same bridge with ``lead=False`` (workers claim pending tasks directly:
  no room affinity, no lead).
- **store**: the same custody path without HTTP, gateway or agents, on the same kind of store
  (the same mode): 16 lanes (the bridge's 4 x 4 concurrency), each taking one message
  at a time through ``ingest_many([task])`` -> ``claim`` -> ``complete`` -> ``mark_delivered``,
  so the lanes' transitions share group commits as the bridge's do. It is what the store alone
  sustains at the bridge's concurrency, the ceiling the bridge's own work is measured against.

Rounds interleaved (per mode: store, bridge, leaderless; a fresh gateway process and fresh files
each); medians of rates and of per-round ratios printed. ``SYNCHRONOUS`` names the modes
(default ``NORMAL,FULL``: durable at promises, the default, and a sync at every commit). The
bar (issue #39): the bridge spends at most 450 us of CPU per message, with a lead and
leaderless, measured in the same run as the store's own. ``ROUNDS`` and ``MESSAGES`` may be set
in the environment.

Each side also reports the CPU it spent per message (this process: the bridge's Trio thread,
its custody writer and its HTTP; and, on Linux, the gateway process's, read from ``/proc``)
and how busy this process was (CPU seconds per wall second). A Python process runs Python on
one core at a time (the GIL), so a side that is busy ~90-100% is CPU-bound, and its rate is
about one core divided by its CPU per message. Then ``store CPU / bridge CPU`` is the most the
rate ratio can reach, whatever the waits: the bridge does the store's work and more (the
lead's assignments, the agent's session, the gateway's HTTP).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from tether.bridge import BridgeConfig, BridgeService, CustodyState, SqliteStore, Task, write_token

MESSAGES = int(os.environ.get("MESSAGES", "2000"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
WORKERS = 4
CONCURRENCY = 4
LANES = WORKERS * CONCURRENCY
MODES = os.environ.get("SYNCHRONOUS", "NORMAL,FULL").upper().split(",")
CPU_BAR_US = 450
TOKEN = "bench-token"
STALL_S = 30.0
_URL = re.compile(r"tether gateway: (http://\S+?)/ ")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@attrs.frozen
class Round:
    """One side of one round: its rate, and the CPU it spent per message."""

    rate: float
    """Messages per second."""
    cpu_us: float
    """CPU microseconds per message of this process (every thread)."""
    busy: float
    """This process's CPU seconds per wall second while it ran (~1.0: one core, saturated)."""
    gateway_cpu_us: float | None = None
    """CPU microseconds per message of the gateway process (None: not on Linux)."""


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used so far; None without ``/proc``."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS


async def measured(run: Callable[[], Awaitable[None]], gateway_pid: int | None = None) -> Round:
    """Run ``run`` (which handles ``MESSAGES`` messages) and measure its rate and CPU."""
    gateway_before = None if gateway_pid is None else process_cpu(gateway_pid)
    cpu, start = time.process_time(), time.perf_counter()
    await run()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    gateway_after = None if gateway_pid is None else process_cpu(gateway_pid)
    gateway = (
        None
        if gateway_before is None or gateway_after is None
        else (gateway_after - gateway_before) / MESSAGES * 1e6
    )
    return Round(MESSAGES / elapsed, cpu / MESSAGES * 1e6, cpu / elapsed, gateway)


@asynccontextmanager
async def gateway_process(folder: Path) -> AsyncIterator[tuple[str, int]]:
    """A reference gateway in its own process; yields its base URL and pid, SIGTERMs it
    after."""
    token_file = folder / "token"
    write_token(token_file, TOKEN)
    command = [
        sys.executable,
        "-c",
        "import sys; from tether._cli import main; sys.exit(main(sys.argv[1:]))",
        "gateway",
        "serve",
        "--port",
        "0",
        "--token-file",
        str(token_file),
        "--db",
        str(folder / "gateway.db"),
    ]
    log = (folder / "gateway.log").open("wb")  # its own log, read if it fails to start
    proc = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, stderr=log)
    log.close()
    try:
        assert proc.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            chunk = await proc.stdout.receive_some(1)
            if not chunk:
                break
            line += chunk
        found = _URL.search(line.decode())
        if found is None:
            log_text = (folder / "gateway.log").read_text()
            raise RuntimeError(f"the gateway did not start: {line!r}\n{log_text}")
        yield found.group(1), proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        with trio.CancelScope(shield=True):
            await proc.wait()
            if proc.stdout is not None:
                await proc.stdout.aclose()


async def post_message(
    http: httpx.AsyncClient, i: int, rooms: int = 40, tenant: str | None = None
) -> None:
    """Submit message ``i`` (room ``i % rooms``, of ``tenant`` if given) under the id
    ``m-<i>``, so a retry is idempotent: on a loaded machine the gateway may close a
    kept-alive connection as a request goes out."""
    message = {"id": f"m-{i}", "room": f"room-{i % rooms}", "text": f"message {i}"}
    if tenant is not None:
        message["tenant"] = tenant
    for attempt in range(5):
        try:
            response = await http.post("/v1/messages", json=message)
        except httpx.TransportError:
            if attempt == 4:
                raise
            await trio.sleep(0.1)
            continue
        response.raise_for_status()
        return


async def _get_retried(http: httpx.AsyncClient, path: str) -> httpx.Response:
    """GET ``path``, tried again once if the gateway closed the kept-alive connection (it
    does after its keep-alive timeout: the submission may have ended seconds before)."""
    try:
        return await http.get(path)
    except httpx.TransportError:
        return await http.get(path)


async def submit_all(
    http: httpx.AsyncClient,
    messages: int,
    rooms: int = 40,
    tenant_of: Callable[[int], str | None] = lambda i: None,
) -> None:
    """``post_message`` for messages 0 to ``messages - 1`` (message ``i`` of tenant
    ``tenant_of(i)``), 16 requests at a time."""
    limiter = trio.CapacityLimiter(16)

    async def submit(i: int) -> None:
        async with limiter:
            await post_message(http, i, rooms, tenant_of(i))

    async with trio.open_nursery() as submitters:
        for i in range(messages):
            submitters.start_soon(submit, i)


async def store_rate(folder: Path, mode: Any) -> Round:
    store = await SqliteStore.open(folder / "store.db", synchronous=mode)
    try:
        ids = iter(range(MESSAGES))

        async def lane(k: int) -> None:
            worker = f"w{k}"
            for i in ids:
                await store.ingest_many(
                    [Task(f"t{i}", f"message {i}", room=f"room-{i % 40}")], room_policy="concurrent"
                )
                claim = await store.claim(worker, leaderless=True)
                assert claim is not None
                await store.complete(claim, f"reply to {claim.task.body}")
                await store.mark_delivered(claim.task.id)

        async def lanes() -> None:
            async with trio.open_nursery() as nursery:
                for k in range(LANES):
                    nursery.start_soon(lane, k)

        result = await measured(lanes)
        assert (await store.counts())[CustodyState.DELIVERED] == MESSAGES
    finally:
        await store.aclose()
    return result


async def _until_delivered(service: BridgeService, store: SqliteStore) -> None:
    """Wait until delivery has confirmed every message; fail loudly (with the store's counts)
    if it makes no progress for ``STALL_S`` seconds instead of hanging the benchmark.

    It wakes when delivery marks replies delivered (its ``on_delivered`` hook), not on a
    timer: this process's CPU is the bridge's figure, and a 5 ms poll cost it ~25 us a
    message here (200 timer wake-ups a second, each a Trio cancellation)."""
    delivery = service.delivery
    assert delivery is not None
    stats, rung = delivery.stats, trio.Event()
    forward = delivery.on_delivered

    def ring() -> None:
        if forward is not None:
            forward()
        rung.set()  # stats are counted before this task runs again

    delivery.on_delivered = ring
    seen, since = -1, time.perf_counter()
    while stats.delivered < MESSAGES:
        if stats.delivered != seen:
            seen, since = stats.delivered, time.perf_counter()
        elif time.perf_counter() - since > STALL_S:
            counts = {k.value: v for k, v in (await store.counts()).items()}
            raise RuntimeError(f"stalled at {seen} of {MESSAGES} delivered; store: {counts}")
        with trio.move_on_after(1.0):
            await rung.wait()
        rung = trio.Event()


async def bridge_rate(folder: Path, mode: Any, *, lead: bool) -> Round:
    async with (
        gateway_process(folder) as (url, gateway_pid),
        httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
        ) as http,
    ):
        await submit_all(http, MESSAGES)

        config = BridgeConfig(
            gateway=url,
            token_file=folder / "token",
            store=str(folder / "bridge.db"),
            agent="tether.agents.noop:factory",
            workers=WORKERS,
            concurrency=CONCURRENCY,
            poll_wait=5.0,
            grace=2.0,
            lead=lead,
            synchronous=mode,
            log_level="WARNING",
        )
        store = await SqliteStore.open(folder / "bridge.db", synchronous=mode)
        service = BridgeService(config, store=store)
        result: Round | None = None
        try:
            async with trio.open_nursery() as bridge:

                async def drain() -> None:
                    await bridge.start(service.run)
                    await _until_delivered(service, store)

                result = await measured(drain, gateway_pid)
                bridge.cancel_scope.cancel()
        finally:
            await store.aclose()
        stats = (await _get_retried(http, "/v1/stats")).json()
        assert stats["tasks"]["answered"] == MESSAGES, stats  # every reply is at the gateway
    assert result is not None
    return result


def _cpu(side: Round) -> str:
    gateway = "" if side.gateway_cpu_us is None else f" + gateway {side.gateway_cpu_us:4.0f}"
    return f"{side.rate:6.0f} msg/s, CPU {side.cpu_us:4.0f} us/msg{gateway} (busy {side.busy:.0%})"


async def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    sides: dict[tuple[str, str], list[Round]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(ROUNDS):
            for mode in MODES:
                folder = Path(tmp, f"round-{r}-{mode}")
                for side in ("s", "b", "l"):
                    (folder / side).mkdir(parents=True)
                ran = (
                    await store_rate(folder / "s", mode),
                    await bridge_rate(folder / "b", mode, lead=True),
                    await bridge_rate(folder / "l", mode, lead=False),
                )
                for name, result in zip(("store", "bridge", "leaderless"), ran, strict=True):
                    sides.setdefault((mode, name), []).append(result)
                print(
                    f"round {r + 1} {mode}: store {_cpu(ran[0])}\n"
                    f"         bridge {_cpu(ran[1])}\n"
                    f"     leaderless {_cpu(ran[2])}",
                    file=sys.stderr,
                )

    def median(rounds: list[Round], of: Callable[[Round], float]) -> float:
        return statistics.median(of(x) for x in rounds)

    def spread(rounds: list[Round], of: Callable[[Round], float]) -> str:
        return f"{min(of(x) for x in rounds):.0f}-{max(of(x) for x in rounds):.0f}"

    for mode in MODES:
        store = sides[mode, "store"]
        shown = "durable at promises" if mode == "NORMAL" else "a sync at every commit"
        print(f"synchronous={mode} ({shown}), {ROUNDS} rounds of {MESSAGES} messages:")
        for name, label in (
            ("bridge", f"bridge end to end (noop agent, {WORKERS} workers x {CONCURRENCY}, lead)"),
            ("leaderless", "bridge without a lead (workers claim pending directly)"),
            ("store", f"store ingest -> deliver ({LANES} lanes)"),
        ):
            rounds = sides[mode, name]
            print(
                f"  {label:<58} {median(rounds, lambda r: r.rate):7.0f} msg/s"
                f" ({spread(rounds, lambda r: r.rate)}), "
                f"{median(rounds, lambda r: r.cpu_us):5.0f} us CPU/msg"
                f" ({spread(rounds, lambda r: r.cpu_us)})"
            )
        for name in ("bridge", "leaderless"):
            rounds = sides[mode, name]
            # the disk is shared (fsync cost swings between rounds): compare within each round
            by_rate = statistics.median(x.rate / y.rate for x, y in zip(rounds, store, strict=True))
            cpu = median(rounds, lambda r: r.cpu_us)
            print(
                f"  {name}: CPU {cpu:.0f} us/msg (bar: <= {CPU_BAR_US}); rate / store {by_rate:.2f}"
                f" (this process busy {median(rounds, lambda r: r.busy):.0%})"
            )


if __name__ == "__main__":
    trio.run(main)
