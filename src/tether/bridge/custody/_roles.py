"""The store interface, by role: each caller is typed against the role it plays, and ``Store`` is
every role together, what a backend implements (held by the conformance suite).

Each method is one compare-and-set transaction and returns only once its change is durable.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol, runtime_checkable

from ._asks import AskRecord, QuestionStore
from ._children import ChildView
from ._conversation import Conversation, ConversationCounts, ForgottenRoom, RoomView
from ._events import Event, EventSent, EventWaiter
from ._limits import Granted, LimitSpec, LimitView, NoPermit
from ._records import (
    Hand,
    JournalEntry,
    LeaseExpiry,
    OperatorOutcome,
    PoolView,
    StallCandidate,
    StepRecord,
    Suspects,
    SweepPlanner,
    Swept,
    WaitingRetries,
    WaitingRuns,
    WorkerInfo,
    WorkerRole,
)
from ._rooms import RoomPolicy
from ._rules import Claim, CustodyState, Result, Task, TaskRecord
from ._schedules import ScheduleSpec, ScheduleView
from ._tenants import TenantView
from ._versions import InFlight
from ._work_bell import WorkBell


class StoreClock(Protocol):
    """The time base every role shares: leases, ages and retries are measured on it."""

    clock: Callable[[], float]
    """Seconds, the time base of leases. The reconciler reads time from here."""

    lease_s: float

    max_attempts: int


class IngestStore(StoreClock, Protocol):
    """What ingest needs: take the gateway's tasks into custody (then, and only then, it acks)."""

    work_bell: WorkBell
    """Rung when a call of this process made pending work (an ingest stored a new task, a
    permit given back woke its waiter): the pools of this process on this store object
    listen (``custody._work_bell``)."""

    async def ingest(
        self, task: Task, *, room_policy: RoomPolicy = ..., debounce_s: float = ...
    ) -> bool:
        """Store ``task`` as pending. ``False`` for a replay: nothing changes, in any state,
        and also for an id whose delivered row was pruned while its tombstone is kept."""
        ...

    async def ingest_many(
        self, tasks: Sequence[Task], *, room_policy: RoomPolicy = ..., debounce_s: float = ...
    ) -> list[bool]:
        """Ingest a gateway batch in one transaction (one commit, then ack them all).

        Every task is validated first: one invalid task refuses the batch and stores nothing.
        Each new task keeps ``room_policy`` (default ``serial``, as the bridge's; the bridge
        passes its configured policy): claims and the lead's view honour it (see
        ``custody._rooms``). Under ``replace`` a new task of a room supersedes, in the same
        transaction, the older tasks of its room still pending, assigned or claimed.

        With ``debounce_s`` (seconds, 0 off; issue #52) a room's messages within that time of
        each other are one burst: each room's newest new task may not be claimed before now +
        ``debounce_s``, and its room's older tasks still waiting out their own (pending, never
        claimed) end, in the same transaction, as no-send results "answered with <newest>".
        """
        ...

    async def body_conflicts(self, tasks: Sequence[Task]) -> list[bool]:
        """For each task: is its id in the store with a different body? (A replay keeps the
        first body; ingest warns, counts and rejects such a one.) False for an unknown id and
        for a pruned one (its tombstone keeps no body). Reads only."""
        ...


class PoolMemberStore(StoreClock, Protocol):
    """What every pool member (lead or worker) needs: beats, membership, the pool's picture."""

    async def beat(
        self, worker: str, role: WorkerRole, capacity: int, *, queues: Sequence[str] = ...
    ) -> Sequence[WorkerInfo]:
        """Record a beat of ``worker`` now (store clock), with the queues whose tasks it takes
        (issue #51; default: the default queue); return every member's last beat, so a worker
        learns whether the lead lives in the same round trip."""
        ...

    async def workers(self) -> Sequence[WorkerInfo]:
        """Every pool member's last beat, by name."""
        ...

    async def remove_worker(self, worker: str) -> bool:
        """Forget ``worker``'s beat (a clean stop); ``False`` if it had none."""
        ...

    async def return_assignments(self, worker: str) -> Sequence[str]:
        """Every task assigned to ``worker`` -> pending, in one transaction; their ids.

        Used for a dead worker and by a worker that stops; claims are never touched."""
        ...

    async def pool_view(
        self,
        *,
        pending_limit: int = ...,
        skip_rooms: Collection[str] = ...,
        skip_queues: Collection[str] = ...,
    ) -> PoolView:
        """Workers, assignments, claim counts, pending tasks and room affinity, consistently.

        ``pending`` holds the tasks of the queues a worker that beat within the lease serves
        (issue #51), and leaves out the tasks of ``skip_rooms`` and ``skip_queues`` (default
        none): the lead reads past rooms whose keeper is full, and queues whose workers are,
        instead of stopping at them."""
        ...


class StallStore(StoreClock, Protocol):
    """What stall notices need: long-running claims, and a once-only marker per task."""

    async def stall_candidates(
        self, older_than: float, *, worker: str | None = None, limit: int = ...
    ) -> Sequence[StallCandidate]:
        """Claimed tasks created at or before ``older_than`` (store clock) with no stall notice
        recorded, oldest first; only ``worker``'s claims if given."""
        ...

    async def mark_stall_notified(self, id: str) -> bool:
        """Record that ``id``'s stall notice is being sent; ``False`` if one already was (by
        anyone, before any restart): the caller must not send it."""
        ...

    async def clear_stall_notice(self, id: str) -> None:
        """Forget ``id``'s stall notice after its send failed, so the next pass retries it."""
        ...

    async def prune_stall_notices(self, *, limit: int = ...) -> int:
        """Delete up to ``limit`` stall-notice records whose task is terminal (or gone)."""
        ...


class ConversationStore(Protocol):
    """What a run reads and writes of its room's conversation (issue #34). The turns of
    custody moves are written by the moves themselves (ingest, ``complete``, delivery, a
    ``replace`` supersession), in their transactions; these are the rest."""

    async def conversation(self, task_id: str, *, limit: int = ...) -> Conversation:
        """The turns of ``task_id``'s room before its message, oldest first, at most ``limit``
        (the newest ones), none still streaming; the room's state and version. One bounded
        read: its cost does not grow with the room's length. An unknown task, or one without
        a room, has an empty conversation."""
        ...

    async def complete_with_state(
        self,
        claim: Claim,
        body: str,
        state: Mapping[str, object],
        base_version: int,
        *,
        no_send: bool = False,
    ) -> int:
        """``complete`` and store ``state`` as the room's new state, in ONE transaction under
        the claim's fence; returns the new version (``base_version + 1``). ``StaleLease`` if
        fenced out and ``StateConflict`` if the room's state is no longer at ``base_version``
        (nothing written either way: the run runs again with the current state);
        ``StateTooLarge`` (an ``InvalidTask``) for a state that is not a JSON object or over
        ``MAX_STATE_BYTES``, ``InvalidTask`` for a task without a room."""
        ...

    async def record_shown(self, claim: Claim, text: str) -> bool:
        """Record, under the claim's fence, the partial reply the gateway has taken so far
        (a ``shown`` turn, replaced by the next call): a ``replace`` supersession turns it
        into the ``interrupted`` turn the person saw. ``False`` if fenced out (nothing
        written)."""
        ...


class RoomStore(Protocol):
    """What an operator and retention do with conversations (issue #34)."""

    async def room(self, room: str, *, limit: int = ...) -> RoomView | None:
        """``room``'s newest ``limit`` turns (streaming ones too), its state and its counts;
        ``None`` for a room the store holds nothing of. Reads only."""
        ...

    async def forget_room(self, room: str) -> ForgottenRoom:
        """Erase every copy of ``room``'s text the store holds, in one transaction (issue
        #53): its turns and state, and of its tasks and the child runs they spawned the
        message, reply, reason, room name and headers (but the labels custody reads), their
        step records, asks and their journal's reasons. A task still in custody is cancelled
        to ``dead`` first (a running one is fenced out at its next heartbeat; a reply not yet
        delivered is withdrawn), so nothing is left half-erased and nothing of the room goes
        out after it. The rows stay as ids, states and times, each journaled with actor
        ``operator``. Then the store's files are cleared of the old copies as far as the
        backend allows (``ForgottenRoom.scrubbed``). Erasing a room the store holds nothing
        of changes nothing."""
        ...

    async def prune_turns(self, *, keep: int = ..., limit: int = ...) -> int:
        """Delete at most ``limit`` turns, the oldest of rooms holding more than ``keep``, so
        that repeated calls leave each its ``keep`` newest; returns how many were deleted (fewer
        than ``limit``: none is left over). A slice costs time linear in ``limit``, whatever
        ``keep`` is: retention calls it until done and never holds the writer long. A
        finished (delivered or dead) task whose message or reply is pruned loses that text
        from its row too, journaled; one still in custody keeps it (it has yet to run or be
        delivered)."""
        ...

    async def prune_rooms(self, before: float, *, limit: int = ...) -> int:
        """Delete at most ``limit`` rooms' worker affinities last noted before ``before``
        (store clock): a preference for the worker that ran the room last, stale after the
        retention period (issue #56: a row per room ever seen, kept for ever). Conversations
        are not touched. Returns how many were deleted."""
        ...

    async def conversation_counts(self) -> ConversationCounts:
        """Rooms with a conversation, turns kept, bytes of state: what the metrics show."""
        ...


class PermitStore(Protocol):
    """What a run's permits need (issue #38): take one of a key under the claim's fence, give it
    back, pause the key. See ``custody._limits``."""

    async def acquire_permit(
        self, claim: Claim, key: str, weight: float = 1.0
    ) -> Granted | NoPermit:
        """Take a permit of ``key`` for ``claim``'s run, spending ``weight`` tokens, under the
        lease fence (``StaleLease`` if fenced out): ``Granted`` with the permit's id, or how
        long to wait (a ``NoPermit``; the run is then counted among the key's waiters). A key
        with no declared limit grants at once (``Granted(None)``). The permit is held until
        ``release_permit`` or until its task leaves ``claimed`` (a result, a failure, a park, a
        cancel, a lapsed lease taken back), whichever comes first."""
        ...

    async def release_permit(self, permit: int) -> None:
        """Give permit ``permit`` back (nothing if it was freed already); the run parked
        longest for a permit of its key (``waiting``, its waiter recorded) is pending again
        in the same transaction."""
        ...

    async def pause_limit(self, key: str, until: float) -> None:
        """No permit of ``key`` for anyone before ``until`` (store clock); a later pause
        already there is kept. A key with no declared limit is paused too."""
        ...


class LimitStore(PermitStore, StoreClock, Protocol):
    """Flow control (issue #38): limits per key shared by everyone on the store, permits that
    are leases of their holder's claim, and pauses; what an operator declares and reads. See
    ``custody._limits``."""

    async def set_limit(self, spec: LimitSpec) -> None:
        """Declare (or change) ``spec.key``'s limit; a new bucket starts full, a changed one
        keeps its tokens (cut to the new burst), its permits and its pause."""
        ...

    async def limit_views(self) -> Sequence[LimitView]:
        """Every key's limit, its tokens now, permits in flight, pause and waiters. Reads
        only."""
        ...

    async def set_tenant_weight(self, tenant: str, weight: float) -> None:
        """Give ``tenant`` ``weight`` turns to a weight-1 tenant's one (``custody._tenants``),
        for the tasks taken in from now on (queued ones keep their turns)."""
        ...

    async def tenant_views(self) -> Sequence[TenantView]:
        """Every tenant with a weight set or a task pending: its weight and pending count.
        Reads only."""
        ...


class Clocked(Protocol):
    """Has the store's clock (due times are on it)."""

    clock: Callable[[], float]


class JournalStore(PermitStore, Clocked, Protocol):
    """What a run records while it runs (``runs._journal``): its steps, read and recorded, its
    asks, read, and its permits, each fenced by its claim. Both stores implement it, and so
    does a quarantine child's pipe to its parent (which records under its own claim)."""

    async def steps(self, id: str) -> Sequence[StepRecord]:
        """``id``'s recorded steps in the order they were recorded (empty for an unknown or
        pruned task). Reads only."""
        ...

    async def record_step(
        self,
        claim: Claim,
        name: str,
        value: str,
        *,
        version: str | None = None,
        fingerprint: str | None = None,
        call: str | None = None,
    ) -> StepRecord:
        """Record step ``name`` of ``claim``'s task with ``value`` (JSON text), made by agent
        ``version`` calling ``call`` with arguments of ``fingerprint`` (issue #53: kept on the
        record), under the
        lease fence (id, claimed, owner, attempt, live lease) in the same statement or
        transaction: ``StaleLease`` if fenced out, so a run whose lease is gone records
        nothing and a run that took over never sees a zombie's record appear after its own.
        If ``name`` is recorded already, that record is kept and returned (the first wins).
        ``StepError`` for a bad name, a value over ``MAX_STEP_BYTES``, or one that would take
        the task's steps past ``MAX_TASK_STEP_BYTES``. Returns the record stored, once it is
        durable (a promise: the step's effect has already left the process)."""
        ...

    async def asks(self, id: str) -> Sequence[AskRecord]:
        """``id``'s asks in the order they were asked (empty for an unknown task). Reads only."""
        ...

    async def spawn(
        self, claim: Claim, name: str, child: Task, *, version: str | None = None
    ) -> StepRecord:
        """Spawn ``child`` (a ``custody._children.child_task`` of ``claim``'s task) as step
        ``~spawn:<name>``, under the lease fence, in one transaction: if the step is recorded
        already its record is returned and nothing else is done (a resumed parent never
        spawns twice); else the child is ingested (pending) and the step recorded with its
        id. ``SpawnError`` past ``MAX_CHILDREN``; ``StaleLease`` if fenced out (a zombie
        parent spawns nothing)."""
        ...

    async def children(self, parent: str, ids: Sequence[str]) -> Sequence[ChildView | None]:
        """Each of ``ids`` that is a child of ``parent``: its state, result and reason (None
        where no such child is stored). Reads only."""
        ...

    async def take_event(self, key: str, taken: Sequence[str]) -> Event | None:
        """The first kept event of ``key`` (arrival order, TTL not ended) whose id is not in
        ``taken`` (the events this run took before): a wait's read (issue #52). Reads only."""
        ...


class RunStore(JournalStore, ConversationStore, StoreClock, Protocol):
    """Everything a run does to the store (``bridge.runs``): its journal, its room's
    conversation, and its outcome (complete, fail, park, ask, release), each fenced by its
    claim."""

    async def park(self, claim: Claim, until: float, why: str) -> None:
        """claimed -> waiting under the fence: the lease released (owner cleared), no attempt
        spent; due again at ``until`` (store clock, kept as ``not_before``); ``why`` (what it
        waits for) is its recorded reason. ``StaleLease`` if fenced out."""
        ...

    async def park_join(
        self, claim: Claim, ids: Sequence[str], until: float, why: str
    ) -> CustodyState:
        """Park ``claim``'s task until its children ``ids`` are done (``child_done``): they
        are marked awaited, then, under the fence, claimed -> waiting (due at ``until``, the
        join's deadline; ``why`` after ``joining`` is its reason) if one of them is live, else
        claimed -> pending with the same attempt (they finished as it parked: its join
        returns when it runs again). The transaction that makes the last awaited child done
        wakes it (waiting -> pending). Returns the state it moved to; ``StaleLease`` if
        fenced out."""
        ...

    async def park_event(
        self, claim: Claim, key: str, taken: Sequence[str], until: float, why: str
    ) -> CustodyState:
        """Park ``claim``'s task until an event of ``key`` not in ``taken`` comes (issue
        #52): under the fence, claimed -> waiting (due at ``until``, the wait's deadline; its
        reason ``awaiting event <key>: <why>``), or claimed -> pending with the same attempt if
        such an event is kept already (it came as the run parked). The transaction that keeps
        an event wakes its key's waiting runs. The state it moved to; ``StaleLease`` if
        fenced out."""
        ...

    async def ask(
        self,
        claim: Claim,
        name: str,
        text: str,
        until: float,
        why: str,
        *,
        answer_from: Sequence[str] | None = None,
    ) -> AskRecord:
        """Record the question ``name`` of ``claim``'s task (kept if already recorded: the
        first wins, with its deadline and senders; ``answer_from`` names the senders whose
        message answers it, None for anyone) with its assistant turn (outcome ``asked``) if the task
        is in a room, and park the task (claimed -> waiting, due at the ask's deadline, the
        lease released, no attempt spent), all under the lease fence in one transaction; the
        record stored. ``StaleLease`` if fenced out."""
        ...

    async def complete(self, claim: Claim, body: str, *, no_send: bool = False) -> None:
        """claimed -> result with ``body``; ``StaleLease`` if fenced out. ``no_send``: delivery
        confirms the task to the gateway without posting a message."""
        ...

    async def complete_many(
        self, outcomes: Sequence[tuple[Claim, str]], *, no_send: bool = False
    ) -> list[bool]:
        """``complete`` for each ``(claim, body)`` in ONE transaction, each fenced on its own
        (id, claimed, owner, attempt, live lease): ``True`` where the task moved to ``result``,
        ``False`` where its fence no longer holds (the lease was lost or the task is gone;
        nothing changes for it, as a ``StaleLease`` would say). Every body is checked first: a
        bad one refuses the whole call, nothing written. A worker buffering the results of
        several runs commits them with one durable write instead of one each."""
        ...

    async def fail(
        self,
        claim: Claim,
        reason: str,
        *,
        retry_after: float = 0.0,
        permanent: bool = False,
    ) -> CustodyState:
        """claimed -> pending with ``attempt + 1``, or dead once ``max_attempts`` is reached.

        ``retry_after`` (seconds, store clock): the repooled task is not claimed or assigned
        before now + ``retry_after`` (its ``not_before``; 0: at once). ``permanent``: dead now
        whatever the attempt (a hopeless input burns no more attempts). Returns the new state;
        ``StaleLease`` if fenced out; ``ValueError`` for a negative or infinite delay.
        """
        ...

    async def quarantine_death(
        self, claim: Claim, death: str, *, max_deaths: int = ...
    ) -> CustodyState:
        """The quarantine child running ``claim``'s task died while it ran it (``death``:
        how, naming the signal or exit code): the task's own doing. claimed -> dead at
        ``max_deaths`` such deaths, else -> pending, still a suspect, attempt + 1 (a crash: no
        failure spent). Returns the new state; ``StaleLease`` if fenced out."""
        ...

    async def release(self, claim: Claim) -> None:
        """claimed -> pending with the SAME attempt: the worker gives work back unfinished
        (a soft stop), which is not a failure. ``StaleLease`` if fenced out."""
        ...


class WorkerStore(PoolMemberStore, StallStore, RunStore, Protocol):
    """What a worker needs: claim leases, renew them and beat; it hands each claim to a run
    (``bridge.runs``), which stores the run's outcome through ``RunStore``. It also raises the
    stall notices of its own claims."""

    async def claim(
        self, worker: str, *, leaderless: bool = False, queues: Sequence[str] = ...
    ) -> Claim | None:
        """The worker's next lease: its own assignments first (by priority, then age); pending
        tasks only when ``leaderless``, and only those that are due (never one waiting out a
        retry backoff) and in one of ``queues`` (default: the default queue; a suspect
        likewise). ``None`` if nothing is there."""
        ...

    async def claim_many(
        self,
        worker: str,
        limit: int,
        *,
        leaderless: bool = False,
        quarantine: int | None = None,
        queues: Sequence[str] = ...,
    ) -> Sequence[Claim]:
        """Up to ``limit`` leases in ONE transaction (of tasks in ``queues``, as ``claim``), in
        the order ``limit`` calls of ``claim`` would hand them out (own assignments by priority
        then age, then pending tasks only when ``leaderless``); each is fenced on its own like
        a ``claim``'s. Empty if nothing is there; ``ValueError`` unless ``limit`` is an int
        from 1 to ``MAX_CLAIM_BATCH``.

        ``quarantine``: how many suspects (most crashed first) the caller may run now in
        quarantine processes (0: none now); they come first, marked ``Claim.suspect``, beside
        ordinary work. ``None``: the caller cannot quarantine, and a suspect runs alone in its
        process (see ``custody._crashes``). A claim reads no conversation: a run reads its
        own on demand (``conversation_of``, issue 49)."""
        ...

    async def renew(self, claim: Claim) -> Claim:
        """Extend a live lease by ``lease_s`` from now; ``StaleLease`` if fenced out."""
        ...

    async def recover_claims(self, worker: str) -> Sequence[LeaseExpiry]:
        """Every task still claimed under ``worker``'s name -> a crash expiry now (pending
        with the same attempt, a suspect; or dead if proven to kill its process: see
        ``custody._crashes``). A worker calls it once as it starts, before its first beat and
        claim: whatever its name holds then was held by an earlier process that died (a
        restarted SQLite bridge keeps its names), whose fresh beats would otherwise make the
        dead holder look alive."""
        ...


class LeadStore(PoolMemberStore, Protocol):
    """What the pool lead needs: read the queue and assign (or take back) tasks."""

    async def pending(self, *, limit: int = ...) -> Sequence[Task]:
        """Pending tasks that are due (not waiting out a retry backoff), in the order the lead
        should assign them: priority, then age."""
        ...

    async def assign(self, id: str, worker: str) -> None:
        """pending -> assigned to ``worker``; ``CustodyConflict`` if not pending, or pending
        but waiting out a retry backoff (its ``not_before`` is still ahead)."""
        ...

    async def unassign(self, id: str, worker: str) -> bool:
        """assigned to ``worker`` -> pending (the lead returns a dead or stuck assignment).

        ``False`` if the task is no longer assigned to ``worker`` (it was claimed meanwhile).
        """
        ...

    async def return_outranked(self, ahead: str, *, limit: int = ...) -> Sequence[str]:
        """Assigned tasks (not claimed) that pending task ``ahead`` outranks in queue order
        -> pending, at most ``limit`` (the worst placed of them); their ids. The lead gives back
        what it assigned ahead of a worker's free slots when a task with a better place
        (another tenant's turn, a higher priority) finds every worker full. Nothing for an
        ``ahead`` that is not pending."""
        ...

    async def assign_many(self, pairs: Sequence[tuple[str, str]]) -> list[bool]:
        """Assign each ``(id, worker)`` in one transaction: ``True`` where the task was pending
        and due and is now assigned, ``False`` where it had moved on or is waiting out a retry
        backoff (nothing changes for it). Records
        each task's room as last handled by that worker (room affinity)."""
        ...

    async def plan_and_assign(
        self, decide: SweepPlanner, *, pending_limit: int = ...
    ) -> tuple[PoolView, list[bool] | None]:
        """Read the pool view, call ``decide(view)`` and assign the ``(id, worker)`` pairs it
        returns (as ``assign_many``); ``None`` from ``decide`` assigns nothing. Returns the view
        and ``assign_many``'s answer (``None`` when nothing was decided).

        A backend that can does it all in one transaction (SQLite: one writer job and one
        commit for a whole sweep, so the plan sees exactly the state it changes); otherwise it
        is ``pool_view`` then ``assign_many``, each compare-and-set as usual. ``decide`` may
        run in the store's thread: it must be a pure function of the view (it may be called
        again if the transaction is replayed) and must not call Trio."""
        ...

    async def plan_assign_and_claim(
        self, decide: SweepPlanner, *, pending_limit: int = ..., hands: Mapping[str, Hand]
    ) -> Swept:
        """``plan_and_assign``, then, in the same transaction where the backend can, claim for
        each worker of ``hands`` up to its free slots of the tasks now assigned to it (as its
        own ``claim_many`` would: fenced, its lease starting now). The lead's own process's
        workers get their tasks with no claim of their own and no wake-up: one transaction
        from a pending task to its run (issue 49). A backend that cannot claims nothing (the
        workers claim as usual, rung by the lead)."""
        ...


class StateReader(Protocol):
    """One task's state: the one read delivery and operators share."""

    async def state(self, id: str) -> CustodyState | None: ...


class DeliveryStore(StoreClock, StateReader, Protocol):
    """What delivery needs: stored replies, then mark each delivered once the gateway confirmed."""

    @property
    def delivery_leases(self) -> bool:
        """Does ``ready_results(holder=...)`` lease what it returns, so that deliveries sharing
        this store (several bridges) post each result from one of them at a time? PostgreSQL:
        yes. SQLite: no (one bridge per file; a holder's read is a plain read)."""
        ...

    async def ready_results(
        self, *, limit: int = ..., holder: str | None = None, lease_s: float | None = None
    ) -> Sequence[Result]:
        """Stored replies waiting for delivery (state ``result``), by priority then age.

        Without ``holder``: a plain read of every ready result. With ``holder`` (a worker-style
        name, unique per delivery loop) and ``lease_s``, on a store with ``delivery_leases``:
        in one transaction, take up to ``limit`` results whose delivery lease is free, expired
        or already ``holder``'s, lease them to ``holder`` until now + ``lease_s`` and return
        them. No other holder gets them while the lease lives; once it lapsed (the holder
        crashed, or its post outlasted the lease) another holder does. The lease is not a
        custody state: the task stays ``result``; ``mark_delivered(_many)`` and
        ``dead_letter`` ignore and clear it. Without ``delivery_leases`` the arguments are
        checked and the read is plain: two holders may post the same result, which the
        gateway absorbs as a duplicate."""
        ...

    async def mark_delivered(self, id: str) -> None:
        """result -> delivered (a repeat on a delivered id is a no-op); else ``CustodyConflict``."""
        ...

    async def mark_delivered_many(self, ids: Sequence[str]) -> list[bool]:
        """``mark_delivered`` for each id in ONE transaction: ``True`` where the task is now
        delivered (or already was), ``False`` where it is unknown or in another state (nothing
        changes for it). Every id is validated first: a malformed one refuses the call."""
        ...

    async def dead_letter(self, id: str, reason: str) -> None:
        """Any in-custody state -> dead with ``reason`` (no-op if already dead); a delivered
        task raises ``CustodyConflict``."""
        ...


class DeadNoticeStore(Protocol):
    """What the dead-notice loop needs: dead tasks the gateway has not yet heard about."""

    async def unreported_dead(self, *, limit: int = ...) -> Sequence[TaskRecord]:
        """Up to ``limit`` dead tasks the gateway has not yet confirmed hearing about, in the
        order they died (oldest first): what the dead-notice loop reports next."""
        ...

    async def mark_dead_reported(self, ids: Sequence[str]) -> list[bool]:
        """Record, in ONE transaction, that the gateway confirmed each dead task's notice:
        ``True`` where the task is dead and is now (or already was) marked, ``False`` where it
        is unknown or not dead (nothing changes for it). Only the marker changes: the reason,
        ``updated_at`` and everything else stay as they were. Every id is validated first."""
        ...


class ReconcilerStore(StoreClock, Protocol):
    """What the reconciler needs: expire lapsed leases (never dropping an id), wake parked
    runs that are due."""

    async def expire_leases(self, *, limit: int = ...) -> Sequence[LeaseExpiry]:
        """Repool (or dead-letter past ``max_attempts``) up to ``limit`` expired leases."""
        ...

    async def settle_children(self, *, limit: int = ...) -> tuple[list[str], list[str]]:
        """Wake each joining parent whose awaited children are all done (two siblings done at
        once in two transactions may each have missed it), and cancel (-> dead, journaled
        with the reason) each live child whose parent ended or is gone: (woken, cancelled)."""
        ...

    async def wake_due(self, *, limit: int = ...) -> Sequence[str]:
        """waiting -> pending for up to ``limit`` tasks whose wake-up time (``not_before``)
        has come, the same attempt, in one transaction; their ids (earliest first). Work wakes
        as for ingest (PostgreSQL: ``NOTIFY``)."""
        ...

    async def waiting_runs(self) -> WaitingRuns:
        """How many tasks are ``waiting``, and the earliest wake-up (store clock)."""
        ...

    async def fire_schedules(self, *, limit: int = ...) -> Sequence[str]:
        """Fire up to ``limit`` schedules due by now (issue #52): for each, in one transaction,
        its next due time moves on (compare-and-set on the one read) and the task of each due
        time fired is ingested (its id: the schedule's name and the due time); the ids this
        call made new."""
        ...

    async def next_schedule_due(self) -> float | None:
        """The soonest due time of a schedule not paused (store clock), or None."""
        ...

    async def prune_events(self, *, limit: int = ...) -> Sequence[str]:
        """Drop up to ``limit`` kept events whose TTL ended; their ids (logged)."""
        ...


class RetentionStore(Protocol):
    """What retention needs: prune delivered tasks, keeping tombstones against replays."""

    async def prune_delivered(self, before: float, *, limit: int = ...) -> int:
        """Delete up to ``limit`` tasks delivered before ``before`` (store clock); dead tasks
        are never pruned. In the same transaction each deleted id leaves a tombstone (the id and
        its delivery time, nothing else), so a late replay of it is still refused by
        ``ingest``. Returns how many tasks were deleted."""
        ...

    async def prune_tombstones(self, before: float, *, limit: int = ...) -> int:
        """Delete up to ``limit`` tombstones of tasks delivered before ``before`` (store clock);
        from then on such an id is ingested as a new task. Keep this retention longer than the
        gateway's replay window. Returns how many were deleted."""
        ...

    async def prune_workers(self, before: float, *, limit: int = ...) -> int:
        """Delete at most ``limit`` pool members whose last beat is before ``before`` (store
        clock): a member that crashed leaves its row (names are unique per process, so none
        beats under it again). Long dead by then: the lead returned its tasks within seconds.
        Returns how many were deleted."""
        ...

    async def prune_waiters(self, before: float, *, limit: int = ...) -> int:
        """Delete at most ``limit`` waiter rows of limits (a refused acquire's, due until its
        expected wait plus a grace) that lapsed before ``before`` (store clock) unserved and
        whose task is not parked for a permit now (a parked waiter's row orders the wake-ups);
        a lapsed row tells nothing more (``custody._crashes`` reads only rows newer than the
        holder's last beat). Returns how many were deleted."""
        ...

    async def reclaim_space(self, *, pages: int = ...) -> int:
        """Give up to ``pages`` of the store's free pages (left by pruning) back to the file
        system, in one short writer job: SQLite's incremental vacuum (issue #56). PostgreSQL's
        autovacuum keeps its own free space for reuse: 0 there. Returns the pages given back
        (fewer than ``pages``: none is left)."""
        ...


class InspectStore(StoreClock, StateReader, Protocol):
    """What an operator (``tether store status``, the admin endpoint) reads."""

    async def get(self, id: str) -> TaskRecord | None: ...

    async def counts(self) -> Mapping[CustodyState, int]:
        """Tasks per state, every state present (zero when empty)."""
        ...

    async def in_flight(self) -> Sequence[str]:
        """Ids still in custody (pending, assigned, claimed, result), oldest first."""
        ...

    async def records(
        self, state: CustodyState, *, limit: int = ..., newest_first: bool = False
    ) -> Sequence[TaskRecord]:
        """Up to ``limit`` full records in ``state``: oldest ingested first, or with
        ``newest_first`` the latest to reach the state first (its last move, ``updated_at``):
        what ``tether store status`` shows (oldest in flight; dead letters, latest to die
        first, with their reasons)."""
        ...

    async def unreported_dead_count(self) -> int:
        """How many dead tasks the gateway has not yet confirmed hearing about."""
        ...

    async def waiting_retries(self) -> WaitingRetries:
        """Pending tasks whose ``not_before`` is still ahead (store clock), and the earliest."""
        ...

    async def pending_by_queue(self) -> dict[str, int]:
        """Pending tasks per queue (issue #51), by queue name. Reads only."""
        ...

    async def workers(self) -> Sequence[WorkerInfo]:
        """Every pool member's last beat, by name (which queues are served). Reads only."""
        ...

    async def journal(self, id: str) -> Sequence[JournalEntry]:
        """``id``'s custody history, oldest first (empty for an unknown or pruned task)."""
        ...

    async def steps(self, id: str) -> Sequence[StepRecord]:
        """``id``'s recorded steps (``StepStore.steps``): what ``tether store show`` lists."""
        ...

    async def asks(self, id: str) -> Sequence[AskRecord]:
        """``id``'s questions to the person (``AskStore.asks``): ``tether store show`` too."""
        ...

    async def waiting_runs(self) -> WaitingRuns:
        """How many tasks are ``waiting``, and the earliest wake-up (store clock)."""
        ...

    async def versions_in_flight(self) -> Sequence[InFlight]:
        """Runs in flight (tasks pending, assigned, claimed or waiting) by the agent version
        they began under, their first step record's (issue #53), most first: an old version
        has drained once it is gone from here. Reads only."""
        ...

    async def records_of_version(
        self, version: str | None, *, limit: int = ...
    ) -> Sequence[TaskRecord]:
        """The first ``limit`` runs in flight that began under ``version`` (their first step
        record's; None: unversioned or none recorded), oldest first. Reads only."""
        ...

    async def suspects(self, *, limit: int = ...) -> Suspects:
        """How many tasks in custody are suspects, and the first ``limit`` (most crashes while
        alone, then most crashes, then oldest): what ``tether store status`` shows."""
        ...


class OperatorStore(StoreClock, Protocol):
    """What an operator changes by hand (``tether store retry``/``cancel``): re-drive dead
    tasks, cancel tasks not yet run to a reply. Each call is one transaction; each task moves by
    a compare-and-set on the state it was read in, so a task that moved meanwhile is refused,
    never overwritten. A task an operator moved is journalled with actor ``operator``."""

    async def redrive(
        self, ids: Sequence[str], *, reason: str | None = None, fresh: bool = False
    ) -> Sequence[OperatorOutcome]:
        """dead -> pending for each of ``ids``, with fresh attempts (attempt 1), no
        ``not_before`` (due now), owner, lease and stored reply cleared, and the dead-notice
        marker cleared (if it dies again, the gateway hears again), and its crash accounting
        cleared (the operator vouches for it: not a suspect). Any other state is refused
        (a delivered task's reply was confirmed; an in-custody one is still being handled).
        ``reason`` (optional) is recorded after "operator: re-driven". Work wakes as for
        ingest (PostgreSQL: ``NOTIFY``). Every id is validated first: a malformed one refuses
        the whole call (``InvalidTaskId``), nothing changed. Its recorded steps are kept (the
        run resumes past them) unless ``fresh``: then they are forgotten first, so the run
        starts over from nothing."""
        ...

    async def redrive_dead(
        self,
        *,
        reason_contains: str | None = None,
        reason: str | None = None,
        limit: int = ...,
        include_cancelled: bool = False,
        fresh: bool = False,
    ) -> Sequence[OperatorOutcome]:
        """``redrive`` every dead task (up to ``limit``, oldest death first) whose reason
        contains ``reason_contains`` (case-sensitive substring; None: every dead task), with
        ``reason`` and ``fresh`` as ``redrive``'s. A task an operator cancelled (its reason
        begins "operator: cancelled: ") is left dead unless ``include_cancelled``: the people
        behind it were told "cancelled"; ``redrive`` by id re-drives it."""
        ...

    async def cancel(self, ids: Sequence[str], reason: str) -> Sequence[OperatorOutcome]:
        """pending, assigned, claimed or waiting -> dead with "operator: cancelled:
        ``reason``". A claimed task keeps its owner for the record but loses its lease, so the
        running worker's renew, complete or fail is fenced out (``StaleLease``) and its late
        result refused. A cancelled suspect is a suspect no more (its crash counts stay, as
        evidence). A task with a reply (result, delivered) or already dead is refused, nothing
        changed."""
        ...

    async def rewind(self, id: str, step: str, *, reason: str | None = None) -> OperatorOutcome:
        """Re-drive dead task ``id`` with its records from ``step`` on dropped (issue #53), the
        asks asked since with them: the run replays up to ``step`` and runs it and what follows
        again. The drop, then the re-drive (``redrive``, its reason saying what was dropped and
        ``reason``); refused, nothing changed, for a task not dead or a step not recorded."""
        ...

    async def fork(
        self, id: str, step: str, *, room: str | None = None, reason: str | None = None
    ) -> OperatorOutcome:
        """A new task from ``id`` (issue #53: "regenerate from here"): its message again, as
        ``<id>~fork<n>`` in ``room`` (default: the same), pending, with the records before
        ``step`` copied (and the asks answered before it), in one transaction journaled as the
        operator's. Its reply goes to the room as a message of its own. The outcome names the
        new task; refused for a child run, a forgotten message or a step not recorded."""
        ...


class NewsStore(Protocol):
    """News from the other processes on the store: hints that work or a result may be there
    (PostgreSQL ``NOTIFY``, SQLite's news file). Each loop's own look stays the truth."""

    async def wait_for_work(self, seconds: float, *, worker: str | None = None) -> bool:
        """Sleep until new pending work (or an assignment to ``worker``) may exist, at most
        ``seconds``; True if news came."""
        ...

    async def wait_for_results(self, seconds: float) -> bool:
        """Sleep until another process may have stored a result, at most ``seconds``."""
        ...


class ScheduleStore(StoreClock, Protocol):
    """Schedules kept in the store (issue #52): what an operator adds, pauses, resumes,
    removes and reads."""

    async def add_schedule(self, spec: ScheduleSpec) -> ScheduleView:
        """Keep ``spec``, first due after now; ``ScheduleError`` if its name is kept."""
        ...

    async def pause_schedule(self, name: str) -> bool: ...

    async def resume_schedule(self, name: str) -> bool:
        """Due next after now: the times it was paused through never fire."""
        ...

    async def remove_schedule(self, name: str) -> bool: ...

    async def schedule(self, name: str) -> ScheduleView | None: ...

    async def schedules(self) -> Sequence[ScheduleView]: ...


class EventStore(StoreClock, Protocol):
    """Events sent to the store (issue #52), and what an operator reads and drops."""

    async def send_event(self, id: str, key: str, body: object, *, ttl_s: float = ...) -> EventSent:
        """Keep the event (durable before it returns; idempotent by ``id``; a replay with
        another key or body raises ``EventConflict``) and wake every run waiting on ``key``."""
        ...

    async def events(self, *, key: str | None = ..., limit: int = ...) -> Sequence[Event]: ...

    async def drop_event(self, id: str) -> bool: ...

    async def event_waiters(self) -> Sequence[EventWaiter]: ...


@runtime_checkable
class Store(
    IngestStore,
    WorkerStore,
    LeadStore,
    DeliveryStore,
    DeadNoticeStore,
    StallStore,
    ReconcilerStore,
    RetentionStore,
    InspectStore,
    OperatorStore,
    RoomStore,
    QuestionStore,
    LimitStore,
    ScheduleStore,
    EventStore,
    NewsStore,
    Protocol,
):
    """A transactional custody store: every role at once. A backend implements this; each caller
    is typed against only its role above. Every method is async; all raise
    ``ClosedResourceError`` after ``aclose``."""

    async def aclose(self) -> None: ...


async def plan_then_assign(
    store: Store, decide: SweepPlanner, *, pending_limit: int
) -> tuple[PoolView, list[bool] | None]:
    """``Store.plan_and_assign`` in two transactions, for a backend without one for a sweep: the
    view, then ``assign_many``'s compare-and-set (a task that moved meanwhile answers False)."""
    view = await store.pool_view(pending_limit=pending_limit)
    pairs = decide(view)
    return view, None if pairs is None else await store.assign_many(pairs)


async def plan_then_assign_unclaimed(
    store: Store, decide: SweepPlanner, *, pending_limit: int
) -> Swept:
    """``Store.plan_assign_and_claim`` for a backend without one transaction for a sweep: the
    two of ``plan_then_assign``, and no claim (each worker claims its assignments, rung)."""
    view, done = await plan_then_assign(store, decide, pending_limit=pending_limit)
    return Swept(view, done)
