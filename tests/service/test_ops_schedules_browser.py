"""The operator page's schedules, kept events and runs waiting on an event key, in headless
Chromium (issue #52): each schedule's rule, room, next due time (or paused) and count; each
kept event's key; a run parked on an event shows its key and when it times out, with its
Cancel; a kept event's Drop asks first, then drops it. Screenshots go to test-artifacts/."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from support.browser import ARTIFACTS, NEEDS_CHROMIUM, chromium
from support.observe import ADMIN_TOKEN, running_admin
from tether.bridge import SqliteStore, Task
from tether.bridge.custody._schedules import ScheduleSpec
from tether.bridge.service._ops_routes import OpsRoutes

pytestmark = NEEDS_CHROMIUM


def look(url: str, shots: Path) -> dict[str, Any]:
    """Open the page by its ``#token=`` link and read its schedule, event and waiting rows
    (blocking: run it in a thread)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as shown
    from selenium.webdriver.support.ui import WebDriverWait

    seen: dict[str, Any] = {}
    with chromium(window="1100,1900") as driver:
        driver.get(f"{url}#token={ADMIN_TOKEN}")
        wait = WebDriverWait(driver, 20, poll_frequency=0.05)
        for rows in ("#schedule-rows tr", "#event-rows tr", "#waiting-rows tr"):
            wait.until(shown.presence_of_element_located((By.CSS_SELECTOR, rows)))
        for name in ("schedule", "event", "waiting"):
            rows = driver.find_elements(By.CSS_SELECTOR, f"#{name}-rows tr")
            seen[name] = [r.text for r in rows]
        seen["schedule_head"] = driver.find_element(By.CSS_SELECTOR, "#schedules thead").text
        driver.find_element(By.ID, "schedules").screenshot(str(shots / "ops-page-schedules.png"))
        driver.save_screenshot(str(shots / "ops-page-schedules-full.png"))
        driver.find_element(By.CSS_SELECTOR, "#event-rows button.drop").click()
        question = wait.until(shown.alert_is_present())
        seen["question"] = question.text
        question.accept()
        wait.until(shown.text_to_be_present_in_element((By.ID, "notice"), "dropped"))
        seen["notice"] = driver.find_element(By.ID, "notice").text
    return seen


async def test_the_page_shows_schedules_kept_events_and_runs_waiting_on_a_key(
    store: SqliteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium manager must never download a driver
    await store.add_schedule(
        ScheduleSpec("morning", "team", "summary", cron="0 9 * * 1-5", tz="Europe/Paris")
    )
    await store.add_schedule(ScheduleSpec("heartbeat", "ops", "status?", every=900))
    await store.pause_schedule("heartbeat")
    await store.send_event("ci-1", "ci.pr-17", "green")
    await store.ingest(Task("order-7", "wait for the payment"))
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    await store.park_event(claim, "pay.7", (), store.clock() + 3600, "until tomorrow")
    ARTIFACTS.mkdir(exist_ok=True)
    async with running_admin(tmp_path, partial(OpsRoutes, store), store=store) as admin:
        seen = await trio.to_thread.run_sync(look, f"{admin.url}/ops", ARTIFACTS)
    assert seen["schedule_head"] == "schedule when room next due last fired fired"
    heartbeat, morning = seen["schedule"]
    assert heartbeat == "heartbeat every 15m ops paused - 0"
    assert morning.startswith("morning cron 0 9 * * 1-5 (Europe/Paris) team due in ")
    (event,) = seen["event"]
    assert event.startswith("ci-1 ci.pr-17 ")
    assert event.endswith("Drop")
    assert seen["question"].startswith("Drop event ci-1?")
    assert seen["notice"] == "event ci-1 dropped"
    assert await store.events() == []  # dropped by the page, as the operator asked
    (waiting,) = seen["waiting"]
    assert "order-7" in waiting
    assert "awaiting event pay.7" in waiting
