"""The rules of versions (issue #53): what a step record keeps of the code that made it, and
when a resumed run's step no longer matches its record.

Runs wait for hours or days (sleeps, asks, children, events), so a deploy meets runs that
recorded under the old code. A record keeps the agent's *version* and a *fingerprint* of the
arguments its step was asked with; a resumed run asking the same step with other arguments,
or a new step where the old code had gone on to another, is a mismatch: the run ends dead
naming the step, both versions and what differs, instead of silently returning a stale value
or running a renamed step twice. ``run.patched(name)`` marks a deliberate change.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

import attrs

from ._records import StepRecord
from ._rules import Task, TaskRecord

VERSION_RULE: Final = r"[A-Za-z0-9][A-Za-z0-9_.+:-]{0,63}"
"""An agent version: ``1.4.2``, ``2026-12-07``, ``git:3fa9c1e`` (at most 64 characters)."""
_VERSION_RE: Final = re.compile(VERSION_RULE)

PATCH_PREFIX: Final = "~patch:"
"""``run.patched(name)``'s decision is recorded as the run's own step ``~patch:<name>``."""
FORK_HEADER: Final = "forked-from"
"""The header of a forked task: ``<id>@<step>`` of the run it branched from."""
FINGERPRINT_CHARS: Final = 16
"""Hex digits of a fingerprint kept (64 bits: a collision between two argument lists of one
step is not a risk worth a longer column)."""


class VersionError(ValueError):
    """An agent version that does not match ``VERSION_RULE``."""


def check_version(value: object) -> str:
    """``value`` if it is a valid agent version (``--agent-version``)."""
    if not isinstance(value, str) or _VERSION_RE.fullmatch(value) is None:
        raise VersionError(
            f"agent version {value!r:.80} must match {VERSION_RULE} (letters, digits and "
            "_ . + : -, at most 64: '1.4.2', 'git:3fa9c1e')"
        )
    return value


def _shape(value: object) -> object:
    """What JSON cannot hold, as the fingerprint sees it: a set sorted, anything else by its
    ``repr`` unless that names a memory address (which differs per process: the type then)."""
    if isinstance(value, set | frozenset):
        return sorted(repr(item) for item in value)
    if isinstance(value, bytes | bytearray):
        return hashlib.sha256(value).hexdigest()
    text = repr(value)
    if " at 0x" in text:
        return f"<{type(value).__module__}.{type(value).__qualname__}>"
    return text


def fingerprint(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """A step's arguments, as a short stable hash: the same in every process for equal
    arguments (JSON with sorted keys; other values by ``_shape``)."""
    text = json.dumps(
        [list(args), dict(kwargs)],
        sort_keys=True,
        default=_shape,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:FINGERPRINT_CHARS]


def spawn_print(child: Task) -> str:
    """A spawn's fingerprint: what the child is asked (its body, room and queue)."""
    return fingerprint((child.body,), {"room": child.room, "queue": child.queue})


_FINGERPRINT_RE: Final = re.compile(f"[0-9a-f]{{{FINGERPRINT_CHARS}}}")


def check_fingerprint(value: object) -> str:
    """``value`` if it is a fingerprint (``FINGERPRINT_CHARS`` lowercase hex digits)."""
    if not isinstance(value, str) or _FINGERPRINT_RE.fullmatch(value) is None:
        raise ValueError(f"a step's fingerprint is {FINGERPRINT_CHARS} hex digits, got {value!r}")
    return value


def _who(version: str | None) -> str:
    return "an unversioned run" if version is None else f"version {version!r}"


def argument_mismatch(record: StepRecord, version: str | None, asked: str) -> str | None:
    """Why step ``record.name`` asked with fingerprint ``asked`` by ``version`` does not match
    its record, or None: a record without a fingerprint (made before versions) matches."""
    if record.fingerprint is None or record.fingerprint == asked:
        return None
    return (
        f"step {record.name!r} was recorded by {_who(record.version)} with other arguments "
        f"than {_who(version)} asks (fingerprint {record.fingerprint} recorded, {asked} now): "
        "its recorded value would be stale"
    )


def passed_over(
    recorded: Mapping[str, StepRecord], used: Collection[str], name: str, version: str | None
) -> str | None:
    """Why a fresh step ``name`` run by ``version`` does not match the records, or None.

    A run that recorded a step the resumed code has not asked for, made by another version,
    had gone on along another path: the fresh step is a renamed or moved step (it would run
    again under its new name) unless the change is marked with ``run.patched``. Records of
    the same version never count: parallel steps may record in any order."""
    skipped = sorted(
        (r for r in recorded.values() if r.name not in used and not r.name.startswith("~")),
        key=lambda r: r.at,
    )
    for record in skipped:
        if record.version is not None and record.version != version:
            return (
                f"step {name!r} is not in the records {_who(record.version)} made, which "
                f"went on to step {record.name!r} that {_who(version)} has not asked for: a "
                "renamed or moved step would run again (mark a deliberate change with "
                "run.patched(...), or rewind the run: tether store retry --from-step)"
            )
    return None


def has_passed(recorded: Mapping[str, StepRecord], used: Collection[str]) -> bool:
    """Had an earlier run of the task gone past the point this run is at (it recorded a
    step, a sleep or a wait this run has not reached)? ``run.patched``'s question."""
    return any(name not in used for name in recorded)


def fork_id(source: str, n: int) -> str:
    """The id of the ``n``-th fork of task ``source`` (``<source>~fork<n>``); a source id too
    long for the suffix is shortened to a hash of it."""
    suffix = f"~fork{n}"
    if len(source) + len(suffix) <= 128:
        return source + suffix
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    return f"{source[: 128 - len(suffix) - 25]}-{digest}{suffix}"


def forked_task(source: Task, id: str, step: str, room: str | None) -> Task:
    """The task a fork of ``source`` at ``step`` makes: its message again, as ``id``, in
    ``room`` (None: the source's), marked with ``FORK_HEADER``. Its reply goes to the room, as a
    schedule's does (a child is never forked: ``fork_refusal``)."""
    headers = {**source.headers, FORK_HEADER: f"{source.id}@{step}"}
    return attrs.evolve(source, id=id, room=source.room if room is None else room, headers=headers)


def fork_refusal(source: TaskRecord) -> str | None:
    """Why ``source`` cannot be forked, or None."""
    if source.task.parent is not None:
        return (
            f"task {source.task.id!r} is a child run of {source.task.parent!r}: fork the "
            "parent (a child's reply goes to its parent, not to a room)"
        )
    if source.task.body == "":
        return f"task {source.task.id!r} has no message left to fork (its room was forgotten)"
    return None


def no_such_step(id: str, step: str, names: Sequence[str]) -> str:
    """The refusal of a rewind or fork to a step the task has not recorded."""
    have = ", ".join(repr(name) for name in names[:20]) or "none"
    more = f" and {len(names) - 20} more" if len(names) > 20 else ""
    return f"task {id!r} has no recorded step {step!r} (its steps: {have}{more})"


def rewind_reason(step: str, dropped: int, reason: str | None) -> str:
    """What a rewound task's re-drive records (after ``operator: re-driven: ``)."""
    said = f"rewound to step {step!r}, {dropped} record(s) dropped"
    return said if reason is None else f"{said}: {reason}"


@attrs.frozen
class InFlight:
    """Tasks in custody whose runs last recorded under ``version`` (None: unversioned, or no
    record yet: any version may run them): what an operator waits on to drain a version."""

    version: str | None
    tasks: int
