"""``tether worker run``: join a custody store's pool from any host, no gateway needed.

Heavy imports happen only when the command runs, so ``--help`` stays instant.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..bridge.service._settings import env_name
from ..bridge.service._worker_config import WORKER_SETTINGS
from ._bridge import _HELP as BRIDGE_HELP
from ._parsers import Subparsers, add_command, add_group, add_settings

_HELP: dict[str, tuple[str, type[Any]]] = {
    **{name: BRIDGE_HELP[name] for name in WORKER_SETTINGS if name in BRIDGE_HELP},
    "agent": (
        "agent factory as module:factory (default: tether.agents.echo:factory, unless "
        "--exchange is given)",
        str,
    ),
    "exchange": (
        "host the file exchange in this directory for an outside program (any language): "
        "tasks appear as outbox/<id>.txt, the program writes results/<id>.txt "
        "(see docs/guide/pool.md); instead of --agent",
        Path,
    ),
    "grace": (
        "seconds a stopping worker process gives its runs to finish; then they are cancelled "
        "and their tasks handed back (default: 10)",
        float,
    ),
    "client_name": (
        "prefix of this process's pool names (default: tether-worker; a short host name and "
        "a random suffix are added unless --pool-name is given)",
        str,
    ),
    "sweep_interval": (
        "seconds between the pool lead's sweeps when nothing rings it (default: 0.25; new "
        "work rings it at once through PostgreSQL NOTIFY)",
        float,
    ),
    "poll_interval": (
        "seconds an idle worker waits between claims when nothing rings it (default: 0.25)",
        float,
    ),
    "reconcile_interval": (
        "seconds between reconciler passes (repools expired leases) (default: 5)",
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
    "status_file": ("write this process's pool status (JSON, 0600) here", Path),
    "admin_port": (
        "serve the admin endpoint (/healthz, /metrics, /tasks, /status) on this port; "
        "0 picks a free one (default: off)",
        int,
    ),
    "limits": (
        "limits to declare in the store as the process starts (flow control): "
        "'KEY rate=500/min burst=50 concurrency=20; KEY2 ...' (default: none; the store "
        "keeps those declared before)",
        str,
    ),
    "admin_token_file": (
        "bearer token of the admin endpoint, created 0600 if missing "
        "(default: tether-data/worker/admin-token)",
        Path,
    ),
}
assert set(_HELP) == set(WORKER_SETTINGS), set(WORKER_SETTINGS) ^ set(_HELP)

CONFIG_HELP = f"""configuration (later sources win):
  defaults < TOML file (--config or $TETHER_CONFIG, a [worker] table with the
  settings' names, e.g. workers = 8) < environment ({env_name("workers")}, ...) < flags

who leads: every bridge and worker process on a store stands as a lead candidate
(unless --lead false); the oldest live one leads, the others stand by and take over
--lead-lease (3 s) after its last beat (a candidate beats three times a lease).
"""


def add_worker_parsers(sub: Subparsers, epilog: str) -> None:
    actions = add_group(
        sub,
        "worker",
        help="pool workers on any host: claim tasks from a custody store, run them, store replies",
        epilog=epilog,
        dest="worker_command",
    )
    run = add_command(
        actions,
        "run",
        help="join a store's pool until SIGINT/SIGTERM",
        description=(
            "Join the pool of a custody store (PostgreSQL: from any host; SQLite: processes "
            "on the same host) with N workers running an agent, or hosting the file exchange "
            "for an outside program. No gateway is needed: a bridge elsewhere ingests and "
            "delivers. SIGINT/SIGTERM stop it gracefully (runs finish or are handed back)."
        ),
        epilog=CONFIG_HELP + "\n" + epilog,
    )
    add_settings(run, _HELP, WORKER_SETTINGS)


def run_worker(args: argparse.Namespace) -> int:
    import trio

    from .._plumbing._logging import configure_logging
    from .._plumbing._token_file import ensure_token_file
    from ..bridge.service._settings import prepare_store_dir
    from ..bridge.service._worker_config import load_worker_config

    flags = {name: getattr(args, name) for name in WORKER_SETTINGS if hasattr(args, name)}
    config = load_worker_config(file=args.config, flags=flags)
    from ..bridge.service._worker_service import WorkerService
    from ._startup import admin_announcer, check_store_file, load_checked_agent

    check_store_file(config)  # before the agent's lines, the banner and the first log line
    factory = None if config.exchange is not None else load_checked_agent(config.agent_spec)
    configure_logging(config.log_level, config.log_format)
    prepare_store_dir(config)
    if config.admin_port is not None and ensure_token_file(config.admin_token_file):
        print(f"tether: created admin token file {config.admin_token_file}", file=sys.stderr)
    service = WorkerService(config, factory=factory)
    doing = (
        f"file exchange in {config.exchange}"
        if config.exchange is not None
        else f"agent {config.agent_spec}"
    )
    print(
        f"tether worker: pool {service.pool_stem} ({config.workers} worker(s), {doing}); "
        "Ctrl+C stops",
        file=sys.stderr,
        flush=True,
    )
    service.admin_ready = admin_announcer(
        "tether worker", config.admin_host, config.admin_token_file
    )
    trio.run(service.run_until_signal)
    return 0
