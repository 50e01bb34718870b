"""``tether demo``: the main job end to end, in one process, in a temporary directory.

A reference gateway, a bridge with the echo agent restarted halfway (like a deploy) and a few
hundred messages; the summary counts sent, replied, lost (exit 1 unless none) and duplicates.
Ctrl-C (or SIGTERM) stops it at once, at any moment, says how far it got and exits 130.
"""

from __future__ import annotations

import logging
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import attrs
import httpx
import trio

from .. import ChildSpec, Runtime, open_runtime, wait_stop_requested
from ..bridge import (
    BridgeConfig,
    BridgeService,
    ConfigError,
    SqliteStore,
    ensure_token_file,
    read_token,
)
from ..gateway import GatewaySettings, serve

ROOMS = 40
"""Conversations: a room's messages stay on one worker, so many rooms spread the load."""
REPLY_TIMEOUT = 45.0
EXIT_INTERRUPTED = 130
"""128 + SIGINT, as shells report a Ctrl-C."""


@attrs.define(eq=False)
class DemoState:
    """How far the demo got: what the summary of an interrupted demo reports."""

    total: int
    started: float = attrs.field(factory=time.monotonic)
    sent: int = 0
    answered: int = 0
    """The gateway's count of answered messages when the demo last looked."""
    phase: str = "starting"


@attrs.define
class DemoResult:
    sent: int
    replied: int
    wrong: int
    lost: int
    duplicates: int
    seconds: float
    samples: list[tuple[str, str]]
    first_bridge: int = 0
    """Replies the first bridge delivered before it crashed (the second answered the rest)."""


@attrs.define(eq=False)
class Progress:
    """A one-line progress bar on stderr (redrawn in place on a terminal, sparse otherwise)."""

    total: int
    out: TextIO = sys.stderr
    enabled: bool = True
    width: int = 30
    _shown: int = -1
    _label: str = ""

    def show(self, done: int, label: str) -> None:
        if not self.enabled or (done, label) == (self._shown, self._label):
            return
        tty = self.out.isatty()
        step = max(1, self.total // 10)
        if not tty and done != self.total and done // step == self._shown // step:
            return
        self._shown, self._label = done, label
        filled = self.width * done // max(1, self.total)
        bar = "#" * filled + "." * (self.width - filled)
        line = f"[{bar}] {done:>5}/{self.total} {label}"
        self.out.write(("\r" + line) if tty else line + "\n")
        self.out.flush()

    def end(self) -> None:
        if self.enabled and self.out.isatty():
            self.out.write("\n")
            self.out.flush()


def run_demo(
    *,
    messages: int = 300,
    workers: int = 4,
    agent: str = "tether.agents.echo:factory",
    quiet: bool = False,
) -> int:
    """Run the demo; print the summary; 0 when every message got its reply."""
    if not 1 <= messages <= 100_000:
        raise ConfigError(f"--messages must be from 1 to 100000, got {messages}")
    if not 1 <= workers <= 64:
        raise ConfigError(f"--workers must be from 1 to 64, got {workers}")
    state = DemoState(messages)
    # the demo tells its own story (the crash it stages is in the summary): tether's warnings
    # about that crash ("bridge: aborting") would read as trouble; errors still show
    tether_log = logging.getLogger("tether")
    level = tether_log.level
    tether_log.setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory(prefix="tether-demo-") as folder:
            if not quiet:
                print(
                    f"tether demo: {messages} messages through a local gateway and a bridge "
                    f"({workers} workers) in {folder}; Ctrl-C stops it",
                    file=sys.stderr,
                    flush=True,
                )
            result = trio.run(partial(_demo, Path(folder), state, workers, agent, quiet))
    except KeyboardInterrupt:  # before or after the runtime handles signals
        result = None
    finally:
        tether_log.setLevel(level)
    if result is None:
        if not quiet and sys.stderr.isatty():
            print(file=sys.stderr)  # below the progress bar's line
        print(
            f"tether demo: interrupted after {time.monotonic() - state.started:.1f} s: sent "
            f"{state.sent} of {state.total} messages, {state.answered} replied ({state.phase}); "
            "the gateway and the bridge are stopped and the temporary folder is removed"
        )
        return EXIT_INTERRUPTED
    print("sample replies:")
    for text, reply in result.samples:
        print(f"  {text!r} -> {reply!r}")
    rate = result.replied / result.seconds if result.seconds else 0.0
    print(
        f"sent {result.sent} / replied {result.replied} / lost {result.lost} / "
        f"duplicates absorbed {result.duplicates}"
        + (f" / wrong replies {result.wrong}" if result.wrong else "")
        + f"  ({result.seconds:.1f} s, {rate:.0f} messages/s; the first bridge crashed after "
        f"{result.first_bridge} replies, a new one on the same store answered the rest)"
    )
    return 0 if result.lost == 0 and result.wrong == 0 else 1


async def _demo(
    folder: Path, state: DemoState, workers: int, agent: str, quiet: bool
) -> DemoResult | None:
    """The demo's result, or None when a signal stopped it (``state`` says how far it got)."""
    token_file = folder / "gateway" / "token"
    ensure_token_file(token_file)
    store_path = folder / "bridge" / "custody.db"
    # the store outlives the runtime: no bridge is still running when it closes
    async with (
        await SqliteStore.open(str(store_path), synchronous="NORMAL") as store,
        open_runtime(grace=1.0) as runtime,
    ):
        result: DemoResult | None = None
        # the demo's own Ctrl-C: stop now (the runtime's first signal would drain gracefully)
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_cancel_on_signal, signals, nursery.cancel_scope)
                result = await _demo_body(runtime, folder, store, state, workers, agent, quiet)
                nursery.cancel_scope.cancel()
        if result is None:
            # nothing to hand over (the store is a temporary one): stop every child now
            runtime.supervisor.abort("the demo was interrupted")
        return result


async def _cancel_on_signal(signals: AsyncIterator[int], scope: trio.CancelScope) -> None:
    async for signum in signals:
        scope.cancel(reason=f"{signal.Signals(signum).name}: the demo stops")
        return


async def _demo_body(
    runtime: Runtime,
    folder: Path,
    store: SqliteStore,
    state: DemoState,
    workers: int,
    agent: str,
    quiet: bool,
) -> DemoResult:
    token_file = folder / "gateway" / "token"
    token = read_token(token_file)
    count = state.total
    progress = Progress(count, enabled=not quiet)
    state.phase = "starting the gateway"
    port: int = await runtime.supervisor.start_child(
        ChildSpec(
            "gateway",
            partial(serve, shutdown_trigger=wait_stop_requested),
            GatewaySettings(
                token_file=token_file,
                db=folder / "gateway" / "gateway.db",
                # the default 30 s lease: a poll answered just as the first bridge stops
                # is never read, but that bridge gives its unacked leases back on its
                # way out (POST /v1/leases/release), so nothing waits out the lease
                port=0,
            ),
        )
    )
    url = f"http://127.0.0.1:{port}"
    config = BridgeConfig(
        gateway=url,
        token_file=token_file,
        store=str(folder / "bridge" / "custody.db"),
        agent=agent,
        workers=workers,
        poll_wait=5.0,
        grace=5.0,
        log_level="WARNING",
        # the demo's users fire independent questions all at once; under the default
        # (serial) each room would answer its five in turn, a reply delivered before the
        # next run: right for a conversation, slow for a throughput demo
        room_policy="concurrent",
    )
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
        texts = [f"hello #{i}" for i in range(count)]
        state.phase = "sending the messages"
        ids = await _send(http, texts, progress, state)
        first = await _run_bridge_until(
            runtime, config, store, http, count // 2, progress, state, "first", crash=True
        )
        await _run_bridge_until(
            runtime, config, store, http, count, progress, state, "second", crash=False
        )
        progress.end()
        state.phase = "checking the replies"
        result = await _check(http, ids, texts, time.monotonic() - state.started)
        return attrs.evolve(result, first_bridge=first)


async def _send(
    http: httpx.AsyncClient, texts: list[str], progress: Progress, state: DemoState
) -> list[str]:
    ids: list[str] = [""] * len(texts)
    limiter = trio.CapacityLimiter(16)

    async def one(i: int) -> None:
        async with limiter:
            response = await http.post(
                "/v1/messages",
                json={"room": f"room-{i % ROOMS}", "text": texts[i], "id": f"demo-{i:06d}"},
            )
            response.raise_for_status()
            ids[i] = response.json()["id"]
            state.sent += 1
            progress.show(state.sent, "sent")

    async with trio.open_nursery() as nursery:
        for i in range(len(texts)):
            nursery.start_soon(one, i)
    return ids


async def _answered(http: httpx.AsyncClient) -> tuple[int, int]:
    response = await http.get("/v1/stats")
    response.raise_for_status()
    stats: Any = response.json()
    return stats["tasks"]["answered"] + stats["tasks"]["closed"], stats["duplicate_results"]


async def _run_bridge_until(
    runtime: Runtime,
    config: BridgeConfig,
    store: SqliteStore,
    http: httpx.AsyncClient,
    target: int,
    progress: Progress,
    state: DemoState,
    which: str,
    *,
    crash: bool,
) -> int:
    """Run a bridge until ``target`` messages are answered, then crash it (``abort``: no soft
    stop, no grace; what custody must survive) or stop it softly; return how many replies this
    bridge delivered."""
    service = BridgeService(config, store=store)
    name = f"bridge-{which}"
    ended = trio.Event()

    async def run(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await service.run(task_status=task_status)
        finally:
            ended.set()

    state.phase = f"the {which} bridge was answering"
    before, _ = await _answered(http)
    await runtime.supervisor.start_child(
        ChildSpec(name, run, restart="temporary", shutdown_grace=service.stop_grace)
    )

    def delivered() -> int:
        return service.delivery.stats.delivered if service.delivery is not None else 0

    with trio.move_on_after(REPLY_TIMEOUT):
        shown = trio.current_time()
        while True:
            if trio.current_time() - shown >= 0.05 or not crash:
                shown = trio.current_time()
                answered, _ = await _answered(http)  # the gateway's count: the truth
                state.answered = answered
                progress.show(answered, f"replied ({which} bridge)")
                if answered >= target and not crash:
                    break
            # to crash midway, the bridge's own count, looked at often (it answers thousands a
            # second), and the one the summary reports: the gateway's runs ahead of it while
            # "delivered" marks commit. It counts a re-posted reply again, so it never decides
            # the end
            if crash and before + delivered() >= target:
                break
            await trio.sleep(0.002 if crash else 0.02)
    if crash:
        service.abort("the demo crashes the first bridge midway")
        await ended.wait()
    else:
        await runtime.supervisor.terminate_child(name)
    state.answered = (await _answered(http))[0]
    progress.show(state.answered, f"replied ({which} bridge)")
    if service.fatal is not None:
        raise service.fatal
    return delivered()


async def _check(
    http: httpx.AsyncClient, ids: list[str], texts: list[str], seconds: float
) -> DemoResult:
    replied = wrong = 0
    samples: list[tuple[str, str]] = []
    for task_id, text in zip(ids, texts, strict=True):
        response = await http.get(f"/v1/messages/{task_id}")
        response.raise_for_status()
        reply = response.json()["reply"]
        if reply is None:
            continue
        replied += 1
        if text not in reply:
            wrong += 1
        if len(samples) < 3:
            samples.append((text, reply))
    _, duplicates = await _answered(http)
    return DemoResult(
        sent=len(ids),
        replied=replied,
        wrong=wrong,
        lost=len(ids) - replied,
        duplicates=duplicates,
        seconds=seconds,
        samples=samples,
    )
