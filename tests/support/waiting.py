"""Waiting for a condition in tests: poll it, on the run's clock, until it holds."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from tether.bridge import CustodyState, SqliteStore


async def wait_until(
    check: Callable[[], Awaitable[bool]],
    *,
    within: float = 60.0,
    step: float = 0.05,
    explain: Callable[[], Awaitable[str]] | None = None,
) -> None:
    """Poll ``check`` every ``step`` seconds until it is true; fail the test (``TooSlowError``)
    after ``within`` seconds of the run's clock (virtual under a mock clock).

    ``explain`` says what the world looked like when the wait failed (logs, a store's
    status): a flake on a busy CI machine is then diagnosable from its report alone."""
    try:
        with trio.fail_after(within):
            while not await check():  # noqa: ASYNC110 (polling a store or a server is the point)
                await trio.sleep(step)
    except trio.TooSlowError as exc:
        if explain is None:
            raise
        raise AssertionError(f"not true within {within} s; {await explain()}") from exc


async def state_is(store: SqliteStore, id: str, state: CustodyState) -> bool:
    """``wait_until``'s check that task ``id`` is in ``state``."""
    return await store.state(id) is state
