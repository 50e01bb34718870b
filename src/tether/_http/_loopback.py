"""Is a server reachable from beyond this machine? The servers speak plain HTTP with bearer
tokens: off loopback, anyone on the path reads the tokens, so a start there says so once."""

from __future__ import annotations

import ipaddress
import logging

log = logging.getLogger("tether.http")


def is_loopback(host: str) -> bool:
    """``host`` (an address or a name) is this machine's loopback only: 127.0.0.0/8, ``::1``
    or ``localhost``. A name other than ``localhost`` is taken as reachable."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def warn_off_loopback(what: str, host: str, bind: str) -> None:
    """Log once, at WARNING, that ``what`` (bound to ``bind``) serves plain HTTP beyond this
    machine, when ``host`` is not loopback."""
    if is_loopback(host):
        return
    log.warning(
        "%s listens on %s beyond this machine, in plain HTTP: its bearer tokens cross the "
        'network readable; put a TLS proxy in front (see the gateway guide, "TLS") or bind '
        "127.0.0.1",
        what,
        bind,
    )
