"""tether.gateway: a reference gateway (protocol v1) for local use, demos and tests.

``await nursery.start(serve, GatewaySettings(token_file=..., db=..., port=0))`` returns the
port it listens on; ``tether gateway serve`` runs it from the command line.
"""

from ._app import AppLimits as AppLimits
from ._app import GatewayApp as GatewayApp
from ._server import DEFAULT_PORT as DEFAULT_PORT
from ._server import GatewaySettings as GatewaySettings
from ._server import serve as serve
from ._store import GatewayStore as GatewayStore
from ._store import StoreError as StoreError
