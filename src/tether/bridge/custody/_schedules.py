"""The rules of schedules (issue #52): names, specs, due times, and the task a due time fires.

A schedule lives in the store: every N seconds, or a cron line read in a time zone (cronsim,
with Debian cron's handling of daylight saving: a time that does not exist that day runs at
the first minute that does, a time that comes twice runs once). Every process's reconciler
pass fires what is due; a due time fires as the ingest of one task whose id is the
schedule's name and the due time, so two processes that fire it at once make one task.

Missed times: a due time found more than ``MISSED_AFTER_S`` late was missed (everything was
down). With ``catch_up="latest"`` (the default) a schedule's missed times fire once, as the
latest of them; with ``"all"`` each fires, ``MAX_FIRINGS`` per pass.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from typing import Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs
from cronsim import CronSim, CronSimError

from ..._plumbing._converter import structure_versioned, unstructure
from ._rules import QUEUE_HEADER, Task, check_priority, check_queue
from ._tenants import TENANT_HEADER, check_tenant

SCHEDULE_NAME_RULE: Final = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
"""A schedule's name: a task id's characters but ``~`` (it joins the name and the due time in
a firing's id), at most 64."""
_NAME_RE: Final = re.compile(SCHEDULE_NAME_RULE)
SCHEDULE_HEADER: Final = "schedule"
"""The header naming the schedule a task was fired by."""
MIN_EVERY_S: Final = 1.0
MAX_EVERY_S: Final = 366 * 86400.0
MISSED_AFTER_S: Final = 60.0
"""Seconds late past which a due time was missed (nothing ran to fire it) rather than late."""
MAX_FIRINGS: Final = 1000
"""Due times one schedule fires per pass (``catch_up="all"`` after a long outage)."""
MAX_CRON_CHARS: Final = 200
CatchUp = Literal["latest", "all"]
CATCH_UPS: Final = ("latest", "all")
SCHEDULE_SCHEMA_VERSION: Final = 1


class ScheduleError(ValueError):
    """A schedule cannot be kept as asked; the message names what was wrong."""


def check_schedule_name(value: object) -> str:
    if not isinstance(value, str) or _NAME_RE.fullmatch(value) is None:
        raise ScheduleError(
            f"schedule name {value!r:.80} must match {SCHEDULE_NAME_RULE} (letters, digits and "
            "_ . -, at most 64)"
        )
    return value


def check_every(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not MIN_EVERY_S <= value <= MAX_EVERY_S
    ):
        raise ScheduleError(
            f"every must be a number of seconds from {MIN_EVERY_S:g} to {MAX_EVERY_S:g}, "
            f"got {value!r}"
        )
    return float(value)


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"time zone {name!r:.80} is not a zone this machine knows (an IANA name such "
            "as 'Europe/Paris' or 'UTC')"
        ) from None


def check_cron(line: object, tz: str) -> str:
    if not isinstance(line, str) or not line.strip() or len(line) > MAX_CRON_CHARS:
        raise ScheduleError(f"cron must be a cron line (5 or 6 fields), got {line!r:.80}")
    try:
        next(CronSim(line, datetime.now(zone(tz))))
    except (CronSimError, StopIteration) as exc:
        raise ScheduleError(f"cron line {line!r}: {exc or 'never due'}") from None
    return line


def _catch_up(value: object) -> CatchUp:
    if value not in CATCH_UPS:
        raise ScheduleError(f"catch_up must be one of {', '.join(CATCH_UPS)}, got {value!r}")
    return value


@attrs.frozen
class ScheduleSpec:
    """What an operator asked: fire ``body`` into ``room`` every ``every`` seconds, or at
    each time of ``cron`` read in ``tz``. The fired task is a task like any other (its room's
    policy, tenant, queue, priority and limits apply)."""

    name: str = attrs.field(converter=check_schedule_name)
    room: str
    body: str
    every: float | None = None
    cron: str | None = None
    tz: str = "UTC"
    queue: str | None = None
    tenant: str | None = None
    priority: str = "normal"
    catch_up: CatchUp = attrs.field(default="latest", converter=_catch_up)
    schema_version: int = SCHEDULE_SCHEMA_VERSION
    """The version of the document the store keeps."""

    def __attrs_post_init__(self) -> None:
        if (self.every is None) == (self.cron is None):
            raise ScheduleError(f"schedule {self.name!r}: give either every or cron, not both")
        zone(self.tz)
        if self.every is not None:
            check_every(self.every)
        else:
            check_cron(self.cron, self.tz)
        if self.queue is not None:
            check_queue(self.queue)
        if self.tenant is not None:
            check_tenant(self.tenant)
        check_priority(self.priority)
        self.task(0.0)  # the room and the body as a task checks them

    @property
    def when(self) -> str:
        """As an operator reads it: ``every 15m`` or ``cron 0 9 * * 1-5 (Europe/Paris)``."""
        if self.every is not None:
            return f"every {_seconds(self.every)}"
        return f"cron {self.cron} ({self.tz})"

    def first_due(self, now: float) -> float:
        """The first due time of a schedule made (or resumed) at ``now``."""
        return self.next_after(now)

    def next_after(self, at: float) -> float:
        """The first due time strictly after ``at`` (store clock: seconds since the epoch)."""
        if self.every is not None:
            return at + self.every
        assert self.cron is not None
        start = datetime.fromtimestamp(math.floor(at), zone(self.tz))
        return next(CronSim(self.cron, start)).timestamp()

    def latest_by(self, at: float, since: float) -> float:
        """The latest due time at or before ``at``, counting from the due time ``since``."""
        if self.every is not None:
            return since + math.floor((at - since) / self.every) * self.every
        assert self.cron is not None
        start = datetime.fromtimestamp(math.floor(at) + 1, zone(self.tz))
        latest = max(since, next(CronSim(self.cron, start, reverse=True)).timestamp())
        # in a repeated hour (DST ends) the reverse walk can miss a time: step forward to it
        while (following := self.next_after(latest)) <= at:
            latest = following
        return latest

    def firings(self, due: float, now: float) -> tuple[list[float], float]:
        """The due times to fire now for a schedule next due at ``due``, and its next due
        time after them (``due`` itself if nothing is due yet)."""
        if due > now:
            return [], due
        if now - due > MISSED_AFTER_S and self.catch_up == "latest":
            latest = self.latest_by(now, due)
            return [latest], self.next_after(latest)
        fired: list[float] = []
        while due <= now and len(fired) < MAX_FIRINGS:
            fired.append(due)
            due = self.next_after(due)
        return fired, due

    def task(self, due: float) -> Task:
        """The task that fires at ``due``: its id is the schedule's name and the due time."""
        headers = {SCHEDULE_HEADER: self.name}
        if self.queue is not None:
            headers[QUEUE_HEADER] = self.queue
        if self.tenant is not None:
            headers[TENANT_HEADER] = self.tenant
        return Task(firing_id(self.name, due), self.body, self.room, self.priority, headers)


@attrs.frozen
class ScheduleView:
    """A schedule as the store keeps it: its spec, whether it is paused, when it is next due,
    and the due time it last fired (with that task's id)."""

    spec: ScheduleSpec
    paused: bool
    next_due: float
    last_due: float | None = None
    fired: int = 0
    """Due times it has fired (the missed times a ``latest`` catch-up skipped are not)."""

    @property
    def last_task(self) -> str | None:
        return None if self.last_due is None else firing_id(self.spec.name, self.last_due)


def spec_document(spec: ScheduleSpec) -> str:
    """The JSON text the store keeps for ``spec``."""
    return json.dumps(unstructure(spec), separators=(",", ":"))


def spec_from(document: str) -> ScheduleSpec:
    return structure_versioned(
        json.loads(document), ScheduleSpec, version=SCHEDULE_SCHEMA_VERSION, what="schedule"
    )


def firing_id(name: str, due: float) -> str:
    """``name~20261207T090000Z``: the schedule's name and the due time in UTC (with
    milliseconds when it has them), so the id says which due time it fired."""
    whole, millis = divmod(round(due * 1000), 1000)  # one rounding for both parts
    stamp = datetime.fromtimestamp(whole, UTC).strftime("%Y%m%dT%H%M%S")
    if millis:
        stamp += f".{millis:03d}"
    return f"{name}~{stamp}Z"


def _seconds(value: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if value >= size and value % size == 0:
            return f"{value / size:g}{unit}"
    return f"{value:g}s"


def parse_every(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h``, ``1d`` as seconds (the CLI's ``--every``)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if match is None:
        raise ScheduleError(f"--every {text!r}: give a duration such as 90s, 15m, 2h or 1d")
    scale = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match[2]]
    return check_every(float(match[1]) * scale)
