"""open_runtime's root supervisor and its SIGINT/SIGTERM handling (in-process and real)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tether import ChildSpec, open_runtime, wait_stop_requested

Status = trio.TaskStatus[Any]


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_first_request_is_graceful_and_open_runtime_returns_normally(
    mock_clock: trio.testing.MockClock,
) -> None:
    events: list[tuple[str, float]] = []

    async def service(*, task_status: Status = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await wait_stop_requested()
        await trio.sleep(1)
        events.append(("service cleaned up", trio.current_time()))

    async def chore() -> None:
        try:
            await trio.sleep(100)
        finally:
            events.append(("chore cancelled", trio.current_time()))

    async with open_runtime(grace=2, handle_signals=True) as rt:
        assert rt.handles_signals
        await rt.supervisor.start_child(ChildSpec("svc", service, shutdown_grace=5))
        rt.spawn(chore, name="chore")
        await trio.sleep(3)
        rt.request_shutdown(signal.SIGTERM)
        await trio.sleep_forever()  # the graceful stop cancels the body
    # children first (soft stop, 1 s cleanup), then the background drain (2 s grace)
    assert events == [("service cleaned up", 4.0), ("chore cancelled", 6.0)]


async def test_second_request_cancels_at_once_and_raises_keyboard_interrupt(
    mock_clock: trio.testing.MockClock,
) -> None:
    events: list[tuple[str, float]] = []

    async def stubborn(*, task_status: Status = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            events.append(("stubborn ended", trio.current_time()))

    async def second_signal(rt: Any) -> None:
        await trio.sleep(2)
        rt.request_shutdown(signal.SIGINT)

    async def scenario() -> None:
        async with open_runtime(grace=30, handle_signals=True) as rt:
            await rt.supervisor.start_child(ChildSpec("stubborn", stubborn, shutdown_grace=60))
            rt.spawn(second_signal, rt, name="second")  # at t=2
            await trio.sleep(1)
            rt.request_shutdown(signal.SIGINT)
            await trio.sleep_forever()

    with pytest.raises(KeyboardInterrupt):
        await scenario()
    # not the 60 s shutdown grace: the second request cancelled the stubborn child at once
    assert events == [("stubborn ended", 2.0)]


async def test_signals_off_means_no_handlers_and_no_shutdown_requests() -> None:
    before = signal.getsignal(signal.SIGTERM)
    async with open_runtime(handle_signals=False) as rt:
        assert not rt.handles_signals
        assert signal.getsignal(signal.SIGTERM) is before
        with pytest.raises(RuntimeError, match="does not handle signals"):
            rt.request_shutdown()


async def test_handlers_are_installed_inside_and_restored_after() -> None:
    before = signal.getsignal(signal.SIGTERM)
    async with open_runtime() as rt:  # main thread: on by default
        assert rt.handles_signals
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


def test_signals_default_off_outside_the_main_thread_and_forcing_them_errors() -> None:
    results: dict[str, object] = {}

    async def main() -> None:
        async with open_runtime() as rt:
            results["default"] = rt.handles_signals
        try:
            async with open_runtime(handle_signals=True):
                pass
        except RuntimeError as exc:
            results["forced"] = str(exc)

    thread = threading.Thread(target=trio.run, args=(main,))
    thread.start()
    thread.join(timeout=30)
    assert results["default"] is False
    assert "main thread" in str(results["forced"])


SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import trio
    import tether

    out = Path(sys.argv[1])
    cleanup_seconds = float(sys.argv[2])


    async def child(name, *, task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        try:
            await tether.wait_stop_requested()
            (out / f"{name}.stop-requested").write_text("")
            await trio.sleep(cleanup_seconds)
            (out / f"{name}.cleaned-up").write_text("")
        finally:
            (out / f"{name}.finally").write_text("")


    async def main():
        async with tether.open_runtime(grace=1) as rt:
            for name in ("alpha", "beta"):
                await rt.supervisor.start_child(
                    tether.ChildSpec(name, child, name, shutdown_grace=60)
                )
            print("READY", flush=True)
            await trio.sleep_forever()
        print("GRACEFUL", flush=True)


    try:
        trio.run(main)
    except KeyboardInterrupt:
        print("IMMEDIATE", flush=True)
        sys.exit(130)
    """
)


def start_script(tmp_path: Path, cleanup_seconds: float) -> subprocess.Popen[str]:
    script = tmp_path / "service.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), str(cleanup_seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # bounded by the test timeout; the script prints at once
    if line.strip() != "READY":
        proc.kill()
        _, err = proc.communicate(timeout=10)
        pytest.fail(f"service did not start: {line!r}\n{err}")
    return proc


def wait_for(path: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"{path.name} never appeared")
        time.sleep(0.02)


@pytest.mark.slow
def test_sigterm_stops_both_children_gracefully_and_exits_zero(tmp_path: Path) -> None:
    proc = start_script(tmp_path, cleanup_seconds=0.2)
    try:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "GRACEFUL" in out
    for name in ("alpha", "beta"):
        assert (tmp_path / f"{name}.stop-requested").exists()
        assert (tmp_path / f"{name}.cleaned-up").exists()
        assert (tmp_path / f"{name}.finally").exists()


@pytest.mark.slow
def test_second_sigint_cancels_immediately(tmp_path: Path) -> None:
    proc = start_script(tmp_path, cleanup_seconds=60)  # cleanup would take a minute
    try:
        proc.send_signal(signal.SIGINT)
        wait_for(tmp_path / "beta.stop-requested")  # the graceful stop is under way
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "IMMEDIATE" in out
    assert took < 10  # not the 60 s cleanup, nor the 60 s shutdown grace
    assert (tmp_path / "beta.finally").exists()
    assert not (tmp_path / "beta.cleaned-up").exists()
    # alpha was never asked: beta (started last) was still stopping when the cancel came
    assert not (tmp_path / "alpha.stop-requested").exists()
    assert (tmp_path / "alpha.finally").exists()
