"""TaskRegistry: a Trio instrument that mirrors the live tasks by identity.

Keyed by the ``trio.lowlevel.Task``, never by its name (names collide); the hooks stay cheap enough
to leave on in production. See docs/guide/design.md, "The task registry".
"""

from __future__ import annotations

import contextlib
import gc
import logging
import operator
from collections.abc import Callable, Iterable, Iterator
from typing import Literal

import attrs
import trio

from ._context import OWNER

log = logging.getLogger("tether.registry")

TaskKind = Literal["user", "system", "harness"]
USER_ONLY: frozenset[TaskKind] = frozenset({"user"})
ALL_KINDS: frozenset[TaskKind] = frozenset({"user", "system", "harness"})

# pytest-trio runs each test as `trio.run(_bootstrap_fixtures_and_run_test)` and starts the test
# and its fixtures as tasks named `<test 'name'>` / `<fixture 'name'>`.
_HARNESS_MAIN = "_bootstrap_fixtures_and_run_test"
_HARNESS_PREFIXES = ("<test ", "<fixture ")


@attrs.frozen
class TaskInfo:
    """A snapshot of one live task.

    ``parent`` is the parent task's name (a label, shared by design); ``parent_id`` is the
    parent's ``task_id``, which, unlike the name, is enough to rebuild the tree.
    """

    name: str
    owner: str | None
    kind: TaskKind
    started_at: float
    parent: str | None
    task_id: int
    parent_id: int | None = None


def _task_info_builder() -> tuple[
    Callable[[type[TaskInfo]], TaskInfo],
    Callable[[TaskInfo, str], None],
    Callable[[TaskInfo, str | None], None],
    Callable[[TaskInfo, TaskKind], None],
    Callable[[TaskInfo, float], None],
    Callable[[TaskInfo, str | None], None],
    Callable[[TaskInfo, int], None],
    Callable[[TaskInfo, int | None], None],
]:
    """``object.__new__`` and one slot setter per field, in field order: how ``snapshot()``
    builds a million records without the generated ``__init__`` (which sets each field of a
    frozen class through the slower ``object.__setattr__``). ``TaskInfo`` has no
    defaults to apply, converters or validators for it to skip, so a record built this way
    is the same value (the tests compare the two); a new field must be added here too, and
    the check below refuses to import until it is."""
    fields = tuple(a.name for a in attrs.fields(TaskInfo))
    expected = ("name", "owner", "kind", "started_at", "parent", "task_id", "parent_id")
    if fields != expected:  # pragma: no cover - guards a future edit of TaskInfo
        raise TypeError(f"_task_info_builder sets {expected}, TaskInfo has {fields}")
    slots = vars(TaskInfo)
    return (
        object.__new__,
        slots["name"].__set__,
        slots["owner"].__set__,
        slots["kind"].__set__,
        slots["started_at"].__set__,
        slots["parent"].__set__,
        slots["task_id"].__set__,
        slots["parent_id"].__set__,
    )


_TASK_INFO_BUILDER = _task_info_builder()


@attrs.define(eq=False)
class TaskRegistry(trio.abc.Instrument):
    """Every live task, keyed by its ``trio.lowlevel.Task`` object.

    Ages are in Trio's clock (``trio.current_time``, so a ``MockClock`` drives them in tests);
    pass ``clock=`` for another.

    Install it with ``trio.lowlevel.add_instrument(registry)`` (``open_runtime`` does), or pass
    it to ``trio.run(..., instruments=[registry])``. Queries count ``user`` tasks by default:
    Trio's own tasks (``system``) and pytest-trio's test and fixture tasks (``harness``) are
    left out unless asked for with ``kinds=ALL_KINDS``.
    """

    clock: Callable[[], float] = trio.current_time
    # an unowned task's entry is its start time alone; an owned one's is (owner, start time):
    # most tasks are unowned, and not building a tuple for them is a third of the hook's cost
    _live: dict[trio.lowlevel.Task, _Entry] = attrs.field(init=False, factory=dict)
    # The time is read once per scheduler batch (``after_io_wait``), not once per spawn: it
    # keeps ``task_spawned`` to a dict insert and a context-variable read. ``started_at`` thus
    # has the resolution of one pass of Trio's run loop.
    _now: float = attrs.field(init=False, default=0.0)
    hook_errors: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        try:
            self._now = self.clock()
        except RuntimeError:  # built outside trio.run: the first pass of the run loop sets it
            self._now = 0.0

    # -- hooks: guarded, because Trio silently removes an instrument whose hook raises --------

    def after_io_wait(self, timeout: float) -> None:
        try:
            self._now = self.clock()
        except BaseException:
            self._hook_failed("after_io_wait")

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        try:
            owner = task.context.get(OWNER)
            self._live[task] = self._now if owner is None else (owner, self._now)
        except BaseException:
            self._hook_failed("task_spawned")

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        try:
            self._live.pop(task, None)
        except BaseException:
            self._hook_failed("task_exited")

    def _hook_failed(self, hook: str) -> None:
        self.hook_errors += 1
        if self.hook_errors > 10 and self.hook_errors % 1000:
            return  # counted; the first ten and every thousandth are logged, not a flood
        try:
            log.exception(
                "TaskRegistry.%s failed (%d hook failures so far); the registry stays installed",
                hook,
                self.hook_errors,
            )
        except BaseException:  # logging itself failed: nothing else is safe
            pass

    def mark_started(self, task: trio.lowlevel.Task) -> None:
        """Restart ``task``'s age: a pooled task (a session worker) that begins a new job.

        Without it, a worker reused for many handler runs would show its own age, not the
        current run's, in ``snapshot()`` and ``render_tree()``.
        """
        entry = self._live.get(task)
        if entry is not None:
            self._live[task] = _encode(_decode(entry)[0], self._now)

    # -- adoption: tasks that were alive before the instrument was installed -----------------

    def adopt_running(self) -> int:
        """Register the tasks that were already alive when the registry was installed.

        Call it from inside ``trio.run`` right after ``add_instrument``; returns how many tasks
        it added. Their ``started_at`` is the adoption time.
        """
        now = self._now = self.clock()
        added = 0
        stack = [trio.lowlevel.current_root_task()]
        while stack:
            task = stack.pop()
            if task is None:
                continue
            if task not in self._live:
                self._live[task] = _encode(task.context.get(OWNER), now)
                added += 1
            for nursery in task.child_nurseries:
                stack.extend(nursery.child_tasks)
        return added

    # -- queries ----------------------------------------------------------------------------

    def current_tasks(self, *, kinds: Iterable[TaskKind] = USER_ONLY) -> list[trio.lowlevel.Task]:
        """Exactly the live tasks of the given kinds (user tasks by default)."""
        wanted = frozenset(kinds)
        if wanted == ALL_KINDS:
            return list(self._live)
        with _gc_paused():
            return [row[0] for row in self._rows(wanted)]

    def find(self, name: str, *, kinds: Iterable[TaskKind] = USER_ONLY) -> list[trio.lowlevel.Task]:
        """Every live task labelled ``name`` (a name may be shared by many tasks)."""
        return [t for t in self.current_tasks(kinds=kinds) if t.name == name]

    def owned_by(self, owner: str) -> list[trio.lowlevel.Task]:
        """Every live task whose owner label is ``owner``."""
        return [t for t, (o, _) in self._decoded() if o == owner]

    def owner_of(self, task: trio.lowlevel.Task) -> str | None:
        entry = self._live.get(task)
        return None if entry is None else _decode(entry)[0]

    def _decoded(self) -> list[tuple[trio.lowlevel.Task, tuple[str | None, float]]]:
        return [(task, _decode(entry)) for task, entry in list(self._live.items())]

    def is_live(self, task: trio.lowlevel.Task) -> bool:
        return task in self._live

    def count(self, *, kinds: Iterable[TaskKind] = USER_ONLY) -> int:
        return len(self.current_tasks(kinds=kinds))

    def __len__(self) -> int:
        return self.count()

    def __contains__(self, task: object) -> bool:
        return task in self._live

    def entries(
        self, *, kinds: Iterable[TaskKind] = USER_ONLY
    ) -> list[tuple[trio.lowlevel.Task, str | None, TaskKind, float]]:
        """``(task, owner, kind, started_at)`` for each live task of the given kinds: the live
        objects behind ``snapshot()``, for observers that walk the tree (call it in the Trio
        thread and do not keep the tasks)."""
        with _gc_paused():
            return [
                (task, owner, kind, started)
                for task, _, owner, kind, started, _ in self._rows(kinds)
            ]

    def _rows(self, kinds: Iterable[TaskKind]) -> list[_Row]:
        """``(task, parent, owner, kind, started_at, name)`` per live task of the given kinds,
        in spawn order: the pass behind ``entries()`` and ``current_tasks()``, linear in the
        live tasks.

        A task's kind is its parent's (the harness's children aside, see ``_Classifier``), so
        it is decided once per *nursery* and shared by all the nursery's children: the pass
        costs one attribute read and one lookup in a small table per task, and touches each
        task object once (its name is read while it is in the cache). ``snapshot()`` and
        ``render_tree()`` make the same pass but build their own output in it.
        """
        wanted = frozenset(kinds)
        classify = _Classifier()
        # nursery -> (its parent task, the kind all its children inherit, shown?), for the
        # nurseries whose children inherit their parent's kind
        nurseries: dict[trio.Nursery | None, tuple[trio.lowlevel.Task | None, TaskKind, bool]] = {}
        rows: list[_Row] = []
        append = rows.append
        # a copy taken in one C call (a caller in another thread cannot change it under us),
        # iterated without building a pair per task
        for task, entry in self._live.copy().items():
            nursery = task.parent_nursery
            known = nurseries.get(nursery)
            if known is not None:
                parent, kind, keep = known
                if not keep:
                    continue
            else:
                parent, kind, shared = classify.in_nursery(task, nursery)
                if shared:
                    nurseries[nursery] = (parent, kind, kind in wanted)
                if kind not in wanted:
                    continue
            if entry.__class__ is tuple:
                owner, started = entry
                append((task, parent, owner, kind, started, task.name))
            else:
                append((task, parent, None, kind, entry, task.name))  # type: ignore[arg-type]
        return rows

    def snapshot(self, *, kinds: Iterable[TaskKind] = USER_ONLY) -> list[TaskInfo]:
        """Frozen records of the live tasks, oldest first.

        One pass builds the records directly (no intermediate row per task), filling their
        slots with ``_TASK_INFO_BUILDER`` rather than the generated ``__init__``: at a million
        tasks the records' construction is most of the query's cost.
        """
        wanted = frozenset(kinds)
        new, set_name, set_owner, set_kind, set_started, set_parent, set_id, set_parent_id = (
            _TASK_INFO_BUILDER
        )
        with _gc_paused():
            classify = _Classifier()
            # nursery -> (kind, parent name, parent id) shared by its children, or () when
            # they are not shown; only for nurseries whose children inherit the parent's kind
            nurseries: dict[trio.Nursery | None, tuple[()] | _Shared] = {}
            infos: list[TaskInfo] = []
            append = infos.append
            for task, entry in self._live.copy().items():
                nursery = task.parent_nursery
                known = nurseries.get(nursery)
                if known is None:
                    parent, kind, shared = classify.in_nursery(task, nursery)
                    known = (
                        ()
                        if kind not in wanted
                        else (kind, None, None)
                        if parent is None
                        else (kind, parent.name, id(parent))
                    )
                    if shared:
                        nurseries[nursery] = known
                if not known:
                    continue
                info = new(TaskInfo)
                if entry.__class__ is tuple:
                    set_owner(info, entry[0])
                    set_started(info, entry[1])
                else:
                    set_owner(info, None)
                    set_started(info, entry)  # type: ignore[arg-type]
                set_name(info, task.name)
                set_kind(info, known[0])
                set_parent(info, known[1])
                set_id(info, id(task))
                set_parent_id(info, known[2])
                append(info)
            infos.sort(key=_INFO_STARTED)  # stable: spawn order breaks ties
            return infos

    def render_tree(
        self, *, kinds: Iterable[TaskKind] = USER_ONLY, now: float | None = None
    ) -> str:
        """The live task tree as text: one line per task with its owner and age.

        Tasks whose parent is not shown (a filtered-out kind, e.g. the test harness) are drawn
        as roots, so no live task is ever missing from the picture. Linear in the live tasks:
        one pass files each task straight into its parent's list of children (the list is
        found once per nursery), then an explicit frame stack draws them (so a deep chain of
        nested tasks cannot exhaust the recursion limit). Each line is built in one format
        from pieces shared by many tasks (an age and owner label per distinct entry).
        """
        now = self.clock() if now is None else now
        wanted = frozenset(kinds)
        live = self._live
        with _gc_paused():
            classify = _Classifier()
            roots: list[_Drawn] = []
            children: dict[trio.lowlevel.Task, list[_Drawn]] = {}
            # nursery -> the list its children join (their parent's, or the roots when the
            # parent is not shown), or None when they are not shown
            nurseries: dict[trio.Nursery | None, list[_Drawn] | None] = {}
            for task, entry in live.copy().items():
                nursery = task.parent_nursery
                kids = nurseries.get(nursery, _UNSEEN)
                if kids is _UNSEEN:
                    parent, kind, shared = classify.in_nursery(task, nursery)
                    if kind not in wanted:
                        kids = None
                    elif parent is not None and parent in live and classify(parent) in wanted:
                        kids = children.get(parent)
                        if kids is None:
                            kids = children[parent] = []
                    else:
                        kids = roots
                    if shared:
                        nurseries[nursery] = kids
                if kids is None:
                    continue
                started = entry if entry.__class__ is float else entry[1]  # type: ignore[index]
                kids.append((started, entry, task.name, task))
            count = len(roots)
            for kids in children.values():
                count += len(kids)
                if len(kids) > 1:
                    kids.sort(key=_DRAWN_STARTED)  # stable: spawn order breaks ties
            roots.sort(key=_DRAWN_STARTED)

            # "<name><owner>  <age>": the part after the name, per entry (start time, owner)
            tails: dict[_Entry, str] = {}
            lines = [f"{count} live task{'s' if count != 1 else ''}"]
            append = lines.append
            # frames of (siblings, next index, prefix); a task with children suspends its
            # frame after its own line and draws its children's frame first
            frames: list[tuple[list[_Drawn], int, str]] = [(roots, 0, "")]
            while frames:
                siblings, i, prefix = frames.pop()
                end = len(siblings) - 1
                middle = prefix + "├── "
                while i <= end:
                    _, entry, name, task = siblings[i]
                    tail = tails.get(entry)
                    if tail is None:
                        owner, started = _decode(entry)
                        owner_txt = f" [{owner}]" if owner else ""
                        tail = tails[entry] = f"{owner_txt}  {_age(now - started)}"
                    below = children.get(task)
                    if i == end:
                        append(f"{prefix}└── {name}{tail}")
                        if below:
                            frames.append((below, 0, prefix + "    "))
                        break
                    append(f"{middle}{name}{tail}")
                    i += 1
                    if below:
                        frames.append((siblings, i, prefix))
                        frames.append((below, 0, prefix + "│   "))
                        break
            return "\n".join(lines)

    def __iter__(self) -> Iterator[trio.lowlevel.Task]:
        return iter(self.current_tasks())


_Entry = float | tuple[str, float]
_Row = tuple[trio.lowlevel.Task, trio.lowlevel.Task | None, str | None, TaskKind, float, str]
# render_tree's row: (started_at, entry, name, task), sorted on the first
_Drawn = tuple[float, _Entry, str, trio.lowlevel.Task]
_DRAWN_STARTED = operator.itemgetter(0)
# snapshot's per-nursery share: (kind, parent name, parent id)
_Shared = tuple[TaskKind, str | None, int | None]
_INFO_STARTED = operator.attrgetter("started_at")
_UNSEEN: list[_Drawn] = []  # a marker: "this nursery has not been looked at yet"


def _encode(owner: str | None, started: float) -> _Entry:
    return started if owner is None else (owner, started)


def _decode(entry: _Entry) -> tuple[str | None, float]:
    return entry if isinstance(entry, tuple) else (None, entry)


def _parent(task: trio.lowlevel.Task) -> trio.lowlevel.Task | None:
    nursery = task.parent_nursery
    return None if nursery is None else nursery.parent_task


def _age(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.1f}s"
    return f"{seconds / 60:.1f}m"


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a query builds a million objects.

    Every allocation counts toward the collector's thresholds, and its older generations scan
    every tracked object: a query that allocates per live task would trigger collections whose
    cost grows with the live heap, making the query superlinear. The query's objects are not
    cyclic garbage, so pausing the collector loses nothing; it is restored after.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _Classifier:
    """Sorts tasks into user / system / harness, memoising ancestors within one query.

    A task's kind is decided by where it hangs in the tree: Trio's root task and its children
    other than the main task are ``system`` (as is everything below them); pytest-trio's
    bootstrap main task and its ``<test …>`` / ``<fixture …>`` tasks are ``harness``; the rest
    is ``user``.
    """

    def __init__(self) -> None:
        self.root = trio.lowlevel.current_root_task()
        self.memo: dict[trio.lowlevel.Task, TaskKind] = {}

    def __call__(self, task: trio.lowlevel.Task) -> TaskKind:
        memo = self.memo
        path: list[trio.lowlevel.Task] = []
        kind: TaskKind | None = None
        current: trio.lowlevel.Task | None = task
        while current is not None:
            known = memo.get(current)
            if known is not None:
                kind = known
                break
            if current is self.root:
                kind = "system"
                break
            parent = _parent(current)
            if parent is None or parent is self.root:
                kind = self._top_level_kind(current, parent)
                memo[current] = kind
                break
            path.append(current)
            current = parent
        if kind is None:
            kind = "system"
        # descendants inherit the ancestor's kind, except that pytest-trio's test and
        # fixture tasks under the harness main are harness while *their* children are user
        for t in reversed(path):
            if kind == "harness" and not t.name.startswith(_HARNESS_PREFIXES):
                kind = "user"
            memo[t] = kind
        return memo.get(task, kind)

    def in_nursery(
        self, task: trio.lowlevel.Task, nursery: trio.Nursery | None
    ) -> tuple[trio.lowlevel.Task | None, TaskKind, bool]:
        """``(parent, kind, shared)`` for ``task`` in ``nursery``: ``shared`` says every other
        child of that nursery has the same parent and kind, so a query may decide them once
        per nursery. Not for the root's nurseries nor the harness main's (where a child's
        kind depends on its own name), nor when the parent's kind is unknown."""
        parent = None if nursery is None else nursery.parent_task
        kind = self(task)
        shared = False
        if parent is not None and parent is not self.root:
            parent_kind = self.memo.get(parent)
            shared = parent_kind is not None and parent_kind != "harness"
        return parent, kind, shared

    def _top_level_kind(
        self, task: trio.lowlevel.Task, parent: trio.lowlevel.Task | None
    ) -> TaskKind:
        if parent is None:
            return "system"
        if task.name.startswith("<") and task.name.endswith(">"):
            return "system"
        if task.name.endswith(_HARNESS_MAIN):
            return "harness"
        return "user" if _is_main(task) else "system"


def _is_main(task: trio.lowlevel.Task) -> bool:
    """Trio runs the main task alone in the root's last nursery; system tasks live elsewhere."""
    root = trio.lowlevel.current_root_task()
    if root is None or not root.child_nurseries:
        return False
    return task in root.child_nurseries[-1].child_tasks
