"""examples/research_agent.py: a planner fans out to three child runs, parks while they run,
and writes from their notes once the last one wakes it."""

from __future__ import annotations

from pathlib import Path

import pytest
import research_agent


async def test_the_planner_writes_from_its_three_childrens_notes(tmp_path: Path) -> None:
    reply, tree = await research_agent.demo(tmp_path, "why is the sky blue")
    assert reply.splitlines() == [
        "Here is what I found.",
        "- physics: three facts about 'why is the sky blue'",
        "- history: three facts about 'why is the sky blue'",
        "- examples: three facts about 'why is the sky blue'",
    ]
    planner, *children = tree
    # it ran, parked while its children ran, was woken by the last of them and answered
    assert (
        planner.split(None, 1)[1] == "pending -> claimed -> waiting -> pending -> claimed -> result"
    )
    assert len(children) == 3
    for child in children:  # each child ran once, and its reply was never delivered
        assert child.startswith("  c-")
        assert child.split(None, 1)[1] == "pending -> claimed -> result"


def test_the_script_prints_the_reply_and_the_tree(capsys: pytest.CaptureFixture[str]) -> None:
    assert research_agent.main(["tides"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Here is what I found."
    assert sum(line.startswith("  c-") for line in lines) == 3
