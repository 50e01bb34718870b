"""SIGUSR1 writes the live task tree, with await stacks, to the log."""

from __future__ import annotations

import logging
import os
import signal

import pytest
import trio

from tether import open_runtime


async def waiting_for_godot(event: trio.Event) -> None:
    await event.wait()


async def test_sigusr1_logs_the_tree_with_stacks(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tether.tasks")
    previous = signal.getsignal(signal.SIGUSR1)
    release = trio.Event()
    async with open_runtime(handle_signals=True) as runtime:
        assert signal.getsignal(signal.SIGUSR1) is not previous
        runtime.spawn(waiting_for_godot, release, name="estragon")
        await trio.testing.wait_all_tasks_blocked()
        dumped = trio.Event()
        notify = _EventHandler(dumped)
        logging.getLogger("tether.tasks").addHandler(notify)
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            with trio.fail_after(5):
                await dumped.wait()
        finally:
            logging.getLogger("tether.tasks").removeHandler(notify)
        release.set()
    assert signal.getsignal(signal.SIGUSR1) is previous  # restored on exit
    [record] = [r for r in caplog.records if r.name == "tether.tasks"]
    assert record.levelno == logging.WARNING
    text = record.getMessage()
    assert "live task" in text
    [line] = [ln for ln in text.splitlines() if "estragon" in ln]
    assert "[runtime.background]" in line
    assert "in waiting_for_godot" in text  # the await stack reaches the parked function


class _EventHandler(logging.Handler):
    """Sets a Trio event when a record arrives (the dump runs in the Trio thread)."""

    def __init__(self, event: trio.Event) -> None:
        super().__init__()
        self.event = event

    def emit(self, record: logging.LogRecord) -> None:
        self.event.set()


async def test_no_dump_handler_without_signal_handling() -> None:
    previous = signal.getsignal(signal.SIGUSR1)
    async with open_runtime(handle_signals=False):
        assert signal.getsignal(signal.SIGUSR1) is previous
    async with open_runtime(handle_signals=True, tree_dump_signal=None):
        assert signal.getsignal(signal.SIGUSR1) is previous
