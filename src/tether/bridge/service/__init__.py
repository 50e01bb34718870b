"""The bridge as a service: ingest, delivery, dead notices, settings and the CLI verbs.

- ``_service``: :class:`BridgeService`, every part as a supervised child.
- ``_ingest``: poll -> commit -> ack. ``_delivery``: post -> confirm -> delivered.
- ``_dead_notices``: tell the gateway about each dead letter.
- ``_config``: :class:`BridgeConfig` and :func:`load_config` (flags, env, TOML).
- ``_admin``: what the bridge hands its admin endpoint (``tether.observe``'s terms).
- ``_command``: ``tether bridge run`` and ``tether store ...``; ``_store_status``: what
  ``tether store status`` shows.
"""

from ..._plumbing._config_error import ConfigError as ConfigError
from ._config import BridgeConfig as BridgeConfig
from ._config import load_config as load_config
from ._service import BridgeService as BridgeService
from ._store_status import StatusEntry as StatusEntry
from ._store_status import StoreStatus as StoreStatus
from ._store_status import render_status as render_status
from ._store_status import store_status as store_status
from ._worker_config import WorkerConfig as WorkerConfig
from ._worker_config import load_worker_config as load_worker_config
from ._worker_service import WorkerService as WorkerService

__all__ = [
    "BridgeConfig",
    "BridgeService",
    "ConfigError",
    "StatusEntry",
    "StoreStatus",
    "WorkerConfig",
    "WorkerService",
    "load_config",
    "load_worker_config",
    "render_status",
    "store_status",
]
