"""The runtime's context variables, in a leaf module that imports nothing of tether at run time.

Trio copies them into every spawned task, and the core's modules read each other's state through
them without importing each other. See docs/guide/design.md, "Owner labels and context variables".
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import trio

    from .._runtime import Runtime
    from ._directory import Directory

OWNER: contextvars.ContextVar[str | None] = contextvars.ContextVar("tether_owner", default=None)
"""The owner label new tasks carry (read by the registry in ``task_spawned``)."""

DIRECTORY: contextvars.ContextVar[Directory | None] = contextvars.ContextVar(
    "tether_directory", default=None
)
"""The open runtime's directory of supervisors and sessions."""

STOP_EVENT: contextvars.ContextVar[trio.Event | None] = contextvars.ContextVar(
    "tether_stop_event", default=None
)
"""Set by a supervisor in its child's task: the soft stop request."""

RUNTIME: contextvars.ContextVar[Runtime | None] = contextvars.ContextVar(
    "tether_runtime", default=None
)
"""The runtime whose block the code runs in."""


def current_runtime() -> Runtime | None:
    """The runtime whose block the caller runs in, if any (sessions use its registry)."""
    return RUNTIME.get()
