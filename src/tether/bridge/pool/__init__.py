"""tether.bridge.pool: the worker pool's tier: a lead assigns, workers claim and run agents,
liveness decides who is alive; the planner's values for those who embed or test a pool.

What an agent author needs (``Reply``, ``Retry``, ``Permanent``, ``progress_of``,
``conversation_of`` with its ``Conversation`` and ``Turn``, ``run_of``, ``load_agent``) is
exported by ``tether.bridge``; the run's own names live in ``tether.bridge.runs`` and are
re-exported here for those who embed a pool.

- ``_lead``: :class:`PoolLead`; ``_plan``: its pure planner :func:`plan_sweep`.
- ``_worker``: :class:`PoolWorker`: claims, heartbeats and slots; it hands each claim to a run
  (``tether.bridge.runs``), which stores the outcome. ``_publish``: the runs' progress out.
- ``_reconciler``: :class:`Reconciler`, the loop of reconcile passes (the pass is custody's).
- ``_liveness``: the one predicate "is this member alive" (:func:`is_alive`).
- ``_stall``: stall notices, once per task. ``_files``: the file exchange for outside programs.
- ``_agent``: what an agent is and how ``module:factory`` is loaded; ``_asyncio``: agents
  written for asyncio (``asyncio_agent``, ``trio_as_asyncio``). ``_wakeup``: "look now".
"""

import typing as _typing

from ..._core._lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from ..custody._children import ChildFailed as ChildFailed
    from ..custody._conversation import Conversation as Conversation
    from ..custody._conversation import Turn as Turn
    from ..custody._events import WaitTimeout as WaitTimeout
    from ..custody._steps import StepError as StepError
    from ..runs._asks import AskTimeout as AskTimeout
    from ..runs._asks import AskUnsupported as AskUnsupported
    from ..runs._bounds import Bounds as Bounds
    from ..runs._bounds import TooLarge as TooLarge
    from ..runs._children import JoinTimeout as JoinTimeout
    from ..runs._current import conversation_of as conversation_of
    from ..runs._current import progress_of as progress_of
    from ..runs._current import run_of as run_of
    from ..runs._journal import Parked as Parked
    from ..runs._progress import Progress as Progress
    from ..runs._progress import ProgressUpdate as ProgressUpdate
    from ..runs._reply import AgentError as AgentError
    from ..runs._reply import EmptyReply as EmptyReply
    from ..runs._reply import Reply as Reply
    from ..runs._retry import Permanent as Permanent
    from ..runs._retry import Retry as Retry
    from ..runs._retry import RetryBackoff as RetryBackoff
    from ..runs._run import Run as Run
    from ..runs._timings import TimingHistogram as TimingHistogram
    from ..runs._timings import Timings as Timings
    from ..runs._versions import StepMismatch as StepMismatch
    from ._agent import AgentFactory as AgentFactory
    from ._agent import AgentLoadError as AgentLoadError
    from ._agent import load_agent as load_agent
    from ._asyncio import asyncio_agent as asyncio_agent
    from ._asyncio import trio_as_asyncio as trio_as_asyncio
    from ._files import FileExchange as FileExchange
    from ._files import HeaderRefused as HeaderRefused
    from ._files import ResultRefused as ResultRefused
    from ._files import file_exchange_worker as file_exchange_worker
    from ._lead import PoolLead as PoolLead
    from ._lead import SweepReport as SweepReport
    from ._lead import elect as elect
    from ._liveness import is_alive as is_alive
    from ._liveness import live_lead as live_lead
    from ._plan import Assigned as Assigned
    from ._plan import Deferred as Deferred
    from ._plan import Returned as Returned
    from ._plan import plan_sweep as plan_sweep
    from ._reconciler import Reconciler as Reconciler
    from ._stall import StallPass as StallPass
    from ._stall import StallWatcher as StallWatcher
    from ._status import PoolStatus as PoolStatus
    from ._wakeup import PoolWakeups as PoolWakeups
    from ._wakeup import Wakeup as Wakeup
    from ._worker import PoolWorker as PoolWorker
else:
    # loaded on first use, as tether.bridge's names (issue #56)
    __getattr__, __dir__ = _lazy_exports(__name__, __file__)
