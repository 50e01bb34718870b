"""PostgreSQL migration of issue 39: the journal and the permits' release run once per
statement. A schema of the previous version, with tasks journaled by the old triggers, is
migrated in place: a batch claim and completion then journal every move after the old
entries, in order, and free the permits their runs held."""

from __future__ import annotations

from support.migrations import old_pending_rows, postgres_from, postgres_step
from tether.bridge import CustodyState, Task
from tether.bridge.custody import Granted, LimitSpec

STEP = postgres_step("journal_moves")
"""The migration's place in the list (found by its content: later issues append theirs)."""
OLD_TASKS = old_pending_rows(3)


async def test_a_postgres_schema_of_the_previous_version_is_migrated(postgres_dsn: str) -> None:
    async with postgres_from(postgres_dsn, STEP, *OLD_TASKS) as store:
        await store.ingest(Task("new0", "hi"))
        await store.set_limit(LimitSpec("k", concurrency=4))
        claims = await store.claim_many("w1", 10, leaderless=True)
        assert [c.task.id for c in claims] == ["old0", "old1", "old2", "new0"]
        for claim in claims[:2]:
            assert isinstance(await store.acquire_permit(claim, "k"), Granted)
        [view] = await store.limit_views()
        assert view.in_flight == 2
        assert await store.complete_many([(c, "done") for c in claims]) == [True] * 4
        [view] = await store.limit_views()
        assert view.in_flight == 0
        for claim in claims:
            moves = [(e.src, e.dst, e.worker, e.actor) for e in await store.journal(claim.task.id)]
            assert moves == [
                (None, CustodyState.PENDING, None, "bridge"),
                (CustodyState.PENDING, CustodyState.CLAIMED, "w1", "worker"),
                (CustodyState.CLAIMED, CustodyState.RESULT, "w1", "worker"),
            ]
