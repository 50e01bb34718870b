"""The operator page's limits and tenants, and its Cancel, in headless Chromium (issue 47.9):
opened by a ``#token=`` link as the bridge's start line says, it shows each key's cap, permits
held, runs waiting, pause and rate, and each tenant's weight and share of turns; Cancel asks
first, and a dismissed question changes nothing. Screenshots go to test-artifacts/."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from support.browser import ARTIFACTS, NEEDS_CHROMIUM, chromium
from support.observe import ADMIN_TOKEN, running_admin
from tether.bridge import CustodyState, SqliteStore
from tether.bridge.service._ops_routes import OpsRoutes

from .test_ops_routes import _limited_and_shared

pytestmark = NEEDS_CHROMIUM


def look_and_cancel(url: str, task_id: str, shots: Path) -> dict[str, Any]:
    """Open the page by its ``#token=`` link, read the limits and tenants, click Cancel on
    ``task_id`` twice: dismiss the question, then accept it (blocking: run it in a thread)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as shown
    from selenium.webdriver.support.ui import WebDriverWait

    seen: dict[str, Any] = {}
    row = (By.CSS_SELECTOR, f'#flight-rows tr[data-id="{task_id}"]')
    with chromium(window="1100,1700") as driver:
        driver.get(f"{url}#token={ADMIN_TOKEN}")
        wait = WebDriverWait(driver, 20, poll_frequency=0.05)
        wait.until(shown.presence_of_element_located((By.CSS_SELECTOR, "#limit-rows tr")))
        wait.until(shown.presence_of_element_located((By.CSS_SELECTOR, "#tenant-rows tr")))
        seen["url"] = driver.current_url
        seen["limits"] = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#limit-rows tr")]
        seen["tenants"] = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#tenant-rows tr")]
        seen["limit_head"] = driver.find_element(By.CSS_SELECTOR, "#limits thead").text
        seen["tenant_head"] = driver.find_element(By.CSS_SELECTOR, "#tenants thead").text
        driver.find_element(By.ID, "limits").screenshot(str(shots / "ops-page-limits.png"))
        driver.save_screenshot(str(shots / "ops-page-limits-full.png"))
        cancel = wait.until(shown.presence_of_element_located(row))
        cancel.find_element(By.CSS_SELECTOR, "button.cancel").click()
        question = wait.until(shown.alert_is_present())
        seen["question"] = question.text
        question.dismiss()
        seen["after_dismiss"] = driver.find_element(By.ID, "notice").text
        cancel.find_element(By.CSS_SELECTOR, "button.cancel").click()
        wait.until(shown.alert_is_present()).accept()
        wait.until(shown.text_to_be_present_in_element((By.ID, "notice"), "cancelled"))
        seen["notice"] = driver.find_element(By.ID, "notice").text
    return seen


async def test_the_page_shows_limits_and_shares_and_cancel_asks_first(
    store: SqliteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium manager must never download a driver
    await _limited_and_shared(store)
    ARTIFACTS.mkdir(exist_ok=True)
    async with running_admin(tmp_path, partial(OpsRoutes, store), store=store) as admin:
        states_before = {id: await store.state(id) for id in ("t1", "t2", "t3")}
        seen = await trio.to_thread.run_sync(look_and_cancel, f"{admin.url}/ops", "t1", ARTIFACTS)
    assert ADMIN_TOKEN not in seen["url"]  # the link's token is kept, and dropped from view
    assert seen["limit_head"] == "key rate burst tokens cap held waiting paused"
    (limit,) = seen["limits"]
    # cap 2, both held, the third run's wait (a waiter counts while its wait is fresh), paused
    assert re.fullmatch(r"openai:gpt-4o 8\.33/s 50 \d+\.\d 2 2 [01] for (9\.\d|10\.0) min", limit)
    assert seen["tenant_head"] == "tenant weight share of turns pending"
    assert sorted(seen["tenants"]) == ["acme 3 75% 2", "globex 1 25% 1"]
    assert seen["question"].startswith("Cancel task t1?")
    assert "cancelled" not in seen["after_dismiss"]  # dismissed: nothing was sent
    assert "dead letter" in seen["question"]
    assert states_before["t1"] is CustodyState.PENDING
    assert seen["notice"] == "task 't1' cancelled: pending -> dead"
    assert await store.state("t1") is CustodyState.DEAD  # accepted: cancelled
    assert await store.state("t2") is CustodyState.PENDING
    for shot in ("ops-page-limits.png", "ops-page-limits-full.png"):
        assert (ARTIFACTS / shot).stat().st_size > 5_000
