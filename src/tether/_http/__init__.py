"""HTTP server plumbing shared by the reference gateway and the admin endpoint (private): ``_asgi``
(requests, bounded bodies, JSON answers, hypercorn) and ``_auth`` (bearer tokens)."""
