"""Retention in slices (issue #56): each prune is many small writer jobs, never one long one.

A store has one writer; a job that holds it for seconds makes every beat, claim and ack wait
behind it (a 10 s prune of 37,000 turns made the lead return live workers' tasks as dead). So
each pruner deletes at most a slice per call, a slice costs time linear in its rows (a few
milliseconds), and a pass calls it again until less than a slice is left: whatever queued
meanwhile runs between two slices.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import attrs
import trio

from ..custody._roles import Store

log = logging.getLogger("tether.bridge.retention")

TASKS_PER_SLICE = 100
"""Delivered tasks per writer job: each takes its journal, steps and asks with it and leaves a
tombstone (about 20 rows' work)."""
TOMBSTONES_PER_SLICE = 2000
TURNS_PER_SLICE = 250
ROOMS_PER_SLICE = 2000
"""Room affinities, or pool members, per writer job."""
PAGES_PER_SLICE = 256
"""Free pages a SQLite file gives back per writer job (1 MiB at 4 KiB pages)."""


@attrs.frozen
class RetentionPass:
    """What one pass removed, and in how many writer jobs."""

    tasks: int = 0
    tombstones: int = 0
    turns: int = 0
    rooms: int = 0
    """Room affinities past the retention period."""
    workers: int = 0
    """Pool members whose last beat is older than the retention period."""
    waiters: int = 0
    """Limits' waiter rows lapsed unserved past the retention period (no parked waiter's)."""
    pages: int = 0
    """Free pages given back to the file system (SQLite)."""
    slices: int = 0


async def in_slices(prune: Callable[[int], Awaitable[int]], size: int) -> tuple[int, int]:
    """Call ``prune(size)`` until it removes less than ``size``: (rows removed, calls)."""
    removed = calls = 0
    while True:
        n = await prune(size)
        removed += n
        calls += 1
        if n < size:
            return removed, calls
        await trio.lowlevel.checkpoint()  # a cancelled pass stops between slices


async def retention_pass(
    store: Store, *, retention: float, tombstone_retention: float, room_keep: int
) -> RetentionPass:
    """Prune delivered tasks past ``retention`` (with their journal, steps and asks),
    tombstones past ``tombstone_retention`` and each room's turns past ``room_keep`` (a
    delivered task's text with its turns), then give the free pages back, a slice per writer
    job."""
    now = store.clock()
    tasks, a = await in_slices(
        lambda n: store.prune_delivered(now - retention, limit=n), TASKS_PER_SLICE
    )
    if tasks:
        log.info("pruned %d delivered task(s) past the retention period", tasks)
    tombstones, b = await in_slices(
        lambda n: store.prune_tombstones(now - tombstone_retention, limit=n),
        TOMBSTONES_PER_SLICE,
    )
    if tombstones:
        log.info("forgot %d tombstone(s) past the tombstone retention", tombstones)
    turns, c = await in_slices(
        lambda n: store.prune_turns(keep=room_keep, limit=n), TURNS_PER_SLICE
    )
    if turns:
        log.info("pruned %d conversation turn(s) past --room-keep", turns)
    rooms, e = await in_slices(
        lambda n: store.prune_rooms(now - retention, limit=n), ROOMS_PER_SLICE
    )
    workers, f = await in_slices(
        lambda n: store.prune_workers(now - retention, limit=n), ROOMS_PER_SLICE
    )
    waiters, g = await in_slices(
        lambda n: store.prune_waiters(now - retention, limit=n), ROOMS_PER_SLICE
    )
    pages, d = await in_slices(lambda n: store.reclaim_space(pages=n), PAGES_PER_SLICE)
    if pages:
        log.info("gave %d free page(s) back to the file system", pages)
    slices = a + b + c + d + e + f + g
    return RetentionPass(tasks, tombstones, turns, rooms, workers, waiters, pages, slices)
