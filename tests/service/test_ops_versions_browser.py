"""The operator page's versions and a run's steps, in headless Chromium (issue #53): the
versions in flight, each step with the version that recorded it, "Fork here" on any step and
"Rewind here" on a dead run's, each asking first, then moving the task as the store does.
Screenshots go to test-artifacts/."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from support.browser import ARTIFACTS, NEEDS_CHROMIUM, chromium
from support.observe import ADMIN_TOKEN, running_admin
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.service._ops_routes import OpsRoutes

pytestmark = NEEDS_CHROMIUM
S = CustodyState


def look(url: str, shots: Path) -> dict[str, Any]:
    """Open the page, show task ``t1``, fork it at its second step, then rewind it to its
    second step (blocking: run it in a thread)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as shown
    from selenium.webdriver.support.ui import WebDriverWait

    seen: dict[str, Any] = {}
    with chromium(window="1100,1900") as driver:
        driver.get(f"{url}#token={ADMIN_TOKEN}")
        wait = WebDriverWait(driver, 20, poll_frequency=0.05)
        wait.until(shown.presence_of_element_located((By.CSS_SELECTOR, "#version-rows tr")))
        seen["versions"] = [
            r.text for r in driver.find_elements(By.CSS_SELECTOR, "#version-rows tr")
        ]
        driver.find_element(By.ID, "task-id").send_keys("t1")
        driver.find_element(By.CSS_SELECTOR, "#show button").click()
        wait.until(shown.presence_of_element_located((By.CSS_SELECTOR, "#step-rows li")))
        steps = driver.find_elements(By.CSS_SELECTOR, "#step-rows li")
        seen["steps"] = [li.text for li in steps]
        driver.find_element(By.ID, "timeline").screenshot(str(shots / "ops-page-steps.png"))
        for move, notice in (("fork", "forked task t1"), ("rewind", "re-driven")):
            steps = driver.find_elements(By.CSS_SELECTOR, "#step-rows li")
            steps[1].find_element(By.CSS_SELECTOR, f"button.{move}").click()
            question = wait.until(shown.alert_is_present())
            seen[f"{move}_question"] = question.text
            question.accept()
            wait.until(shown.text_to_be_present_in_element((By.ID, "notice"), notice))
            seen[f"{move}_notice"] = driver.find_element(By.ID, "notice").text
    return seen


async def test_the_page_shows_versions_and_forks_and_rewinds_a_run_at_a_step(
    store: SqliteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium manager must never download a driver
    for id in ("t1", "w1"):
        await store.ingest(Task(id, f"plan {id}", room=f"room-{id}"))
        claim = await store.claim("w", leaderless=True)
        assert claim is not None
        for name in ("search", "draft", "send"):
            await store.record_step(claim, name, '"x"', version="1.4" if id == "t1" else "1.5")
        if id == "t1":
            await store.fail(claim, "boom", permanent=True)
        else:
            await store.park(claim, store.clock() + 3600, "sleeping")
    ARTIFACTS.mkdir(exist_ok=True)
    async with running_admin(tmp_path, partial(OpsRoutes, store), store=store) as admin:
        seen = await trio.to_thread.run_sync(look, f"{admin.url}/ops", ARTIFACTS)
    assert seen["versions"] == ["1.5 1"]  # t1 is dead: not in flight
    search, draft, _ = seen["steps"]
    assert search.startswith("search · attempt 1 · version 1.4 · 3 bytes")
    assert search.endswith("Rewind here Fork here")
    assert seen["fork_question"].startswith("Fork task t1 at step draft?")
    assert (
        seen["fork_notice"] == "forked task t1 at step 'draft' into t1~fork1 (1 record(s) copied)"
    )
    assert seen["rewind_question"].startswith("Rewind task t1 to step draft?")
    assert "re-driven" in seen["rewind_notice"]
    assert [s.name for s in await store.steps("t1~fork1")] == ["search"]
    assert [s.name for s in await store.steps("t1")] == ["search"]
    assert await store.state("t1") is S.PENDING
    assert draft.startswith("draft")
