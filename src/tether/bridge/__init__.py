"""tether.bridge: moves chat tasks from a remote gateway through custody to agent workers.

Every acknowledged task is in exactly one ``CustodyState``, stored transactionally; every move
is a fenced compare-and-set. ``custody`` is the one definition of ids, states, transitions and
the "in custody" predicate; ``Store`` is what every backend implements. ``GatewayClient``
speaks gateway protocol v1.

To run a bridge in-process: build a ``BridgeConfig`` (directly, or with ``load_config`` from a
TOML file and ``TETHER_*`` environment the way ``tether bridge run`` does), then
``await nursery.start(BridgeService(config).run)``. ``store_status``/``render_status`` are what
``tether store status`` shows.

Where things live: ``custody/`` (the rules and the store roles), ``stores/`` (SQLite,
PostgreSQL), ``pool/`` (lead, workers, liveness, file exchange), ``wire/`` (gateway protocol
v1 and its client), ``service/`` (ingest, delivery, dead notices, settings, CLI verbs).
"""

import typing as _typing

from .._plumbing._token_file import TokenFileError as TokenFileError
from .._plumbing._token_file import ensure_token_file as ensure_token_file
from .._plumbing._token_file import read_token as read_token
from .._plumbing._token_file import write_token as write_token
from .client import PROTOCOL_VERSION as PROTOCOL_VERSION
from .client import Backoff as Backoff
from .client import ConnectionStatus as ConnectionStatus
from .client import GatewayAuthError as GatewayAuthError
from .client import GatewayClient as GatewayClient
from .client import GatewayError as GatewayError
from .client import GatewayProtocolError as GatewayProtocolError
from .client import GatewayRequestError as GatewayRequestError
from .client import GatewayTask as GatewayTask
from .client import GatewayUnavailable as GatewayUnavailable
from .client import ResultReceipt as ResultReceipt
from .custody import DEFAULT_ROOM_POLICY as DEFAULT_ROOM_POLICY
from .custody import IN_CUSTODY as IN_CUSTODY
from .custody import MAX_CLAIM_BATCH as MAX_CLAIM_BATCH
from .custody import OPERATOR_MOVES as OPERATOR_MOVES
from .custody import ROOM_POLICIES as ROOM_POLICIES
from .custody import TERMINAL as TERMINAL
from .custody import TRANSITIONS as TRANSITIONS
from .custody import WORKER_ROLES as WORKER_ROLES
from .custody import Assignment as Assignment
from .custody import BodyTooLarge as BodyTooLarge
from .custody import Claim as Claim
from .custody import CustodyConflict as CustodyConflict
from .custody import CustodyState as CustodyState
from .custody import DeadNoticeStore as DeadNoticeStore
from .custody import Decide as Decide
from .custody import DeliveryStore as DeliveryStore
from .custody import IngestStore as IngestStore
from .custody import InspectStore as InspectStore
from .custody import InvalidTask as InvalidTask
from .custody import InvalidTaskId as InvalidTaskId
from .custody import InvalidWorkerName as InvalidWorkerName
from .custody import JournalEntry as JournalEntry
from .custody import LeadStore as LeadStore
from .custody import LeaseExpiry as LeaseExpiry
from .custody import OperatorOutcome as OperatorOutcome
from .custody import OperatorStore as OperatorStore
from .custody import PoolMemberStore as PoolMemberStore
from .custody import PoolView as PoolView
from .custody import Priority as Priority
from .custody import Queued as Queued
from .custody import Reconciler as Reconciler
from .custody import ReconcileReport as ReconcileReport
from .custody import ReconcilerStore as ReconcilerStore
from .custody import Result as Result
from .custody import RetentionStore as RetentionStore
from .custody import RoomPolicy as RoomPolicy
from .custody import StaleLease as StaleLease
from .custody import StallCandidate as StallCandidate
from .custody import StallStore as StallStore
from .custody import StateReader as StateReader
from .custody import Store as Store
from .custody import StoreClock as StoreClock
from .custody import Superseded as Superseded
from .custody import Task as Task
from .custody import TaskRecord as TaskRecord
from .custody import UnknownTask as UnknownTask
from .custody import WaitingRetries as WaitingRetries
from .custody import WorkerInfo as WorkerInfo
from .custody import WorkerRole as WorkerRole
from .custody import WorkerStore as WorkerStore
from .custody import in_custody as in_custody
from .custody import may_move as may_move
from .custody import operator_may as operator_may
from .pool import AgentError as AgentError
from .pool import AgentFactory as AgentFactory
from .pool import AgentLoadError as AgentLoadError
from .pool import Assigned as Assigned
from .pool import Deferred as Deferred
from .pool import EmptyReply as EmptyReply
from .pool import FileExchange as FileExchange
from .pool import HeaderRefused as HeaderRefused
from .pool import Permanent as Permanent
from .pool import PoolLead as PoolLead
from .pool import PoolWakeups as PoolWakeups
from .pool import PoolWorker as PoolWorker
from .pool import Progress as Progress
from .pool import ProgressUpdate as ProgressUpdate
from .pool import Reply as Reply
from .pool import ResultRefused as ResultRefused
from .pool import Retry as Retry
from .pool import RetryBackoff as RetryBackoff
from .pool import Returned as Returned
from .pool import StallPass as StallPass
from .pool import StallWatcher as StallWatcher
from .pool import SweepReport as SweepReport
from .pool import Timings as Timings
from .pool import Wakeup as Wakeup
from .pool import file_exchange_worker as file_exchange_worker
from .pool import is_alive as is_alive
from .pool import live_lead as live_lead
from .pool import load_agent as load_agent
from .pool import plan_sweep as plan_sweep
from .pool import progress_of as progress_of
from .pool import reporting as reporting
from .service import BridgeConfig as BridgeConfig
from .service import BridgeService as BridgeService
from .service import ConfigError as ConfigError
from .service import StatusEntry as StatusEntry
from .service import StoreStatus as StoreStatus
from .service import load_config as load_config
from .service import render_status as render_status
from .service import store_status as store_status
from .stores import StoreConfigError as StoreConfigError
from .stores import open_store as open_store
from .stores.postgres import redact_dsn as redact_dsn
from .stores.sqlite import SchemaTooNew as SchemaTooNew
from .stores.sqlite import SqliteStore as SqliteStore

if _typing.TYPE_CHECKING:
    from .stores.postgres import PostgresStore as PostgresStore
    from .stores.postgres import StoreConnectionLost as StoreConnectionLost
    from .stores.postgres import StoreTimeout as StoreTimeout

__all__ = [
    "DEFAULT_ROOM_POLICY",
    "IN_CUSTODY",
    "MAX_CLAIM_BATCH",
    "OPERATOR_MOVES",
    "PROTOCOL_VERSION",
    "ROOM_POLICIES",
    "TERMINAL",
    "TRANSITIONS",
    "WORKER_ROLES",
    "AgentError",
    "AgentFactory",
    "AgentLoadError",
    "Assigned",
    "Assignment",
    "Backoff",
    "BodyTooLarge",
    "BridgeConfig",
    "BridgeService",
    "Claim",
    "ConfigError",
    "ConnectionStatus",
    "CustodyConflict",
    "CustodyState",
    "DeadNoticeStore",
    "Decide",
    "Deferred",
    "DeliveryStore",
    "EmptyReply",
    "FileExchange",
    "GatewayAuthError",
    "GatewayClient",
    "GatewayError",
    "GatewayProtocolError",
    "GatewayRequestError",
    "GatewayTask",
    "GatewayUnavailable",
    "HeaderRefused",
    "IngestStore",
    "InspectStore",
    "InvalidTask",
    "InvalidTaskId",
    "InvalidWorkerName",
    "JournalEntry",
    "LeadStore",
    "LeaseExpiry",
    "OperatorOutcome",
    "OperatorStore",
    "Permanent",
    "PoolLead",
    "PoolMemberStore",
    "PoolView",
    "PoolWakeups",
    "PoolWorker",
    "PostgresStore",
    "Priority",
    "Progress",
    "ProgressUpdate",
    "Queued",
    "ReconcileReport",
    "Reconciler",
    "ReconcilerStore",
    "Reply",
    "Result",
    "ResultReceipt",
    "ResultRefused",
    "RetentionStore",
    "Retry",
    "RetryBackoff",
    "Returned",
    "RoomPolicy",
    "SchemaTooNew",
    "SqliteStore",
    "StaleLease",
    "StallCandidate",
    "StallPass",
    "StallStore",
    "StallWatcher",
    "StateReader",
    "StatusEntry",
    "Store",
    "StoreClock",
    "StoreConfigError",
    "StoreConnectionLost",
    "StoreStatus",
    "StoreTimeout",
    "Superseded",
    "SweepReport",
    "Task",
    "TaskRecord",
    "Timings",
    "TokenFileError",
    "UnknownTask",
    "WaitingRetries",
    "Wakeup",
    "WorkerInfo",
    "WorkerRole",
    "WorkerStore",
    "ensure_token_file",
    "file_exchange_worker",
    "in_custody",
    "is_alive",
    "live_lead",
    "load_agent",
    "load_config",
    "may_move",
    "open_store",
    "operator_may",
    "plan_sweep",
    "progress_of",
    "read_token",
    "redact_dsn",
    "render_status",
    "reporting",
    "store_status",
    "write_token",
]

_NEEDS_PSYCOPG = frozenset({"PostgresStore", "StoreConnectionLost", "StoreTimeout"})


def __getattr__(name: str) -> object:
    # the PostgreSQL names need psycopg, the optional 'postgres' extra: import on first use
    if name in _NEEDS_PSYCOPG:
        from .stores import postgres

        return getattr(postgres, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
