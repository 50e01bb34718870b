"""examples/embed_runtime.py as a real process: services under supervision, the task tree on
SIGUSR1, a graceful stop with exit code 0 on SIGTERM."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "embed_runtime.py"


class Lines:
    """Lines of a process's output, read as they come, kept for the failure message."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.seen: list[str] = []
        self._buffer = b""

    async def until(self, pattern: str) -> str:
        """Read until a line matches ``pattern`` (it fails the test at EOF)."""
        while True:
            while b"\n" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\n", 1)
                line = raw.decode()
                self.seen.append(line)
                if re.search(pattern, line):
                    return line
            chunk = await self.stream.receive_some()
            if not chunk:
                pytest.fail(f"no line matching {pattern!r}; output:\n" + "\n".join(self.seen))
            self._buffer += chunk


@pytest.mark.slow
async def test_the_embedded_runtime_dumps_its_tree_on_sigusr1_and_stops_on_sigterm() -> None:
    proc = await trio.lowlevel.open_process(
        [sys.executable, str(SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        assert proc.stdout is not None
        out = Lines(proc.stdout)
        with trio.fail_after(60):
            ready = await out.until(r"^ready: ")
            match = re.search(r"pid (\d+), echo server on 127\.0\.0\.1:(\d+)", ready)
            assert match is not None
            assert int(match.group(1)) == proc.pid
            # the supervised service is up and serving
            stream = await trio.open_tcp_stream("127.0.0.1", int(match.group(2)))
            async with stream:
                await stream.send_all(b"ping")
                assert await stream.receive_some() == b"ping"

            proc.send_signal(signal.SIGUSR1)
            await out.until(r"task tree dump")
            await out.until(r"metrics-flush \[metrics-flush\]")
            dump = "\n".join(out.seen[-60:])
            for service in ("echo-server [echo-server]", "jobs [jobs]", "cache-warmer"):
                assert service in dump
            assert "in periodic" in dump  # each task's await stack, down to the example's code

            proc.send_signal(signal.SIGTERM)
            await out.until(r"echo server: stopped accepting")  # its soft stop ran
            await out.until(r"^stopped cleanly$")
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if proc.stdout is not None:
            await proc.stdout.aclose()
