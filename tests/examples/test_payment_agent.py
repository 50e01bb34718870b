"""examples/payment_agent.py: an order parks on its payment's key, its slot serves another
order meanwhile, and the webhook's event wakes it once; an event before its wait is kept."""

from __future__ import annotations

from pathlib import Path

import payment_agent
import pytest


async def test_each_order_is_confirmed_by_its_own_payment_event(tmp_path: Path) -> None:
    replies, moves = await payment_agent.demo(tmp_path)
    assert replies == [
        "Order o1 is confirmed: 12 EUR received.",
        "Order o2 is confirmed: 12 EUR received.",
    ]
    # o1 parked on its payment (its one slot free for o2) and the event woke it once
    assert moves[0] == "o1: pending -> claimed -> waiting -> pending -> claimed -> result"
    # o2's payment came before it asked: taken at once, no park
    assert moves[1] == "o2: pending -> claimed -> result"


def test_the_script_prints_both_replies(capsys: pytest.CaptureFixture[str]) -> None:
    assert payment_agent.main() == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Order o1 is confirmed: 12 EUR received."
    assert lines[-2].startswith("o1: ")
