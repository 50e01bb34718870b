"""``BridgeService``: the whole bridge as supervised children of one supervisor.

Ingest starts last and stops first, so a stop takes no new work, lets the workers finish and
delivers what they produced. See docs/guide/design.md, "BridgeService".
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ... import (
    ChildSpec,
    Supervisor,
    current_runtime,
    open_supervisor,
    wait_stop_requested,
)
from ..._core._util import open_nursery_unwrapped
from ..._plumbing._redact import redact_url
from ..._protocol._progress import ProgressRequest
from ..client._client import (
    GatewayAuthError,
    GatewayClient,
    GatewayProtocolError,
    GatewayRequestError,
    GatewayUnavailable,
)
from ..custody._roles import Store
from ..custody._rooms import RoomPolicy
from ..custody._rules import IN_CUSTODY, Task
from ..pool._agent import AgentFactory, AgentLoadError, agent_room_policy, load_agent
from ..pool._asyncio import loop_for
from ..pool._idle import worker_idle_maximum
from ..pool._lead import PoolLead
from ..pool._quarantine import Quarantine, QuarantineSpec
from ..pool._reconciler import Reconciler
from ..pool._stall import StallWatcher
from ..pool._status import PoolStatus, pool_status
from ..pool._wakeup import PoolWakeups
from ..pool._worker import PoolWorker
from ..runs._claimed import RELEASE_TIMEOUT
from ..runs._progress import ProgressUpdate
from ..runs._timings import Timings
from ._config import BridgeConfig
from ._dead_notices import DeadNotices
from ._delivery import Delivery, delivery_holder
from ._ingest import Ingest
from ._names import host_stem, lead_name, one_bridge_per_file, pool_stem, worker_names
from ._outage import run_through_outages
from ._pool_store import open_pool_store
from ._process import run_until_signal, until_stopped
from ._questions import QuestionPoster
from ._retention import retention_pass
from ._settings import prepare_store_dir
from ._store_wakeups import ResultsHint, WorkHint, relay_results, relay_work

if TYPE_CHECKING:
    from ...observe import CounterSource

log = logging.getLogger("tether.bridge")

ServiceRun = Callable[..., Awaitable[None]]


@attrs.define(eq=False)
class BridgeService:
    """One bridge. ``await nursery.start(service.run)`` (ready once every child is), or
    ``await service.run_until_signal()`` for a process of its own.

    ``store`` and ``factory`` may be given (tests, the demo); otherwise they come from
    ``config.store`` and ``config.agent``. ``gateway_options`` go to
    :class:`~tether.bridge.client.GatewayClient`.

    Stopping it in-process:

    - **Graceful** (a deploy, Ctrl-C): cancel the scope around ``run``, or let the supervisor
      whose child it is stop it. Ingest stops first, workers finish their runs within
      ``config.grace`` or hand their claims back, delivery posts what they produced. The
      supervisor shields this shutdown, so cancelling takes up to ``stop_grace`` seconds.
    - **Abrupt**: ``abort(reason)``. Every child is cancelled now, with no soft stop and no
      grace: agent runs are cut off mid-call, replies not yet posted stay in the store. For
      custody it is a crash (nothing is lost: the next run on the same store delivers every
      task), for Trio an orderly exit (no task of the bridge outlives ``run``). Cancelled
      workers still hand their claims back in a shielded step (one quick store write each),
      so the tasks are pending again at once, with no attempt burnt, rather than waiting out
      their leases. ``run`` then returns normally; as a supervised child, give it
      ``restart="temporary"`` or ``"transient"`` so the supervisor does not start it again.
    """

    config: BridgeConfig
    store: Store | None = None
    factory: AgentFactory | None = None
    gateway_options: dict[str, Any] = attrs.field(factory=dict)
    admin_ready: Callable[[int], None] | None = None
    """Called with the admin endpoint's bound port once it serves (``config.admin_port``)."""
    freeze_gc: bool = True
    """Once every child runs, move the objects alive then out of the cyclic garbage
    collector's way (``gc.freeze()``), if nothing in the process is frozen yet: the start-up
    heap (modules, clients, services) lives as long as the bridge, and otherwise each full
    collection walks all of it again (about once per few thousand messages). Only
    the first start freezes, so a restarted bridge never freezes the garbage of a run before.
    ``False`` when embedding the bridge in a process whose garbage from before the start must
    still be collected."""
    admin_port: int | None = attrs.field(default=None, init=False)
    ingest: Ingest | None = attrs.field(default=None, init=False)
    delivery: Delivery | None = attrs.field(default=None, init=False)
    dead_notices: DeadNotices | None = attrs.field(default=None, init=False)
    questions: QuestionPoster | None = attrs.field(default=None, init=False)
    gateway: GatewayClient | None = attrs.field(default=None, init=False)
    fatal: BaseException | None = attrs.field(default=None, init=False)
    running: bool = attrs.field(default=False, init=False)
    """True once every child started (``run`` reported ready)."""
    room_policy: RoomPolicy | None = attrs.field(default=None, init=False)
    """The room policy this bridge ingests with: the agent's if it names one, else
    ``config.room_policy`` (known once ``run`` started)."""
    wakeups: PoolWakeups = attrs.field(factory=PoolWakeups, init=False)
    timings: Timings = attrs.field(factory=Timings, init=False)
    """Queue wait, run and delivery times this bridge observed (the admin endpoint shows them)."""
    """Ingest, the lead and the workers ring each other through it (in this process)."""
    aborted: str | None = attrs.field(default=None, init=False)
    """The reason given to :meth:`abort`, once it was called."""
    pool_stem: str = attrs.field(init=False)
    """The stem of this bridge's pool names (``config.pool_name``, or unique per object)."""
    workers: list[PoolWorker] = attrs.field(factory=list, init=False)
    quarantine: Quarantine | None = attrs.field(default=None, init=False)
    """Where this process runs suspects: in quarantine children started with the agent spec
    (``None`` when the agent was given as an object: suspects run alone in the process)."""
    lead: PoolLead | None = attrs.field(default=None, init=False)
    _failed: trio.Event = attrs.field(factory=trio.Event, init=False)
    _supervisor: Supervisor | None = attrs.field(default=None, init=False)
    _body: trio.CancelScope | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        config = self.config
        if config.pool_name is None and not config.store_is_url:
            self.pool_stem = host_stem(config.client_name)  # one bridge per SQLite file
        else:
            self.pool_stem = pool_stem(config.client_name, config.pool_name)

    @property
    def pool_names(self) -> list[str]:
        """Every name this bridge beats under in the store (workers, then its lead)."""
        names = worker_names(self.pool_stem, self.config.workers)
        return [*names, lead_name(self.pool_stem)] if self.config.lead else names

    def pool_status(self) -> PoolStatus:
        return pool_status(self.pool_stem, self.workers, self.lead)

    @property
    def worker_grace(self) -> float:
        """A worker's shutdown grace: its runs' grace, then time to give its claims back."""
        return self.config.grace + RELEASE_TIMEOUT + 1.0

    def _quarantine(self) -> Quarantine | None:
        """The process's quarantine, if its agent can start in a child (a spec, not an object
        given in process that its spec does not name); says at start which rule its suspects
        follow."""
        config = self.config
        if self.factory is not None and not _is_spec_of(config.agent, self.factory):
            log.warning(
                "bridge: the agent was given as an object, not a module:factory spec, so it "
                "cannot start in a quarantine process: a suspect (a task in flight when a "
                "process died) runs alone in this process, and two crashes while it runs alone "
                "make it dead"
            )
            return None
        log.info(
            "bridge: suspects run in quarantine processes (agent %s, at most %d at once, dead "
            "after %d deaths%s; environment: the base variables%s)",
            config.agent,
            config.quarantine_processes,
            config.max_quarantine_deaths,
            f", {config.quarantine_memory} MiB each" if config.quarantine_memory else "",
            f" and {', '.join(config.quarantine_env)}"
            if config.quarantine_env
            else " only: quarantine_env names what the agent reads",
        )
        return Quarantine(
            QuarantineSpec(
                config.agent, memory=config.quarantine_memory * 2**20, env=config.quarantine_env
            ),
            processes=config.quarantine_processes,
            max_deaths=config.max_quarantine_deaths,
        )

    @property
    def stop_grace(self) -> float:
        """How long the whole bridge may take to stop softly (every stage's grace, summed)."""
        return 2 * self.config.grace + RELEASE_TIMEOUT + 15.0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the bridge until cancelled, asked to stop (as a supervised child), aborted, or
        fatal. Returns normally after a graceful stop or :meth:`abort`."""
        if self.aborted is not None:
            log.warning("bridge: not started, the service was aborted (%s)", self.aborted)
            return
        config = self.config
        factory = self.factory if self.factory is not None else load_agent(config.agent)
        self.quarantine = self._quarantine()
        try:
            async with AsyncExitStack() as stack:
                if self.store is None and config.pool_name is None:  # fixed names: one bridge
                    prepare_store_dir(config)
                    stack.enter_context(one_bridge_per_file(config.store))  # outlives the store
                store = await open_pool_store(  # a chosen name: refused if taken
                    stack,
                    config,
                    self.store,
                    self.pool_names,
                    check_names=config.pool_name is not None,
                    wakeups=self.wakeups,
                )
                log.info("pool names: %s-w1..w%d", self.pool_stem, config.workers)
                options: dict[str, Any] = {
                    "client_name": config.client_name,
                    "status_file": config.status_file,
                    "poll_wait": config.poll_wait,
                    "pool_name": self.pool_stem,
                }
                options.update(self.gateway_options)
                gateway = await stack.enter_async_context(
                    GatewayClient(config.gateway, config.token_file, **options)
                )
                self.gateway = gateway
                self.room_policy = await agent_room_policy(factory) or config.room_policy
                self.ingest = Ingest(
                    store,
                    gateway,
                    poll_wait=config.poll_wait,
                    timings=self.timings,  # the store's work bell rings the pool at commit
                    room_policy=self.room_policy,
                    debounce_s=config.room_debounce,
                )
                self.delivery = Delivery(
                    store,
                    gateway,
                    on_dead=self.wakeups.tasks_dead,
                    holder=delivery_holder(self.pool_stem),
                    timings=self.timings,
                    # a delivered reply may let its room's next message run (serial rooms)
                    on_delivered=self.wakeups.tasks_pending,
                )
                self.dead_notices = DeadNotices(store, gateway, wakeup=self.wakeups.dead)
                self.questions = QuestionPoster(store, gateway, on_woken=self.wakeups.tasks_pending)
                supervisor = await stack.enter_async_context(
                    open_supervisor(
                        name="bridge", strategy="one_for_one", max_restarts=10, period=30
                    )
                )
                self._supervisor = supervisor
                with trio.CancelScope() as self._body:
                    if self.aborted is not None:  # abort() came while the store opened
                        self._cut()
                    await self._start_children(supervisor, store, gateway, factory)
                    if self.freeze_gc and gc.get_freeze_count() == 0:
                        gc.freeze()  # once a process: a restart must not freeze a run's garbage
                    self.running = True
                    task_status.started()
                    await self._until_stop_or_failure()
        finally:
            # kept until the supervisor closed: an abort also cuts a graceful stop short
            self._supervisor = self._body = None
        if self.fatal is not None:
            raise self.fatal

    def abort(self, reason: str = "aborted") -> None:
        """Stop the bridge now, as a crash would (see the class docstring); ``run`` returns.

        Safe to call from any task of the run's thread, at any time and more than once (the
        first reason is kept), also during a graceful stop, which it cuts short. An aborted
        service stays aborted: a ``run`` that was starting stops as soon as it can (without
        reporting ready), a later ``run`` returns at once. Build a new ``BridgeService`` to
        run the bridge again.
        """
        if self.aborted is not None:
            return
        self.aborted = reason
        log.warning("bridge: aborting (%s)", reason)
        self._cut()

    def _cut(self) -> None:
        reason = self.aborted
        assert reason is not None
        if self._supervisor is not None:
            self._supervisor.abort(reason)
        if self._body is not None:
            self._body.cancel(reason=f"bridge aborted: {reason}")

    async def _start_children(
        self, supervisor: Supervisor, store: Store, gateway: GatewayClient, factory: AgentFactory
    ) -> None:
        config = self.config
        if config.admin_port is not None:
            await self._start_admin(supervisor, store, gateway)
        for spec in self._children(store, gateway, factory):
            await supervisor.start_child(spec)
        log.info(
            "bridge running: %s -> %s, %d worker(s)",
            redact_url(config.gateway),
            redact_url(config.store),
            config.workers,
        )

    async def _until_stop_or_failure(self) -> None:
        async with open_nursery_unwrapped() as nursery:

            async def until_stop() -> None:
                await wait_stop_requested()
                nursery.cancel_scope.cancel()

            nursery.start_soon(until_stop)
            await self._failed.wait()
            nursery.cancel_scope.cancel()

    async def run_until_signal(self) -> None:
        """The bridge as a process: SIGINT/SIGTERM stop it gracefully, then this returns."""
        await run_until_signal(
            "bridge",
            self.run,
            lambda: self.running,
            grace=self.config.grace,
            stop_grace=self.stop_grace,
        )

    # -- the children ----------------------------------------------------------------------

    async def _start_admin(
        self, supervisor: Supervisor, store: Store, gateway: GatewayClient
    ) -> None:
        """The admin endpoint, first child of the bridge's supervisor: up before the others
        start (health shows them starting) and the last to stop (it shows the shutdown)."""
        from ...observe import AdminSettings, admin_child  # hypercorn: only when used
        from ._admin import bridge_observed
        from ._ops_routes import OpsRoutes

        runtime = current_runtime()
        if runtime is None:
            raise RuntimeError(
                "the bridge's admin endpoint needs open_runtime() around BridgeService.run "
                "(run_until_signal opens one)"
            )
        config = self.config
        observed = bridge_observed(
            runtime,
            store=store,
            gateway=lambda: gateway.status,
            gateway_window=config.health_window,
            counters=self._counters(),
            pool=self.pool_status,
            timings=self.timings,
            routes=OpsRoutes(store, runtime, event_ttl=config.event_ttl),
        )
        settings = AdminSettings(
            token_file=config.admin_token_file, host=config.admin_host, port=config.admin_port or 0
        )
        self.admin_port = await supervisor.start_child(admin_child(observed, settings))
        log.info("admin endpoint on %s:%d", config.admin_host, self.admin_port)
        if self.admin_ready is not None:
            self.admin_ready(self.admin_port)

    def _counters(self) -> list[CounterSource]:
        from ...observe import CounterSource

        ingest, delivery, dead_notices = self.ingest, self.delivery, self.dead_notices
        assert ingest is not None
        assert delivery is not None
        assert dead_notices is not None
        return [
            CounterSource(
                "ingested",
                "Tasks taken into custody from the gateway",
                lambda: ingest.stats.ingested,
            ),
            CounterSource(
                "ingest_replays",
                "Polled tasks already in custody (acked again, nothing changed)",
                lambda: ingest.stats.replays,
            ),
            CounterSource(
                "ingest_rejected",
                "Polled tasks rejected to the gateway (the store refused them, or a conflict)",
                lambda: ingest.stats.rejected,
            ),
            CounterSource(
                "ingest_conflicts",
                "Ids polled again with a different body (first body kept, newcomer rejected)",
                lambda: ingest.stats.conflicts,
            ),
            CounterSource(
                "deliveries", "Replies the gateway confirmed", lambda: delivery.stats.delivered
            ),
            CounterSource(
                "delivery_dead_letters",
                "Replies dead-lettered because the gateway refused them",
                lambda: delivery.stats.dead_lettered,
            ),
            CounterSource(
                "dead_letters_reported",
                "Dead-lettered tasks the gateway confirmed it was told about (closed, with reason)",
                lambda: dead_notices.stats.reported,
            ),
            CounterSource(
                "dead_letters_report_refused",
                "Dead-lettered tasks the gateway refused to hear about (e.g. unknown to it)",
                lambda: dead_notices.stats.refused,
            ),
            CounterSource(
                "quarantine_runs",
                "Suspects' runs started in a quarantine process",
                lambda: 0 if self.quarantine is None else self.quarantine.runs,
            ),
            CounterSource(
                "quarantine_deaths",
                "Quarantine processes that died while they ran their task (the proof that counts)",
                lambda: 0 if self.quarantine is None else self.quarantine.deaths,
            ),
            CounterSource(
                "quarantine_start_failures",
                "Quarantine processes that could not start the agent (each backs off the next)",
                lambda: 0 if self.quarantine is None else self.quarantine.start_failures,
            ),
        ]

    def _children(
        self, store: Store, gateway: GatewayClient, factory: AgentFactory
    ) -> list[ChildSpec]:
        config = self.config
        assert self.ingest is not None
        assert self.delivery is not None
        assert self.dead_notices is not None
        assert self.questions is not None
        reconciler = Reconciler(
            store, on_dead=self.wakeups.tasks_dead, on_woken=self.wakeups.tasks_pending
        )
        self.wakeups.on_parked = reconciler.parked_until  # a parked run wakes on time
        stem = self.pool_stem
        workers = [
            PoolWorker(
                store,
                name,
                factory,
                concurrency=config.concurrency,
                capacity=config.capacity,
                poll_interval=config.poll_interval,
                idle_maximum=worker_idle_maximum(index),
                stop_grace=config.grace,
                retry_backoff=config.retry_backoff,
                run_timeout=config.run_timeout,
                history_turns=config.history_turns,
                bounds=config.bounds,
                park_after=config.park_after,
                agent_version=config.agent_version,
                queues=config.queues,
                wakeups=self.wakeups,
                after_complete=self._result_stored,
                on_asked=self._question_recorded,
                on_progress=self.send_progress,
                timings=self.timings,
                quarantine=self.quarantine,
            )
            for index, name in enumerate(worker_names(stem, config.workers))
        ]
        self.workers = workers
        stall = StallWatcher(store, stall_after=config.stall_after, notify=self.notify_stall)
        specs = [
            self._spec(
                "reconciler",
                until_stopped(partial(reconciler.run, interval=config.reconcile_interval)),
            ),
            self._spec("delivery", partial(self._deliver, self.delivery)),
            self._spec("dead-notices", until_stopped(self.dead_notices.run)),
            self._spec("questions", until_stopped(self.questions.run)),
            self._spec("retention", until_stopped(partial(self._prune, store))),
            self._spec(
                "heartbeat",
                until_stopped(partial(self._heartbeat, store, gateway)),
                restart="transient",
            ),
            self._spec("workers", partial(self._run_workers, workers), grace=self.worker_grace),
            self._spec("stall-notices", stall.run),
            # on its way out ingest gives the gateway back what it leased and never acked
            self._spec(
                "ingest", until_stopped(self.ingest.run), grace=2.0 + gateway.release_timeout
            ),
        ]
        if config.lead:
            # before the workers, so a soft stop ends it after them; it drops its beat then
            lead = PoolLead(
                store,
                name=lead_name(stem),
                sweep_interval=config.sweep_interval,
                lease=config.lead_lease,
                wakeups=self.wakeups,
                timings=self.timings,
            )
            self.lead = lead
            specs.insert(4, self._spec("lead", lead.run))
        if isinstance(store, ResultsHint):  # results stored by other processes
            relay = partial(relay_results, store, self.delivery)
            specs.append(self._spec("store-wakeups", until_stopped(relay)))
        if isinstance(store, WorkHint):  # tasks other bridges ingested, other leads assigned
            names = [w.name for w in workers]
            ring = partial(relay_work, store, self.wakeups, names)
            specs.append(self._spec("store-work-wakeups", until_stopped(ring)))
        return specs

    async def _run_workers(
        self,
        workers: list[PoolWorker],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """The workers under their own one_for_one supervisor; a soft stop reaches all of them
        at once, so they finish (or give back) their tasks in parallel, not one after another."""
        async with (
            loop_for(*(worker.factory for worker in workers)),
            open_supervisor(
                name="workers", strategy="one_for_one", max_restarts=10, period=30
            ) as supervisor,
        ):
            for worker in workers:
                await supervisor.start_child(
                    ChildSpec(
                        worker.name,
                        worker.run,
                        # a worker returns only when stopped: restart it only if it crashed
                        restart="transient",
                        shutdown_grace=self.worker_grace,
                    )
                )
            task_status.started()
            await wait_stop_requested()
            for worker in workers:
                worker.request_stop()

    def _spec(
        self,
        name: str,
        run: ServiceRun,
        *,
        restart: Any = "permanent",
        grace: float | None = None,
    ) -> ChildSpec:
        return ChildSpec(
            name,
            self._guarded,
            run,
            name,
            restart=restart,
            shutdown_grace=self.config.grace if grace is None else grace,
        )

    async def _guarded(
        self,
        run: ServiceRun,
        name: str = "a child",
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run a child; a gateway auth refusal stops the whole bridge instead of a restart, and
        a store call that met the start of an outage runs the child again at once."""
        try:
            await run_through_outages(run, name, task_status=task_status)
        except* GatewayAuthError as group:
            if self.fatal is None:
                self.fatal = group.exceptions[0]
            self._failed.set()
            await wait_stop_requested()  # the bridge is stopping; this child goes with it

    async def _deliver(
        self, delivery: Delivery, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Deliver until asked to stop; then finish the batch in hand and deliver what the
        stopping workers produced (bounded by the child's shutdown grace)."""
        async with open_nursery_unwrapped() as nursery:

            async def forward_stop() -> None:
                await wait_stop_requested()
                delivery.request_stop()

            nursery.start_soon(forward_stop)
            await delivery.run(task_status=task_status)
            nursery.cancel_scope.cancel()

    async def _heartbeat(
        self,
        store: Store,
        gateway: GatewayClient,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Tell the gateway we live and how many tasks we hold; ends if it has no endpoint."""
        task_status.started()
        failing = False
        while gateway.heartbeat_supported:
            counts = await store.counts()
            try:
                await gateway.heartbeat(sum(counts[state] for state in IN_CUSTODY))
            except (GatewayUnavailable, GatewayRequestError, GatewayProtocolError) as exc:
                if not failing:
                    log.warning("gateway heartbeat failed (will keep trying): %s", exc)
                failing = True
            else:
                failing = False
            await trio.sleep(self.config.heartbeat_interval)

    async def _prune(
        self, store: Store, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Delete delivered tasks older than ``retention`` (dead ones stay), tombstones and
        turns past their limits, each in slices of a few milliseconds (``_retention``).

        Each pruned id leaves a tombstone so a late gateway replay is still a no-op; tombstones
        go after ``tombstone_retention``.
        """
        task_status.started()
        while True:
            await retention_pass(
                store,
                retention=self.config.retention,
                tombstone_retention=self.config.tombstone_retention,
                room_keep=self.config.room_keep,
            )
            await trio.sleep(60.0)

    async def _result_stored(self, task: Task) -> None:
        """A worker stored a reply: delivery looks now rather than at its next idle tick."""
        if self.delivery is not None:
            self.delivery.nudge()

    def _question_recorded(self) -> None:
        """A worker recorded a question (issue #36): the poster looks now."""
        if self.questions is not None:
            self.questions.nudge()

    async def notify_stall(self, task_id: str, age_s: float) -> None:
        """The pool's stall callback: tell the gateway (raises if it could not be sent)."""
        log.warning("task %s has been in custody for %.0f s without a reply", task_id, age_s)
        if self.gateway is not None:
            await self.gateway.notice(task_id, age_s)

    async def send_progress(self, update: ProgressUpdate) -> bool:
        """The pool's progress callback: one update to the gateway (False: it has no
        progress endpoint, so the workers stop sending)."""
        if self.gateway is None:
            return False
        return await self.gateway.progress(
            ProgressRequest(
                id=update.id,
                attempt=update.attempt,
                seq=update.seq,
                running_s=update.running_s,
                status=update.status,
                partial=update.partial,
                worker=update.worker,
            )
        )


def _is_spec_of(spec: str, factory: AgentFactory) -> bool:
    """Does ``spec`` load ``factory`` itself (so a child started with it runs the same agent)?"""
    try:
        return load_agent(spec) is factory
    except AgentLoadError:
        return False
