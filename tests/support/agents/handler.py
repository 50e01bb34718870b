"""An agent made of one handler, for the tests that run a pool in-process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tether import Session
from tether.bridge import Task


def agent(fn: Callable[[Task], Any]) -> Callable[[Session], None]:
    """An agent factory whose one ``task`` handler is ``fn``."""

    def factory(session: Session) -> None:
        session.add_handler("task", fn)

    return factory
