"""HTTP server plumbing shared by the reference gateway and the admin endpoint (private): ``_asgi``
(requests, bounded bodies, JSON answers, hypercorn), ``_auth`` (bearer tokens) and ``_static`` (the
pages' packaged files, their CSP and the stylesheet they share)."""
