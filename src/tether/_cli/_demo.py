"""``tether demo``: the main job end to end, in one process, in a temporary directory.

A reference gateway, a bridge with the echo agent restarted halfway (like a deploy) and a few
hundred messages; the summary counts sent, replied, lost (exit 1 unless none) and duplicates.
"""

from __future__ import annotations

import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import attrs
import httpx
import trio

from .. import ChildSpec, open_runtime, wait_stop_requested
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

    def show(self, done: int, label: str) -> None:
        if not self.enabled:
            return
        tty = self.out.isatty()
        step = max(1, self.total // 10)
        if not tty and done != self.total and done // step == self._shown // step:
            return
        self._shown = done
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
    with tempfile.TemporaryDirectory(prefix="tether-demo-") as folder:
        result = trio.run(partial(_demo, Path(folder), messages, workers, agent, quiet))
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


async def _demo(folder: Path, count: int, workers: int, agent: str, quiet: bool) -> DemoResult:
    token_file = folder / "gateway" / "token"
    ensure_token_file(token_file)
    token = read_token(token_file)
    progress = Progress(count, enabled=not quiet)
    started = time.monotonic()
    async with open_runtime(grace=5.0) as runtime:
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
        async with (
            httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http,
            await SqliteStore.open(config.store, synchronous="NORMAL") as store,
        ):
            texts = [f"hello #{i}" for i in range(count)]
            ids = await _send(http, texts, progress)
            first = await _run_bridge_until(
                runtime, config, store, http, count // 2, progress, "first", crash=True
            )
            await _run_bridge_until(
                runtime, config, store, http, count, progress, "second", crash=False
            )
            progress.end()
            result = await _check(http, ids, texts, time.monotonic() - started)
            return attrs.evolve(result, first_bridge=first)


async def _send(http: httpx.AsyncClient, texts: list[str], progress: Progress) -> list[str]:
    ids: list[str] = [""] * len(texts)
    limiter = trio.CapacityLimiter(16)
    sent = 0

    async def one(i: int) -> None:
        nonlocal sent
        async with limiter:
            response = await http.post(
                "/v1/messages",
                json={"room": f"room-{i % ROOMS}", "text": texts[i], "id": f"demo-{i:06d}"},
            )
            response.raise_for_status()
            ids[i] = response.json()["id"]
            sent += 1
            progress.show(sent, "sent")

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
    runtime: Any,
    config: BridgeConfig,
    store: SqliteStore,
    http: httpx.AsyncClient,
    target: int,
    progress: Progress,
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
    progress.show((await _answered(http))[0], f"replied ({which} bridge)")
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
