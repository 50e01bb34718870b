"""Supervisor: long-running services as supervised children, after Erlang/OTP.

Restart strategies, restart intensity and a soft-then-hard shutdown that survives an enclosing
cancellation, acting on one child table. See docs/guide/design.md, "Supervisors".
"""

from __future__ import annotations

import contextvars
import logging
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Literal, get_args

import attrs
import trio
import trio_util

from ._backoff import Backoff
from ._child import (
    ChildSpec,
    ChildState,
    Incarnation,
    SupervisedChild,
    SupervisorSnapshot,
    restart_wanted,
)
from ._core._context import STOP_EVENT
from ._core._directory import current_directory
from ._core._owner import current_owner, owned_by, start_soon_owned
from ._expected import expected_one_line, next_at
from ._intensity import RestartIntensity

log = logging.getLogger("tether.supervisor")

Strategy = Literal["one_for_one", "one_for_all", "rest_for_one"]
"""Which children a supervisor restarts when one fails (Erlang/OTP's three strategies)."""
STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)

SHUTDOWN_MARGIN = 1.0
"""Seconds a shutdown may run past the sum of its children's graces before it cancels the rest."""

# the supervisor whose child the current task belongs to, so a nested one can be aborted with it
_ENCLOSING: contextvars.ContextVar[Supervisor | None] = contextvars.ContextVar(
    "tether_enclosing_supervisor", default=None
)


class SupervisorFailed(Exception):
    """A child needed more restarts than the supervisor's intensity allows.

    ``child`` names it; ``__cause__`` is its last error (None if it kept returning normally).
    """

    def __init__(
        self,
        supervisor: str,
        child: str,
        max_restarts: int,
        period: float,
        last_error: BaseException | None,
    ) -> None:
        self.supervisor = supervisor
        self.child = child
        self.max_restarts = max_restarts
        self.period = period
        how = (
            f"last error: {last_error!r}"
            if last_error is not None
            else "it returned normally each time"
        )
        super().__init__(
            f"supervisor {supervisor!r} gave up: child {child!r} ended more than "
            f"max_restarts={max_restarts} times within {period:g}s ({how})"
        )


@attrs.frozen(kw_only=True)
class RestartPolicy:
    """A supervisor's restart rules. ``open_supervisor`` takes the same names as keywords."""

    strategy: Strategy = "one_for_one"
    max_restarts: int = 3
    period: float = 5.0
    backoff_initial: float = 0.1
    backoff_max: float = 5.0
    backoff_reset: float = 10.0
    jitter: float = 0.1

    def __attrs_post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(
                f"strategy must be one of {', '.join(STRATEGIES)}; got {self.strategy!r}"
            )
        if self.backoff_initial < 0:
            raise ValueError(f"backoff_initial must be >= 0, got {self.backoff_initial!r}")
        if self.backoff_max < self.backoff_initial:
            raise ValueError(
                f"backoff_max ({self.backoff_max!r}) must be >= backoff_initial "
                f"({self.backoff_initial!r})"
            )
        if self.backoff_reset < 0:
            raise ValueError(f"backoff_reset must be >= 0, got {self.backoff_reset!r}")
        # the helpers check the rest (jitter, the period...) in their own words
        self.intensity()
        self.backoff()

    def intensity(self) -> RestartIntensity:
        return RestartIntensity(self.max_restarts, self.period)

    def backoff(self) -> Backoff:
        return Backoff(self.backoff_initial, self.backoff_max, jitter=self.jitter)


@attrs.define(eq=False)
class _ReadyStatus:
    """Passes ``started()`` on to Trio and marks the incarnation ready."""

    _inner: trio.TaskStatus[Any]
    _on_ready: Callable[[], None]
    ready: bool = False

    def started(self, value: Any = None) -> None:
        self._inner.started(value)
        if not self.ready:
            self.ready = True
            self._on_ready()


@attrs.define(eq=False)
class Supervisor:
    """Runs children and keeps them running. Open one with ``open_supervisor()``.

    Machinery tasks (exit handlers) carry the owner label ``supervisor:<name>``; each child's
    tasks carry the child's name, so ``registry.owned_by(child_name)`` lists exactly them.
    """

    name: str = "supervisor"
    policy: RestartPolicy = attrs.field(factory=RestartPolicy)
    rng: random.Random = attrs.field(factory=random.Random)
    _children: list[SupervisedChild] = attrs.field(init=False, factory=list)
    _nursery: trio.Nursery | None = attrs.field(init=False, default=None)
    _lock: trio.Lock = attrs.field(init=False, factory=trio.Lock)
    _intensity: RestartIntensity = attrs.field(init=False)
    _backoff: Backoff = attrs.field(init=False)
    _handlers: set[trio.CancelScope] = attrs.field(init=False, factory=set)
    _closing: bool = attrs.field(init=False, default=False)
    _closed: trio.Event = attrs.field(init=False, factory=trio.Event)
    _failure: SupervisorFailed | None = attrs.field(init=False, default=None)
    _nested: set[Supervisor] = attrs.field(init=False, factory=set)
    _shutdown_scope: trio.CancelScope | None = attrs.field(init=False, default=None)
    _abort_reason: str | None = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        self._intensity = self.policy.intensity()
        self._backoff = self.policy.backoff()

    @property
    def owner_label(self) -> str:
        return f"supervisor:{self.name}"

    @property
    def closing(self) -> bool:
        return self._closing

    # -- observing ---------------------------------------------------------------------------

    def children(self) -> list[SupervisedChild]:
        """The live child records, in start order."""
        return list(self._children)

    def child(self, name: str) -> SupervisedChild:
        for child in self._children:
            if child.spec.name == name:
                return child
        known = ", ".join(repr(c.spec.name) for c in self._children) or "none"
        raise KeyError(f"supervisor {self.name!r} has no child named {name!r} (children: {known})")

    def state(self, name: str) -> trio_util.AsyncValue[ChildState]:
        """The child's state as an ``AsyncValue`` (``await sup.state(n).wait_value("running")``)."""
        return self.child(name).state

    def snapshot(self) -> SupervisorSnapshot:
        return SupervisorSnapshot(
            name=self.name,
            strategy=self.policy.strategy,
            closing=self._closing,
            recent_restarts=self._intensity.recent(trio.current_time()),
            children=tuple(c.snapshot() for c in self._children),
        )

    # -- dynamic children -------------------------------------------------------------------

    async def start_child(self, spec: ChildSpec) -> Any:
        """Start a child; return the value it passed to ``task_status.started()``.

        Raises ``ValueError`` if a child of that name is still supervised (one that ended for
        good is replaced), ``trio.ClosedResourceError`` once the supervisor is closing, and
        whatever the child raised if it failed before it was ready.
        """
        if not isinstance(spec, ChildSpec):
            raise TypeError(f"start_child takes a ChildSpec, got {spec!r}")
        async with self._lock:
            self._check_open(f"start child {spec.name!r}")
            for existing in self._children:
                if existing.spec.name == spec.name:
                    if not existing.done:
                        raise ValueError(
                            f"supervisor {self.name!r} already has a child named "
                            f"{spec.name!r} (state {existing.state.value})"
                        )
                    self._children.remove(existing)
            child = SupervisedChild(spec)
            self._children.append(child)
            try:
                return await self._launch(child)
            except BaseException as exc:
                self._children.remove(child)
                child.done = True
                if isinstance(exc, Exception):
                    child.last_error = exc
                    child.state.value = "failed"
                else:
                    child.state.value = "stopped"
                raise

    async def terminate_child(self, name: str) -> None:
        """Stop a child (soft, then hard after its grace) and forget it."""
        async with self._lock:
            child = self.child(name)
            child.done = True
            if child.pending is not None:
                child.pending.cancel(reason=f"child {name!r} terminated")
            await self._stop_child(child, reason="terminate_child")
            self._children.remove(child)

    def _check_open(self, what: str) -> None:
        if self._nursery is None:
            raise trio.ClosedResourceError(
                f"cannot {what}: supervisor {self.name!r} is not running (use open_supervisor)"
            )
        if self._closing:
            raise trio.ClosedResourceError(
                f"cannot {what}: supervisor {self.name!r} is shutting down"
            )

    # -- running one incarnation ------------------------------------------------------------

    async def _launch(self, child: SupervisedChild) -> Any:
        assert self._nursery is not None
        inc = Incarnation()
        child.current = inc
        child.running_since = None
        child.backoff_until = None
        child.state.value = "starting"
        with owned_by(child.spec.name):
            return await self._nursery.start(self._run_incarnation, child, inc, name=child.name)

    def _mark_ready(self, child: SupervisedChild, inc: Incarnation) -> None:
        inc.ready = True
        # from now on only this supervisor stops the child (soft, then hard); see abort()
        inc.scope.shield = True
        if child.current is inc:
            child.running_since = trio.current_time()
            child.state.value = "running"

    async def _run_incarnation(
        self,
        child: SupervisedChild,
        inc: Incarnation,
        task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        STOP_EVENT.set(inc.stop)
        _ENCLOSING.set(self)
        status = _ReadyStatus(task_status, partial(self._mark_ready, child, inc))
        error: Exception | None = None
        try:
            with inc.scope:
                try:
                    await child.spec.fn(*child.spec.args, task_status=status)
                except Exception as exc:
                    if not status.ready:
                        raise  # start_child (or the restart) sees it, unwrapped
                    error = exc
        except BaseException:
            if child.current is inc and status.ready:
                child.state.value = "stopped"
            raise
        finally:
            inc.exited.set()
        if not status.ready:
            return  # Trio raises "exited without calling started()" in the starter
        if inc.stopped_by_supervisor or self._closing:
            if child.current is inc and child.state.value != "failed":
                child.state.value = "stopped"
            if error is not None:
                child.last_error = error
                log.warning(
                    "supervisor %r: child %r raised while stopping: %r",
                    self.name,
                    child.name,
                    error,
                    exc_info=error,
                )
            return
        self._spawn_exit_handler(child, inc, error)

    # -- reacting to a child that ended on its own ------------------------------------------

    def _spawn_exit_handler(
        self, child: SupervisedChild, inc: Incarnation | None, error: Exception | None
    ) -> None:
        assert self._nursery is not None
        start_soon_owned(
            self._nursery,
            self.owner_label,
            self._on_exit,
            child,
            inc,
            error,
            name=f"{self.owner_label}:restart:{child.name}",
        )

    async def _on_exit(
        self, child: SupervisedChild, inc: Incarnation | None, error: Exception | None
    ) -> None:
        with trio.CancelScope() as scope:
            self._handlers.add(scope)
            try:
                await self._handle_exit(scope, child, inc, error)
            finally:
                self._handlers.discard(scope)
                if child.pending is scope:
                    child.pending = None

    async def _handle_exit(
        self,
        own: trio.CancelScope,
        child: SupervisedChild,
        inc: Incarnation | None,
        error: Exception | None,
    ) -> None:
        async with self._lock:
            if self._closing or child.done or child.current is not inc:
                return
            now = trio.current_time()
            # an expected failure is one line, saying what happens next; else a traceback
            one_line = None if error is None else expected_one_line(error)
            if error is not None:
                child.last_error = error
                if one_line is None:
                    log.warning(
                        "supervisor %r: child %r failed: %r",
                        self.name,
                        child.name,
                        error,
                        exc_info=error,
                    )
            else:
                log.info("supervisor %r: child %r returned", self.name, child.name)
            if not restart_wanted(child.spec.restart, error):
                if one_line is not None:
                    log.warning(
                        "supervisor %r: child %r failed: %s; not restarted (restart=%s)",
                        self.name,
                        child.name,
                        one_line,
                        child.spec.restart,
                    )
                child.done = True
                child.state.value = "failed" if error is not None else "stopped"
                return
            if not self._intensity.record(now):
                if one_line is not None:
                    log.warning(
                        "supervisor %r: child %r failed: %s", self.name, child.name, one_line
                    )
                await self._fail(own, child, error)
                return
            uptime = 0.0 if child.running_since is None else now - child.running_since
            if uptime >= self.policy.backoff_reset:
                child.attempt = 0
            delay = self._backoff.delay(child.attempt, self.rng)
            child.attempt += 1
            if one_line is not None:
                log.warning(
                    "supervisor %r: child %r failed: %s; restart %s",
                    self.name,
                    child.name,
                    one_line,
                    next_at(delay),
                )
            if self.policy.strategy != "one_for_one":
                await self._restart_group(child, delay)
                return
            child.restarts += 1
            child.backoff_until = trio.current_time() + delay
            child.state.value = "backoff"
            child.pending = own
        await trio.sleep(delay)
        async with self._lock:
            if self._closing or child.done or child.current is not inc:
                return
            await self._relaunch(child)

    async def _relaunch(self, child: SupervisedChild) -> bool:
        """Start a child again; a failure before ready is handled as a failed incarnation."""
        try:
            await self._launch(child)
        except Exception as exc:
            child.last_error = exc
            child.state.value = "backoff"
            self._spawn_exit_handler(child, child.current, exc)
            return False
        return True

    async def _restart_group(self, failed: SupervisedChild, delay: float) -> None:
        index = self._children.index(failed)
        scope = self._children if self.policy.strategy == "one_for_all" else self._children[index:]
        members = [c for c in scope if c is failed or not c.done]
        reason = f"{self.policy.strategy} restart after {failed.name!r} ended"
        for other in reversed(members):
            if other is not failed:
                await self._stop_child(other, reason=reason)
        for other in members:
            if other is not failed and other.spec.restart == "temporary":
                other.done = True
        to_start = [c for c in members if not c.done]
        backoff_until = trio.current_time() + delay
        for c in to_start:
            c.restarts += 1
            c.backoff_until = backoff_until
            c.state.value = "backoff"
        await trio.sleep(delay)
        for c in to_start:
            if self._closing or not await self._relaunch(c):
                return

    async def _fail(
        self, own: trio.CancelScope, child: SupervisedChild, error: Exception | None
    ) -> None:
        assert self._nursery is not None
        child.done = True
        child.state.value = "failed"
        failure = SupervisorFailed(
            self.name, child.name, self.policy.max_restarts, self.policy.period, error
        )
        failure.__cause__ = error
        self._failure = failure
        log.error("%s", failure)
        self._closing = True
        for scope in list(self._handlers):
            if scope is not own:
                scope.cancel(reason=f"supervisor {self.name!r} failed")
        await self._stop_all(reason=f"supervisor failed: child {child.name!r}")
        self._closed.set()
        self._nursery.cancel_scope.cancel(reason=str(failure))

    # -- stopping ---------------------------------------------------------------------------

    async def _stop_child(self, child: SupervisedChild, *, reason: str) -> None:
        inc = child.current
        if inc is None or inc.exited.is_set():
            if child.state.value not in ("failed", "stopped"):
                child.state.value = "stopped"
            return
        inc.stopped_by_supervisor = True
        child.state.value = "stopping"
        inc.stop.set()
        grace = child.spec.shutdown_grace
        with trio.move_on_after(grace):
            await inc.exited.wait()
        if not inc.exited.is_set():
            log.warning(
                "supervisor %r: child %r did not stop within %gs; cancelling (%s)",
                self.name,
                child.name,
                grace,
                reason,
            )
            inc.scope.cancel(
                reason=f"supervisor {self.name!r}: child {child.name!r} still running "
                f"{grace:g}s after the stop request ({reason})"
            )
            await inc.exited.wait()
        child.state.value = "stopped"

    async def _stop_all(self, *, reason: str) -> None:
        for child in reversed(list(self._children)):
            if child.pending is not None:
                child.pending.cancel(reason=reason)
            await self._stop_child(child, reason=reason)

    def _cancel_children(self, reason: str) -> None:
        for child in self._children:
            inc = child.current
            if inc is not None and not inc.exited.is_set():
                inc.stopped_by_supervisor = True
                inc.scope.cancel(reason=reason)

    def abort(self, reason: str = "aborted") -> None:
        """Cancel every child now: no soft stop, no grace; the block then ends at once.

        Also cancels a shutdown in progress and every supervisor opened inside one of this
        supervisor's children. The runtime calls this on the second shutdown signal: the
        shields that keep an enclosing cancellation from skipping the graceful shutdown must
        not keep an explicit "stop now" out as well.
        """
        if self._abort_reason is not None:
            return
        self._abort_reason = reason
        self._closing = True
        log.warning("supervisor %r: aborting (%s)", self.name, reason)
        for scope in list(self._handlers):
            scope.cancel(reason=f"supervisor {self.name!r} aborted: {reason}")
        if self._shutdown_scope is not None:
            self._shutdown_scope.cancel(reason=f"supervisor {self.name!r} aborted: {reason}")
        for nested in list(self._nested):
            nested.abort(reason)
        self._cancel_children(f"supervisor {self.name!r} aborted: {reason}")

    def _shutdown_deadline(self) -> float:
        live = [
            c for c in self._children if c.current is not None and not c.current.exited.is_set()
        ]
        return trio.current_time() + sum(c.spec.shutdown_grace for c in live) + SHUTDOWN_MARGIN

    async def _shutdown(self, reason: str) -> None:
        """Stop every child, soft then hard, even when the caller's context is cancelled."""
        if self._closed.is_set():
            return
        self._closing = True
        for scope in list(self._handlers):
            scope.cancel(reason=f"supervisor {self.name!r} shutting down")
        scope = trio.CancelScope(shield=True, deadline=self._shutdown_deadline())
        if self._abort_reason is not None:
            scope.cancel(reason=f"supervisor {self.name!r} aborted: {self._abort_reason}")
        self._shutdown_scope = scope
        try:
            with scope:
                async with self._lock:
                    await self._stop_all(reason=reason)
        finally:
            self._shutdown_scope = None
        if scope.cancelled_caught and self._abort_reason is None:
            log.warning(
                "supervisor %r: shutdown still running at its deadline (children's graces "
                "+ %gs); cancelling the remaining children",
                self.name,
                SHUTDOWN_MARGIN,
            )
        self._cancel_children(f"supervisor {self.name!r} shutdown ({reason}) ended")
        self._closed.set()


@asynccontextmanager
async def supervising(supervisor: Supervisor) -> AsyncIterator[Supervisor]:
    """Run ``supervisor`` for the duration of the block (``open_supervisor`` and the runtime).

    Leaving the block stops every child (soft, grace, hard; reverse start order), also when an
    enclosing cancellation ends it (the shutdown is shielded, bounded by the graces). The body's
    own exception comes out as itself; ``SupervisorFailed`` comes out bare.
    """
    if supervisor._nursery is not None:
        raise RuntimeError(f"supervisor {supervisor.name!r} is already running")
    directory = current_directory()
    if directory is not None:
        directory.add_supervisor(supervisor, opened_by=current_owner())
    enclosing = _ENCLOSING.get()
    if enclosing is not None:
        enclosing._nested.add(supervisor)
        if enclosing._abort_reason is not None:
            supervisor.abort(enclosing._abort_reason)
    body_exc: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            supervisor._nursery = nursery
            try:
                yield supervisor
            except BaseException as exc:
                body_exc = exc
                raise
            finally:
                await supervisor._shutdown("the supervisor block ended")
    except BaseExceptionGroup as group:
        failure = supervisor._failure
        if failure is not None:
            raise failure from failure.__cause__
        if body_exc is not None and len(group.exceptions) == 1 and group.exceptions[0] is body_exc:
            raise body_exc from body_exc.__cause__
        _, rest = group.split(KeyboardInterrupt)
        if rest is None:  # only interrupts: not a child failure, so not a group either
            raise KeyboardInterrupt from group
        raise
    finally:
        if directory is not None:
            directory.remove_supervisor(supervisor)
        if enclosing is not None:
            enclosing._nested.discard(supervisor)
    failure = supervisor._failure
    if failure is not None:
        raise failure from failure.__cause__


@asynccontextmanager
async def open_supervisor(
    *,
    strategy: Strategy = "one_for_one",
    max_restarts: int = 3,
    period: float = 5.0,
    backoff_initial: float = 0.1,
    backoff_max: float = 5.0,
    backoff_reset: float = 10.0,
    jitter: float = 0.1,
    rng: random.Random | None = None,
    name: str = "supervisor",
) -> AsyncIterator[Supervisor]:
    """Open a supervisor; add children with ``await sup.start_child(ChildSpec(...))``.

    ``max_restarts``/``period``: the restart intensity (at most ``max_restarts`` in ``period``).
    ``backoff_initial``..``backoff_max``: exponential delay before a restart, doubled per
    consecutive restart and reset once the child stayed up ``backoff_reset`` seconds.
    ``jitter``: each delay is scaled by a uniform factor in ``(1 - jitter, 1]`` drawn from
    ``rng`` (0 = exact delays).
    """
    policy = RestartPolicy(
        strategy=strategy,
        max_restarts=max_restarts,
        period=period,
        backoff_initial=backoff_initial,
        backoff_max=backoff_max,
        backoff_reset=backoff_reset,
        jitter=jitter,
    )
    supervisor = Supervisor(
        name=name, policy=policy, rng=rng if rng is not None else random.Random()
    )
    async with supervising(supervisor):
        yield supervisor
