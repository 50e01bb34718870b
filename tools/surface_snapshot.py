"""Print what an operator sees of one fixed custody store, to compare two versions (issue 46).

``python tools/surface_snapshot.py build <dir>`` makes ``<dir>/custody.db``: a SQLite store with
tasks in every custody state, steps, an ask, a parked run, limits (one holding permits, one
paused), tenant weights, a worker's beat and a room's conversation, written through the
store's API on a fixed clock. ``render <dir> [-o out.txt]`` copies that store into a temporary
directory and prints, for the copy: ``--help`` of every command, every reading ``tether store``
verb (text and ``--json``), four refused commands (exit code and stderr), and the admin
``/status`` and ``/metrics`` of a ``tether worker run`` on it and of a ``tether bridge run`` on
a second copy (its gateway a ``tether gateway serve`` that knows none of the tasks), each read
once its pool has settled (``SETTLE_S``). ``all`` does both in a temporary directory.

Build once, on the old version, and render that same store with both versions: the build goes
through store methods a refactor may move, the render only through the ``tether`` command.

Every ``tether`` process runs with ``time.time`` frozen at ``NOW`` (so the ages, deadlines and
times shown are the same on every run) and ``COLUMNS=100``. What is still inherently variable
is replaced by named placeholders: the temporary directory (``<store-dir>``), the admin port
(``127.0.0.1:<port>``), and what ``MEASURED_KEYS`` and ``MEASURED_METRICS`` name
(``<measured>``: the wall-clock ages of readings, uptimes, the Trio tasks alive at an instant).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

T0 = 1_790_000_000.0
"""When the build starts (2026-09-21T14:13:20Z): every record's time is T0 plus a few seconds."""
NOW = T0 + 3_600.0
"""The frozen wall clock of every ``tether`` process the render runs: an hour after the build."""
LEASE_S = 7 * 86_400.0
"""Leases and waits far past ``NOW``: the rendered worker process expires none of them."""

_FROZEN = (
    "import runpy, sys, time\n"
    "time.time = lambda: {now!r}\n"
    "runpy.run_module('tether', run_name='__main__', alter_sys=True)\n"
)


class _Clock:
    """The build's clock: ``T0`` plus the seconds the build has moved it on."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float = 1.0) -> None:
        self.now += seconds


async def _build(path: Path) -> None:
    from tether.bridge import SqliteStore, Task
    from tether.bridge.custody import Claim, LimitSpec

    clock = _Clock()
    store = await SqliteStore.open(path, clock=clock, lease_s=LEASE_S, max_attempts=3)

    async def claimed(task: Task, worker: str = "w1") -> Claim:
        await store.ingest(task)
        clock.tick()
        await store.assign(task.id, worker)
        claim = await take(task.id, worker)
        clock.tick()
        return claim

    async def take(id: str, worker: str = "w1") -> Claim:
        claim = await store.claim(worker)
        if claim is None or claim.task.id != id:
            raise RuntimeError(f"the build expected {worker} to claim {id}, got {claim}")
        return claim

    async with store:
        await store.set_tenant_weight("acme", 3.0)
        await store.set_tenant_weight("globex", 0.5)
        await store.set_limit(LimitSpec("openai:gpt-4o", rate=5.0, burst=10.0, concurrency=2))
        await store.set_limit(LimitSpec("search", concurrency=4))
        await store.set_limit(LimitSpec("mail", rate=0.5))
        # a room's conversation: two delivered turns with the agent's state
        for n, text in enumerate(("hello", "and again"), 1):
            claim = await claimed(Task(f"room-{n}", text, room="alice", headers={"tenant": "acme"}))
            await store.complete_with_state(claim, f"reply {n}", {"turns": n}, n - 1)
            clock.tick()
            await store.mark_delivered(f"room-{n}")
            clock.tick()
        # a result not yet delivered, with two steps and a permit it took
        claim = await claimed(Task("result-1", "summarise", headers={"tenant": "globex"}))
        await store.record_step(claim, "fetch", json.dumps({"pages": 3}))
        await store.record_step(claim, "summary", json.dumps("short"))
        await store.complete(claim, "the summary")
        clock.tick()
        # claimed and running: a step, a permit held, one more on another key
        claim = await claimed(Task("claimed-1", "long job", priority="urgent"))
        await store.record_step(claim, "plan", json.dumps(["a", "b"]))
        await store.acquire_permit(claim, "openai:gpt-4o")
        await store.acquire_permit(claim, "search", 2.0)
        await store.pause_limit("mail", NOW + 600.0)
        # waiting: a durable sleep, and a question to the person in room bob
        claim = await claimed(Task("sleep-1", "remind me"))
        await store.park(claim, T0 + LEASE_S, "sleep 7d")
        claim = await claimed(Task("ask-1", "book a table", room="bob"))
        await store.ask(claim, "when", "What time?", T0 + LEASE_S, "ask when")
        # pending, each held back by a failed attempt (a live worker claims no task of these)
        for id, tenant in (("pending-1", "acme"), ("pending-2", "globex"), ("pending-3", None)):
            headers = {"tenant": tenant} if tenant else {}
            claim = await claimed(Task(id, f"job {id}", headers=headers))
            await store.fail(claim, "ConnectionError: 503", retry_after=LEASE_S)
        # dead: out of attempts, hopeless, cancelled by an operator
        await store.ingest(Task("dead-1", "flaky"))
        for n in range(3):
            await store.assign("dead-1", "w1")
            claim = await take("dead-1")
            clock.tick()
            await store.fail(claim, f"TimeoutError: attempt {n + 1}")
        claim = await claimed(Task("dead-2", "bad input"))
        await store.fail(claim, "ValueError: not JSON", permanent=True)
        await store.ingest(Task("dead-3", "never mind"))
        await store.cancel(["dead-3"], "operator: duplicate")
        # assigned to w1 (alive: it beats at NOW), not claimed yet
        clock.now = NOW
        await store.beat("w1", "worker", 4)
        await store.ingest(Task("assigned-1", "queued for w1"))
        await store.assign("assigned-1", "w1")


# Rendering -----------------------------------------------------------------------------------

COMMANDS = (
    (),
    ("demo",),
    ("example",),
    ("bridge",),
    ("bridge", "run"),
    ("store",),
    *(("store", verb) for verb in ("status", "show", "list", "retry", "cancel", "room")),
    ("store", "forget-room"),
    ("store", "limits"),
    ("store", "limits", "set"),
    ("store", "tenants"),
    ("store", "tenants", "set"),
    ("worker",),
    ("worker", "run"),
    ("gateway",),
    ("gateway", "serve"),
    ("ps",),
    ("status",),
)
"""Every command whose ``--help`` the render prints."""

TASKS = (
    "room-1", "room-2", "result-1", "claimed-1", "sleep-1", "ask-1",
    "pending-1", "pending-2", "pending-3", "dead-1", "dead-2", "dead-3", "assigned-1",
)  # fmt: skip
STATES = ("pending", "assigned", "claimed", "result", "delivered", "dead", "waiting")


def _environ(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env.update(COLUMNS="100", LC_ALL="C.UTF-8", HOME=str(home), NO_COLOR="1")
    return env


def _tether(argv: Sequence[str]) -> list[str]:
    return [sys.executable, "-c", _FROZEN.format(now=NOW), *argv]


class Render:
    """The render's output, normalised as it is written."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.lines: list[str] = []
        self.subs: list[tuple[re.Pattern[str], str]] = [
            (re.compile(re.escape(str(work.resolve()))), "<store-dir>"),
            (re.compile(re.escape(str(work))), "<store-dir>"),
        ]

    def normal(self, text: str) -> str:
        for pattern, placeholder in (*self.subs, *_VARIABLE):
            text = pattern.sub(placeholder, text)
        return text

    def section(self, title: str, body: str) -> None:
        self.lines.append(f"=== {self.normal(title)}")
        self.lines.append(self.normal(body).rstrip("\n"))

    def command(self, *argv: str, store: bool = True) -> None:
        where = ["--store", str(self.work / "custody.db")] if store else []
        done = subprocess.run(
            _tether([*argv, *where]),
            capture_output=True,
            text=True,
            env=_environ(self.work),
            cwd=self.work,
            timeout=120,
            check=False,
        )
        body = f"[exit {done.returncode}]\n{done.stdout}"
        if done.stderr:
            body += f"--- stderr\n{done.stderr}"
        self.section("$ tether " + " ".join(argv), body)


_VARIABLE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<port>"),
)


def render_cli(out: Render) -> None:
    for command in COMMANDS:
        out.command(*command, "--help", store=False)
    out.command("store", "status")
    out.command("store", "status", "--json")
    out.command("store", "status", "--limit", "1")
    for state in STATES:
        out.command("store", "list", "--state", state)
    out.command("store", "list", "--state", "dead", "--json")
    out.command("store", "list", "--state", "waiting", "--json")
    for id in TASKS:
        out.command("store", "show", id)
    for id in ("room-2", "result-1", "claimed-1", "ask-1", "dead-1"):
        out.command("store", "show", id, "--json")
    for room in ("alice", "bob"):
        out.command("store", "room", room)
        out.command("store", "room", room, "--json")
    out.command("store", "limits")
    out.command("store", "limits", "--json")
    out.command("store", "tenants")
    out.command("store", "tenants", "--json")
    # refused: one clear line each
    out.command("store", "show", "no-such-task")
    out.command("store", "room", "no-such-room")
    out.command("store", "list", "--state", "gone")
    out.command("store", "status", "--limit", "0")


@contextmanager
def _process(out: Render, name: str, argv: Sequence[str], frozen: bool = True) -> Iterator[str]:
    """A ``tether`` process (time frozen unless told) logging into ``<name>.log``: that log's
    text once the process has announced a URL, then its exit code in the output."""
    log = out.work / f"{name}.log"
    command = _tether(argv) if frozen else [sys.executable, "-m", "tether", *argv]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env=_environ(out.work)
        )
    try:

        def announced() -> str | None:
            text = log.read_text()
            return text if "http://" in text else None

        yield _wait_for(announced, 60)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        out.section(f"{name} process: exit code", str(process.returncode))


def _admin(out: Render, name: str, argv: Sequence[str]) -> None:
    """Start ``argv`` with its admin endpoint and print its settled ``/status`` and ``/metrics``."""
    token_file = out.work / f"{name}-admin-token"
    admin = ["--admin-port", "0", "--admin-token-file", str(token_file), "--grace", "1"]
    with _process(out, name, [*argv, *admin]):
        log = _wait_for(lambda: re.search(r"admin endpoint (http://\S+)", _text(out, name)), 60)
        url, token = log.group(1).rstrip("/,"), token_file.read_text().strip()
        last: tuple[str, str] | None = None
        since = time.monotonic()

        def settled() -> tuple[str, str] | None:
            """Leading, its workers seen by the lead, and every read alike for SETTLE_S."""
            nonlocal last, since
            status = _get(url + "/status", token)
            pool = json.loads(status)["pool"]
            if not pool["leading"] or set(pool["workers"]) - set(pool["workers_seen"]):
                return None
            now = (_status(status), _metrics(_get(url + "/metrics", token)))
            if now != last:
                last, since = now, time.monotonic()
            return now if time.monotonic() - since >= SETTLE_S else None

        status, metrics = _wait_for(settled, 60)
        out.section(f"GET /status ({name} process)", status)
        out.section(f"GET /metrics ({name} process)", metrics)


def _text(out: Render, name: str) -> str:
    return (out.work / f"{name}.log").read_text()


def _wait_for(check: Callable[[], T | None], within: float) -> T:
    deadline = time.monotonic() + within
    while (found := check()) is None or found is False:
        if time.monotonic() > deadline:
            sys.exit(f"gave up after {within} s waiting for {check}")
        time.sleep(0.1)
    return found


def _get(url: str, token: str) -> str:
    request = urllib.request.Request(url, headers={"authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(response.read().decode())


def render_admin(out: Render) -> None:
    """A worker process on one copy of the store; on another, a bridge to a reference gateway
    that knows none of the store's tasks (it refuses their results, questions and notices)."""
    pool = ["--workers", "1", "--concurrency", "1", "--pool-name", "snapshot"]
    _admin(out, "worker", ["worker", "run", "--store", str(out.work / "custody.db"), *pool])
    gateway = [
        *("gateway", "serve", "--port", "0", "--db", str(out.work / "gateway.db")),
        *("--token-file", str(out.work / "gateway-token")),
    ]
    with _process(out, "gateway", gateway, frozen=False) as log:
        url = re.search(r"listening on (http://\S+)", log)
        if url is None:
            sys.exit(f"the gateway announced no URL:\n{log}")
        bridge = [
            *("bridge", "run", "--store", str(out.work / "bridge" / "custody.db"), *pool),
            *("--gateway", url.group(1), "--token-file", str(out.work / "gateway-token")),
        ]
        _admin(out, "bridge", bridge)


SETTLE_S = 3.0
"""How long a process's reads must stay alike: three of the admin's custody readings (one a
second), so no move made meanwhile is still to show."""
MEASURED_KEYS = frozenset({"uptime_s", "custody_age_s", "live_tasks"})
"""``/status`` fields measured while the process runs: times on the wall clock, and the Trio
tasks alive at that instant (a request's or a sweep's come and go)."""
MEASURED_TIMINGS = frozenset({"lead_sweep"})
"""``/status`` timings of work that repeats while the process runs: how often and how long."""
MEASURED_METRICS = frozenset(
    {"tether_custody_reading_age_seconds", "tether_registry_tasks"}
    | {f"tether_lead_sweep_seconds{part}" for part in ("_bucket", "_count", "_sum")}
)
"""``/metrics`` samples measured while the process runs (as the two above)."""


def _status(text: str) -> str:
    def measured(value: object) -> object:
        if isinstance(value, dict) and value.get("name") in MEASURED_TIMINGS:
            return {k: v if k == "name" else "<measured>" for k, v in value.items()}
        if isinstance(value, dict):
            return {
                k: "<measured>" if k in MEASURED_KEYS else measured(v) for k, v in value.items()
            }
        if isinstance(value, list):
            return [measured(v) for v in value]
        return value

    return json.dumps(measured(json.loads(text)), indent=1)


def _metrics(text: str) -> str:
    def line(sample: str) -> str:
        name = re.split(r"[{ ]", sample, maxsplit=1)[0]
        return f"{sample.rsplit(' ', 1)[0]} <measured>" if name in MEASURED_METRICS else sample

    return "\n".join(line(s) for s in text.splitlines())


def render(store_dir: Path) -> str:
    built = store_dir / "custody.db"
    if not built.is_file():
        sys.exit(f"{built}: no store here (make one with `build {store_dir}`)")
    with tempfile.TemporaryDirectory(prefix="tether-surface-") as tmp:
        work = Path(tmp)
        (work / "bridge").mkdir()
        for part in store_dir.glob("custody.db*"):  # with its wake-up side file
            shutil.copy2(part, work / part.name)
            shutil.copy2(part, work / "bridge" / part.name)
        out = Render(work)
        render_cli(out)
        render_admin(out)
        return "\n".join(out.lines) + "\n"


def build(store_dir: Path) -> None:
    import trio

    store_dir.mkdir(parents=True, exist_ok=True)
    path = store_dir / "custody.db"
    if path.exists():
        sys.exit(f"{path} exists: build into an empty directory")
    logging.disable(logging.CRITICAL)  # the store logs each move it is asked for
    trio.run(_build, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    b = verbs.add_parser("build", help="make <dir>/custody.db (on the old version)")
    b.add_argument("dir", type=Path)
    r = verbs.add_parser("render", help="print the surface of <dir>/custody.db")
    r.add_argument("dir", type=Path)
    r.add_argument("-o", "--output", type=Path, help="write here (default: stdout)")
    a = verbs.add_parser("all", help="build in a temporary directory and render")
    a.add_argument("-o", "--output", type=Path, help="write here (default: stdout)")
    args = parser.parse_args(argv)
    if args.verb == "build":
        build(args.dir)
        return 0
    if args.verb == "render":
        text = render(args.dir)
    else:
        with tempfile.TemporaryDirectory(prefix="tether-surface-build-") as tmp:
            build(Path(tmp))
            text = render(Path(tmp))
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
