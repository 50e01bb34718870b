"""What the pool's tests share: an agent made of one handler, and a store-state predicate for
``wait_until``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tether import Session
from tether.bridge import CustodyState, SqliteStore, Task


def agent(fn: Callable[[Task], Any]) -> Callable[[Session], None]:
    """An agent factory whose one ``task`` handler is ``fn``."""

    def factory(session: Session) -> None:
        session.add_handler("task", fn)

    return factory


async def state_is(store: SqliteStore, id: str, state: CustodyState) -> bool:
    return await store.state(id) is state
