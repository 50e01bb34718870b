"""``tether bridge run`` and ``tether store ...``: the bridge from the command line.

Heavy imports happen only when a command runs, so ``--help`` stays instant.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, Final

from ..bridge.service._config import (
    DEFAULT_AGENT,
    DEFAULT_GATEWAY,
    SETTINGS,
    BridgeConfig,
)
from ..bridge.service._settings import env_name
from ._opened import opened_store
from ._parsers import (
    SettingsHelp,
    Subparsers,
    add_command,
    add_group,
    add_settings,
    setting_flag,
)
from ._schedules import add_schedule_parsers, run_events, run_schedules

EXIT_AUTH = 3


_HELP: dict[str, tuple[str, type[Any]]] = {
    "gateway": (f"gateway base URL (default: {DEFAULT_GATEWAY})", str),
    "token_file": (
        "file holding the gateway's bearer token (default: tether-data/gateway/token)",
        Path,
    ),
    "store": (
        "custody store: a SQLite file or a postgresql:// URL "
        "(default: tether-data/bridge/custody.db, directory created 0700)",
        str,
    ),
    "store_password_file": (
        "PostgreSQL password, one line in a 0600 file (else PGPASSWORD or ~/.pgpass; never "
        "in the URL)",
        Path,
    ),
    "store_schema": ("PostgreSQL schema holding the custody tables (default: tether)", str),
    "agent": (f"agent factory as module:factory (default: {DEFAULT_AGENT})", str),
    "workers": ("number of pool workers (default: 4)", int),
    "queues": (
        "the queues whose tasks this process's agent takes, comma-separated; a gateway's "
        "tasks are in default, child runs name theirs (default: default)",
        str,
    ),
    "concurrency": ("tasks each worker runs at once (default: 4)", int),
    "capacity": (
        "tasks each worker asks the lead for, running + assigned and waiting; at least "
        "--concurrency. More keeps workers busy (throughput); equal to --concurrency suits "
        "slow agents: no task waits behind a busy worker while another idles "
        "(default: adaptive, 4 x concurrency while runs are quick, down to concurrency + 1 "
        "as they take seconds)",
        int,
    ),
    "history_turns": (
        "turns of its room's conversation a run reads at most, newest first (default: 50)",
        int,
    ),
    "room_keep": (
        "turns each room's conversation keeps at most; older ones are pruned, and a delivered "
        "task's text with them (default: 500)",
        int,
    ),
    "history_keep": ("deprecated: the old name of --room-keep", int),
    "max_step_bytes": (
        "the largest result a step records, bytes of JSON (256KiB, 1MiB: at most 1 MiB); a "
        "run whose step returns more fails at once, its task dead, never retried (default: 1MiB)",
        str,
    ),
    "max_state_bytes": (
        "the largest state a reply may give its room, bytes of JSON (at most 1 MiB); over it "
        "the run fails at once, its task dead, never retried (default: 1MiB)",
        str,
    ),
    "max_reply_bytes": (
        "the largest reply, bytes of UTF-8 (at most the store's body limit, 1 MiB); over it "
        "the run fails at once, its task dead, never retried (default: 256KiB)",
        str,
    ),
    "client_name": ("name this bridge gives the gateway (default: tether-bridge)", str),
    "pool_name": (
        "stem of this process's pool names (<stem>-w1.., <stem>-lead), kept across restarts; "
        "a second live process under it is refused (default: <client-name>-<host> on a SQLite "
        "store, one bridge per file; <client-name>-<host>-<random> on PostgreSQL, unique per "
        "process)",
        str,
    ),
    "poll_wait": ("long-poll wait in seconds (default: 30)", float),
    "lease_s": ("a worker's lease on a task, renewed by its heartbeat (default: 60)", float),
    "max_attempts": ("attempts before a task is dead-lettered (default: 5)", int),
    "retry_backoff": (
        "delay before a failed task's next attempt, FIRST:CAP seconds: exponential with full "
        "jitter, up to FIRST after the first failure, doubling, at most CAP; 0 retries at once "
        "(default: 2:300)",
        str,
    ),
    "run_timeout": (
        "seconds one agent run may take before it is cancelled and counted as a failed attempt; "
        "0 or off: no limit; an agent factory's run_timeout attribute overrides it (default: "
        "600, for LLM agents)",
        str,
    ),
    "heartbeat_interval": ("seconds between gateway heartbeats (default: 60)", float),
    "reconcile_interval": ("seconds between reconciler passes (default: 5)", float),
    "room_debounce": (
        "seconds (0: off) within which a room's messages are one burst: a message waits this "
        "long before its run may start, a newer one of its room within that time takes its "
        "place, and the run of the burst's last message answers them all (default: 0)",
        float,
    ),
    "event_ttl": (
        "seconds an event sent to the admin endpoint (POST /v1/events) is kept for the runs "
        "that wait for its key later (default: 604800, 7 days)",
        float,
    ),
    "park_after": (
        "seconds: a durable sleep (run.sleep) up to this long sleeps in place; a longer one "
        "parks its task in waiting, freeing the worker, until it is due (default: 30)",
        float,
    ),
    "agent_version": (
        "the version the runs' step records keep: a run resumed under another version is "
        "checked against its records (default: the agent's package version, else a hash of "
        "its module)",
        str,
    ),
    "room_policy": (
        "how a room's messages run: serial (one at a time, in arrival order), replace "
        "(a newer message supersedes older ones waiting or running) or concurrent; an agent "
        "may override it (default: serial)",
        str,
    ),
    "lead": (
        "stand as a pool lead candidate: of all processes sharing the store, the oldest live "
        "candidate leads (room affinity, balanced assignment), the others stand by; with no "
        "live candidate workers claim pending tasks directly (default: true)",
        str,
    ),
    "lead_lease": (
        "seconds a leader's beat holds the lead: a leader silent this long is replaced by "
        "another process's standby lead; candidates beat three times a lease (default: 3)",
        float,
    ),
    "sweep_interval": ("seconds between the pool lead's assignment sweeps (default: 0.05)", float),
    "poll_interval": ("seconds an idle worker waits between claims (default: 0.05)", float),
    "stall_after": ("seconds in custody before a stall notice (default: 300)", float),
    "retention": ("seconds delivered tasks are kept, then pruned (default: 604800)", float),
    "tombstone_retention": (
        "seconds a pruned delivered id still counts as a replay (default: 2592000)",
        float,
    ),
    "grace": (
        "seconds a stopping bridge gives its runs to finish; then they are cancelled and their "
        "tasks handed back (default: 10)",
        float,
    ),
    "status_file": ("write the gateway connection status (JSON) here", Path),
    "quarantine_processes": (
        "suspects (tasks in flight when a process died) run in quarantine child processes, at "
        "most this many at once per bridge process (default: 2)",
        int,
    ),
    "max_quarantine_deaths": (
        "deaths of its quarantine process while it ran the task that make a task dead (default: 2)",
        int,
    ),
    "quarantine_memory": (
        "MiB of address space a quarantine process may use; 0: no limit (default: 0)",
        int,
    ),
    "quarantine_env": (
        "environment variables a quarantine process gets beyond the base ones (PATH, HOME, "
        "LANG, LC_*, PYTHON*, ...): names or PREFIX_*, comma-separated (default: none)",
        str,
    ),
    "synchronous": (
        "durability: NORMAL (default: synced before each promise: an ack, a reply, an answer),"
        " FULL (every commit synced) or EXTRA",
        str,
    ),
    "log_level": ("DEBUG, INFO, WARNING or ERROR (default: INFO)", str),
    "log_format": ("text, or json for one JSON object per line (default: text)", str),
    "admin_port": (
        "serve the admin endpoint (/healthz, /metrics, /tasks, /status) on this port; "
        "0 picks a free one (default: off)",
        int,
    ),
    "admin_host": ("address the admin endpoint binds (default: 127.0.0.1)", str),
    "admin_token_file": (
        "bearer token of the admin endpoint, created 0600 if missing "
        "(default: tether-data/bridge/admin-token)",
        Path,
    ),
    "limits": (
        "limits to declare in the store as the process starts (flow control): "
        "'KEY rate=500/min burst=50 concurrency=20; KEY2 ...' (default: none; the store "
        "keeps those declared before)",
        str,
    ),
    "health_window": (
        "/healthz fails when the gateway has not answered for this many seconds (default: 120)",
        float,
    ),
}
assert set(_HELP) == set(SETTINGS)

CONFIG_HELP = f"""configuration (later sources win):
  defaults < TOML file (--config or $TETHER_CONFIG, a [bridge] table with the
  settings' names, e.g. workers = 8) < environment ({env_name("workers")}, ...) < flags
"""


def add_bridge_parsers(sub: Subparsers, epilog: str) -> None:
    actions = add_group(
        sub,
        "bridge",
        help="the bridge: gateway -> custody store -> agent workers -> gateway",
        epilog=epilog,
        dest="bridge_command",
    )
    run = add_command(
        actions,
        "run",
        help="run a bridge until SIGINT/SIGTERM",
        description=(
            "Run the bridge: poll the gateway, keep every task in the custody store until its "
            "reply is delivered, run the agent in a pool of workers. SIGINT/SIGTERM stop it "
            "gracefully (workers finish or hand back their tasks; nothing is lost)."
        ),
        epilog=CONFIG_HELP + "\n" + epilog,
    )
    add_settings(run, _HELP)

    store_actions = add_group(
        sub,
        "store",
        help="inspect the custody store; re-drive or cancel tasks",
        epilog=epilog,
        dest="store_command",
    )
    status = add_command(
        store_actions,
        "status",
        help="counts per custody state, oldest in flight, dead letters with reasons",
        epilog=CONFIG_HELP + "\n" + epilog,
    )
    _store_options(status)
    status.add_argument("--limit", type=int, default=10, help="rows per list (default: 10)")
    status.add_argument("--json", action="store_true", help="print one JSON document")
    show = add_command(
        store_actions,
        "show",
        help="one task's record and its custody journal (every move, when, by whom, why)",
        epilog=CONFIG_HELP + "\n" + epilog,
    )
    show.add_argument("id", help="the task id")
    _store_options(show)
    show.add_argument("--json", action="store_true", help="print one JSON document")
    _add_operator_parsers(store_actions, epilog)
    _add_room_parsers(store_actions, epilog)
    _add_limit_parsers(store_actions, epilog)
    _add_tenant_parsers(store_actions, epilog)
    add_schedule_parsers(store_actions, epilog, CONFIG_HELP, _store_options)


LIMITS_EXITS = """exit codes of limits:
  0  shown; declared
  2  bad usage (a bad key, rate, burst or concurrency): nothing changed
"""


def _add_limit_parsers(store_actions: Subparsers, epilog: str) -> None:
    limits = add_command(
        store_actions,
        "limits",
        help="flow control: each key's rate, tokens left, permits in flight, pause, waiters",
        description=(
            "Show each key's limit as every bridge and worker on the store shares it: its rate "
            "and burst (a token bucket), tokens left now, its concurrency cap and permits in "
            "flight, how long it stays paused, and the runs waiting for a permit. Reads only. "
            "`limits set KEY` declares (or changes) a key's limit."
        ),
        epilog=CONFIG_HELP + "\n" + LIMITS_EXITS + "\n" + epilog,
    )
    _store_options(limits)
    limits.add_argument("--json", action="store_true", help="print one JSON document")
    actions = limits.add_subparsers(dest="limits_command", required=False, metavar="[set]")
    set_ = add_command(
        actions,
        "set",
        help="declare or change a key's limit",
        description=(
            "Declare KEY's limit, kept in the store for everyone: --rate (N/s, N/min, N/hour), "
            "--burst (tokens saved up; default one second's worth) and --concurrency (permits "
            "held at once). A new key starts with a full bucket; a changed one keeps its "
            "tokens (cut to the new burst), its permits and its pause."
        ),
        epilog=CONFIG_HELP + "\n" + LIMITS_EXITS + "\n" + epilog,
    )
    set_.add_argument("key", help="the key, e.g. openai:gpt-4o")
    set_.add_argument("--rate", default=None, help="e.g. 500/min, 20/s (default: no rate)")
    set_.add_argument("--burst", type=float, default=None, help="tokens saved up at most")
    set_.add_argument(
        "--concurrency", type=int, default=None, help="permits held at once (default: no cap)"
    )
    _store_options(set_)


TENANTS_EXITS = """exit codes of tenants:
  0  shown; set
  2  bad usage (a bad tenant name or weight): nothing changed
"""


def _add_tenant_parsers(store_actions: Subparsers, epilog: str) -> None:
    tenants = add_command(
        store_actions,
        "tenants",
        help="fair shares: the tenants taking turns in the queue, their weights and backlogs",
        description=(
            "Show the tenants that share the store's queue (a task names its tenant in its "
            "'tenant' header, from the gateway's message): each one's weight and its tasks "
            "pending now. Tenants take turns: one tenant's burst never starves another's "
            "message. Reads only. `tenants set NAME --weight W` gives a tenant W turns to a "
            "weight-1 tenant's one."
        ),
        epilog=CONFIG_HELP + "\n" + TENANTS_EXITS + "\n" + epilog,
    )
    _store_options(tenants)
    tenants.add_argument("--json", action="store_true", help="print one JSON document")
    actions = tenants.add_subparsers(dest="tenants_command", required=False, metavar="[set]")
    set_ = add_command(
        actions,
        "set",
        help="give a tenant a weight",
        description=(
            "Give TENANT a weight, kept in the store for everyone: its tasks taken in from now "
            "on get WEIGHT turns to a weight-1 tenant's one (queued tasks keep their turns)."
        ),
        epilog=CONFIG_HELP + "\n" + TENANTS_EXITS + "\n" + epilog,
    )
    set_.add_argument("tenant", help="the tenant, e.g. acme")
    set_.add_argument("--weight", type=float, required=True, help="its share, > 0 (default 1)")
    _store_options(set_)


ROOM_EXITS = """exit codes of room and forget-room:
  0  shown; forgotten everywhere asked: the custody store and the gateway's copy (or the
     store alone with --no-gateway); also when nothing of the room was held
  1  room: the store holds no conversation of that room; forget-room: the custody store's
     copy is erased, the gateway's is NOT (none configured, it has no route to forget (404),
     or it did not answer within 30 s): one line on stderr says which and what to do
  2  bad usage (an empty room name, a bad option, a configured gateway's token file missing
     or too open): nothing changed
  3  forget-room: the gateway refused the token: the custody store's copy is erased, the
     gateway's is not
"""


def _add_room_parsers(store_actions: Subparsers, epilog: str) -> None:
    room = add_command(
        store_actions,
        "room",
        help="a room's conversation: its turns as the person saw them, and its state",
        description=(
            "Show a room's conversation: the newest turns (the person's messages and the "
            "agent's replies, each with its outcome: received, shown while streaming, result, "
            "delivered, interrupted) and the state its agent keeps. Reads only."
        ),
        epilog=CONFIG_HELP + "\n" + ROOM_EXITS + "\n" + epilog,
    )
    room.add_argument("room", help="the room")
    _store_options(room)
    room.add_argument("--limit", type=int, default=50, help="newest turns shown (default: 50)")
    room.add_argument("--json", action="store_true", help="print one JSON document")
    forget = add_command(
        store_actions,
        "forget-room",
        help="erase a room everywhere tether keeps it: custody store and gateway (privacy)",
        description=(
            "Erase a room's text from the custody store in one transaction: its turns and "
            "state, and of its tasks (and the child runs they spawned) the message, reply, "
            "reason and headers, their step records, questions and journal text; a task still "
            "in custody is cancelled first (a running one is stopped at its next heartbeat), "
            "so nothing of the room is sent after it. The rows stay as ids, states and times, "
            "journaled as the operator's; a SQLite store's files keep no copy (its WAL is "
            "truncated). Then the gateway is asked to drop its copy (POST "
            "/v1/rooms/<room>/forget: the gateway `tether bridge run` polls with the same "
            "settings, or the local one whose token file exists); a gateway without that "
            "route answers 404 and the verb says so in one line."
        ),
        epilog=CONFIG_HELP + "\n" + ROOM_EXITS + "\n" + epilog,
    )
    forget.add_argument("room", help="the room")
    _store_options(forget)
    forget.add_argument(
        setting_flag("gateway"), dest="gateway", default=None, help=_HELP["gateway"][0]
    )
    forget.add_argument(
        setting_flag("token_file"),
        dest="token_file",
        type=Path,
        default=None,
        help=_HELP["token_file"][0],
    )
    forget.add_argument(
        "--no-gateway",
        action="store_true",
        help="erase the custody store's copy alone (the gateway's is erased by its own means)",
    )


OPERATOR_EXITS = """exit codes of retry, fork and cancel:
  0  every named task moved (retry --dead: every match; none matching is fine; fork: the
     new task is stored)
  1  at least one task was refused: one line on stderr per refused id says why, nothing
     changed for it; the other ids DID move (each is its own compare-and-set)
  2  bad usage (a malformed id, no ids, a bad option): nothing changed
"""


_STORE_VERB_HELP: Final[SettingsHelp] = {
    **_HELP,
    "store": (
        "custody store: a SQLite file or a postgresql:// URL (default: "
        "tether-data/bridge/custody.db); it must exist: a bridge creates it on its first start",
        str,
    ),
}
"""A store verb opens the store a bridge made; it never creates one (a typo would)."""


def _store_options(parser: argparse.ArgumentParser) -> None:
    """Where the store is, for every ``store`` action: a path/URL and how to log in."""
    add_settings(parser, _STORE_VERB_HELP, ("store", "store_password_file", "store_schema"))


def _add_operator_parsers(store_actions: Subparsers, epilog: str) -> None:
    from ..bridge.custody._rules import CustodyState

    def action(name: str, text: str, description: str, exits: str = "") -> argparse.ArgumentParser:
        parser = add_command(
            store_actions,
            name,
            help=text,
            description=description,
            epilog=CONFIG_HELP + "\n" + exits + ("\n" if exits else "") + epilog,
        )
        _store_options(parser)
        return parser

    listing = action(
        "list",
        "tasks in one custody state, oldest first; or the children of a task",
        "List the tasks in one custody state (id, attempt, owner, age, reason), oldest first; "
        "or, with --parent, the child runs a task spawned (id, spawn name, state), in spawn "
        "order.",
    )
    listed = listing.add_mutually_exclusive_group(required=True)
    listed.add_argument("--state", choices=[s.value for s in CustodyState], help="the state")
    listed.add_argument("--parent", metavar="ID", help="the task whose children to list")
    listed.add_argument(
        "--version",
        metavar="V",
        help="tasks in custody whose runs began under agent version V (how many are "
        "left before an old version has drained; 'none': unversioned or nothing recorded)",
    )
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default: 50)")
    listing.add_argument("--json", action="store_true", help="print one JSON document")
    retry = action(
        "retry",
        "re-drive dead tasks: dead -> pending with fresh attempts",
        "Re-drive dead tasks (dead -> pending with fresh attempts, due now); a running bridge "
        "picks them up and delivers their replies (the gateway reopens a task it was told was "
        "dead). A task in any other state is refused (a delivered one's reply was confirmed).",
        OPERATOR_EXITS,
    )
    retry.add_argument("ids", nargs="*", metavar="ID", help="the task ids to re-drive")
    retry.add_argument(
        "--dead",
        action="store_true",
        help="re-drive every dead task (or those matching --reason-contains)",
    )
    retry.add_argument(
        "--include-cancelled",
        action="store_true",
        help="with --dead: also tasks an operator cancelled (left dead otherwise; the people "
        "behind them were told 'cancelled'); naming a task's id re-drives it either way",
    )
    retry.add_argument(
        "--reason-contains",
        default=None,
        metavar="TEXT",
        help="with --dead: only dead tasks whose reason contains TEXT (case-sensitive)",
    )
    retry.add_argument(
        "--reason", default=None, help="why, recorded in each task's journal (optional)"
    )
    retry.add_argument(
        "--fresh",
        action="store_true",
        help="forget the steps its runs recorded: the run starts over from nothing (default: "
        "keep them, the run resumes past its recorded steps)",
    )
    retry.add_argument(
        "--from-step",
        metavar="NAME",
        default=None,
        help="rewind one dead task to step NAME: its records from NAME on are dropped "
        "(journaled), the run replays up to NAME and runs it and what follows again",
    )
    fork = action(
        "fork",
        "branch a task from a step: a new task with the records before it",
        "Fork a task at a step ('regenerate from here'): its message again as a new task "
        "(<id>~fork<n>, pending) in the same room or --room, with the records of its runs "
        "before --from-step copied, so the new run replays them and runs the step and what "
        "follows anew. Its reply goes to the room as a message of its own. The source task is "
        "not changed. Journaled as the operator's.",
        OPERATOR_EXITS,
    )
    fork.add_argument("id", metavar="ID", help="the task to fork")
    fork.add_argument("--from-step", metavar="NAME", required=True, help="the step to redo")
    fork.add_argument("--room", default=None, help="the room of the new task (default: the same)")
    fork.add_argument(
        "--reason", default=None, help="why, recorded in the new task's journal (optional)"
    )
    cancel = action(
        "cancel",
        "cancel tasks not yet answered: pending/assigned/claimed/waiting -> dead",
        "Cancel tasks not yet run to a reply (pending, assigned, claimed, waiting -> dead with "
        "the reason; the gateway is told, as for any dead task). A claimed task's run is cancelled "
        "at its worker's next heartbeat and its late result refused. A task with a reply "
        "(result, delivered) or already dead is refused.",
        OPERATOR_EXITS,
    )
    cancel.add_argument("ids", nargs="+", metavar="ID", help="the task ids to cancel")
    cancel.add_argument(
        "--reason",
        default="no reason given",
        help="why, recorded as the dead task's reason (default: no reason given)",
    )


FORGET_SETTINGS: Final = ("gateway", "token_file")
"""``forget-room``'s gateway, as ``tether bridge run`` has it."""


def _flags(args: argparse.Namespace, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(args, name) for name in names if hasattr(args, name)}


def run_store(args: argparse.Namespace) -> int:
    import trio

    from .._plumbing._redact import redact_url
    from ..bridge.service._config import ConfigError, load_config
    from ..bridge.service._store_status import render_store_status, store_status

    config = load_config(
        file=args.config,
        flags=_flags(args, ("store", "store_password_file", "store_schema", *FORGET_SETTINGS)),
    )
    if args.store_command == "show":
        return trio.run(_show, config, args.id, args.json)
    if args.store_command in ("list", "retry", "cancel", "fork"):
        return trio.run(_operate, config, args)
    if args.store_command in ("room", "forget-room"):
        return trio.run(_room, config, args)
    if args.store_command == "limits":
        return trio.run(_limits, config, args)
    if args.store_command == "tenants":
        return trio.run(_tenants, config, args)
    if args.store_command == "schedules":
        return trio.run(run_schedules, config, args)
    if args.store_command in ("send-event", "events"):
        return trio.run(run_events, config, args)
    if args.limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {args.limit}")

    async def status() -> int:
        async with opened_store(config, read_only=True, must_exist=False) as store:
            snapshot = await store_status(store, limit=args.limit)
        if args.json:
            print(json.dumps(snapshot.to_document(), indent=2))
        else:
            print(render_store_status(snapshot, redact_url(config.store)))
        return 0

    return trio.run(status)


async def _show(config: BridgeConfig, id: str, as_json: bool) -> int:
    from ..bridge.custody._rules import InvalidTaskId
    from ..bridge.service._store_show import TaskShow, render_show, task_tree

    async with opened_store(config, read_only=True, must_exist=False) as store:
        try:
            record = await store.get(id)
        except InvalidTaskId as exc:
            print(f"tether: {exc}", file=sys.stderr)
            return 2
        if record is None:
            print(f"tether: no task {id!r} in the store {config.store}", file=sys.stderr)
            return 1
        show = TaskShow(
            record,
            tuple(await store.journal(id)),
            store.clock(),
            steps=tuple(await store.steps(id)),
            asks=tuple(await store.asks(id)),
            tree=await task_tree(store, record),
        )
    print(json.dumps(show.to_document(), indent=2) if as_json else render_show(show))
    return 0


def _check_operator_args(args: argparse.Namespace) -> None:
    """Refuse bad usage before the store is opened (exit 2, nothing changed)."""
    from ..bridge.custody._rules import check_task_id
    from ..bridge.service._config import ConfigError

    if args.store_command == "list":
        if args.limit < 1:
            raise ConfigError(f"--limit must be >= 1, got {args.limit}")
        if args.version not in (None, "none"):
            from ..bridge.custody._versions import VersionError, check_version

            try:
                check_version(args.version)
            except VersionError as exc:
                raise ConfigError(f"--version: {exc}") from None
        if args.parent is not None:
            try:
                check_task_id(args.parent)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        return
    if args.store_command == "fork":
        args.ids = [args.id]
        if args.room is not None:
            from ..bridge.custody._conversation import check_room
            from ..bridge.custody._rules import InvalidTask

            try:
                check_room(args.room)
            except InvalidTask as exc:
                raise ConfigError(f"--room: {exc}") from None
    if args.store_command in ("retry", "fork") and args.from_step is not None:
        from ..bridge.custody._steps import StepError, check_step_name

        try:
            check_step_name(args.from_step, own=True)
        except StepError as exc:
            raise ConfigError(f"--from-step: {exc}") from None
    if (
        args.store_command == "retry"
        and args.from_step is not None
        and (args.dead or len(args.ids) != 1 or args.fresh)
    ):
        raise ConfigError(
            "--from-step rewinds one task: name exactly one id (not --dead, not --fresh)"
        )
    if args.store_command == "retry":
        if args.dead and args.ids:
            raise ConfigError("give task ids or --dead, not both")
        if not args.dead and not args.ids:
            raise ConfigError("name the task ids to re-drive, or --dead for every dead task")
        if args.reason_contains is not None and not args.dead:
            raise ConfigError("--reason-contains selects among dead tasks: use it with --dead")
        if args.reason_contains == "":
            raise ConfigError("--reason-contains needs some text")
        if args.include_cancelled and not args.dead:
            raise ConfigError(
                "--include-cancelled widens --dead: use it with --dead (a named id is "
                "re-driven whether cancelled or not)"
            )
    for name in ("reason",):
        value = getattr(args, name, None)
        if value is not None and not value.strip():
            raise ConfigError(f"--{name} needs some text")
    for id in args.ids:
        try:
            check_task_id(id)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


async def _operate(config: BridgeConfig, args: argparse.Namespace) -> int:
    from ..bridge.custody._rules import CustodyState
    from ..bridge.service import _store_ops

    _check_operator_args(args)
    # each move is printed (and journalled): the custody log's own line for it would only
    # repeat it on stderr through logging's last-resort handler
    logging.getLogger("tether.custody").addHandler(logging.NullHandler())
    async with opened_store(config, read_only=args.store_command == "list") as store:
        if args.store_command == "list":
            if args.parent is not None:
                return await _store_ops.list_children(store, args.parent, args.limit, args.json)
            if args.version is not None:
                return await _store_ops.list_version(store, args.version, args.limit, args.json)
            state = CustodyState(args.state)
            return await _store_ops.list_tasks(store, state, args.limit, args.json)
        if args.store_command == "cancel":
            return await _store_ops.cancel(store, args.ids, args.reason)
        if args.store_command == "fork":
            return await _store_ops.fork(store, args.id, args.from_step, args.room, args.reason)
        if args.from_step is not None:
            return await _store_ops.rewind(store, args.ids[0], args.from_step, args.reason)
        if args.dead:
            return await _store_ops.retry_dead(
                store,
                args.reason_contains,
                args.reason,
                include_cancelled=args.include_cancelled,
                fresh=args.fresh,
            )
        return await _store_ops.retry(store, args.ids, args.reason, fresh=args.fresh)


async def _room(config: BridgeConfig, args: argparse.Namespace) -> int:
    from ..bridge.custody._conversation import check_room
    from ..bridge.custody._rules import MAX_ROOM_CHARS, InvalidTask
    from ..bridge.service import _store_room
    from ..bridge.service._config import ConfigError

    try:
        room = check_room(args.room)
    except InvalidTask:  # in the CLI's words: its argument, not the library's None and str
        raise ConfigError(
            f"ROOM must be a room name of 1 to {MAX_ROOM_CHARS} characters of valid text "
            f"without NUL, got {args.room!r:.80}"
        ) from None
    showing = args.store_command == "room"
    if showing and args.limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {args.limit}")
    logging.getLogger("tether.custody").addHandler(logging.NullHandler())
    if showing:
        async with opened_store(config, read_only=True) as store:
            return await _store_room.show_room(store, room, min(args.limit, 10_000), args.json)
    gateway = _store_room.gateway_to_ask(  # before anything is erased: a bad token file is 2
        config,
        file=args.config,
        flags=_flags(args, FORGET_SETTINGS),
        room=room,
        skip=args.no_gateway,
    )
    async with opened_store(config, read_only=False) as store:
        return await _store_room.forget_room(store, room, gateway, postgres=config.store_is_url)


async def _limits(config: BridgeConfig, args: argparse.Namespace) -> int:
    from ..bridge.custody._limits import LimitSpec, parse_rate
    from ..bridge.service import _store_limits
    from ..bridge.service._config import ConfigError

    setting = getattr(args, "limits_command", None) == "set"
    spec = None
    if setting:
        if args.rate is None and args.concurrency is None:
            raise ConfigError("limits set needs --rate or --concurrency (or both)")
        if args.burst is not None and args.rate is None:
            raise ConfigError("--burst sizes a rate's bucket: give --rate too")
        try:
            rate = None if args.rate is None else parse_rate(args.rate)
            spec = LimitSpec(args.key, rate, args.burst or 0.0, args.concurrency)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    async with opened_store(config, read_only=not setting) as store:
        if spec is not None:
            return await _store_limits.set_limit(store, spec)
        return await _store_limits.show_limits(store, args.json)


async def _tenants(config: BridgeConfig, args: argparse.Namespace) -> int:
    from ..bridge.custody._tenants import check_tenant, check_tenant_weight
    from ..bridge.service import _store_tenants
    from ..bridge.service._config import ConfigError

    setting = getattr(args, "tenants_command", None) == "set"
    if setting:
        try:
            check_tenant(args.tenant)
            check_tenant_weight(args.weight)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    async with opened_store(config, read_only=not setting) as store:
        if setting:
            return await _store_tenants.set_tenant_weight(store, args.tenant, args.weight)
        return await _store_tenants.show_tenants(store, args.json)


def run_bridge(args: argparse.Namespace) -> int:
    import trio

    from .._plumbing._logging import configure_logging
    from .._plumbing._redact import redact_url
    from .._plumbing._token_file import ensure_token_file
    from ..bridge.service._config import load_config
    from ..bridge.service._names import one_bridge_per_file
    from ..bridge.service._settings import prepare_store_dir

    config = load_config(file=args.config, flags=_flags(args, SETTINGS))
    from ..bridge.service._service import (
        BridgeService,  # after the config: a typo is reported at once
    )
    from ._startup import admin_announcer, check_store_file, check_token_file, load_checked_agent

    factory = load_checked_agent(config.agent)
    check_token_file(config.token_file)  # before the banner, the data directory and the store
    check_store_file(config)
    configure_logging(config.log_level, config.log_format)
    prepare_store_dir(config)
    with one_bridge_per_file(config.store):  # refused in one line, before the banner
        pass  # the service holds it while it runs
    if config.admin_port is not None and ensure_token_file(config.admin_token_file):
        print(f"tether: created admin token file {config.admin_token_file}", file=sys.stderr)
    print(
        f"tether bridge: {redact_url(config.gateway)} -> {redact_url(config.store)}, "
        f"agent {config.agent}, "
        f"{config.workers} worker(s); Ctrl+C stops",
        file=sys.stderr,
        flush=True,
    )
    admin_ready = admin_announcer("tether bridge", config.admin_host, config.admin_token_file)
    trio.run(BridgeService(config, factory=factory, admin_ready=admin_ready).run_until_signal)
    return 0
