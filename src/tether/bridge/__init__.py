"""tether.bridge: moves chat tasks from a remote gateway through custody to agent workers.

The names here serve three readers: an agent author (``Task``, ``Reply``, ``Retry``,
``Permanent``, ``progress_of``, ``conversation_of``, ``run_of`` (with ``AskTimeout`` and
``AskUnsupported``), ``load_agent``, ``asyncio_agent``
and ``trio_as_asyncio`` for agents written for asyncio), someone running or embedding a bridge
(``BridgeConfig``, ``load_config``, ``BridgeService``, ``WorkerService``, ``open_store``,
``store_status``, the token files) and a client of the gateway (``GatewayClient``, its errors
and records), plus the custody basics they all read (``CustodyState``, ``in_custody``,
``TaskRecord``). Two tiers below hold what implementers need: ``tether.bridge.custody`` (the
rules, the Store roles and their records) and ``tether.bridge.pool`` (the lead, the workers and
the planner's values).

To run a bridge in-process: build a ``BridgeConfig`` (directly, or with ``load_config`` from a
TOML file and ``TETHER_*`` environment the way ``tether bridge run`` does), then
``await nursery.start(BridgeService(config).run)``.
"""

import typing as _typing

from .._core._lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from .._plumbing._config_error import ConfigError as ConfigError
    from .._plumbing._redact import redact_dsn as redact_dsn
    from .._plumbing._token_file import TokenFileError as TokenFileError
    from .._plumbing._token_file import ensure_token_file as ensure_token_file
    from .._plumbing._token_file import read_token as read_token
    from .._plumbing._token_file import write_token as write_token
    from .._protocol._connection import ConnectionStatus as ConnectionStatus
    from .._protocol._messages import PROTOCOL_VERSION as PROTOCOL_VERSION
    from .._protocol._messages import GatewayTask as GatewayTask
    from .._protocol._messages import ResultReceipt as ResultReceipt
    from .client._client import GatewayAuthError as GatewayAuthError
    from .client._client import GatewayClient as GatewayClient
    from .client._client import GatewayError as GatewayError
    from .client._client import GatewayProtocolError as GatewayProtocolError
    from .client._client import GatewayRequestError as GatewayRequestError
    from .client._client import GatewayUnavailable as GatewayUnavailable
    from .custody import IN_CUSTODY as IN_CUSTODY
    from .custody import TERMINAL as TERMINAL
    from .custody import Conversation as Conversation
    from .custody import CustodyState as CustodyState
    from .custody import InvalidTaskId as InvalidTaskId
    from .custody import Task as Task
    from .custody import TaskRecord as TaskRecord
    from .custody import Turn as Turn
    from .custody import UnknownTask as UnknownTask
    from .custody import in_custody as in_custody
    from .pool import AgentFactory as AgentFactory
    from .pool import AgentLoadError as AgentLoadError
    from .pool import AskTimeout as AskTimeout
    from .pool import AskUnsupported as AskUnsupported
    from .pool import Permanent as Permanent
    from .pool import Progress as Progress
    from .pool import Reply as Reply
    from .pool import Retry as Retry
    from .pool import Run as Run
    from .pool import StepError as StepError
    from .pool import asyncio_agent as asyncio_agent
    from .pool import conversation_of as conversation_of
    from .pool import load_agent as load_agent
    from .pool import progress_of as progress_of
    from .pool import run_of as run_of
    from .pool import trio_as_asyncio as trio_as_asyncio
    from .service._config import BridgeConfig as BridgeConfig
    from .service._config import load_config as load_config
    from .service._service import BridgeService as BridgeService
    from .service._store_status import StatusEntry as StatusEntry
    from .service._store_status import StoreStatus as StoreStatus
    from .service._store_status import render_store_status as render_store_status
    from .service._store_status import store_status as store_status
    from .service._worker_config import WorkerConfig as WorkerConfig
    from .service._worker_config import load_worker_config as load_worker_config
    from .service._worker_service import WorkerService as WorkerService
    from .stores._open import StoreConfigError as StoreConfigError
    from .stores._open import open_store as open_store
    from .stores.postgres._store import PostgresStore as PostgresStore
    from .stores.postgres._store import StoreConnectionLost as StoreConnectionLost
    from .stores.postgres._store import StoreTimeout as StoreTimeout
    from .stores.sqlite._schema import SchemaTooNew as SchemaTooNew
    from .stores.sqlite._store import SqliteStore as SqliteStore
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
