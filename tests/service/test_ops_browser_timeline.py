"""The operator page's task timeline in headless Chromium (issue #48): a task's recorded steps
and its questions to the person show in their sections, as ``tether store show`` lists them
(the Steps section was always empty: the page's document carried neither)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from support.browser import NEEDS_CHROMIUM, chromium
from support.observe import ADMIN_TOKEN, running_admin
from tether.bridge import SqliteStore, Task
from tether.bridge.service._ops_routes import OpsRoutes

pytestmark = NEEDS_CHROMIUM


def show_task(url: str, task_id: str) -> dict[str, Any]:
    """Authenticate, show ``task_id``'s timeline, and read its sections (blocking)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as shown
    from selenium.webdriver.support.ui import WebDriverWait

    with chromium() as driver:
        driver.get(url)
        wait = WebDriverWait(driver, 20, poll_frequency=0.05)
        wait.until(shown.text_to_be_present_in_element((By.ID, "notice"), "admin token"))
        driver.find_element(By.ID, "token").send_keys(ADMIN_TOKEN)
        driver.find_element(By.ID, "use").click()
        driver.find_element(By.ID, "task-id").send_keys(task_id)
        driver.find_element(By.CSS_SELECTOR, "#show button").click()
        wait.until(shown.text_to_be_present_in_element((By.ID, "step-rows"), "search"))
        return {
            "steps": driver.find_element(By.ID, "step-rows").text,
            "asks": driver.find_element(By.ID, "ask-rows").text,
            "asks_shown": driver.find_element(By.ID, "asks").is_displayed(),
        }


async def test_the_timeline_shows_a_tasks_steps_and_questions(
    store: SqliteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium manager must never download a driver
    task = Task("t1", "a table for 4", room="r", headers={"sender": "ann"})
    await store.ingest(task, room_policy="serial")
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    await store.record_step(claim, "search", '"T-4"')
    await store.ask(
        claim, "~ask:1", "8 pm, book it?", store.clock() + 600, "asked", answer_from=["ann"]
    )
    async with running_admin(tmp_path, partial(OpsRoutes, store), store=store) as admin:
        seen = await trio.to_thread.run_sync(show_task, f"{admin.url}/ops", "t1")
    assert seen["steps"].startswith("search · attempt 1 · 5 bytes · recorded ")
    assert seen["asks_shown"]
    assert seen["asks"] == "~ask:1: 8 pm, book it? · open (not yet shown), from ann"
