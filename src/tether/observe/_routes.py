"""Routes a service adds to its admin endpoint (the bridge's operator page), in the endpoint's
terms: the endpoint checks the method and the bearer token, then hands the request over."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import attrs

from .._http._asgi import Request, Send

Handler = Callable[[Request, Send], Awaitable[None]]


@attrs.frozen
class AdminRoute:
    """One path's handler and the methods it answers (others: 405)."""

    methods: tuple[str, ...]
    handler: Handler
    public: bool = False
    """Served without the token: only a page's own files (the same code for everyone, no
    data), because a browser cannot send a bearer header when it navigates to a page."""


class AdminRoutes(Protocol):
    def route(self, path: str) -> AdminRoute | None:
        """The route serving ``path``, or None (the endpoint answers 404)."""
        ...
