"""Conformance: a task's headers are bounded metadata, on every backend.

A gateway may put anything in ``sender`` (the bridge stores it as a header); the store refuses a
task whose headers are too many, unnamed or over-long, naming the header, and stores nothing of
it, so ``ingest_many`` of a round can fall back to one-by-one and refuse just that task.
"""

from __future__ import annotations

import pytest

from tether.bridge import Task
from tether.bridge.custody import InvalidTask, Store
from tether.bridge.custody._rules import MAX_HEADER_VALUE_CHARS, MAX_HEADERS


@pytest.mark.parametrize(
    ("headers", "says"),
    [
        ({"sender": "x" * (MAX_HEADER_VALUE_CHARS + 1)}, "header 'sender' is 4097 characters"),
        ({f"h{i}": "v" for i in range(MAX_HEADERS + 1)}, "33 headers; the limit is 32"),
        ({"": "v"}, "header name of 0 characters"),
        ({"n" * 129: "v"}, "names are 1-128 characters"),
        ({"sender": "bad \ud800"}, "lone surrogate"),
    ],
)
async def test_unbounded_headers_are_refused_by_name_and_nothing_is_stored(
    store: Store, headers: dict[str, str], says: str
) -> None:
    task = Task("hostile", "hi", headers=headers)
    with pytest.raises(InvalidTask, match="task 'hostile'") as single:
        await store.ingest(task)
    assert says in str(single.value)
    with pytest.raises(InvalidTask, match="task 'hostile'"):
        await store.ingest_many([Task("fine", "ok"), task])
    assert await store.get("hostile") is None
    assert await store.get("fine") is None  # one transaction: the round lands whole or not at all


async def test_headers_at_the_limits_are_stored_whole(store: Store) -> None:
    headers = {f"h{i}": "v" for i in range(MAX_HEADERS - 1)}
    headers["n" * 128] = "é" * MAX_HEADER_VALUE_CHARS
    await store.ingest(Task("edge", "hi", headers=headers))
    record = await store.get("edge")
    assert record is not None
    assert record.task.headers == headers
