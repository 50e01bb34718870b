"""Issue #49's table before and after: one row's benchmark run alternately in two checkouts.

Each pair runs the row's benchmark once in each checkout (``DIR/.venv/bin/python``, or the
interpreter given by ``--before-python``/``--after-python``), the order alternating between
pairs so neither side always goes first, each run in a fresh scratch folder. The figures are
parsed from each run's output; printed: each pair's figures side by side with after/before,
then per figure each side's median and spread (min-max) and the after/before ratio per pair
(median and spread). By default both sides run this folder's copy of the benchmark (the same
measuring code; only the tether under it differs); ``--own-scripts`` runs each checkout's own
copy instead (for a benchmark the other checkout's tether cannot run).

A row measured against a peer (DBOS, LangGraph, the SQLite queues) also prints the peer's
figure and tether's ratio to it on each side. The peers live in the ``bench`` dependency
group; a side whose interpreter lacks them skips them, and its ratio then uses the peer's
figure from the other side's run of the same pair (said in the output). To give a checkout
the peers without touching it, make an interpreter for it elsewhere:

    UV_PROJECT_ENVIRONMENT=/tmp/before-venv uv sync --locked --all-extras --group bench \\
        --project ../wt-base    # then: --before-python /tmp/before-venv/bin/python

Rows (``--list`` shows each one's command, default pairs and figures): lone, lone-steps, dbos-1,
dbos-8, langgraph, conversation-cost, bridge-cpu, lanes-1, lanes-16, latency, pg-pool, registry,
dispatch; ``all`` runs them one after another (about 26 minutes on the 2-core machine at a load of
6-10 under ``nice``, 3 pairs a row; less when it is quiet). The CPU figures (bridge-cpu, registry,
dispatch) stand a busy machine; the latencies (lone, latency) and rates do not: run on a quiet one.

    uv run python benchmarks/before_after.py ROW|all|ROW,ROW --before ../wt-base --after .
        [--pairs N] [--args '--messages 100'] [--env MESSAGES=500] [--own-scripts]
        [--log DIR] [--nice 10] [--before-python PY] [--after-python PY]
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs

Figures = dict[str, float]
Derived = Callable[[Mapping[str, float]], float]


@attrs.frozen
class Row:
    """One row of the table: the benchmark run for it and the figures read from its output."""

    title: str
    script: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = attrs.field(factory=dict)
    figures: Mapping[str, str] = attrs.field(factory=dict)
    """Figure name -> a regex whose first group is the number (multiline, first match)."""
    peers: frozenset[str] = frozenset()
    """Figures of a peer, not of tether: borrowed from the other side when a side lacks them."""
    derived: Mapping[str, Derived] = attrs.field(factory=dict)
    """Figures computed from the others (a ratio to a peer), per side and run."""
    settings: str = r"^settings.*|^durable steps.*|^tether: synchronous.*|^synchronous=.*"
    """Lines of the output echoed once per side: each side's settings, as it printed them."""
    pairs: int = 3
    """Pairs run by default (``--pairs`` overrides): with ``args``, sized so the whole table
    takes about 25 minutes on the 2-core machine."""
    requires: tuple[str, ...] = ()
    """Modules of the ``bench`` group the benchmark cannot run without (on either side)."""
    optional: tuple[str, ...] = ()
    """Modules of the peers it skips when missing (their figures are then borrowed)."""


def _ratio(num: str, den: str) -> Derived:
    return lambda f: f[num] / f[den]


def _over_fastest(num: str, peers: tuple[str, ...]) -> Derived:
    return lambda f: f[num] / max(f[p] for p in peers if p in f)


_QUEUES = ("huey", "persist-queue", "litequeue")


def _lone(variant: str, title: str) -> Row:
    line = r"^\s+" + re.escape(variant) + r"\[here\]\s+p50 "
    return Row(
        title,
        "lone_message.py",
        ("--variants", variant, "--rounds", "1", "--messages", "200"),
        figures={
            "p50 ms": line + r"median ([\d.]+)",
            "p99 ms": line + r".*?p99 median ([\d.]+)",
            "max ms": line + r".*?max median ([\d.]+)",
            "waits the completion hook missed": line + r".*?hook missed (\d+)",
        },
        settings=r"^settings.*|^\s+" + re.escape(variant) + r"\[here\]: .*",
    )


def _lanes(lanes: int, title: str) -> Row:
    head = rf"^\s+{lanes} lane\(s\): .*?"
    return Row(
        title,
        "peers_sqlite.py",
        ("--lanes", str(lanes), "--rounds", "2", "--jobs", "400" if lanes == 1 else "600"),
        figures={
            "tether /s": rf"^\s+{lanes} lane\(s\): tether ([\d,]+)/s",
            "tether-full /s": head + r"tether-full ([\d,]+)/s",
            **{f"{p} /s": head + rf"\b{re.escape(p)} ([\d,]+)/s" for p in _QUEUES},
        },
        peers=frozenset(f"{p} /s" for p in _QUEUES),
        optional=("huey", "persistqueue", "litequeue"),
        derived={
            "tether-full / fastest peer": _over_fastest(
                "tether-full /s", tuple(f"{p} /s" for p in _QUEUES)
            ),
            "tether / fastest peer": _over_fastest("tether /s", tuple(f"{p} /s" for p in _QUEUES)),
            "tether / slowest peer": lambda f: (
                f["tether /s"] / min(f[f"{p} /s"] for p in _QUEUES if f"{p} /s" in f)
            ),
        },
    )


def _steps(lanes: int, title: str) -> Row:
    return Row(
        title,
        "durable_steps.py",
        ("--lanes", str(lanes), "--workflows", "200", "--rounds", "2"),
        figures={
            "tether steps/s": r"^\s+tether:\s+(\d+) steps/s",
            "dbos steps/s": r"^\s+dbos:\s+(\d+) steps/s",
            "tether step p50 ms": r"^\s+tether:.*per step p50 ([\d.]+) ms",
        },
        peers=frozenset({"dbos steps/s"}),
        optional=("dbos",),
        derived={"tether / dbos": _ratio("tether steps/s", "dbos steps/s")},
    )


ROWS: dict[str, Row] = {
    "lone": _lone("lone", "lone message, embedded pool on SQLite, ingest -> reply durable"),
    "lone-steps": _lone("lone-steps", "the same, the agent running 3 run.steps"),
    "dbos-1": _steps(1, "one workflow of 3 steps at a time vs DBOS Transact (SQLite)"),
    "dbos-8": _steps(8, "8 at once vs DBOS (8 threads)"),
    "langgraph": Row(
        "20 rooms x 20 turns, one turn at a time, embedded pool vs LangGraph SqliteSaver",
        "lone_message.py",
        (
            *("--variants", "talk,langgraph", "--rounds", "1"),
            *("--rooms", "20", "--turns", "20", "--prefill", "20"),
        ),
        figures={
            "tether turns/s": r"^\s+talk\[here\].*turns/s median ([\d.]+)",
            "tether p50 ms": r"^\s+talk\[here\]\s+p50 median ([\d.]+)",
            "langgraph turns/s": r"^\s+langgraph\[here\].*turns/s median ([\d.]+)",
            "langgraph p50 ms": r"^\s+langgraph\[here\]\s+p50 median ([\d.]+)",
        },
        peers=frozenset({"langgraph turns/s", "langgraph p50 ms"}),
        optional=("langgraph",),
        derived={
            "tether / langgraph turns/s": _ratio("tether turns/s", "langgraph turns/s"),
            "tether p50 / langgraph p50": _ratio("tether p50 ms", "langgraph p50 ms"),
        },
        settings=r"^settings.*|^\s+(talk|langgraph)\[here\]: .*",
    ),
    "conversation-cost": Row(
        "a run reading 20 turns of history vs one reading none (conversation_cost.py)",
        "conversation_cost.py",
        (
            "--messages=400",
            "--rounds=1",
            "--langgraph-turns=50",
            "--bridge-messages=300",
        ),
        figures={
            "store path cost %": r"cost of history\+state per message vs no conversation, %: "
            r"median ([-\d.]+)",
            "bridge time cost %": r"cost of history\+state per message on the bridge: "
            r"time ([-+\d.]+)%",
            "bridge CPU cost %": r"cost of history\+state per message on the bridge: "
            r"time [-+\d.]+%, CPU ([-+\d.]+)%",
            "bridge CPU cost of turns only %": r"cost of turns only per message on the bridge: "
            r"time [-+\d.]+%, CPU ([-+\d.]+)%",
            "store path cost of turns only %": r"cost of turns per message vs no conversation, "
            r"%: median ([-\d.]+)",
            "store path x langgraph, 1 at once": r"tether read \+ commit, x LangGraph's speed: "
            r"median ([\d.]+)",
        },
        requires=("langgraph",),
    ),
    "bridge-cpu": Row(
        "bridge CPU per message vs its store's (bridge_throughput.py, NORMAL)",
        "bridge_throughput.py",
        env={"SYNCHRONOUS": "NORMAL", "ROUNDS": "1", "MESSAGES": "1500"},
        figures={
            "bridge us/msg": r"^\s+bridge: CPU (\d+) us/msg",
            "leaderless us/msg": r"^\s+leaderless: CPU (\d+) us/msg",
            "store us/msg": r"store ingest -> deliver \(\d+ lanes\)\s+\d+ msg/s \([^)]*\),"
            r"\s+(\d+) us CPU/msg",
            "bridge msg/s": r"^\s+bridge end to end.*?\s(\d+) msg/s",
        },
        derived={
            "store / bridge CPU": _ratio("store us/msg", "bridge us/msg"),
            "store / leaderless CPU": _ratio("store us/msg", "leaderless us/msg"),
        },
    ),
    "lanes-1": _lanes(1, "SQLite, tether at FULL vs huey/persist-queue/litequeue, 1 lane"),
    "lanes-16": _lanes(16, "same, 16 lanes"),
    "latency": Row(
        "through a gateway and a bridge, light load (bridge_latency.py, lead)",
        "bridge_latency.py",
        env={
            "PHASES": "light",
            "MODES": "lead",
            "STORAGE": "disk",  # the row's; memory (the bridge's own time): --env STORAGE=...
            "MAX_RATE": "100",
            "LIGHT_S": "10",
            "IDLE_S": "2",
        },
        figures={
            "disk p50 added ms": r"^lead light \[disk\].*added p50\s+([\d.]+)",
            "disk p99 added ms": r"^lead light \[disk\].*added p50\s+[\d.]+ p99\s+([\d.]+)",
            "memory p99 added ms": r"^lead light \[memory\].*added p50\s+[\d.]+ p99\s+([\d.]+)",
            "disk p99 clear of stalls ms": r"p99 added of the other \d+: ([\d.]+) ms",
        },
    ),
    "pg-pool": Row(
        "PostgreSQL, the pool as users run it vs pgqueuer at its best (pool_postgres.py)",
        "pool_postgres.py",
        ("--rounds", "1", "--only", "tether pool,pgqueuer"),
        figures={
            "pool jobs/s": r"^\s+tether pool: ([\d,]+)/s",
            "pool server us/job": r"^\s+tether pool: .*server CPU (\d+) us/job",
            "pool client us/job": r"^\s+tether pool: .*client CPU (\d+) us/job",
            "pgqueuer jobs/s": r"^\s+pgqueuer: ([\d,]+)/s",
            "pgqueuer server us/job": r"^\s+pgqueuer: .*server CPU (\d+) us/job",
        },
        peers=frozenset({"pgqueuer jobs/s", "pgqueuer server us/job"}),
        derived={"pool / pgqueuer": _ratio("pool jobs/s", "pgqueuer jobs/s")},
        requires=("pgqueuer", "asyncpg"),
    ),
    "registry": Row(
        "registry overhead vs bare Trio (registry_overhead.py)",
        "registry_overhead.py",
        ("--tasks", "100000", "--rounds", "3"),
        figures={
            "registry / bare": r"median ratio \(registry / bare\): ([\d.]+)",
            "owned / bare": r"median ratio with owner labels .*: ([\d.]+)",
            "hooks floor": r"floor \(empty hooks / bare\): ([\d.]+)",
        },
    ),
    "dispatch": Row(
        "session dispatch vs asyncio (session_dispatch.py)",
        "session_dispatch.py",
        ("--events", "100000", "--rounds", "2"),
        figures={
            "paced x asyncio": r"^paced.*ratio tether/asyncio ([\d.]+)x",
            "burst x asyncio": r"^burst \(one loop\).*ratio tether/asyncio ([\d.]+)x",
            "burst yields x asyncio": r"^burst, handler yields.*ratio tether/asyncio ([\d.]+)x",
            "paced tether ev/s": r"^paced.*tether\s+([\d,]+) ev/s",
        },
    ),
}


@attrs.frozen
class Side:
    name: str
    checkout: Path
    python: Path

    def script(self, row: Row, own: bool) -> Path:
        here = Path(__file__).resolve().parent
        return (self.checkout / "benchmarks" if own else here) / row.script


def parse(row: Row, output: str) -> Figures:
    found: Figures = {}
    for name, pattern in row.figures.items():
        match = re.search(pattern, output, re.MULTILINE)
        if match is not None:
            found[name] = float(match.group(1).replace(",", "").lstrip("+"))
    return found


def run_once(
    row: Row, side: Side, args: argparse.Namespace, log: Path | None, label: str
) -> tuple[Figures, str]:
    """Run ``row``'s benchmark once in ``side``; its figures and its output."""
    extra = shlex.split(args.args) if args.args else []
    command = [str(side.python), str(side.script(row, args.own_scripts)), *row.args, *extra]
    if args.nice:
        command = ["nice", "-n", str(args.nice), *command]
    env = {**os.environ, **row.env, **dict(kv.split("=", 1) for kv in args.env)}
    env.pop("VIRTUAL_ENV", None)
    env["PYTHONUNBUFFERED"] = "1"
    with tempfile.TemporaryDirectory(prefix=f"before-after-{side.name}-") as scratch:
        started = time.monotonic()
        done = subprocess.run(
            command, cwd=scratch, env=env, capture_output=True, text=True, timeout=args.timeout
        )
        took = time.monotonic() - started
    output = done.stdout + "\n" + done.stderr
    if log is not None:
        (log / f"{label}.log").write_text(f"$ {shlex.join(command)}\n{output}")
    if done.returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-8:])
        raise SystemExit(
            f"{row.script} failed in {side.checkout} (exit {done.returncode}, "
            f"{shlex.join(command)}):\n{tail}\n(--own-scripts runs each checkout's own copy)"
        )
    figures = parse(row, done.stdout + "\n" + done.stderr)
    figures["run seconds"] = took
    return figures, output


def _fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _spread(values: list[float]) -> str:
    if not values:
        return "n/a"
    return (
        f"{_fmt(statistics.median(values))} [{_fmt(min(values))}-{_fmt(max(values))}]"
        f" n={len(values)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("row", nargs="?", help=f"all, or some of (a,b): {', '.join(ROWS)}")
    parser.add_argument("--before", type=Path, help="the checkout measured before")
    parser.add_argument("--after", type=Path, help="the checkout measured after")
    parser.add_argument("--pairs", type=int, help="pairs per row (default: the row's own)")
    parser.add_argument("--before-python", type=Path, help="default: BEFORE/.venv/bin/python")
    parser.add_argument("--after-python", type=Path, help="default: AFTER/.venv/bin/python")
    parser.add_argument("--args", default="", help="more arguments for the benchmark")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the benchmark")
    parser.add_argument("--own-scripts", action="store_true", help="each checkout's own copy")
    parser.add_argument("--nice", type=int, default=0, help="run the benchmark under nice -n N")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("--log", type=Path, help="keep each run's whole output in DIR")
    parser.add_argument("--list", action="store_true", help="the rows, their commands, figures")
    args = parser.parse_args()
    if args.row is None and not args.list:  # as `just bench` runs it: say what it would run
        parser.print_usage()
        args.list = True
    if args.list:
        for name, row in ROWS.items():
            env = " ".join(f"{k}={v}" for k, v in row.env.items())
            print(
                f"{name}: {row.title}\n    {row.pairs} pairs of: {env + ' ' if env else ''}"
                f"{row.script} "
                f"{shlex.join(row.args)}\n    figures: {', '.join([*row.figures, *row.derived])}"
            )
        return
    names = list(ROWS) if args.row == "all" else (args.row or "").split(",")
    unknown = [n for n in names if n not in ROWS]
    if unknown or not names:
        parser.error(f"ROW must be 'all' or some of: {', '.join(ROWS)}; got {args.row!r}")
    if args.before is None or args.after is None:
        parser.error("give both --before DIR and --after DIR")
    if args.pairs is not None and args.pairs < 1:
        parser.error(f"--pairs must be at least 1; got {args.pairs}")
    for kv in args.env:
        if "=" not in kv:
            parser.error(f"--env takes KEY=VALUE; got {kv!r}")
    if len(names) > 1 and (args.args or args.env):
        parser.error("--args and --env apply to one row's benchmark: name one ROW with them")
    if args.log is not None:
        args.log.mkdir(parents=True, exist_ok=True)
    failed = []
    started = time.monotonic()
    for name in names:
        try:
            measure_row(name, sides_for(ROWS[name], args, parser), args)
        except SystemExit as exc:  # one row's benchmark failed: say so, go on with the rest
            if len(names) == 1:
                raise
            print(f"row {name} FAILED: {exc}\n", flush=True)
            failed.append(name)
    if len(names) > 1:
        took = (time.monotonic() - started) / 60
        print(
            f"{len(names)} rows in {took:.1f} min"
            + (f"; failed: {', '.join(failed)}" if failed else "")
        )
    if failed:
        sys.exit(1)


def sides_for(row: Row, args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[Side]:
    """The two sides, each checked: an interpreter, the script, the bench modules the row needs."""
    sides = []
    for name, checkout, python in (
        ("before", args.before, args.before_python),
        ("after", args.after, args.after_python),
    ):
        checkout = checkout.resolve()
        python = python or checkout / ".venv" / "bin" / "python"
        if not python.exists():
            parser.error(f"--{name} {checkout}: no interpreter {python} (uv sync there first)")
        side = Side(name, checkout, python)
        if not side.script(row, args.own_scripts).exists():
            parser.error(f"no {side.script(row, args.own_scripts)}")
        missing = _missing(python, (*row.requires, *row.optional))
        make = (
            f"UV_PROJECT_ENVIRONMENT=/tmp/{name}-venv uv sync --locked --all-extras "
            f"--group bench --project {checkout}, then --{name}-python /tmp/{name}-venv/bin/python"
        )
        if set(missing) & set(row.requires):
            raise SystemExit(f"{python} lacks {', '.join(missing)} (the bench group): {make}")
        if missing:
            print(
                f"  note: {python} lacks {', '.join(missing)}: that side borrows the peers' "
                f"figures from the other side's run (or: {make})"
            )
        sides.append(side)
    return sides


def measure_row(key_name: str, sides: list[Side], args: argparse.Namespace) -> None:
    """Run ``key_name``'s pairs and print them, then each figure's medians, spreads, ratios."""
    row = ROWS[key_name]
    pairs = args.pairs or row.pairs
    print(f"row {key_name}: {row.title}")
    for side in sides:
        print(f"  {side.name}: {side.checkout} ({_head(side.checkout)}), {side.python}")
    env = " ".join(
        f"{k}={v}" for k, v in {**row.env, **dict(kv.split("=", 1) for kv in args.env)}.items()
    )
    print(f"  benchmark: {env + ' ' if env else ''}{row.script} {shlex.join(row.args)} {args.args}")
    print(
        f"  {pairs} pair(s), the order alternating; scripts: "
        f"{'each checkout its own' if args.own_scripts else 'this folder' + chr(39) + 's'}\n",
        flush=True,
    )
    got: dict[str, list[Figures]] = {"before": [], "after": []}
    shown: set[str] = set()
    for n in range(pairs):
        order = sides if n % 2 == 0 else sides[::-1]
        this: dict[str, Figures] = {}
        for side in order:
            figures, output = run_once(row, side, args, args.log, f"{key_name}-{n + 1}-{side.name}")
            this[side.name] = figures
            if side.name not in shown:
                shown.add(side.name)
                for line in re.findall(row.settings, output, re.MULTILINE):
                    print(f"  [{side.name} settings] {line.strip()}")
        borrowed = _borrow(row, this)
        for name, figures in this.items():
            for key, derive in row.derived.items():
                try:
                    figures[key] = derive(figures)
                except (KeyError, ValueError, ZeroDivisionError):
                    pass
            got[name].append(figures)
        print(
            f"pair {n + 1}/{pairs} ({' then '.join(s.name for s in order)}):"
            + (f" peer figures borrowed: {'; '.join(borrowed)}" if borrowed else "")
        )
        for key in _keys(row):
            b, a = this["before"].get(key), this["after"].get(key)
            ratio = f"  {_compare(key)} {_against(key, a, b):.3g}" if a is not None and b else ""
            print(f"  {key:<34} before {_fmt(b):>9}  after {_fmt(a):>9}{ratio}")
        sys.stdout.flush()
    print(
        f"\nrow {key_name}, {pairs} pair(s): median [min-max] per side; after/before "
        "(a percentage: after-before) per pair"
    )
    for key in _keys(row):
        before = [f[key] for f in got["before"] if key in f]
        after = [f[key] for f in got["after"] if key in f]
        ratios = [
            _against(key, a[key], b[key])
            for b, a in zip(got["before"], got["after"], strict=True)
            if key in a and key in b and b[key]
        ]
        print(
            f"  {key:<34} before {_spread(before)}  after {_spread(after)}"
            f"  {_compare(key)} {_spread(ratios)}"
        )
    print(flush=True)


def _missing(python: Path, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` ``python`` cannot import (found without importing them)."""
    if not modules:
        return []
    code = (
        "import importlib.util, sys; "
        "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"
    )
    done = subprocess.run([str(python), "-c", code, *modules], capture_output=True, text=True)
    return done.stdout.split()


def _compare(key: str) -> str:
    """A percentage is compared by its difference (a ratio of signed percentages means
    nothing); every other figure by after / before."""
    return "after-before (points)" if key.endswith("%") else "after/before"


def _against(key: str, after: float, before: float) -> float:
    return after - before if key.endswith("%") else after / before


def _borrow(row: Row, this: dict[str, Figures]) -> list[str]:
    """A side without a peer's figure takes the other side's from this pair (same peer code)."""
    said = []
    for name, figures in this.items():
        other = this["after" if name == "before" else "before"]
        for key in sorted(row.peers):
            if key not in figures and key in other:
                figures[key] = other[key]
                said.append(f"{name} <- {key}")
    return said


def _keys(row: Row) -> list[str]:
    return [*row.figures, *row.derived, "run seconds"]


def _head(checkout: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(checkout), "log", "-1", "--format=%h %s"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()[:60] or "not a git checkout"


if __name__ == "__main__":
    main()
