"""The operator page's routes on a real admin endpoint (127.0.0.1, free port) over a real SQLite
store: the token guards every JSON route and move, the page files carry the strict CSP, and a
retry or cancel from the page is the store's operator move, journalled as the operator."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Any, cast

import httpx
import trio

from support.custody import drive_to
from support.observe import ADMIN_TOKEN, running_admin
from support.waiting import wait_until
from tether import Runtime
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.custody import Store
from tether.bridge.service._ops_routes import OpsRoutes

S = CustodyState
PAGE_FILES = ("/ops", "/ops/ops.js", "/ops/ops.css", "/ops/base.css", "/ops/base.js")


async def test_every_json_route_and_move_needs_the_token_and_the_page_files_carry_the_csp(
    store: SqliteStore, tmp_path: Path
) -> None:
    await drive_to(store, "d1", S.DEAD)
    async with running_admin(tmp_path, partial(OpsRoutes, store), store=store) as admin:
        guarded = [
            ("GET", "/ops/api/store"),
            ("GET", "/ops/api/tasks/d1"),
            ("POST", "/ops/api/tasks/d1/retry"),
            ("POST", "/ops/api/tasks/d1/cancel"),
        ]
        async with httpx.AsyncClient(base_url=admin.url, timeout=10) as anonymous:
            for method, path in guarded:
                for headers in ({}, {"authorization": "Bearer not-the-token"}):
                    refused = await anonymous.request(method, path, headers=headers)
                    assert refused.status_code == 401, (method, path, headers)
                    assert "bearer token" in refused.json()["error"]
                    assert refused.headers["www-authenticate"].startswith("Bearer")
            # the page's own files: the same code for everyone, no data, strict policy
            for path in PAGE_FILES:
                page = await anonymous.get(path)
                assert page.status_code == 200, path
                csp = page.headers["content-security-policy"]
                assert "default-src 'none'" in csp
                assert "script-src 'self';" in csp  # no inline script, nothing external
                assert "frame-ancestors 'none'" in csp
                assert page.headers["x-frame-options"] == "DENY"
                assert page.headers["cache-control"] == "no-store"
            html = (await anonymous.get("/ops")).text
            assert "<script>" not in html  # nothing inline
            assert " style=" not in html
            assert re.findall(r'(?:src|href)="([^"]+)"', html) == [
                "/ops/base.css",
                "/ops/ops.css",
                "/ops/base.js",
                "/ops/ops.js",
            ]
            assert "d1" not in html
        assert await store.state("d1") is S.DEAD  # nothing moved without the token


async def test_the_store_view_lists_counts_oldest_dead_letters_and_members(
    store: SqliteStore, tmp_path: Path
) -> None:
    await drive_to(store, "p1", S.PENDING)
    await drive_to(store, "c1", S.CLAIMED)
    await drive_to(store, "d1", S.DEAD)
    await store.beat("w-c1", "worker", 2)
    async with running_admin(tmp_path, partial(OpsRoutes, store), store=store) as admin:
        view = (await admin.get("/ops/api/store")).json()
        status = view["status"]
        assert status["counts"]["pending"] == status["counts"]["claimed"] == 1
        assert view["oldest"]["pending"]["id"] == "p1"
        assert view["oldest"]["claimed"]["id"] == "c1"
        assert [(d["id"], d["reason"]) for d in status["dead_letters"]] == [
            ("d1", "test: sent to dead")
        ]
        (member,) = view["members"]
        assert (member["name"], member["role"], member["capacity"]) == ("w-c1", "worker", 2)
        assert member["beat_age_s"] >= 0
        assert view["waiting"] == []


async def test_retry_and_cancel_are_the_operators_moves_journalled_as_the_operator(
    store: SqliteStore, tmp_path: Path
) -> None:
    await drive_to(store, "d1", S.DEAD)
    await drive_to(store, "p1", S.PENDING)
    async with running_admin(tmp_path, partial(OpsRoutes, store), store=store) as admin:
        done = await admin.client.post("/ops/api/tasks/d1/retry")
        assert done.status_code == 200, done.text
        assert done.json() == {
            "id": "d1",
            "done": True,
            "state": "pending",
            "detail": "task 'd1' re-driven: dead -> pending",
        }
        assert await store.state("d1") is S.PENDING
        # a repeat (a double click) changes nothing and says why
        again = await admin.client.post("/ops/api/tasks/d1/retry")
        assert again.status_code == 409
        assert again.json()["error"] == (
            "task 'd1' not re-driven: it is pending, not dead (still in the bridge's hands); "
            "nothing changed"
        )
        cancelled = await admin.client.post(
            "/ops/api/tasks/p1/cancel", json={"reason": "spam from a bot"}
        )
        assert cancelled.status_code == 200, cancelled.text
        assert (await admin.client.post("/ops/api/tasks/p1/cancel")).status_code == 409

        timeline = (await admin.get("/ops/api/tasks/d1")).json()
        assert timeline["record"]["state"] == "pending"
        last = timeline["journal"][-1]
        assert (last["src"], last["dst"], last["actor"]) == ("dead", "pending", "operator")
        assert last["reason"] == "operator: re-driven: from the operator page"
    (moved,) = [e for e in await store.journal("p1") if e.dst is S.DEAD]
    assert (moved.actor, moved.reason) == ("operator", "operator: cancelled: spam from a bot")


async def test_a_wrong_method_an_unknown_task_or_a_bad_body_is_one_clear_error(
    store: SqliteStore, tmp_path: Path
) -> None:
    await drive_to(store, "d1", S.DEAD)
    async with running_admin(tmp_path, partial(OpsRoutes, store), store=store) as admin:
        post = admin.client.post
        wrong = await admin.get("/ops/api/tasks/d1/retry")
        assert (wrong.status_code, wrong.headers["allow"]) == (405, "POST")
        assert wrong.json()["error"] == "method GET not allowed here; use POST"
        assert (await post("/ops/api/store")).status_code == 405
        assert (await post("/ops")).status_code == 405
        for path in ("/ops/api/tasks/nope", "/ops/api/tasks/nope/retry"):
            answer = await (admin.get(path) if path.endswith("nope") else post(path))
            assert answer.status_code == 404
            assert answer.json()["error"] == "task 'nope': no such task in the store"
        bad_id = await post("/ops/api/tasks/..bad/retry")
        assert bad_id.status_code == 400
        assert "task id" in bad_id.json()["error"]
        assert (await admin.get("/ops/api/tasks/d1/undo")).status_code == 404
        extra = await post("/ops/api/tasks/d1/retry", json={"reason": "x", "force": True})
        assert extra.status_code == 400
        assert extra.json()["error"] == 'the body must be a JSON object with at most a "reason"'
        blank = await post("/ops/api/tasks/d1/retry", json={"reason": " "})
        assert blank.json()["error"] == '"reason" must be a non-empty string or null'
        assert await store.state("d1") is S.DEAD
        assert ADMIN_TOKEN not in (await admin.get("/ops/ops.js")).text


async def test_a_store_that_hangs_gets_a_503_within_the_bound_and_one_call_per_question(
    store: SqliteStore, tmp_path: Path
) -> None:
    """Issue 33's bound: a store call cannot be cancelled once it reached the store, so the
    page's requests stop waiting for it, share it while it is out, and the move still lands
    when the store answers."""
    await drive_to(store, "d1", S.DEAD)
    release = trio.Event()
    calls: list[str] = []

    class Hanging:
        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        async def counts(self) -> Any:
            calls.append("counts")
            await release.wait()
            return await store.counts()

        async def redrive(self, ids: Any, *, reason: Any = None) -> Any:
            calls.append("redrive")
            await release.wait()
            return await store.redrive(ids, reason=reason)

    def routes(runtime: Runtime) -> OpsRoutes:
        return OpsRoutes(cast(Store, Hanging()), runtime, read_within=0.2, move_within=0.2)

    async with running_admin(tmp_path, routes, store=store) as admin:
        started = trio.current_time()
        for _ in range(3):
            answer = await admin.get("/ops/api/store")
            assert answer.status_code == 503
            assert answer.json()["error"] == "the custody store did not answer within 0.2 s"
            moved = await admin.client.post("/ops/api/tasks/d1/retry")
            assert moved.status_code == 503
        assert trio.current_time() - started < 5  # each answer bounded, not one store wait
        assert calls == ["counts", "redrive"]  # one flight per question, shared
        release.set()

        async def answers() -> bool:
            return (await admin.get("/ops/api/store")).status_code == 200

        await wait_until(answers, within=10)

        async def landed() -> bool:  # the move lands when the store answers (its own flight)
            return await store.state("d1") is S.PENDING

        await wait_until(landed, within=10)


async def _limited_and_shared(store: SqliteStore) -> None:
    """A key capped at 2 with both permits held, one run waiting and the key paused; two
    tenants, one with a weight, each with pending work."""
    from tether.bridge import Task
    from tether.bridge.custody import LimitSpec
    from tether.bridge.custody._tenants import TENANT_HEADER

    await store.set_limit(LimitSpec("openai:gpt-4o", rate=500 / 60, burst=50, concurrency=2))
    for id in ("a", "b", "c"):
        await store.ingest(Task(id, "x"))
    claims = await store.claim_many("w1", 3, leaderless=True)
    for claim in claims:
        await store.acquire_permit(claim, "openai:gpt-4o", 10)
    await store.pause_limit("openai:gpt-4o", store.clock() + 600)
    await store.set_tenant_weight("acme", 3)
    for id, tenant in (("t1", "acme"), ("t2", "acme"), ("t3", "globex")):
        await store.ingest(Task(id, "y", headers={TENANT_HEADER: tenant}))


async def test_the_store_view_carries_the_limits_and_the_tenants_shares(
    store: SqliteStore, tmp_path: Path
) -> None:
    """Issue 47.9: the page had no limits or tenants section; its view carries what
    ``tether store limits --json`` and ``tether store tenants --json`` print."""
    await _limited_and_shared(store)
    async with running_admin(tmp_path, partial(OpsRoutes, store), store=store) as admin:
        view = (await admin.get("/ops/api/store")).json()
    (limit,) = view["limits"]
    assert limit["key"] == "openai:gpt-4o"
    assert (limit["concurrency"], limit["in_flight"], limit["waiters"], limit["burst"]) == (
        2,
        2,
        1,
        50,
    )
    assert 590 < limit["paused_for_s"] <= 600
    tenants = {t["tenant"]: (t["weight"], t["pending"]) for t in view["tenants"]}
    assert tenants == {"acme": (3, 2), "globex": (1, 1)}


async def test_a_tasks_timeline_carries_its_steps_and_asks_as_store_show_does(
    store: SqliteStore, tmp_path: Path
) -> None:
    """Issue #48: the page's Steps section was always empty (the timeline was built without
    the task's steps and asks, which ``tether store show`` lists)."""
    await store.ingest(Task("t1", "a table for 4", room="r"), room_policy="serial")
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    await store.record_step(claim, "search", '"T-4"')
    await store.ask(claim, "~ask:1", "8 pm, book it?", store.clock() + 600, "asked")
    async with running_admin(tmp_path, partial(OpsRoutes, store), store=store) as admin:
        timeline = (await admin.get("/ops/api/tasks/t1")).json()
    [step] = timeline["steps"]
    assert (step["name"], step["attempt"], step["size"]) == ("search", 1, 5)
    [ask] = timeline["asks"]
    assert (ask["name"], ask["question"], ask["status"]) == ("~ask:1", "8 pm, book it?", "open")


async def test_a_rewind_and_a_fork_from_the_page_are_the_stores_and_versions_are_shown(
    store: SqliteStore, tmp_path: Path
) -> None:
    """Issue #53: a dead run rewound to a step (its later records dropped) and a run forked at
    a step (a new task with the earlier records), both journalled as the operator's; the
    store's view counts the tasks in custody per version of their newest record."""
    claim = await drive_to(store, "t1", S.CLAIMED, body="plan my trip")
    assert claim is not None
    for name in ("a", "b", "c"):
        await store.record_step(claim, name, '"x"', version="1.2")
    await store.fail(claim, "boom", permanent=True)
    async with running_admin(tmp_path, partial(OpsRoutes, store), store=store) as admin:
        post = admin.client.post
        forked = await post("/ops/api/tasks/t1/fork", json={"step": "b", "room": "r2"})
        assert forked.status_code == 200, forked.text
        assert forked.json()["id"] == "t1~fork1"  # the new task
        assert "into t1~fork1 (1 record(s) copied)" in forked.json()["detail"]
        assert [s.name for s in await store.steps("t1~fork1")] == ["a"]
        fork = await store.get("t1~fork1")
        assert fork is not None
        assert (fork.task.body, fork.task.room, fork.state) == ("plan my trip", "r2", S.PENDING)

        no_step = await post("/ops/api/tasks/t1/rewind", json={})
        assert no_step.status_code == 400
        assert '"step"' in no_step.json()["error"]
        missing = await post("/ops/api/tasks/t1/rewind", json={"step": "zz"})
        assert missing.status_code == 409
        assert "no recorded step 'zz'" in missing.json()["error"]
        extra = await post("/ops/api/tasks/t1/rewind", json={"step": "b", "room": "r"})
        assert extra.json()["error"] == (
            'the body must be a JSON object with at most "reason" and "step"'
        )
        rewound = await post("/ops/api/tasks/t1/rewind", json={"step": "b"})
        assert rewound.status_code == 200, rewound.text
        assert [s.name for s in await store.steps("t1")] == ["a"]
        [*_, last] = await store.journal("t1")
        assert last.actor == "operator"
        assert last.reason == (
            "operator: re-driven: rewound to step 'b', 2 record(s) dropped: from the operator page"
        )
        view = (await admin.get("/ops/api/store")).json()
        assert {v["version"]: v["tasks"] for v in view["versions"]} == {"1.2": 2}
        timeline = (await admin.get("/ops/api/tasks/t1~fork1")).json()
        assert [(s["name"], s["version"]) for s in timeline["steps"]] == [("a", "1.2")]
