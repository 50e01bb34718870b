"""tether.bridge.pool: the worker pool's tier: a lead assigns, workers claim and run agents,
liveness decides who is alive; the planner's values for those who embed or test a pool.

What an agent author needs from here (``Reply``, ``Retry``, ``Permanent``, ``progress_of``,
``conversation_of`` with its ``Conversation`` and ``Turn``, ``run_of``, ``load_agent``) is also
exported by ``tether.bridge``.

- ``_lead``: :class:`PoolLead`; ``_plan``: its pure planner :func:`plan_sweep`.
- ``_worker``: :class:`PoolWorker`, where a worker claims, runs its agent and stores the outcome.
- ``_reconciler``: :class:`Reconciler`, the loop of reconcile passes (the pass is custody's).
- ``_liveness``: the one predicate "is this member alive" (:func:`is_alive`).
- ``_conversation``: what a run reads of its room (``conversation_of``, issue #34).
- ``_progress``: what a running agent shows people (status, partial reply); ``_timings``:
  queue wait, run and delivery time histograms.
- ``_stall``: stall notices, once per task. ``_files``: the file exchange for outside programs.
- ``_run``: durable runs (``run_of``: steps recorded once per task, durable sleeps).
- ``_agent``: what an agent is and how ``module:factory`` is loaded; ``_asyncio``: agents
  written for asyncio (``asyncio_agent``, ``trio_as_asyncio``). ``_wakeup``: "look now".
"""

import typing as _typing

from ..._core._lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from ..custody._conversation import Conversation as Conversation
    from ..custody._conversation import Turn as Turn
    from ..custody._steps import StepError as StepError
    from ._agent import AgentError as AgentError
    from ._agent import AgentFactory as AgentFactory
    from ._agent import AgentLoadError as AgentLoadError
    from ._agent import EmptyReply as EmptyReply
    from ._agent import Reply as Reply
    from ._agent import load_agent as load_agent
    from ._ask import AskTimeout as AskTimeout
    from ._ask import AskUnsupported as AskUnsupported
    from ._asyncio import asyncio_agent as asyncio_agent
    from ._asyncio import trio_as_asyncio as trio_as_asyncio
    from ._conversation import conversation_of as conversation_of
    from ._conversation import conversing as conversing
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
    from ._progress import Progress as Progress
    from ._progress import ProgressUpdate as ProgressUpdate
    from ._progress import progress_of as progress_of
    from ._progress import reporting as reporting
    from ._reconciler import Reconciler as Reconciler
    from ._retry import Permanent as Permanent
    from ._retry import Retry as Retry
    from ._retry import RetryBackoff as RetryBackoff
    from ._run import Parked as Parked
    from ._run import Run as Run
    from ._run import run_of as run_of
    from ._stall import StallPass as StallPass
    from ._stall import StallWatcher as StallWatcher
    from ._status import PoolStatus as PoolStatus
    from ._timings import TimingHistogram as TimingHistogram
    from ._timings import Timings as Timings
    from ._wakeup import PoolWakeups as PoolWakeups
    from ._wakeup import Wakeup as Wakeup
    from ._worker import PoolWorker as PoolWorker
else:
    # loaded on first use, as tether.bridge's names (issue #56)
    __getattr__, __dir__ = _lazy_exports(__name__, __file__)
