"""``WorkerService``: a process that joins a custody store's pool without a gateway.

Workers, a lead candidate and a reconciler, supervised; it needs only the store. See
docs/guide/design.md, "WorkerService".
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio

from ... import (
    ChildSpec,
    Supervisor,
    current_runtime,
    open_supervisor,
    wait_stop_requested,
)
from ..._plumbing._atomic_file import write_atomic
from ..._plumbing._config_error import ConfigError
from ..._plumbing._converter import unstructure
from ..._plumbing._fs import ensure_private_dir
from ..._protocol._connection import utc_now_iso
from ..custody._roles import NewsStore, Store
from ..pool._agent import AgentFactory, load_agent
from ..pool._asyncio import loop_for
from ..pool._files import file_exchange_worker
from ..pool._idle import worker_idle_maximum
from ..pool._lead import PoolLead
from ..pool._reconciler import Reconciler
from ..pool._status import PoolStatus, pool_status
from ..pool._wakeup import PoolWakeups
from ..pool._worker import PoolWorker
from ..runs._claimed import RELEASE_TIMEOUT
from ._names import CHOSE_ANOTHER, lead_name, pool_stem, worker_names
from ._outage import run_through_outages
from ._pool_store import open_pool_store
from ._process import run_until_signal, until_stopped
from ._worker_config import WorkerConfig

log = logging.getLogger("tether.bridge.worker")

STATUS_REFRESH = 2.0
"""Seconds between rewrites of the status file (also rewritten at once when the lead moves)."""


@attrs.frozen
class WorkerProcessStatus:
    """The status file of ``tether worker run`` (JSON, replaced atomically, 0600)."""

    pid: int
    store: str
    pool: PoolStatus
    exchange: str | None
    completed: int
    failed: int
    released: int
    state: str
    """``starting``, ``running``, ``stopping`` or ``stopped``."""
    updated_at: str
    schema_version: int = 1


@attrs.define(eq=False)
class WorkerService:
    """``await nursery.start(service.run)`` or ``await service.run_until_signal()``."""

    config: WorkerConfig
    store: Store | None = None
    factory: AgentFactory | None = None
    admin_ready: Callable[[int], None] | None = None
    pool_stem: str = attrs.field(init=False)
    workers: list[PoolWorker] = attrs.field(factory=list, init=False)
    lead: PoolLead | None = attrs.field(default=None, init=False)
    admin_port: int | None = attrs.field(default=None, init=False)
    running: bool = attrs.field(default=False, init=False)
    wakeups: PoolWakeups = attrs.field(factory=PoolWakeups, init=False)
    _state: str = attrs.field(default="starting", init=False)
    stem_from_status_file: bool = attrs.field(default=False, init=False)
    """The pool stem is the one this process's predecessor wrote to ``config.status_file``."""

    def __attrs_post_init__(self) -> None:
        config = self.config
        kept = None if config.pool_name is not None else stem_in_status_file(config.status_file)
        self.stem_from_status_file = kept is not None
        self.pool_stem = kept or pool_stem(config.client_name, config.pool_name)

    @property
    def pool_names(self) -> list[str]:
        names = worker_names(self.pool_stem, self.config.workers)
        return [*names, lead_name(self.pool_stem)] if self.config.lead else names

    @property
    def worker_grace(self) -> float:
        return self.config.grace + RELEASE_TIMEOUT + 1.0

    @property
    def stop_grace(self) -> float:
        return self.config.grace + RELEASE_TIMEOUT + 10.0

    def pool_status(self) -> PoolStatus:
        return pool_status(self.pool_stem, self.workers, self.lead)

    def process_status(self) -> WorkerProcessStatus:
        config = self.config
        return WorkerProcessStatus(
            pid=os.getpid(),
            store=_shown_store(config.store),
            pool=self.pool_status(),
            exchange=None if config.exchange is None else str(config.exchange),
            completed=sum(w.counts.completed for w in self.workers),
            failed=sum(w.counts.failed for w in self.workers),
            released=sum(w.counts.released for w in self.workers),
            state=self._state,
            updated_at=utc_now_iso(),
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Join the pool until cancelled or asked to stop (as a supervised child)."""
        config = self.config
        async with AsyncExitStack() as stack:
            if self.stem_from_status_file:
                log.info("pool name %s: kept from %s", self.pool_stem, config.status_file)
            store = await open_pool_store(
                stack,
                config,
                self.store,
                self.pool_names,
                check_names=config.pool_name is not None or self.stem_from_status_file,
                remedy=CHOSE_ANOTHER
                if not self.stem_from_status_file
                else f"it was kept in the status file {config.status_file}: give this process "
                "another --status-file",
                wakeups=self.wakeups,
            )
            self.workers = self._build_workers(store)
            supervisor = await stack.enter_async_context(
                open_supervisor(name="worker", strategy="one_for_one", max_restarts=10, period=30)
            )
            if config.admin_port is not None:
                await self._start_admin(supervisor, store)
            await self._start_children(supervisor, store)
            self.running = True
            self._state = "running"
            log.info(
                "worker process running: pool %s, %d worker(s) on %s%s",
                self.pool_stem,
                config.workers,
                _shown_store(config.store),
                "" if config.exchange is None else f", file exchange in {config.exchange}",
            )
            task_status.started()
            await wait_stop_requested()
            self._state = "stopping"
        self._state = "stopped"
        await self._write_status()

    async def run_until_signal(self) -> None:
        """The service as a process: SIGINT/SIGTERM stop it gracefully, then this returns."""
        await run_until_signal(
            "worker",
            self.run,
            lambda: self.running,
            grace=self.config.grace,
            stop_grace=self.stop_grace,
        )

    # -- the parts -------------------------------------------------------------------------

    def _build_workers(self, store: Store) -> list[PoolWorker]:
        config = self.config
        options: dict[str, Any] = {
            "concurrency": config.concurrency,
            "capacity": config.capacity,
            "poll_interval": config.poll_interval,
            "history_turns": config.history_turns,
            "bounds": config.bounds,
            "stop_grace": config.grace,
            "wakeups": self.wakeups,
            "queues": config.queues,
        }
        build: Callable[..., PoolWorker]
        if config.exchange is not None:
            build = partial(file_exchange_worker, store, root=config.exchange)
        else:
            options["park_after"] = config.park_after
            options["agent_version"] = config.agent_version
            factory = self.factory if self.factory is not None else load_agent(config.agent_spec)
            build = partial(PoolWorker, store, factory=factory)
        names = worker_names(self.pool_stem, config.workers)
        return [
            build(name=name, idle_maximum=worker_idle_maximum(i), **options)
            for i, name in enumerate(names)
        ]

    async def _start_children(self, supervisor: Supervisor, store: Store) -> None:
        config = self.config
        reconciler = Reconciler(
            store, on_dead=self.wakeups.tasks_dead, on_woken=self.wakeups.tasks_pending
        )
        self.wakeups.on_parked = reconciler.parked_until  # a parked run wakes on time
        await supervisor.start_child(
            ChildSpec(
                "reconciler",
                run_through_outages,
                until_stopped(partial(reconciler.run, interval=config.reconcile_interval)),
                "reconciler",
            )
        )
        if config.lead:
            self.lead = PoolLead(
                store,
                name=lead_name(self.pool_stem),
                sweep_interval=config.sweep_interval,
                lease=config.lead_lease,
                wakeups=self.wakeups,
            )
            await supervisor.start_child(
                ChildSpec(
                    "lead", run_through_outages, self.lead.run, "lead", shutdown_grace=config.grace
                )
            )
        await supervisor.start_child(
            ChildSpec("workers", self._run_workers, shutdown_grace=self.worker_grace)
        )
        await supervisor.start_child(
            ChildSpec(
                "status",
                run_through_outages,
                until_stopped(self._publish_status),
                "status",
                restart="permanent",
            )
        )
        await supervisor.start_child(
            ChildSpec(
                "store-wakeups",
                run_through_outages,
                until_stopped(partial(self._relay_wakeups, store)),
                "store-wakeups",
            )
        )

    async def _relay_wakeups(
        self, store: NewsStore, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Work another process made (a bridge ingested, a lead assigned) rings this process's
        lead and workers at once: ``store.wait_for_work`` (PostgreSQL's ``NOTIFY``, SQLite's
        news file). A
        hint only; the polls (``poll_interval``, ``sweep_interval``) stay the source of truth,
        so they can be slower here than in a bridge, which hears its own ingest directly."""
        task_status.started()
        names = [w.name for w in self.workers]
        while True:
            if await store.wait_for_work(1.0):
                self.wakeups.tasks_pending()
                self.wakeups.tasks_assigned(names)

    async def _run_workers(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The workers under their own supervisor, so a soft stop reaches all of them at once."""
        async with (
            loop_for(*(worker.factory for worker in self.workers)),
            open_supervisor(
                name="workers", strategy="one_for_one", max_restarts=10, period=30
            ) as supervisor,
        ):
            for worker in self.workers:
                await supervisor.start_child(
                    ChildSpec(
                        worker.name,
                        worker.run,
                        restart="transient",
                        shutdown_grace=self.worker_grace,
                    )
                )
            task_status.started()
            await wait_stop_requested()
            for worker in self.workers:
                worker.request_stop()

    async def _publish_status(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Rewrite the status file every ``STATUS_REFRESH`` s, and at once when the lead moves."""
        if self.config.status_file is None:
            task_status.started()
            await trio.sleep_forever()
        await self._write_status()
        task_status.started()
        last = self.pool_status().leader
        deadline = trio.current_time() + STATUS_REFRESH
        while True:
            await trio.sleep(0.1)
            leader = self.pool_status().leader
            if leader != last or trio.current_time() >= deadline:
                last = leader
                deadline = trio.current_time() + STATUS_REFRESH
                await self._write_status()

    async def _write_status(self) -> None:
        path = self.config.status_file
        if path is None:
            return
        data = json.dumps(unstructure(self.process_status()), indent=2, sort_keys=True) + "\n"
        await trio.to_thread.run_sync(ensure_private_dir, path.parent)
        await trio.to_thread.run_sync(write_atomic, path, data.encode(), 0o600)

    async def _start_admin(self, supervisor: Supervisor, store: Store) -> None:
        from ...observe import AdminSettings, admin_child
        from ._admin import bridge_observed
        from ._ops_routes import OpsRoutes

        runtime = current_runtime()
        if runtime is None:
            raise RuntimeError("the admin endpoint needs open_runtime() around WorkerService.run")
        config = self.config
        observed = bridge_observed(
            runtime, store=store, pool=self.pool_status, routes=OpsRoutes(store, runtime)
        )
        settings = AdminSettings(
            token_file=config.admin_token_file, host=config.admin_host, port=config.admin_port or 0
        )
        self.admin_port = await supervisor.start_child(admin_child(observed, settings))
        if self.admin_ready is not None:
            self.admin_ready(self.admin_port)


def stem_in_status_file(path: Path | None) -> str | None:
    """The pool stem a previous ``tether worker run`` wrote to the status file ``path`` (None:
    no file, or none to be found in it), so a restarted process keeps its names: its rooms'
    affinity and its logs stay continuous. A file it cannot use is said in a warning, never
    fatal: the process takes a new unique name then."""
    if path is None:
        return None
    try:
        document = json.loads(path.read_bytes())
        stem = document["pool"]["stem"]
        return pool_stem("", stem if isinstance(stem, str) else "")  # a chosen name's rules
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, ConfigError) as exc:
        log.warning("status file %s: no pool name kept in it (%s); taking a new one", path, exc)
        return None


def _shown_store(store: str) -> str:
    from ..stores.postgres._dsn import is_postgres_dsn, redact_dsn

    return redact_dsn(store) if is_postgres_dsn(store) else store


ServiceRun = Callable[..., Awaitable[None]]
