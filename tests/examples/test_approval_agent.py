"""examples/approval_agent.py: a booking that waits for the person's yes in custody, books
once on a yes, nothing on a no; and the script prints the conversation."""

from __future__ import annotations

from pathlib import Path

import approval_agent
import pytest


@pytest.mark.parametrize(
    ("answer", "reply", "booked"),
    [
        ("yes", "agent:  Booked a table for 4 at Chez Anna, 20:00: reference CA-0001.", 1),
        ("no", "agent:  All right, I booked nothing.", 0),
    ],
)
async def test_the_booking_waits_for_the_persons_answer(
    tmp_path: Path, answer: str, reply: str, booked: int
) -> None:
    approval_agent.BOOKINGS.clear()
    transcript = await approval_agent.demo(tmp_path, answer)
    assert transcript == [
        "person: a table for 4 tonight, please",
        "agent:  I found a table for 4 at Chez Anna, 20:00. Shall I book it?",
        f"person: {answer}",
        reply,
    ]
    assert len(approval_agent.BOOKINGS) == booked


def test_the_script_prints_the_conversation(capsys: pytest.CaptureFixture[str]) -> None:
    assert approval_agent.main(["yes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert lines[-1].startswith("agent:  Booked a table for 4")
