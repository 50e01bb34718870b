"""A store is a facade over its parts: each role method is the method of one part, found by
name (``Via``), so the roles (``custody._roles``) stay flat while each capability's SQL lives in
one part per backend over the backend's one primitive (``sqlite._db``, ``postgres._db``).

``Via`` keeps the part method's exact signature for mypy (a ``ParamSpec``), so a store that
delegates a method with the wrong signature fails the role it is typed against.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

import attrs

from ._asks_frame import AsksFrame
from ._conversations import ConversationFrame
from ._events_frame import EventsFrame
from ._frame import CustodyFrame
from ._limits_frame import LimitsFrame
from ._operator_frame import OperatorFrame
from ._retention import RetentionFrame
from ._schedules_frame import SchedulesFrame
from ._steps_frame import StepsFrame
from ._tenants_frame import TenantsFrame

P = ParamSpec("P")
R = TypeVar("R")
F = TypeVar("F")


@attrs.frozen
class Parts:
    """A store's parts, one per capability, each over the backend's one primitive."""

    custody: CustodyFrame
    operator: OperatorFrame
    retention: RetentionFrame
    steps: StepsFrame
    asks: AsksFrame
    limits: LimitsFrame
    tenants: TenantsFrame
    rooms: ConversationFrame
    schedules: SchedulesFrame
    events: EventsFrame


class Via(Generic[F, P, R]):
    """A store method that is ``method`` of the part named ``part`` (``Parts``)."""

    __slots__ = ("method", "name", "part")

    def __init__(self, part: str, method: Callable[Concatenate[F, P], Coroutine[Any, Any, R]]):
        self.part = part
        self.name = method.__name__
        self.method = method
        """The frame's method (``tests/stores/test_facade.py`` checks it is the part's: mypy
        checks the signature, not that ``part`` names the right part)."""

    @overload
    def __get__(self, store: None, owner: type) -> Self: ...

    @overload
    def __get__(self, store: StoreFacade, owner: type) -> Callable[P, Coroutine[Any, Any, R]]: ...

    def __get__(self, store: StoreFacade | None, owner: type) -> Any:
        if store is None:
            return self
        return getattr(getattr(store.parts, self.part), self.name)

    def __call__(
        self, store: StoreFacade, /, *args: P.args, **kwargs: P.kwargs
    ) -> Coroutine[Any, Any, R]:
        """Called on the class, as a function is (``SqliteStore.claim(store, ...)``)."""
        method: Callable[P, Coroutine[Any, Any, R]] = getattr(
            getattr(store.parts, self.part), self.name
        )
        return method(*args, **kwargs)


class StoreFacade(abc.ABC):
    """The role methods every store has, each delegated to its part; a backend's store class
    adds its fields, ``open``, ``aclose`` and the waits for news."""

    parts: Parts

    @abc.abstractmethod
    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def stored_text(self, text: str) -> str:
        """A reason as the backend stores it (PostgreSQL's text holds no NUL)."""
        return text

    # -- custody (``_frame``) -----------------------------------------------------------------
    ingest = Via("custody", CustodyFrame.ingest)
    ingest_many = Via("custody", CustodyFrame.ingest_many)
    body_conflicts = Via("custody", CustodyFrame.body_conflicts)
    pending = Via("custody", CustodyFrame.pending)
    assign = Via("custody", CustodyFrame.assign)
    unassign = Via("custody", CustodyFrame.unassign)
    return_outranked = Via("custody", CustodyFrame.return_outranked)
    assign_many = Via("custody", CustodyFrame.assign_many)
    return_assignments = Via("custody", CustodyFrame.return_assignments)
    pool_view = Via("custody", CustodyFrame.pool_view)
    beat = Via("custody", CustodyFrame.beat)
    workers = Via("custody", CustodyFrame.workers)
    remove_worker = Via("custody", CustodyFrame.remove_worker)
    claim = Via("custody", CustodyFrame.claim)
    claim_many = Via("custody", CustodyFrame.claim_many)
    renew = Via("custody", CustodyFrame.renew)
    complete = Via("custody", CustodyFrame.complete)
    complete_many = Via("custody", CustodyFrame.complete_many)
    fail = Via("custody", CustodyFrame.fail)
    quarantine_death = Via("custody", CustodyFrame.quarantine_death)
    release = Via("custody", CustodyFrame.release)
    recover_claims = Via("custody", CustodyFrame.recover_claims)
    stall_candidates = Via("custody", CustodyFrame.stall_candidates)
    mark_stall_notified = Via("custody", CustodyFrame.mark_stall_notified)
    clear_stall_notice = Via("custody", CustodyFrame.clear_stall_notice)
    prune_stall_notices = Via("custody", CustodyFrame.prune_stall_notices)
    expire_leases = Via("custody", CustodyFrame.expire_leases)
    ready_results = Via("custody", CustodyFrame.ready_results)
    mark_delivered = Via("custody", CustodyFrame.mark_delivered)
    mark_delivered_many = Via("custody", CustodyFrame.mark_delivered_many)
    dead_letter = Via("custody", CustodyFrame.dead_letter)
    unreported_dead = Via("custody", CustodyFrame.unreported_dead)
    mark_dead_reported = Via("custody", CustodyFrame.mark_dead_reported)
    unreported_dead_count = Via("custody", CustodyFrame.unreported_dead_count)
    state = Via("custody", CustodyFrame.state)
    get = Via("custody", CustodyFrame.get)
    counts = Via("custody", CustodyFrame.counts)
    in_flight = Via("custody", CustodyFrame.in_flight)
    records = Via("custody", CustodyFrame.records)
    waiting_retries = Via("custody", CustodyFrame.waiting_retries)
    pending_by_queue = Via("custody", CustodyFrame.pending_by_queue)
    journal = Via("custody", CustodyFrame.journal)
    suspects = Via("custody", CustodyFrame.suspects)
    # -- the operator (``_operator_frame``) ---------------------------------------------------
    redrive = Via("operator", OperatorFrame.redrive)
    redrive_dead = Via("operator", OperatorFrame.redrive_dead)
    cancel = Via("operator", OperatorFrame.cancel)
    rewind = Via("operator", OperatorFrame.rewind)
    fork = Via("operator", OperatorFrame.fork)
    # -- retention (``_retention``) -----------------------------------------------------------
    prune_delivered = Via("retention", RetentionFrame.prune_delivered)
    prune_tombstones = Via("retention", RetentionFrame.prune_tombstones)
    prune_workers = Via("retention", RetentionFrame.prune_workers)
    prune_waiters = Via("retention", RetentionFrame.prune_waiters)
    reclaim_space = Via("retention", RetentionFrame.reclaim_space)
    # -- durable runs (``_steps_frame``) ------------------------------------------------------
    steps = Via("steps", StepsFrame.steps)
    record_step = Via("steps", StepsFrame.record_step)
    park = Via("steps", StepsFrame.park)
    wake_due = Via("steps", StepsFrame.wake_due)
    spawn = Via("steps", StepsFrame.spawn)
    children = Via("steps", StepsFrame.children)
    park_join = Via("steps", StepsFrame.park_join)
    settle_children = Via("steps", StepsFrame.settle_children)
    waiting_runs = Via("steps", StepsFrame.waiting_runs)
    versions_in_flight = Via("steps", StepsFrame.versions_in_flight)
    records_of_version = Via("steps", StepsFrame.records_of_version)
    # -- questions to the person (``_asks_frame``) --------------------------------------------
    asks = Via("asks", AsksFrame.asks)
    ask = Via("asks", AsksFrame.ask)
    unposted_questions = Via("asks", AsksFrame.unposted_questions)
    question_posted = Via("asks", AsksFrame.question_posted)
    ask_unsupported = Via("asks", AsksFrame.ask_unsupported)
    # -- flow control (``_limits_frame``, ``_tenants_frame``) ---------------------------------
    set_limit = Via("limits", LimitsFrame.set_limit)
    acquire_permit = Via("limits", LimitsFrame.acquire_permit)
    release_permit = Via("limits", LimitsFrame.release_permit)
    pause_limit = Via("limits", LimitsFrame.pause_limit)
    limit_views = Via("limits", LimitsFrame.limit_views)
    set_tenant_weight = Via("tenants", TenantsFrame.set_tenant_weight)
    tenant_views = Via("tenants", TenantsFrame.tenant_views)
    # -- conversations and rooms (``_conversations``) -----------------------------------------
    conversation = Via("rooms", ConversationFrame.conversation)
    complete_with_state = Via("rooms", ConversationFrame.complete_with_state)
    record_shown = Via("rooms", ConversationFrame.record_shown)
    room = Via("rooms", ConversationFrame.room)
    forget_room = Via("rooms", ConversationFrame.forget_room)
    prune_turns = Via("rooms", ConversationFrame.prune_turns)
    prune_rooms = Via("rooms", ConversationFrame.prune_rooms)
    conversation_counts = Via("rooms", ConversationFrame.conversation_counts)
    # -- schedules and events (``_schedules_frame``, ``_events_frame``) ------------------------
    add_schedule = Via("schedules", SchedulesFrame.add_schedule)
    pause_schedule = Via("schedules", SchedulesFrame.pause_schedule)
    resume_schedule = Via("schedules", SchedulesFrame.resume_schedule)
    remove_schedule = Via("schedules", SchedulesFrame.remove_schedule)
    schedule = Via("schedules", SchedulesFrame.schedule)
    schedules = Via("schedules", SchedulesFrame.schedules)
    fire_schedules = Via("schedules", SchedulesFrame.fire_schedules)
    next_schedule_due = Via("schedules", SchedulesFrame.next_schedule_due)
    send_event = Via("events", EventsFrame.send_event)
    take_event = Via("events", EventsFrame.take_event)
    park_event = Via("events", EventsFrame.park_event)
    events = Via("events", EventsFrame.events)
    drop_event = Via("events", EventsFrame.drop_event)
    event_waiters = Via("events", EventsFrame.event_waiters)
    prune_events = Via("events", EventsFrame.prune_events)
