"""The bridge's client of gateway protocol v1 (the protocol itself is ``tether._protocol``).

- ``_client``: :class:`GatewayClient` (httpx on Trio), where a reply is posted.
- ``_backoff``: retry schedule for a remote that is down; ``_status_file``: the client's health.

A room, not a tier: ``tether.bridge`` exports its public names.
"""
