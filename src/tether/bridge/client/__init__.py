"""The bridge's client of gateway protocol v1 (the protocol itself is ``tether._protocol``).

- ``_client``: :class:`GatewayClient` (httpx on Trio), where a reply is posted.
- ``_status_file``: the client's health. Its retry schedule is the runtime's ``tether._backoff``.

A room, not a tier: ``tether.bridge`` exports its public names.
"""
