"""``tether store show ID``: one task's record and its custody journal as a timeline, what an
operator reads when one user's reply is late or missing."""

from __future__ import annotations

from typing import Final, Protocol

import attrs

from ..._plumbing._converter import unstructure
from ..._plumbing._logging import escape_controls
from ..custody._asks import AskRecord
from ..custody._children import spawned
from ..custody._crashes import SUSPECTS_RUN, run_words
from ..custody._records import JournalEntry, StepRecord
from ..custody._roles import InspectStore, JournalStore
from ..custody._rules import OPERATOR_PREFIX, CustodyState, TaskRecord

SHOWN_BODY_CHARS = 400
"""Characters of the message shown (the rest counted; ``--json`` has all of it)."""


TREE_NODES: Final = 200
"""The most tasks a tree shows (its first ones, depth first; ``--json`` the same)."""


@attrs.frozen
class TreeNode:
    """One task of a tree of child runs (issue #51): its id, what it is to the task shown
    (``parent``, ``this task``, or a child's spawn name), its state, and its depth."""

    id: str
    name: str
    state: CustodyState | None
    """None: named by its parent's record of its spawn, no longer in the store (pruned)."""
    depth: int


class TreeStore(InspectStore, JournalStore, Protocol):
    """What drawing a tree reads: records, steps (the spawns) and children's states."""


async def task_tree(store: TreeStore, record: TaskRecord) -> tuple[TreeNode, ...]:
    """The task's parent (if a child), the task, and its children down the tree, depth first
    in spawn order (at most ``TREE_NODES``); empty for a task that is neither parent nor
    child."""
    nodes: list[TreeNode] = []
    depth = 0
    if record.task.parent is not None:
        parent = await store.get(record.task.parent)
        state = None if parent is None else parent.state
        nodes.append(TreeNode(record.task.parent, "parent", state, 0))
        depth = 1
    nodes.append(TreeNode(record.task.id, "this task", record.state, depth))

    async def walk(id: str, depth: int) -> None:
        spawns = spawned(await store.steps(id))
        if not spawns:
            return
        views = await store.children(id, [child for _, child in spawns])
        for (name, child), view in zip(spawns, views, strict=True):
            if len(nodes) >= TREE_NODES:
                return
            nodes.append(TreeNode(child, name, None if view is None else view.state, depth))
            if view is not None:
                await walk(child, depth + 1)

    await walk(record.task.id, depth + 1)
    return tuple(nodes) if len(nodes) > 1 else ()


@attrs.frozen
class TaskShow:
    """A task and its journal (a versioned document for ``--json``)."""

    record: TaskRecord
    journal: tuple[JournalEntry, ...]
    now: float
    schema_version: int = 1
    steps: tuple[StepRecord, ...] = ()
    """The steps its runs recorded (durable runs, issue #35), in record order."""
    asks: tuple[AskRecord, ...] = ()
    """The questions its runs asked the person (issue #36), in order."""
    tree: tuple[TreeNode, ...] = ()
    """Its parent and its children (issue #51), as ``task_tree`` reads them."""

    def to_document(self) -> dict[str, object]:
        return unstructure(self)  # type: ignore[no-any-return]


def _at(seconds: float, now: float) -> str:
    ago = now - seconds
    return f"{ago:.1f}s ago" if ago >= 0 else f"in {-ago:.1f}s"


def _bounded(text: str) -> str:
    """The message on one line (controls escaped), its first ``SHOWN_BODY_CHARS`` only."""
    more = len(text) - SHOWN_BODY_CHARS
    shown = escape_controls(text[:SHOWN_BODY_CHARS])
    return shown + (f"... ({more} more characters)" if more > 0 else "")


def _ask_line(ask: AskRecord, now: float) -> str:
    """One question: when, its name, what became of it, and the text."""
    if ask.status == "answered":
        outcome = f"answered by {ask.answer_id}: {_bounded(ask.answer or '')}"
    elif ask.status == "open":
        posted = "shown" if ask.posted else "not yet shown"
        who = "anyone" if ask.answer_from is None else " or ".join(ask.answer_from)
        outcome = f"open ({posted}), times out {_at(ask.deadline, now)}, from {_bounded(who)}"
    else:
        outcome = ask.status
    return (
        f"  {_at(ask.at, now):>14}  {ask.name} (seq {ask.seq}) {_bounded(ask.question)}: {outcome}"
    )


def render_show(show: TaskShow) -> str:
    """The record, then the journal as one line per move."""
    r, now = show.record, show.now
    lines = [f"task {r.task.id}: {r.state.value}, {run_words(r.attempt, r.crash_count)}"]
    lines.append(f"  message     {_bounded(r.task.body)}")
    if r.owner is not None:
        lines.append(f"  owner       {r.owner}")
    if r.lease_until is not None:
        lines.append(f"  lease until {_at(r.lease_until, now)}")
    if r.not_before is not None and r.state is CustodyState.WAITING:
        lines.append(f"  waits for   {r.reason or 'its wake-up time'}")
        lines.append(f"  wakes       {_at(r.not_before, now)}")
    elif r.not_before is not None:
        lines.append(f"  next try    {_at(r.not_before, now)}")
    if r.crash_count:
        suspect = f", a suspect: it runs {SUSPECTS_RUN}" if r.suspect else ""
        lines.append(
            f"  crashes     {r.crash_count} ({r.crashes_alone} while running alone){suspect}"
        )
    if r.quarantine_deaths:
        deaths = [e.reason for e in show.journal if (e.reason or "").startswith("quarantine:")]
        lines.append(f"  quarantine  {r.quarantine_deaths} death(s) of its quarantine process")
        lines.extend(f"              {d}" for d in deaths if d)
    if r.reason is not None and r.state is not CustodyState.WAITING:
        lines.append(f"  reason      {r.reason}")
    lines.append(
        f"  ingested    {_at(r.created_at, now)}, room {r.task.room or '-'}, "
        f"priority {r.task.priority}"
    )
    if show.steps:
        total = sum(s.size for s in show.steps)
        lines.append(f"steps: {len(show.steps)} recorded, {total} bytes")
        lines.extend(
            f"  {_at(s.at, now):>14}  {s.name}  attempt {s.attempt}  {s.size} bytes"
            + ("" if s.version is None else f"  version {s.version}")
            for s in show.steps
        )
    if show.asks:
        lines.append(f"asks: {len(show.asks)}")
        lines.extend(_ask_line(a, now) for a in show.asks)
    if show.tree:
        lines.append("tree:")
        lines.extend(
            f"  {'  ' * n.depth}{n.id}  {n.name}: "
            f"{'no longer in the store' if n.state is None else n.state.value}"
            for n in show.tree
        )
    lines.append("journal:" if show.journal else "journal: (none)")
    for e in show.journal:
        src = "ingested" if e.src is None else e.src.value
        # the worker a move concerns is its actor only for a worker's own move; for the lead
        # it is the one assigned, for an operator or the reconciler the one that held it
        if not e.worker:
            who = ""
        elif e.actor == "worker":
            who = f" {e.worker}"
        else:
            who = f" (worker {e.worker})"
        reason = e.reason
        if reason and e.actor == "operator":
            reason = reason.removeprefix(OPERATOR_PREFIX)  # "by operator" says it already
        why = f": {reason}" if reason else ""
        lines.append(
            f"  {_at(e.at, now):>14}  {src} -> {e.dst.value}  attempt {e.attempt}  "
            f"by {e.actor}{who}{why}"
        )
    return "\n".join(lines)
