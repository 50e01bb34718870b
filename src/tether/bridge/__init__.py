"""tether.bridge: moves chat tasks from a remote gateway through custody to agent workers."""

from ._backoff import Backoff as Backoff
from ._gateway_client import GatewayAuthError as GatewayAuthError
from ._gateway_client import GatewayClient as GatewayClient
from ._gateway_client import GatewayError as GatewayError
from ._gateway_client import GatewayProtocolError as GatewayProtocolError
from ._gateway_client import GatewayRequestError as GatewayRequestError
from ._gateway_client import GatewayUnavailable as GatewayUnavailable
from ._gateway_wire import PROTOCOL_VERSION as PROTOCOL_VERSION
from ._gateway_wire import GatewayTask as GatewayTask
from ._gateway_wire import ResultReceipt as ResultReceipt
from ._status_file import ConnectionStatus as ConnectionStatus
from ._token_file import TokenFileError as TokenFileError
from ._token_file import ensure_token_file as ensure_token_file
from ._token_file import read_token as read_token
from ._token_file import write_token as write_token
