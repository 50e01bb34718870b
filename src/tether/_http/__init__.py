"""HTTP server plumbing shared by the reference gateway and the admin endpoint (private).

``_asgi``: request parsing, bounded bodies, JSON answers and the hypercorn start; ``_auth``:
bearer tokens re-read when their file changes. Neither server imports the other.
"""
