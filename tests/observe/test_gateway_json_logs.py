"""``tether gateway serve --log-format json``: every log line of the real process is JSON."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import trio

from tether.bridge import read_token


async def test_gateway_serve_logs_json_lines_without_the_token(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    log_path = tmp_path / "stderr.log"
    args = [
        sys.executable, "-m", "tether", "gateway", "serve", "--port", "0",
        "--token-file", str(token_file), "--db", str(tmp_path / "g.db"), "--log-format", "json",
    ]  # fmt: skip
    with open(log_path, "wb") as sink:  # noqa: ASYNC230 - a file handle for the child
        process = await trio.lowlevel.open_process(args, stdout=subprocess.PIPE, stderr=sink)
    try:
        assert process.stdout is not None
        banner = b""
        with trio.fail_after(20):
            while b"\n" not in banner:
                chunk = await process.stdout.receive_some()
                assert chunk, "the gateway exited before it said where it listens"
                banner += chunk
        url = banner.decode().split()[2].rstrip("/")
        async with httpx.AsyncClient() as http:
            refused = await http.get(f"{url}/v1/tasks", headers={"authorization": "Bearer x"})
            assert refused.status_code == 401
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        if process.stdout is not None:
            await process.stdout.aclose()
    lines = log_path.read_text().splitlines()
    records = [json.loads(line) for line in lines if not line.startswith("tether:")]
    assert any(r["logger"] == "tether.gateway" and "listening" in r["message"] for r in records)
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert read_token(token_file) not in log_path.read_text()
