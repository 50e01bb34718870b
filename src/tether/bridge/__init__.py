"""tether.bridge: moves chat tasks from a remote gateway through custody to agent workers.

The names here are grouped by who reads them, the agent author first: what an agent receives,
returns and reads of its run; then someone running or embedding a bridge (its config, services,
token files and status) and opening a store; then the two names a client of the gateway starts
from, and the custody basics everyone reads. Four tiers below hold the rest:
``tether.bridge.client`` (the gateway client's errors and records), ``tether.bridge.custody``
(the rules, the Store roles and their records), ``tether.bridge.runs`` (what a run sees and
does, and the worker's side of each run) and ``tether.bridge.pool`` (the lead, the workers,
the reconciler, the planner's values and ``load_agent``).

To run a bridge in-process: build a ``BridgeConfig`` (directly, or with ``load_config`` from a
TOML file and ``TETHER_*`` environment the way ``tether bridge run`` does), then
``await nursery.start(BridgeService(config).run)``.
"""

# ruff: noqa: I001  (the names below are grouped by audience, not sorted)
import typing as _typing

from .._core._lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    # The agent author: what an agent receives, returns and raises, and what it reads of its run
    from .custody import Task as Task
    from .pool import AgentFactory as AgentFactory
    from .runs import Reply as Reply
    from .runs import Retry as Retry
    from .runs import Permanent as Permanent
    from .runs import TooLarge as TooLarge
    from .runs import run_of as run_of
    from .runs import Run as Run
    from .runs import StepError as StepError
    from .runs import StepMismatch as StepMismatch
    from .runs import AskTimeout as AskTimeout
    from .runs import AskUnsupported as AskUnsupported
    from .runs import ChildFailed as ChildFailed
    from .runs import JoinTimeout as JoinTimeout
    from .runs import WaitTimeout as WaitTimeout
    from .runs import progress_of as progress_of
    from .runs import Progress as Progress
    from .runs import conversation_of as conversation_of
    from .custody import Conversation as Conversation
    from .custody import Turn as Turn

    # ... and an agent written for asyncio (pydantic-ai and the like)
    from .pool import asyncio_agent as asyncio_agent
    from .pool import trio_as_asyncio as trio_as_asyncio

    # Running or embedding a bridge (or workers only)
    from .service._config import BridgeConfig as BridgeConfig
    from .service._config import load_config as load_config
    from .service._service import BridgeService as BridgeService
    from .service._worker_config import WorkerConfig as WorkerConfig
    from .service._worker_config import load_worker_config as load_worker_config
    from .service._worker_service import WorkerService as WorkerService
    from .._plumbing._config_error import ConfigError as ConfigError

    # ... its token files (the gateway reads the same ones)
    from .._plumbing._token_file import ensure_token_file as ensure_token_file
    from .._plumbing._token_file import read_token as read_token
    from .._plumbing._token_file import write_token as write_token
    from .._plumbing._token_file import TokenFileError as TokenFileError

    # ... and what `tether store status` shows
    from .service._store_status import store_status as store_status
    from .service._store_status import render_store_status as render_store_status
    from .service._store_status import StoreStatus as StoreStatus
    from .service._store_status import StatusEntry as StatusEntry

    # Opening a custody store
    from .stores._open import open_store as open_store
    from .stores._open import StoreConfigError as StoreConfigError
    from .stores.sqlite._store import SqliteStore as SqliteStore
    from .stores.sqlite._schema import SchemaTooNew as SchemaTooNew
    from .stores.postgres._store import PostgresStore as PostgresStore
    from .stores.postgres._store import StoreConnectionLost as StoreConnectionLost
    from .stores.postgres._store import StoreTimeout as StoreTimeout
    from .._plumbing._redact import redact_dsn as redact_dsn

    # A client of the gateway (its other errors and records: tether.bridge.client)
    from .client import GatewayClient as GatewayClient
    from .client import GatewayError as GatewayError

    # The custody basics every reader meets (the rest: tether.bridge.custody)
    from .custody._rules import CustodyState as CustodyState
    from .custody._rules import in_custody as in_custody
    from .custody._rules import TaskRecord as TaskRecord
else:
    # The names above, loaded on first use: a command that only names its verbs, or reads a
    # store's status, does not pay for the gateway client, the pool and psycopg (issue #56).
    # A type checker needs the static imports, and sees no __getattr__ (it would make every
    # unknown name an `object`).
    _lazy_getattr, __dir__ = _lazy_exports(__name__, __file__)

    # Old names kept working (issue #46 renamed them so each says one thing); not listed by
    # dir(), and each use warns once per call site.
    _DEPRECATED = {"trio_side": "trio_as_asyncio", "render_status": "render_store_status"}

    def __getattr__(name: str) -> object:
        new = _DEPRECATED.get(name)
        if new is None:
            return _lazy_getattr(name)
        import warnings

        warnings.warn(
            f"tether.bridge.{name} is deprecated: use tether.bridge.{new}",
            DeprecationWarning,
            stacklevel=2,
        )
        return _lazy_getattr(new)
