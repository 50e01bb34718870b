"""An agent for the tracing tests: it makes a span of its own (nested under its run's span),
and while the file ``$TETHER_TEST_HOLD`` exists it marks ``$TETHER_TEST_HOLD.started`` and
holds its run (a test SIGKILLs the bridge then); otherwise it answers at once.

``--agent support.agents.traced:factory`` (the tests put ``tests/`` on PYTHONPATH).
"""

from __future__ import annotations

import os

import trio
from opentelemetry import trace

from tether import Session
from tether.bridge import Task


async def handle(task: Task) -> str:
    with trace.get_tracer("traced-agent").start_as_current_span("agent.think"):
        hold = os.environ.get("TETHER_TEST_HOLD")
        if hold and os.path.exists(hold):  # noqa: ASYNC240 - a test's marker file
            await trio.Path(hold + ".started").touch()
            await trio.sleep_forever()
        return f"traced: {task.body}"


def factory(session: Session) -> None:
    session.add_handler("task", handle)
