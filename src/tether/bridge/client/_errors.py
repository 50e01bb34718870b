"""The errors the gateway client raises: one base, one subclass for each way a call fails."""

from __future__ import annotations

from ..._expected import ExpectedFailure


class GatewayError(Exception):
    """Base of every error the gateway client raises."""


class GatewayAuthError(GatewayError):
    """The gateway refused our token even after re-reading the token file. Fatal."""


class GatewayRequestError(GatewayError):
    """The gateway refused a request (4xx other than auth); retrying would not help."""

    def __init__(self, status: int, detail: str, what: str) -> None:
        self.status = status
        self.detail = detail
        super().__init__(f"gateway refused {what}: HTTP {status}: {detail}")


class GatewayProtocolError(ExpectedFailure, GatewayError):
    """The gateway answered with something that is not protocol v1."""


class GatewayUnavailable(ExpectedFailure, GatewayError):
    """A call made without retries (heartbeat) could not reach the gateway."""
