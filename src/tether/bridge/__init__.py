"""tether.bridge: moves chat tasks from a remote gateway through custody to agent workers.

Every acknowledged task is in exactly one ``CustodyState``, stored transactionally; every move
is a fenced compare-and-set. ``_custody`` is the one definition of ids, states, transitions and
the "in custody" predicate; ``Store`` is what every backend implements. ``GatewayClient``
speaks gateway protocol v1.

To run a bridge in-process: build a ``BridgeConfig`` (directly, or with ``load_config`` from a
TOML file and ``TETHER_*`` environment the way ``tether bridge run`` does), then
``await nursery.start(BridgeService(config).run)``. ``store_status``/``render_status`` are what
``tether store status`` shows.
"""

from typing import TYPE_CHECKING, Any

from ._agent import AgentError as AgentError
from ._agent import AgentFactory as AgentFactory
from ._agent import AgentLoadError as AgentLoadError
from ._agent import EmptyReply as EmptyReply
from ._agent import Reply as Reply
from ._agent import load_agent as load_agent
from ._backoff import Backoff as Backoff
from ._config import BridgeConfig as BridgeConfig
from ._config import ConfigError as ConfigError
from ._config import load_config as load_config
from ._custody import IN_CUSTODY as IN_CUSTODY
from ._custody import MAX_CLAIM_BATCH as MAX_CLAIM_BATCH
from ._custody import TERMINAL as TERMINAL
from ._custody import TRANSITIONS as TRANSITIONS
from ._custody import BodyTooLarge as BodyTooLarge
from ._custody import Claim as Claim
from ._custody import CustodyConflict as CustodyConflict
from ._custody import CustodyState as CustodyState
from ._custody import InvalidTask as InvalidTask
from ._custody import InvalidTaskId as InvalidTaskId
from ._custody import InvalidWorkerName as InvalidWorkerName
from ._custody import Priority as Priority
from ._custody import Result as Result
from ._custody import StaleLease as StaleLease
from ._custody import Task as Task
from ._custody import TaskRecord as TaskRecord
from ._custody import UnknownTask as UnknownTask
from ._custody import in_custody as in_custody
from ._custody import may_move as may_move
from ._gateway_client import GatewayAuthError as GatewayAuthError
from ._gateway_client import GatewayClient as GatewayClient
from ._gateway_client import GatewayError as GatewayError
from ._gateway_client import GatewayProtocolError as GatewayProtocolError
from ._gateway_client import GatewayRequestError as GatewayRequestError
from ._gateway_client import GatewayUnavailable as GatewayUnavailable
from ._gateway_wire import PROTOCOL_VERSION as PROTOCOL_VERSION
from ._gateway_wire import GatewayTask as GatewayTask
from ._gateway_wire import ResultReceipt as ResultReceipt
from ._open_store import StoreConfigError as StoreConfigError
from ._open_store import open_store as open_store
from ._pool_files import FileExchange as FileExchange
from ._pool_files import HeaderRefused as HeaderRefused
from ._pool_files import ResultRefused as ResultRefused
from ._pool_files import file_exchange_worker as file_exchange_worker
from ._pool_lead import Assigned as Assigned
from ._pool_lead import Deferred as Deferred
from ._pool_lead import PoolLead as PoolLead
from ._pool_lead import Returned as Returned
from ._pool_lead import SweepReport as SweepReport
from ._pool_lead import plan_sweep as plan_sweep
from ._pool_liveness import is_alive as is_alive
from ._pool_liveness import live_lead as live_lead
from ._pool_stall import StallPass as StallPass
from ._pool_stall import StallWatcher as StallWatcher
from ._pool_worker import PoolWorker as PoolWorker
from ._postgres_dsn import redact_dsn as redact_dsn
from ._reconcile import Reconciler as Reconciler
from ._reconcile import ReconcileReport as ReconcileReport
from ._service import BridgeService as BridgeService
from ._sqlite import SqliteStore as SqliteStore
from ._sqlite_schema import SchemaTooNew as SchemaTooNew
from ._status_file import ConnectionStatus as ConnectionStatus
from ._store import WORKER_ROLES as WORKER_ROLES
from ._store import Assignment as Assignment
from ._store import Decide as Decide
from ._store import LeaseExpiry as LeaseExpiry
from ._store import PoolView as PoolView
from ._store import Queued as Queued
from ._store import StallCandidate as StallCandidate
from ._store import Store as Store
from ._store import WorkerInfo as WorkerInfo
from ._store import WorkerRole as WorkerRole
from ._store_status import StatusEntry as StatusEntry
from ._store_status import StoreStatus as StoreStatus
from ._store_status import render_status as render_status
from ._store_status import store_status as store_status
from ._token_file import TokenFileError as TokenFileError
from ._token_file import ensure_token_file as ensure_token_file
from ._token_file import read_token as read_token
from ._token_file import write_token as write_token
from ._wakeup import PoolWakeups as PoolWakeups
from ._wakeup import Wakeup as Wakeup

if TYPE_CHECKING:
    from ._postgres import PostgresStore as PostgresStore
    from ._postgres import StoreConnectionLost as StoreConnectionLost
    from ._postgres import StoreTimeout as StoreTimeout


def __getattr__(name: str) -> Any:
    # the PostgreSQL names need psycopg, the optional 'postgres' extra: import on first use
    if name in ("PostgresStore", "StoreConnectionLost", "StoreTimeout"):
        from . import _postgres

        return getattr(_postgres, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
