"""tether.bridge.client: the bridge's client of gateway protocol v1 (the protocol itself is
``tether._protocol``), a tier for whoever talks to a gateway directly. ``tether.bridge`` exports
its two first names, ``GatewayClient`` and ``GatewayError``.

- ``_client``: :class:`GatewayClient` (httpx on Trio), the protocol's calls (where a reply is
  posted); ``_connection``: its settings and the one request path (retries, the token, outage
  lines, the status); ``_answers``: reading answers within bounds; ``_errors``: the errors.
- ``_status_file``: the client's health. Its retry schedule is the runtime's ``tether._backoff``.
"""

import typing as _typing

from ..._core._lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from ..._protocol._connection import ConnectionStatus as ConnectionStatus
    from ..._protocol._messages import PROTOCOL_VERSION as PROTOCOL_VERSION
    from ..._protocol._messages import GatewayTask as GatewayTask
    from ..._protocol._messages import ResultReceipt as ResultReceipt
    from ._client import GatewayClient as GatewayClient
    from ._errors import GatewayAuthError as GatewayAuthError
    from ._errors import GatewayError as GatewayError
    from ._errors import GatewayProtocolError as GatewayProtocolError
    from ._errors import GatewayRequestError as GatewayRequestError
    from ._errors import GatewayUnavailable as GatewayUnavailable
else:
    # Loaded on first use, as tether.bridge's names are (issue #56): the client pulls in httpx.
    __getattr__, __dir__ = _lazy_exports(__name__, __file__)
