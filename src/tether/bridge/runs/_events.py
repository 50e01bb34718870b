"""Waiting for the world (issue #52): ``body = await run.wait_for(key, timeout=...)``.

A wait is a step of the run: it takes the first event of its key the run has not taken (a
key's events are a stream each run reads once), records it (``~wait:n``: every later run gets
the same), and returns its body. No such event yet, the run parks (``Parked``) until one
comes, no worker slot held and no attempt spent; the event's arrival wakes it and the handler
runs again from the top (replay, as for ``run.sleep``). The wait's deadline is recorded too
(``~wait:n:until``), so ``WaitTimeout`` comes at the same time whatever the restarts.
See docs/guide/schedules-and-events.md.
"""

from __future__ import annotations

from typing import Any

import attrs

from ..._plumbing._when import iso_time
from ..custody._events import WAIT_PREFIX, WaitTimeout, check_event_key, check_wait_timeout
from ..custody._steps import decode_step_value
from ._journal import Journal


@attrs.define(eq=False)
class Waits:
    """A run's waits for events: how many it made (a wait's record is named by its position)."""

    made: int = 0

    async def wait_for(
        self,
        journal: Journal,
        key: str,
        timeout: float,  # noqa: ASYNC109 - a durable deadline, not a cancel scope
    ) -> Any:
        key, seconds = check_event_key(key), check_wait_timeout(timeout)
        self.made += 1
        name = f"{WAIT_PREFIX}{self.made}"
        deadline = float(
            (await journal.step(f"{name}:until", lambda: journal.now() + seconds, (), {}))[0]
        )
        with journal.waiting("event", {"tether.event_key": key}) as traced:
            traced.until(deadline)
            took, _ = await journal.step(name, _take, (journal, key, deadline), {})
            if took.get("timeout"):  # recorded: every later run times out here too
                raise WaitTimeout(
                    f"task {journal.task.id!r}: no event of {key!r} came by the wait's "
                    f"deadline ({iso_time(deadline)})"
                )
            return took["body"]


async def _take(journal: Journal, key: str, deadline: float) -> dict[str, Any]:
    """The first event of ``key`` this run has not taken, or, past the deadline, the timeout
    (the wait's step records either); else the run parks."""
    if not journal.durable:
        raise RuntimeError(
            f"task {journal.task.id!r}: only a worker's run can wait for an event (this run is "
            "detached: called outside a worker)"
        )
    taken = await _taken(journal)
    event = await journal.take_event(key, taken)
    if event is not None:
        return {"id": event.id, "body": event.value}
    if journal.now() >= deadline:
        return {"timeout": True}  # recorded, so an event that comes later changes no replay
    raise journal.park(deadline, f"until {iso_time(deadline)}", event=key, taken=taken)


async def _taken(journal: Journal) -> tuple[str, ...]:
    """The ids of the events this task's runs took (its recorded waits)."""
    took = (
        decode_step_value(record.value)
        for name, record in (await journal.recorded()).items()
        if name.startswith(WAIT_PREFIX) and not name.endswith(":until")
    )
    return tuple(str(wait["id"]) for wait in took if "id" in wait)  # (a timeout took none)
