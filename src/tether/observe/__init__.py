"""tether.observe: see what a running tether service is doing, without a debugger.

``serve_admin(Observed.of_runtime(rt, ...), AdminSettings(token_file=...))`` serves
``/healthz``, ``/metrics`` (Prometheus), ``/tasks`` (the live task tree, ``?stacks=1`` for
await stacks) and ``/status``; ``tether ps`` and ``tether status`` read them. A service hands
it what only it knows (custody counts, its gateway connection, counters, timings) through
:class:`Observed`.
"""

from .._core._task_tree import TaskNode as TaskNode
from .._core._task_tree import await_stack as await_stack
from .._core._task_tree import render_nodes as render_nodes
from .._core._task_tree import task_tree as task_tree
from .._plumbing._logging import JsonFormatter as JsonFormatter
from .._plumbing._logging import configure_logging as configure_logging
from .._plumbing._logging import register_secret as register_secret
from .._tree_dump import dump_tree as dump_tree
from ._app import AdminApp as AdminApp
from ._health import HealthReport as HealthReport
from ._health import check_health as check_health
from ._metrics import Metrics as Metrics
from ._observed import CounterSource as CounterSource
from ._observed import GaugeSource as GaugeSource
from ._observed import Observed as Observed
from ._sections import CustodyReading as CustodyReading
from ._sections import Histogram as Histogram
from ._sections import Histograms as Histograms
from ._server import DEFAULT_ADMIN_PORT as DEFAULT_ADMIN_PORT
from ._server import AdminSettings as AdminSettings
from ._server import admin_child as admin_child
from ._server import serve_admin as serve_admin
from ._status import StatusReport as StatusReport
from ._status import render_status as render_status
from ._status import status_report as status_report
