"""What a supervisor supervises: child specs, live child records and their snapshots."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal, get_args

import attrs
import trio
import trio_util

ChildState = Literal["starting", "running", "backoff", "stopping", "stopped", "failed"]
"""Where a supervised child is in its life (``SupervisedChild.state``)."""
CHILD_STATES: tuple[ChildState, ...] = get_args(ChildState)

RestartType = Literal["permanent", "transient", "temporary"]
"""When a child is restarted: always (``permanent``), only after a failure (``transient``),
never (``temporary``)."""
RESTART_TYPES: tuple[RestartType, ...] = get_args(RestartType)

DEFAULT_SHUTDOWN_GRACE = 5.0


@attrs.frozen(init=False)
class ChildSpec:
    """How to run one child: ``fn(*args, task_status=...)`` under ``name``.

    ``fn`` must call ``task_status.started()`` once it is ready; ``start_child`` returns then.
    ``restart`` says what happens when the child ends:

    - ``permanent``: always restarted, whether it raised or returned;
    - ``transient``: restarted only when it raised an exception;
    - ``temporary``: never restarted.

    ``shutdown_grace`` is how long the child gets between the soft stop request and the
    cancellation of its scope.
    """

    name: str
    fn: Callable[..., Awaitable[object]]
    args: tuple[Any, ...]
    restart: RestartType
    shutdown_grace: float

    def __init__(
        self,
        name: str,
        fn: Callable[..., Awaitable[object]],
        *args: Any,
        restart: RestartType = "permanent",
        shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a child needs a non-empty string name, got {name!r}")
        if not callable(fn):
            raise TypeError(f"child {name!r}: fn must be an async callable, got {fn!r}")
        if restart not in RESTART_TYPES:
            raise ValueError(
                f"child {name!r}: restart must be one of {', '.join(RESTART_TYPES)}; "
                f"got {restart!r}"
            )
        if not isinstance(shutdown_grace, int | float) or shutdown_grace < 0:
            raise ValueError(
                f"child {name!r}: shutdown_grace must be a number >= 0, got {shutdown_grace!r}"
            )
        self.__attrs_init__(name, fn, tuple(args), restart, float(shutdown_grace))


def restart_wanted(restart: RestartType, error: BaseException | None) -> bool:
    """Whether a child that ended (``error`` None = returned normally) should run again."""
    if restart == "permanent":
        return True
    if restart == "transient":
        return error is not None
    return False


@attrs.define(eq=False)
class Incarnation:
    """One run of a child: its cancel scope, its soft stop event, and whether it is over."""

    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    stop: trio.Event = attrs.field(factory=trio.Event)
    exited: trio.Event = attrs.field(factory=trio.Event)
    ready: bool = False
    stopped_by_supervisor: bool = False


@attrs.define(eq=False)
class SupervisedChild:
    """A child as its supervisor sees it, live. ``state`` can be awaited on.

    ``restarts`` counts every restart of this child (its own and those its strategy caused);
    ``last_error`` is the last exception it ended with (None if it never raised).
    """

    spec: ChildSpec
    state: trio_util.AsyncValue[ChildState] = attrs.field(
        factory=lambda: trio_util.AsyncValue("starting")
    )
    restarts: int = 0
    last_error: BaseException | None = None
    running_since: float | None = None
    # when the restart being waited out is due (Trio time), while the state is "backoff"
    backoff_until: float | None = None
    # backoff attempt: restarts since the child last stayed up for backoff_reset seconds
    attempt: int = 0
    current: Incarnation | None = None
    # the exit handler waiting out this child's backoff (one_for_one), cancelled on terminate
    pending: trio.CancelScope | None = None
    # ended for good: not restarted by any strategy any more
    done: bool = False

    @property
    def name(self) -> str:
        return self.spec.name

    def snapshot(self) -> ChildSnapshot:
        return ChildSnapshot(
            name=self.spec.name,
            state=self.state.value,
            restart=self.spec.restart,
            restarts=self.restarts,
            last_error=None if self.last_error is None else repr(self.last_error),
            running_since=self.running_since,
            backoff_until=self.backoff_until if self.state.value == "backoff" else None,
            ended_for_good=self.done,
        )


@attrs.frozen
class ChildSnapshot:
    """A child's state at one instant. Times are Trio time (``trio.current_time``).

    ``backoff_until`` is when a child in ``backoff`` is due to start again;
    ``ended_for_good`` is true once no strategy will restart it (a temporary child that ended,
    a transient one that returned, a terminated one).
    """

    name: str
    state: ChildState
    restart: RestartType
    restarts: int
    last_error: str | None
    running_since: float | None
    backoff_until: float | None = None
    ended_for_good: bool = False

    @property
    def healthy(self) -> bool:
        """Running, or finished on purpose: a child that returned and is not restarted (a
        transient service with nothing left to do) is no problem to alert on."""
        if self.state == "running":
            return True
        return self.ended_for_good and self.state == "stopped"


@attrs.frozen
class SupervisorSnapshot:
    """A supervisor at one instant; ``children`` in start order."""

    name: str
    strategy: str
    closing: bool
    recent_restarts: int
    children: tuple[ChildSnapshot, ...]

    def child(self, name: str) -> ChildSnapshot:
        for child in self.children:
            if child.name == name:
                return child
        raise KeyError(f"supervisor {self.name!r} has no child named {name!r}")
