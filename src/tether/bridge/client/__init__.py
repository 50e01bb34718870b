"""Gateway protocol v1: its limits and id rules, its messages, and the bridge's client.

- ``_limits``: the id rules and size limits both ends enforce (the reference gateway imports
  them from here, so the two ends can never drift).
- ``_messages``: the records on the wire and their strict parsers.
- ``_client``: :class:`GatewayClient` (httpx on Trio), where a reply is posted.
- ``_status_file``: the client's health. Its retry schedule is the runtime's ``Backoff``.
"""

from ..._backoff import Backoff as Backoff
from ..._protocol._messages import PROTOCOL_VERSION as PROTOCOL_VERSION
from ..._protocol._messages import GatewayTask as GatewayTask
from ..._protocol._messages import ResultReceipt as ResultReceipt
from ._client import GatewayAuthError as GatewayAuthError
from ._client import GatewayClient as GatewayClient
from ._client import GatewayError as GatewayError
from ._client import GatewayProtocolError as GatewayProtocolError
from ._client import GatewayRequestError as GatewayRequestError
from ._client import GatewayUnavailable as GatewayUnavailable
from ._status_file import ConnectionStatus as ConnectionStatus

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
