"""The bridge's client of gateway protocol v1: :class:`GatewayClient` (httpx on Trio), its errors,
its retry backoff and its status file; the protocol itself is ``tether._protocol``.
"""

from ..._protocol._connection import ConnectionStatus as ConnectionStatus
from ..._protocol._messages import PROTOCOL_VERSION as PROTOCOL_VERSION
from ..._protocol._messages import GatewayTask as GatewayTask
from ..._protocol._messages import ResultReceipt as ResultReceipt
from ._backoff import Backoff as Backoff
from ._client import GatewayAuthError as GatewayAuthError
from ._client import GatewayClient as GatewayClient
from ._client import GatewayError as GatewayError
from ._client import GatewayProtocolError as GatewayProtocolError
from ._client import GatewayRequestError as GatewayRequestError
from ._client import GatewayUnavailable as GatewayUnavailable

__all__ = [
    "PROTOCOL_VERSION",
    "Backoff",
    "ConnectionStatus",
    "GatewayAuthError",
    "GatewayClient",
    "GatewayError",
    "GatewayProtocolError",
    "GatewayRequestError",
    "GatewayTask",
    "GatewayUnavailable",
    "ResultReceipt",
]
