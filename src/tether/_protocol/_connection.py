"""A client's connection to its gateway, as one record: what the client's status file holds and
what the admin endpoint's health and ``/status`` read.

It lives with the protocol because both sides of the admin seam read it: the bridge's client
writes it, ``tether.observe`` (below the bridge) judges it. It never contains the token.
"""

from __future__ import annotations

import time

import attrs

from .._plumbing._when import iso_time

STATUS_SCHEMA_VERSION = 1


@attrs.frozen
class ConnectionStatus:
    """A snapshot of the client's connection to its gateway.

    ``last_ok`` is the wall-clock time (ISO 8601, UTC) of the last successful request;
    ``backoff_s`` is the delay the client is waiting out before retrying (None when it is
    not backing off); ``error`` is the last failure, cleared by the next success.
    """

    gateway: str
    client: str
    connected: bool = False
    last_ok: str | None = None
    backoff_s: float | None = None
    error: str | None = None
    consecutive_failures: int = 0
    heartbeat: str = "unknown"  # unknown | ok | failing | unsupported
    """``failing``: the last beat failed, or the gateway stopped answering since the last good
    one (a beat could not get through either; the client beats again once it answers)."""
    pool: str | None = None
    """The stem of the process's pool names in the custody store (``<pool>-w1``...)."""
    updated_at: str = ""
    schema_version: int = STATUS_SCHEMA_VERSION

    def same_state(self, other: ConnectionStatus) -> bool:
        """True when only timestamps differ: no reason to rewrite the file right away."""
        return attrs.evolve(self, last_ok=None, updated_at="") == attrs.evolve(
            other, last_ok=None, updated_at=""
        )


def utc_now_iso() -> str:
    return iso_time(time.time())
