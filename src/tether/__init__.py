"""tether: a Trio structured-concurrency runtime for agent services.

Nothing is fire-and-forget: every task has an owning scope, every uncaught error surfaces, and
the task registry mirrors live tasks by identity.
"""

import typing as _typing

from ._core._lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from ._child import CHILD_STATES as CHILD_STATES
    from ._child import ChildSnapshot as ChildSnapshot
    from ._child import ChildSpec as ChildSpec
    from ._child import ChildState as ChildState
    from ._child import RestartType as RestartType
    from ._child import SupervisedChild as SupervisedChild
    from ._child import SupervisorSnapshot as SupervisorSnapshot
    from ._core._background import BackgroundScope as BackgroundScope
    from ._core._background import ScopeClosed as ScopeClosed
    from ._core._context import current_runtime as current_runtime
    from ._core._owner import current_owner as current_owner
    from ._core._owner import owned_by as owned_by
    from ._core._owner import start_soon_owned as start_soon_owned
    from ._core._registry import ALL_KINDS as ALL_KINDS
    from ._core._registry import TaskInfo as TaskInfo
    from ._core._registry import TaskKind as TaskKind
    from ._core._registry import TaskRegistry as TaskRegistry
    from ._core._stop import stop_requested as stop_requested
    from ._core._stop import wait_stop_requested as wait_stop_requested
    from ._runtime import Runtime as Runtime
    from ._runtime import open_runtime as open_runtime
    from ._session import Session as Session
    from ._session import open_session as open_session
    from ._session_types import HandlerCancelled as HandlerCancelled
    from ._session_types import HandlerDropped as HandlerDropped
    from ._session_types import HandlerFailure as HandlerFailure
    from ._session_types import Policy as Policy
    from ._session_types import QueueFull as QueueFull
    from ._session_types import SessionClosed as SessionClosed
    from ._session_types import SessionError as SessionError
    from ._session_types import SessionStats as SessionStats
    from ._supervisor import RestartPolicy as RestartPolicy
    from ._supervisor import Strategy as Strategy
    from ._supervisor import Supervisor as Supervisor
    from ._supervisor import SupervisorFailed as SupervisorFailed
    from ._supervisor import open_supervisor as open_supervisor
else:
    # loaded on first use: `tether --help` names its verbs without importing Trio (issue #56)
    __getattr__, __dir__ = _lazy_exports(__name__, __file__)

__version__ = "0.1.0"
