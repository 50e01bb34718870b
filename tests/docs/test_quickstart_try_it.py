"""The Quickstart's "try it without any server" block runs as a newcomer runs it (issue 47.11):
saved as a file of its own beside ``myagent.py`` and run with ``python``, not only inside the
page's shared namespace where the agent's block already defined ``factory`` and ``Task``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.docs_blocks import blocks

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "quickstart.md"


def test_the_try_it_block_runs_as_a_file_of_its_own(tmp_path: Path) -> None:
    python = [b.code for b in blocks(PAGE) if b.lang == "python"]
    (agent,) = [code for code in python if "def factory" in code]
    (try_it,) = [code for code in python if "async def try_it" in code]
    (tmp_path / "myagent.py").write_text(agent)
    (tmp_path / "try_it.py").write_text(try_it)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "try_it.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
