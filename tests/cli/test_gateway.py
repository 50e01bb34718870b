"""``tether gateway serve`` as a real process: starts, serves, stops cleanly on SIGTERM."""

from __future__ import annotations

import signal
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import trio

COMMAND = [sys.executable, "-m", "tether", "gateway", "serve"]


async def start_lines(stdout: trio.abc.ReceiveStream) -> list[str]:
    """The gateway's first two lines on stdout: where it listens, and the chat page's link."""
    banner = b""
    with trio.fail_after(20):
        while banner.count(b"\n") < 2:
            chunk = await stdout.receive_some()
            assert chunk, f"the gateway exited before its start lines: {banner!r}"
            banner += chunk
    return banner.decode().splitlines()[:2]


async def test_serve_creates_a_token_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    token_file = tmp_path / "secrets" / "token"
    db = tmp_path / "gateway.db"
    log_path = tmp_path / "stderr.log"
    with open(log_path, "wb") as log:  # noqa: ASYNC230 - a file handle for the child
        process = await trio.lowlevel.open_process(
            [*COMMAND, "--port", "0", "--token-file", str(token_file), "--db", str(db)],
            stdout=subprocess.PIPE,
            stderr=log,
        )
    try:
        assert process.stdout is not None
        first, second = await start_lines(process.stdout)
        url = first.split()[2].rstrip("/")
        assert url.startswith("http://127.0.0.1:")
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        token = token_file.read_text().strip()
        # issue #48: the page's address and where its token is, never the token (a link
        # carrying it stayed in the browser's history, the line in the journal)
        assert second == (
            f"tether gateway: chat page {url}/ (paste the token from {token_file}; it opens "
            "everything: give people a --user-token-file)"
        )
        assert token not in first + second

        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
            sent = await http.post(f"{url}/v1/messages", json={"room": "r", "text": "hi"})
            assert sent.status_code == 201
            # a pending long poll must not hold up the shutdown
            async with trio.open_nursery() as nursery:
                polled: list[httpx.Response] = []

                async def long_poll() -> None:
                    polled.append(await http.get(f"{url}/v1/tasks", params={"wait": 60}))

                await http.get(f"{url}/v1/tasks")  # lease the one task so the next poll waits
                nursery.start_soon(long_poll)
                await trio.sleep(0.3)
                process.send_signal(signal.SIGTERM)
                with trio.fail_after(10):
                    code = await process.wait()
        assert code == 0
        assert polled[0].json() == {"tasks": []}
        assert "created token file" in log_path.read_text()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        if process.stdout is not None:
            await process.stdout.aclose()


async def test_the_chat_page_line_names_the_user_token_file_when_there_is_one(
    tmp_path: Path,
) -> None:
    """The page needs only the user side: with a user token the line points to its file, and
    shows neither token."""
    user_token = tmp_path / "user-token"
    user_token.write_text("people-chat-here\n")
    user_token.chmod(0o600)
    process = await trio.lowlevel.open_process(
        [
            *COMMAND,
            "--port",
            "0",
            "--token-file",
            str(tmp_path / "token"),
            "--user-token-file",
            str(user_token),
            "--db",
            str(tmp_path / "gateway.db"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        first, line = await start_lines(process.stdout)
        assert line.endswith(f"/ (paste the user token from {user_token})")
        for token in ("people-chat-here", (tmp_path / "token").read_text().strip()):
            assert token not in first + line
        process.send_signal(signal.SIGINT)
        with trio.fail_after(10):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        if process.stdout is not None:
            await process.stdout.aclose()


def test_bad_settings_exit_2_and_unsafe_token_file_exits_1(tmp_path: Path) -> None:
    bad = subprocess.run(
        [*COMMAND, "--lease", "0", "--db", str(tmp_path / "db")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (bad.returncode, bad.stderr) == (
        2,
        "tether: error: lease must be > 0 seconds, got 0.0\n",
    )

    token_file = tmp_path / "token"
    token_file.write_text("abc\n")
    token_file.chmod(0o644)
    unsafe = subprocess.run(
        [*COMMAND, "--port", "0", "--token-file", str(token_file), "--db", str(tmp_path / "db")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert unsafe.returncode == 1
    (line,) = unsafe.stderr.strip().splitlines()
    assert line.startswith("tether: error: token file")
    assert line.endswith(f"chmod 600 {token_file}")
