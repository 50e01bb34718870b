"""The live task tree as plain values: what ``GET /tasks``, ``tether ps`` and SIGUSR1 show.

One structure for JSON, the terminal and the log, optionally with each task's await stack
(``Task.iter_await_frames``); ``render_nodes()`` draws it as text.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import attrs
import trio

from ._registry import USER_ONLY, TaskKind, TaskRegistry

MAX_STACK_FRAMES = 64
_TRAPS = os.path.join("trio", "_core", "_traps.py")


@attrs.frozen
class TaskNode:
    """One live task. ``id`` is stable while the task lives (use it, not ``name``, as a key)."""

    id: int
    name: str
    owner: str | None
    kind: str
    age_s: float
    parent_id: int | None
    parent: str | None
    stack: list[str] | None = None
    children: list[TaskNode] = attrs.field(factory=list)


def await_stack(task: trio.lowlevel.Task, *, limit: int = MAX_STACK_FRAMES) -> list[str]:
    """Where ``task`` is suspended: ``"file:line in function"``, outermost first."""
    frames: list[str] = []
    trap_frames = 0  # trailing frames inside Trio's yield traps: the same on every stack
    for frame, lineno in task.iter_await_frames():
        if len(frames) >= limit:
            frames.append("...")
            trap_frames = 0
            break
        code = frame.f_code
        trap_frames = trap_frames + 1 if code.co_filename.endswith(_TRAPS) else 0
        frames.append(f"{_short_path(code.co_filename)}:{lineno} in {code.co_qualname}")
    return frames[: len(frames) - trap_frames]


def _short_path(path: str) -> str:
    """Paths relative to the nearest ``site-packages`` or the current directory: readable,
    and no home directory layout in an operator's screenshot."""
    marker = f"{os.sep}site-packages{os.sep}"
    if marker in path:
        return path.rsplit(marker, 1)[1]
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def task_tree(
    registry: TaskRegistry,
    *,
    kinds: Iterable[TaskKind] = USER_ONLY,
    stacks: bool = False,
    now: float | None = None,
) -> list[TaskNode]:
    """The live tasks as a forest, children oldest first. A task whose parent is not shown (a
    filtered-out kind) is a root, so no live task is ever missing."""
    now = registry.clock() if now is None else now
    entries = registry.entries(kinds=kinds)
    live = {task for task, *_ in entries}
    parents: dict[trio.lowlevel.Task, trio.lowlevel.Task | None] = {}
    for task, *_ in entries:
        nursery = task.parent_nursery
        parents[task] = None if nursery is None else nursery.parent_task
    children: dict[trio.lowlevel.Task | None, list[trio.lowlevel.Task]] = {}
    started = {}
    owners = {}
    kind_of = {}
    for task, owner, kind, started_at in entries:
        parent = parents[task]
        children.setdefault(parent if parent in live else None, []).append(task)
        started[task] = started_at
        owners[task] = owner
        kind_of[task] = kind

    def build(task: trio.lowlevel.Task) -> TaskNode:
        kids = sorted(children.get(task, []), key=lambda t: (started[t], id(t)))
        parent = parents[task]
        return TaskNode(
            id=id(task),
            name=task.name,
            owner=owners[task],
            kind=kind_of[task],
            age_s=round(max(0.0, now - started[task]), 6),
            parent_id=None if parent is None else id(parent),
            parent=None if parent is None else parent.name,
            stack=await_stack(task) if stacks else None,
            children=[build(kid) for kid in kids],
        )

    roots = sorted(children.get(None, []), key=lambda t: (started[t], id(t)))
    return [build(root) for root in roots]


def count_nodes(nodes: Sequence[TaskNode]) -> int:
    return sum(1 + count_nodes(node.children) for node in nodes)


def render_nodes(nodes: Sequence[TaskNode]) -> str:
    """The forest as text: one line per task (name, [owner], age), stacks indented below."""
    total = count_nodes(nodes)
    lines = [f"{total} live task{'' if total == 1 else 's'}"]

    def walk(node: TaskNode, prefix: str, last: bool) -> None:
        owner = f" [{node.owner}]" if node.owner else ""
        lines.append(f"{prefix}{'└── ' if last else '├── '}{node.name}{owner}  {_age(node.age_s)}")
        below = prefix + ("    " if last else "│   ")
        for frame in node.stack or ():
            lines.append(f"{below}{'│ ' if node.children else '  '}  at {frame}")
        for i, kid in enumerate(node.children):
            walk(kid, below, i == len(node.children) - 1)

    for i, root in enumerate(nodes):
        walk(root, "", i == len(nodes) - 1)
    return "\n".join(lines)


def _age(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"
