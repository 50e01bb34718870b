"""tether.bridge.runs: what a run sees and does. A worker hands each claim to one run
(``ClaimedRun``, the worker's side), which owns its conversation, progress, steps, waits,
asks, permits and its outcome, and reaches the store only through the ``RunStore`` role.

An agent author meets the ``Run`` (``run_of(task)``: ``step``, ``key``, ``sleep``, ``ask``,
``limit``), ``conversation_of`` and ``progress_of``; ``tether.bridge`` exports those too.

- ``_run``: the author's ``Run``; ``_current``: the current run (one context variable).
- ``_journal``: what a run records (steps, asks, permits) and where it parks, fenced.
- ``_children``: child runs (spawn and join, issue #51); ``_events``: waits for events
  (issue #52).
- ``_asks``: questions to the person; ``_permits``: limits' permits; ``_progress``: what a
  run shows people.
- ``_claimed``: ``ClaimedRun``, where a run's outcome is decided and stored; ``_host``: what a
  worker lends its runs; ``_completions``: replies stored together.
- ``_reply``, ``_retry``: what a handler answers or raises; ``_bounds``: the sizes a step's
  result, a room's state and a reply may have; ``_spans``: a task's trace;
  ``_timings``: queue wait, run and delivery time histograms; ``_outage``: store outages.
"""

import typing as _typing

from ..._core._lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from ..custody._children import ChildFailed as ChildFailed
    from ..custody._children import SpawnError as SpawnError
    from ..custody._events import WaitTimeout as WaitTimeout
    from ..custody._steps import StepError as StepError
    from ._asks import AskTimeout as AskTimeout
    from ._asks import AskUnsupported as AskUnsupported
    from ._bounds import Bounds as Bounds
    from ._bounds import TooLarge as TooLarge
    from ._children import Child as Child
    from ._children import JoinTimeout as JoinTimeout
    from ._claimed import ClaimedRun as ClaimedRun
    from ._current import Current as Current
    from ._current import conversation_of as conversation_of
    from ._current import detached_run as detached_run
    from ._current import progress_of as progress_of
    from ._current import run_of as run_of
    from ._journal import Parked as Parked
    from ._permits import Limited as Limited
    from ._permits import Permit as Permit
    from ._progress import Progress as Progress
    from ._progress import ProgressUpdate as ProgressUpdate
    from ._reply import AgentError as AgentError
    from ._reply import EmptyReply as EmptyReply
    from ._reply import Reply as Reply
    from ._retry import Permanent as Permanent
    from ._retry import Retry as Retry
    from ._retry import RetryBackoff as RetryBackoff
    from ._run import Run as Run
    from ._run import run_for as run_for
    from ._talk import Talk as Talk
    from ._versions import StepMismatch as StepMismatch
else:
    # loaded on first use, as tether.bridge's names (issue #56)
    __getattr__, __dir__ = _lazy_exports(__name__, __file__)
