"""tether.bridge.custody: the implementer's tier (like ``trio.lowlevel``): THE custody rules
every part of the bridge shares, the Store roles and the records they pass.

A new backend implements every role of ``Store`` and passes the conformance suite
(``tests/custody``); each part of the bridge is typed against the one role it plays. The
basics a user reads (``CustodyState``, ``in_custody``, ``Task``, ``TaskRecord``) are also
exported by ``tether.bridge``.

- ``_rules``: task ids and worker names, the custody states, the allowed transitions, the one
  predicate "still in custody" (:func:`~tether.bridge.in_custody`), and the records a store
  hands out.
- ``_roles``: the ``Store`` protocol, split into the narrow roles its callers use (what ingest,
  a worker, the lead, delivery, the reconciler and an operator need). A third backend
  implements every role; start there. ``_records``: the values the roles pass.
- ``_conversation``: each room's turns and state (issue #34): the records, the state's size
  limit and its version conflict.
- ``_rooms``: room policies (``serial`` order, ``replace`` barge-in), kept by the store.
- ``_reconcile``: a reconcile pass (lease expiry; it never drops an id) and its report; the
  loop that repeats it is ``tether.bridge.pool.Reconciler``.
- ``_crashes``: crash expiries, suspects that run alone, poison tasks proven and dead-lettered.
- ``_log``: one log line per committed transition, for every backend.
- ``_steps``: the rules of a durable run's recorded steps (names, sizes, JSON values).
- ``_children``: child runs and queues (issue #51): child ids, depth and fan-out bounds, when a
  child is done for its parent's join.
- ``_schedules``, ``_events``: schedules kept by the store and events a run waits for (issue
  #52): names, due times and DST, the task a due time fires; event keys, bodies and TTLs.
- ``_asks``: a run's questions to the person (issue #36): the records, the roles a worker and
  the question poster use, the rules of a question.
- ``_limits``: flow control: a limit per key (token bucket, concurrency cap), its arithmetic.
"""

import typing as _typing

from ..._core._lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from ._asks import AskRecord as AskRecord
    from ._asks import Question as Question
    from ._asks import QuestionStore as QuestionStore
    from ._children import ChildView as ChildView
    from ._conversation import MAX_STATE_BYTES as MAX_STATE_BYTES
    from ._conversation import Conversation as Conversation
    from ._conversation import ConversationCounts as ConversationCounts
    from ._conversation import ForgottenRoom as ForgottenRoom
    from ._conversation import RoomView as RoomView
    from ._conversation import StateConflict as StateConflict
    from ._conversation import StateTooLarge as StateTooLarge
    from ._conversation import Turn as Turn
    from ._events import Event as Event
    from ._events import EventConflict as EventConflict
    from ._events import EventSent as EventSent
    from ._events import EventWaiter as EventWaiter
    from ._events import InvalidEvent as InvalidEvent
    from ._limits import LIMIT_KEY_RULE as LIMIT_KEY_RULE
    from ._limits import Granted as Granted
    from ._limits import LimitSpec as LimitSpec
    from ._limits import LimitView as LimitView
    from ._limits import NoPermit as NoPermit
    from ._reconcile import ReconcileReport as ReconcileReport
    from ._records import WORKER_ROLES as WORKER_ROLES
    from ._records import Assignment as Assignment
    from ._records import Hand as Hand
    from ._records import JournalEntry as JournalEntry
    from ._records import LeaseExpiry as LeaseExpiry
    from ._records import OperatorOutcome as OperatorOutcome
    from ._records import PendingTask as PendingTask
    from ._records import PoolView as PoolView
    from ._records import StallCandidate as StallCandidate
    from ._records import StepRecord as StepRecord
    from ._records import Suspects as Suspects
    from ._records import SweepPlanner as SweepPlanner
    from ._records import Swept as Swept
    from ._records import WaitingRetries as WaitingRetries
    from ._records import WaitingRuns as WaitingRuns
    from ._records import WorkerInfo as WorkerInfo
    from ._records import WorkerRole as WorkerRole
    from ._roles import ConversationStore as ConversationStore
    from ._roles import DeadNoticeStore as DeadNoticeStore
    from ._roles import DeliveryStore as DeliveryStore
    from ._roles import EventStore as EventStore
    from ._roles import IngestStore as IngestStore
    from ._roles import InspectStore as InspectStore
    from ._roles import JournalStore as JournalStore
    from ._roles import LeadStore as LeadStore
    from ._roles import LimitStore as LimitStore
    from ._roles import NewsStore as NewsStore
    from ._roles import OperatorStore as OperatorStore
    from ._roles import PermitStore as PermitStore
    from ._roles import PoolMemberStore as PoolMemberStore
    from ._roles import ReconcilerStore as ReconcilerStore
    from ._roles import RetentionStore as RetentionStore
    from ._roles import RoomStore as RoomStore
    from ._roles import RunStore as RunStore
    from ._roles import ScheduleStore as ScheduleStore
    from ._roles import StallStore as StallStore
    from ._roles import StateReader as StateReader
    from ._roles import Store as Store
    from ._roles import StoreClock as StoreClock
    from ._roles import WorkerStore as WorkerStore
    from ._rooms import DEFAULT_ROOM_POLICY as DEFAULT_ROOM_POLICY
    from ._rooms import ROOM_POLICIES as ROOM_POLICIES
    from ._rooms import RoomPolicy as RoomPolicy
    from ._rooms import Superseded as Superseded
    from ._rules import IN_CUSTODY as IN_CUSTODY
    from ._rules import MAX_CLAIM_BATCH as MAX_CLAIM_BATCH
    from ._rules import OPERATOR_MOVES as OPERATOR_MOVES
    from ._rules import TERMINAL as TERMINAL
    from ._rules import TRANSITIONS as TRANSITIONS
    from ._rules import BodyTooLarge as BodyTooLarge
    from ._rules import Claim as Claim
    from ._rules import CustodyConflict as CustodyConflict
    from ._rules import CustodyState as CustodyState
    from ._rules import InvalidTask as InvalidTask
    from ._rules import InvalidTaskId as InvalidTaskId
    from ._rules import InvalidWorkerName as InvalidWorkerName
    from ._rules import Priority as Priority
    from ._rules import Result as Result
    from ._rules import StaleLease as StaleLease
    from ._rules import Task as Task
    from ._rules import TaskGone as TaskGone
    from ._rules import TaskRecord as TaskRecord
    from ._rules import UnknownTask as UnknownTask
    from ._rules import in_custody as in_custody
    from ._rules import may_move as may_move
    from ._rules import operator_may as operator_may
    from ._schedules import ScheduleError as ScheduleError
    from ._schedules import ScheduleSpec as ScheduleSpec
    from ._schedules import ScheduleView as ScheduleView
    from ._steps import MAX_STEP_BYTES as MAX_STEP_BYTES
    from ._steps import MAX_TASK_STEP_BYTES as MAX_TASK_STEP_BYTES
    from ._steps import STEP_NAME_RULE as STEP_NAME_RULE
else:
    # loaded on first use, as tether.bridge's names (issue #56)
    __getattr__, __dir__ = _lazy_exports(__name__, __file__)
