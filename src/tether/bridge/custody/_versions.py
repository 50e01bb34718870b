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

import dataclasses
import functools
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
HISTORY_HEADER: Final = "history-of"
"""A fork in its source's room reads the conversation as its source did (the turns before
the source's message), not after the source's exchange and its own copy of the message."""
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


_DEPTH: Final = 32
"""Nesting a fingerprint follows; deeper, a value counts by its type."""


def _type_name(value: object) -> str:
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def _canonical(value: object, depth: int = 0) -> object:
    """``value`` as plain JSON that equal values map to in every process: mappings as pairs
    sorted by their keys' JSON, sets sorted, attrs classes and dataclasses by their fields,
    anything else by its type alone (never its ``repr``, which may name a memory address,
    follow the hash seed or change with a library's release)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else repr(value)
    if depth >= _DEPTH:
        return _type_name(value)
    inner = depth + 1
    if isinstance(value, bytes | bytearray):
        return {"bytes": hashlib.sha256(value).hexdigest()}
    if isinstance(value, Mapping):
        pairs = [[_canonical(k, inner), _canonical(v, inner)] for k, v in value.items()]
        return {"map": sorted(pairs, key=_json)}
    if isinstance(value, list | tuple):
        return [_canonical(item, inner) for item in value]
    if isinstance(value, set | frozenset):
        return {"set": sorted((_canonical(item, inner) for item in value), key=_json)}
    if attrs.has(type(value)):
        cls: Any = type(value)
        fields = {f.name: getattr(value, f.name) for f in attrs.fields(cls)}
        return {_type_name(value): _canonical(fields, inner)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {_type_name(value): _canonical(fields, inner)}
    return _type_name(value)


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def fingerprint(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """A step's arguments, as a short stable hash: the same in every process for equal
    arguments (``_canonical``); a value it cannot read counts by its type."""
    if not args and not kwargs:
        return _NO_ARGUMENTS
    try:
        return fingerprint_of_canonical([list(args), dict(kwargs)])
    except (RecursionError, ValueError, TypeError):
        return _hash(_json([_type_name(a) for a in args] + sorted(kwargs)))


def fingerprint_of_canonical(value: object) -> str:
    """The fingerprint of ``value`` in its canonical form."""
    return _hash(_json(_canonical(value)))


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:FINGERPRINT_CHARS]


_NO_ARGUMENTS: Final = fingerprint_of_canonical([[], {}])
"""The fingerprint of a step asked with no arguments (most are: a closure), computed once."""


def call_of(fn: object) -> str | None:
    """The function a step calls, by its qualified name (a ``functools.partial``'s own), or
    None for one without a name of its own (a lambda): what tells a renamed step from a new
    one (``passed_over``)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None)
    if not isinstance(name, str) or "<lambda>" in name or not isinstance(module, str):
        return None
    return f"{module}.{name}"[:MAX_CALL_CHARS]


MAX_CALL_CHARS: Final = 256


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


def _base(name: str) -> str:
    """A step name without its position in a loop (``search:3`` -> ``search``)."""
    return name.partition(":")[0]


def passed_over(
    recorded: Mapping[str, StepRecord],
    used: Collection[str],
    name: str,
    version: str | None,
    call: str | None,
    asked: str,
) -> str | None:
    """Why a fresh step ``name`` run by ``version`` (calling ``call`` with arguments of
    fingerprint ``asked``) does not match the records, or None.

    A renamed step: another version recorded the same call (the same named function, the
    same arguments) under another name this run has not asked. Run under its new name it
    would do the same work again. Only that is caught, so a step that failed before (never
    recorded: a fallback ran instead), a loop's next try (``try:2`` after ``try:1``) and
    parallel steps recording in any order never are, and neither is anything under one
    version. A step whose function has no name (a lambda) is not compared."""
    if call is None:
        return None
    for record in recorded.values():
        if (
            record.name not in used
            and not record.name.startswith("~")
            and record.version is not None
            and record.version != version
            and record.call == call
            and record.fingerprint == asked
            and _base(record.name) != _base(name)
        ):
            return (
                f"step {name!r} calls {call} with the arguments step {record.name!r} was "
                f"recorded with by {_who(record.version)}, which {_who(version)} has not "
                "asked: a renamed step would run again (keep its old name, mark the change "
                "with run.patched(...), or rewind the run: tether store retry --from-step)"
            )
    return None


def has_passed(
    recorded: Mapping[str, StepRecord],
    used: Collection[str],
    asks: Collection[str] = (),
    asked: Collection[str] = (),
) -> bool:
    """Had an earlier run of the task gone past the point this run is at (it recorded a
    step, a sleep, a wait or a question, ``asks``, this run has not reached: ``used``,
    ``asked``)? ``run.patched``'s question. Patch records never count: one whose call is
    gone from the code stays unreached for ever."""
    return any(name not in used and not name.startswith(PATCH_PREFIX) for name in recorded) or any(
        name not in asked for name in asks
    )


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
    if room is None or room == source.room:
        headers[HISTORY_HEADER] = source.headers.get(HISTORY_HEADER, source.id)
    else:
        headers.pop(HISTORY_HEADER, None)
    return attrs.evolve(source, id=id, room=source.room if room is None else room, headers=headers)


def conversation_of_task(task: Task) -> str:
    """The task whose place in its room a run of ``task`` reads the conversation from: its
    own, or a fork's source's (``HISTORY_HEADER``)."""
    return task.headers.get(HISTORY_HEADER, task.id)


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
    """Tasks whose runs began under ``version`` and are not over (None: unversioned, or no
    record yet: any version may run them): what an operator waits on to drain a version."""

    version: str | None
    tasks: int
