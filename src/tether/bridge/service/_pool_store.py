"""Open a process's custody store and take its pool names: one path for ``BridgeService`` and
``WorkerService``, so settings, close and the name check cannot drift."""

from __future__ import annotations

from collections.abc import Collection
from contextlib import AsyncExitStack
from typing import Final

from ..custody._roles import Store
from ..pool._wakeup import PoolWakeups
from ..stores._open import open_store
from ._names import CHOSE_ANOTHER, check_names_free
from ._settings import ProcessSettings

NAME_DEAD_AFTER: Final = 10.0
"""``PoolLead.dead_after`` and ``PoolWorker.lead_dead_after`` (their defaults): a member silent
this long is gone, so its names are free."""


async def open_pool_store(
    stack: AsyncExitStack,
    settings: ProcessSettings,
    store: Store | None,
    names: Collection[str],
    *,
    check_names: bool,
    remedy: str = CHOSE_ANOTHER,
    wakeups: PoolWakeups | None = None,
) -> Store:
    """``store`` if given, else the store ``settings`` name, opened and closed with ``stack``;
    with ``check_names`` (a name that was chosen, not generated anew), refuse to join under
    ``names`` while a live process beats under them (``NameInUse``). An ingest of this process
    on the store rings ``wakeups`` (the process's pool) until ``stack`` closes, so a program
    that ingests by itself wakes the pool it embeds."""
    if store is None:
        store = await open_store(
            settings.store,
            lease_s=settings.lease_s,
            max_attempts=settings.max_attempts,
            synchronous=settings.synchronous,  # type: ignore[arg-type]
            password_file=settings.store_password_file,
            schema=settings.store_schema,
        )
        stack.push_async_callback(store.aclose)
    if wakeups is not None:
        stack.enter_context(store.work_bell.listening(wakeups.tasks_pending))
    for spec in settings.limits:  # declared once, kept in the store for every process
        await store.set_limit(spec)
    if check_names:
        await check_names_free(
            store,
            names,
            dead_after=NAME_DEAD_AFTER,
            watch=min(2.0, store.lease_s / 3) + 0.5,
            remedy=remedy,
        )
    return store
