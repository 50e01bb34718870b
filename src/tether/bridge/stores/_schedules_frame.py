"""Schedules in the store (issue #52), framed as ``_frame`` frames custody: check the
arguments, run the backend part's ``_name`` operation, log.

``fire_schedules`` is the reconciler pass's: it reads the schedules due, and fires each in one
transaction that moves its next due time on (a compare-and-set on the due time it read) and
ingests the task of each due time (an idempotent ingest by the id the due time names). Two
processes that fire at once make one task: the ingest of the same id is a no-op, and the
loser's compare-and-set changes nothing.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Sequence
from typing import Any

import attrs

from ..._plumbing._when import iso_time
from ..custody import _log as _clog
from ..custody._rules import Task
from ..custody._schedules import (
    ScheduleError,
    ScheduleSpec,
    ScheduleView,
    check_schedule_name,
    spec_document,
    spec_from,
)
from ._common import check_limit, ingest_headers
from ._host import Host

log = logging.getLogger("tether.bridge.schedules")


@attrs.frozen
class Firing:
    """One schedule's due times fired in one transaction: its next due time moves from
    ``due`` (as read) to ``next_due``, and ``tasks`` (with their stored headers) are ingested."""

    name: str
    due: float
    next_due: float
    last_due: float
    tasks: tuple[Task, ...]
    headers: tuple[str, ...]

    @property
    def move_on(self) -> dict[str, Any]:
        """The compare-and-set's parameters (both backends' ``MOVE_ON``)."""
        return {
            "name": self.name,
            "due": self.due,
            "next_due": self.next_due,
            "last_due": self.last_due,
            "count": len(self.tasks),
        }


def schedule_view(row: Sequence[Any]) -> ScheduleView | None:
    """A ``(spec, paused, next_due, last_due, fired)`` row (both backends) as a view; None
    (logged) for a spec this tether cannot read (a newer version's, a zone this host lacks),
    so one schedule never stops the others or the reconciler's pass."""
    spec, paused, next_due, last_due, fired = row
    try:
        return ScheduleView(spec_from(spec), bool(paused), float(next_due), last_due, int(fired))
    except ValueError as exc:
        log.error("a schedule cannot be read here (skipped): %s", exc)  # noqa: TRY400
        return None


@attrs.define(eq=False)
class SchedulesFrame(abc.ABC):
    """``ScheduleStore``'s methods around a backend part's operations."""

    host: Host

    async def add_schedule(self, spec: ScheduleSpec) -> ScheduleView:
        if not isinstance(spec, ScheduleSpec):
            raise TypeError(f"add_schedule takes a ScheduleSpec, got {type(spec).__name__}")
        now = self.host.clock()
        ingest_headers(spec.task(now), self.host.max_body_bytes)  # the body's size
        view = ScheduleView(spec, paused=False, next_due=spec.first_due(now))
        if not await self._add(spec.name, spec_document(spec), view.next_due, now):
            raise ScheduleError(f"schedule {spec.name!r} exists: remove it first to change it")
        log.info(
            "schedule %s added: %s, first due %s", spec.name, spec.when, iso_time(view.next_due)
        )
        return view

    @abc.abstractmethod
    async def _add(self, name: str, document: str, next_due: float, now: float) -> bool:
        """Insert the schedule; False if one of that name exists (nothing changed)."""

    async def pause_schedule(self, name: str) -> bool:
        found = await self._set_paused(check_schedule_name(name), True, None)
        if found:
            log.info("schedule %s paused", name)
        return found

    async def resume_schedule(self, name: str) -> bool:
        """Resume ``name``: due next after now (the times it was paused through never fire);
        a schedule not paused is left as it is."""
        view = await self.schedule(name)
        if view is None:
            return False
        if not view.paused:
            return True
        next_due = view.spec.first_due(self.host.clock())
        found = await self._set_paused(name, False, next_due)
        if found:
            log.info("schedule %s resumed, next due %s", name, iso_time(next_due))
        return found

    @abc.abstractmethod
    async def _set_paused(self, name: str, paused: bool, next_due: float | None) -> bool:
        """Set the schedule's paused flag (and its next due time, if given); False if none."""

    async def remove_schedule(self, name: str) -> bool:
        found = await self._remove(check_schedule_name(name))
        if found:
            log.info("schedule %s removed", name)
        return found

    @abc.abstractmethod
    async def _remove(self, name: str) -> bool: ...

    async def schedule(self, name: str) -> ScheduleView | None:
        found = await self._views(check_schedule_name(name))
        return found[0] if found else None

    async def schedules(self) -> Sequence[ScheduleView]:
        """Every schedule this tether can read, by name (one it cannot is logged)."""
        return [view for view in await self._views(None) if view is not None]

    @abc.abstractmethod
    async def _views(self, name: str | None) -> list[ScheduleView | None]:
        """The schedule ``name`` (or every schedule, by name) as kept (``schedule_view``)."""

    async def fire_schedules(self, *, limit: int = 1000) -> Sequence[str]:
        """Fire what is due by now: the ids of the tasks this call made (a due time another
        process fired first makes none here)."""
        now = self.host.clock()
        made: list[str] = []
        for view in await self._due(now, check_limit(limit)):
            if view is None:
                continue  # unreadable here (logged): the other schedules still fire
            try:
                dues, next_due = view.spec.firings(view.next_due, now)
                tasks = tuple(view.spec.task(due) for due in dues)
                headers = tuple(ingest_headers(t, self.host.max_body_bytes) for t in tasks)
            except ValueError as exc:  # a body over a lowered limit: this schedule only
                log.error("schedule %s cannot fire: %s", view.spec.name, exc)  # noqa: TRY400
                continue
            if not dues:
                continue
            firing = Firing(view.spec.name, view.next_due, next_due, dues[-1], tasks, headers)
            new = await self._fire(firing, now)
            if new is None:
                continue  # another process fired it first
            _clog.ingested([t.id for t in tasks], new)
            made.extend(t.id for t, n in zip(tasks, new, strict=True) if n)
            skipped = (
                "" if dues[0] == view.next_due else f" (missed since {iso_time(view.next_due)})"
            )
            log.info(
                "schedule %s fired %s%s; next due %s",
                view.spec.name,
                ", ".join(t.id for t in tasks[:3]) + (", ..." if len(tasks) > 3 else ""),
                skipped,
                iso_time(next_due),
            )
        if made:
            self.host.work_bell.ring()
        return made

    @abc.abstractmethod
    async def _due(self, now: float, limit: int) -> list[ScheduleView | None]:
        """Up to ``limit`` schedules not paused whose next due time is by ``now`` (reads only)."""

    @abc.abstractmethod
    async def _fire(self, firing: Firing, now: float) -> list[bool] | None:
        """In one transaction: move the schedule's next due time on if it is still
        ``firing.due`` and the schedule is not paused, and ingest its tasks (room policy
        ``serial``); whether each task is new, or None if the schedule had moved on."""

    async def next_schedule_due(self) -> float | None:
        """The soonest due time of a schedule not paused (the reconciler passes then)."""
        return await self._next_due()

    @abc.abstractmethod
    async def _next_due(self) -> float | None: ...
