"""`tether demo` as a person runs it and stops it: Ctrl-C at any moment ends it within a
second or so, says what it had done, exits 130 and leaves nothing behind."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

from tether._cli._demo import Progress

STOPPED_WITHIN = 15.0
"""Seconds from SIGINT to exit the tests allow: the demo takes well under one; the margin is
for a machine shared by many test runs."""

SUMMARY = re.compile(
    r"^tether demo: interrupted after \d+\.\d s: sent (\d+) of 3000 messages, (\d+) replied"
)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _start_demo(tmp_path: Path, *, ignore_sigint: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tether", "demo", "--messages", "3000"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: whatever it starts is found after
        preexec_fn=_ignore_sigint if ignore_sigint else None,
    )


def _read_until(stream: IO[str] | None, wanted: Callable[[str], bool]) -> list[str]:
    """Lines of ``stream`` up to and including the first that ``wanted`` accepts."""
    assert stream is not None
    lines: list[str] = []
    for line in stream:
        lines.append(line)
        if wanted(line):
            return lines
    raise AssertionError("the demo ended before the awaited line:\n" + "".join(lines))


def _interrupt_and_check(demo: subprocess.Popen[str], seen: list[str]) -> tuple[str, str]:
    sent_at = time.monotonic()
    demo.send_signal(signal.SIGINT)
    out, err = demo.communicate(timeout=60)
    took = time.monotonic() - sent_at
    err = "".join(seen) + err
    assert demo.returncode == 130, out + err
    assert took < STOPPED_WITHIN, f"{took:.1f} s after SIGINT\n{out}{err}"
    assert "Traceback" not in err, err
    assert "error" not in err, err
    with pytest.raises(ProcessLookupError):  # nothing of its process group is left
        os.killpg(demo.pid, 0)
    folder = re.search(r" in (\S+tether-demo-\S+);", err)
    assert folder is not None, err
    assert not Path(folder.group(1)).exists()  # its temporary folder is gone
    return out, err


@pytest.mark.slow
def test_ctrl_c_as_the_demo_starts_stops_it_with_130(tmp_path: Path) -> None:
    demo = _start_demo(tmp_path)
    seen = _read_until(demo.stderr, lambda line: line.startswith("tether demo: "))
    out, _ = _interrupt_and_check(demo, seen)
    summary = SUMMARY.match(out.strip().splitlines()[-1])
    assert summary is not None, out
    assert int(summary.group(2)) < 3000


@pytest.mark.slow
def test_ctrl_c_while_the_first_bridge_replies_stops_it_with_130(tmp_path: Path) -> None:
    demo = _start_demo(tmp_path)
    seen = _read_until(demo.stderr, lambda line: "replied (first bridge)" in line)
    out, _ = _interrupt_and_check(demo, seen)
    summary = SUMMARY.match(out.strip().splitlines()[-1])
    assert summary is not None, out
    assert int(summary.group(1)) == 3000  # every message was sent before the bridge started
    assert 0 <= int(summary.group(2)) < 3000


@pytest.mark.slow
def test_ctrl_c_reaches_a_demo_started_with_sigint_ignored(tmp_path: Path) -> None:
    """A shell's ``tether demo &`` starts it with SIGINT ignored; ``kill -INT`` still stops it."""
    demo = _start_demo(tmp_path, ignore_sigint=True)
    seen = _read_until(demo.stderr, lambda line: line.startswith("tether demo: "))
    out, _ = _interrupt_and_check(demo, seen)
    assert SUMMARY.match(out.strip().splitlines()[-1]) is not None, out


def test_the_progress_line_is_not_repeated() -> None:
    """Issue 32.9: the demo printed its last progress line twice."""
    out = io.StringIO()
    progress = Progress(300, out=out)
    for done, label in ((0, "sent"), (300, "sent"), (300, "sent"), (300, "replied")):
        progress.show(done, label)
    assert [line.split("] ", 1)[1] for line in out.getvalue().splitlines()] == [
        "    0/300 sent",
        "  300/300 sent",
        "  300/300 replied",
    ]
