"""The rules of a durable run's steps (issue #35): names, sizes, values, waits.

A step's value is recorded in the custody store as JSON text under the lease fence, so a later
run of the same task (after a crash, a retry or a re-drive) gets it back instead of doing the
step's work again. What is checked here is checked before anything touches a store, alike on
both backends; the stores hold the per-task total under their fence.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

STEP_NAME_RULE: Final = r"[A-Za-z0-9~][A-Za-z0-9_.:~-]{0,127}"
"""A step name: letters, digits and ``_ . : ~ -``, at most 128 characters (``search:3``).
Names beginning with ``~`` are the run's own (its sleeps); an agent's names begin with a
letter or a digit."""
_STEP_NAME_RE: Final = re.compile(STEP_NAME_RULE)

MAX_STEP_BYTES: Final = 1024 * 1024
"""The largest value one step records (its JSON text, UTF-8): 1 MiB."""
MAX_TASK_STEP_BYTES: Final = 16 * 1024 * 1024
"""The most all the steps of one task record together: 16 MiB."""

SLEEP_PREFIX: Final = "~sleep:"
"""The name of a run's n-th sleep is ``~sleep:n``: its recorded value is the wake-up time."""


def step_is_a_promise(name: str) -> bool:
    """Is recording step ``name`` a promise (synced before the run goes on)? An author's step
    is: its effect has left the process already. The run's own records (``~sleep``, ``~wait``,
    ``~join`` and their deadlines) are not: nothing left the process on them, and any promise
    made later (a reply posted) is synced past them (issue #52: a wait's record was a flush)."""
    return not name.startswith("~")


class StepError(ValueError):
    """A step cannot be recorded as asked: a bad or repeated name, a value that is not JSON or
    is too large. The message names the step."""


class StepTooLarge(StepError):
    """A step's value over a size limit: its own (``size`` bytes of JSON against ``limit``) or,
    from a store, its task's total (``MAX_TASK_STEP_BYTES``). The run makes it permanent
    (``runs._bounds``): the same run would make the same value again."""

    def __init__(self, message: str, *, size: int, limit: int) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


def check_step_name(name: object, *, own: bool = False) -> str:
    """``name`` if it is a valid step name (``own``: the run's own names may begin with ``~``)."""
    if not isinstance(name, str) or _STEP_NAME_RE.fullmatch(name) is None:
        raise StepError(
            f"step name {name!r:.140} must match {STEP_NAME_RULE} "
            "(letters, digits and _ . : ~ -, at most 128; a loop names its steps 'search:3')"
        )
    if name.startswith("~") and not own:
        raise StepError(f"step name {name!r}: names beginning with '~' are the run's own")
    return name


def encode_step_value(name: str, value: Any, limit: int = MAX_STEP_BYTES) -> tuple[str, int]:
    """The JSON text ``value`` records as step ``name``, and its size in bytes; ``StepError``
    for a value JSON cannot hold (a set, an object, NaN), ``StepTooLarge`` for one over
    ``limit`` bytes (at most ``MAX_STEP_BYTES``, what a store records)."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        size = len(text.encode("utf-8"))
    except (TypeError, ValueError, UnicodeEncodeError) as exc:
        raise StepError(
            f"step {name!r} returned a value that is not JSON ({type(value).__name__}): {exc}; "
            "a step's result is recorded as JSON (dicts, lists, str, int, float, bool, None)"
        ) from None
    except RecursionError:
        raise StepError(f"step {name!r} returned a value nested too deeply for JSON") from None
    if size > limit:
        raise StepTooLarge(
            f"step {name!r} returned {size:,} bytes of JSON, over the {limit:,} bytes a step "
            "may record; record a reference (a file name, an id) instead",
            size=size,
            limit=limit,
        )
    return text, size


def decode_step_value(text: str) -> Any:
    """The value a recorded step's JSON text holds (what a replay returns)."""
    return json.loads(text)


def check_wake_at(value: object) -> float:
    """A wake-up time (store clock): a finite number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"a wake-up time must be a finite number, got {value!r}")
    return float(value)


def over_task_limit(name: str, total: int, size: int) -> StepTooLarge:
    """The error for a step that would take its task's steps past ``MAX_TASK_STEP_BYTES``."""
    return StepTooLarge(
        f"step {name!r}: its {size:,} bytes would take this task's steps to {total + size:,} "
        f"bytes, over the {MAX_TASK_STEP_BYTES:,} bytes a task may record",
        size=total + size,
        limit=MAX_TASK_STEP_BYTES,
    )
