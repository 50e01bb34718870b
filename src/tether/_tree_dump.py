"""SIGUSR1 → the live task tree, with await stacks, written to the log (trio#927).

The handler hands over with ``TrioToken.run_sync_soon``, so the dump runs between task steps and
sees a consistent tree. See docs/guide/design.md, "Signals and the tree dump".
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import trio

from ._core._registry import TaskRegistry
from ._core._task_tree import render_nodes, task_tree

log = logging.getLogger("tether.tasks")

TREE_DUMP_SIGNAL = signal.SIGUSR1


def dump_tree(registry: TaskRegistry, *, stacks: bool = True) -> str:
    """Log the live task tree (at WARNING: it was asked for, so it must show at any usual
    level) and return the text."""
    text = render_nodes(task_tree(registry, stacks=stacks))
    log.warning("task tree dump\n%s", text)
    return text


@contextmanager
def tree_dump_on_signal(
    registry: TaskRegistry, signum: int = TREE_DUMP_SIGNAL, *, stacks: bool = True
) -> Iterator[None]:
    """Dump the tree to the log whenever ``signum`` arrives inside the block (the previous
    handler comes back after). Must be entered in the Trio thread, in the main thread."""
    token = trio.lowlevel.current_trio_token()

    def dump() -> None:
        try:
            dump_tree(registry, stacks=stacks)
        except Exception:  # a dump must never take the service down
            log.exception("could not dump the task tree")

    def handler(signum: int, frame: FrameType | None) -> None:
        try:
            token.run_sync_soon(dump)
        except trio.RunFinishedError:
            pass

    previous = signal.signal(signum, handler)
    try:
        yield
    finally:
        signal.signal(signum, previous)
