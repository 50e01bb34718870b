"""``examples/file-exchange/answer.sh`` answers with the message upper-cased, byte for byte:
no newline added, none taken away (issue 32.9: it added one to every reply)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import trio

from support.waiting import wait_until
from tether.bridge import Task
from tether.bridge.pool._files import parse_result, task_message

ANSWER_SH = Path(__file__).resolve().parents[2] / "examples" / "file-exchange" / "answer.sh"

BODIES = {
    "one-line": "hello there",
    "two-lines": "first line\nsecond line",
    "ends-with-newline": "a line that ends\n",
    "blank-lines-inside": "para one\n\npara two",
}


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX sh")
async def test_each_reply_is_the_message_upper_cased_exactly(tmp_path: Path) -> None:
    for folder in ("outbox", "results"):
        (tmp_path / folder).mkdir()
    for task_id, body in BODIES.items():
        text = task_message(Task(task_id, body, room="r"))
        (tmp_path / "outbox" / f"{task_id}.txt").write_text(text)
    shell = await trio.lowlevel.open_process(["sh", str(ANSWER_SH), str(tmp_path)])

    async def answered() -> bool:
        return all((tmp_path / "results" / f"{i}.txt").exists() for i in BODIES)

    try:
        await wait_until(answered, within=30)
    finally:
        shell.kill()
        await shell.wait()
    for task_id, body in BODIES.items():
        result = (tmp_path / "results" / f"{task_id}.txt").read_text()
        assert parse_result(result, task_id).body == body.upper(), task_id
