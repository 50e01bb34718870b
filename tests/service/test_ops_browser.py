"""The operator page in headless Chromium on a real bridge (issue 40.3): an agent gives up on a
message the first time; the operator opens the page, pastes the admin token, sees the dead
letter with its reason, clicks Retry, and the same bridge answers the person. Screenshots of
what the operator saw go to test-artifacts/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from support.browser import ARTIFACTS, NEEDS_CHROMIUM, chromium
from support.gateway import RunningGateway
from support.service import admin_bridge_config
from support.waiting import wait_until
from tether import ChildSpec, open_runtime
from tether.bridge import BridgeService, CustodyState, Permanent, SqliteStore, Task

pytestmark = NEEDS_CHROMIUM

ADMIN_TOKEN = "ops-page-admin-token-81c2"
GAVE_UP = 'the upstream model refused <img src=x onerror="document.title=1"> (first try)'
"""A reason that looks like markup: the page shows it as text, nothing runs."""


def retry_from_the_page(url: str, task_id: str, shots: Path) -> dict[str, Any]:
    """Authenticate, find the dead letter, click Retry, then follow the task's timeline until
    it is delivered (blocking: run it in a thread). Returns what the page showed."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as shown
    from selenium.webdriver.support.ui import WebDriverWait

    dead_row = (By.CSS_SELECTOR, f'#dead-rows tr[data-id="{task_id}"]')
    seen: dict[str, Any] = {}
    with chromium(window="1100,1400") as driver:
        driver.get(url)
        wait = WebDriverWait(driver, 20, poll_frequency=0.05)
        wait.until(shown.text_to_be_present_in_element((By.ID, "notice"), "admin token"))
        driver.find_element(By.ID, "token").send_keys(ADMIN_TOKEN)
        driver.find_element(By.ID, "use").click()
        row = wait.until(shown.presence_of_element_located(dead_row))
        seen["dead_row"] = row.text
        seen["health"] = driver.find_element(By.ID, "health").text
        seen["pool"] = driver.find_element(By.ID, "pool-summary").text
        seen["images"] = len(driver.find_elements(By.TAG_NAME, "img"))
        seen["title"] = driver.title
        driver.save_screenshot(str(shots / "ops-page-dead-letter.png"))
        row.find_element(By.CSS_SELECTOR, "button.retry").click()
        wait.until(shown.text_to_be_present_in_element((By.ID, "notice"), "re-driven"))
        seen["notice"] = driver.find_element(By.ID, "notice").text
        wait.until(shown.invisibility_of_element_located(dead_row))  # live: no reload
        driver.find_element(By.ID, "task-id").send_keys(task_id)
        driver.find_element(By.CSS_SELECTOR, "#show button").click()
        wait.until(shown.text_to_be_present_in_element((By.ID, "task-summary"), "delivered"))
        seen["journal"] = driver.find_element(By.ID, "journal-rows").text
        seen["url"] = driver.current_url
        seen["storage"] = driver.execute_script("return Object.keys(sessionStorage)")
        seen["cookies"] = driver.get_cookies()
        driver.save_screenshot(str(shots / "ops-page-retried.png"))
    return seen


async def test_a_dead_letter_retried_from_the_page_is_answered(
    gateway: RunningGateway,
    token_file: Path,
    store: SqliteStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium manager must never download a driver
    runs: list[str] = []

    async def handle(task: Task) -> str:
        runs.append(task.id)
        if len(runs) == 1:
            raise Permanent(GAVE_UP)
        return f"answer to {task.body}"

    def factory(session: Any) -> None:
        session.add_handler("task", handle)

    config = admin_bridge_config(
        gateway.url, token_file, tmp_path, ADMIN_TOKEN, workers=1, reconcile_interval=0.5
    )
    service = BridgeService(config, store=store, factory=factory)
    task_id = await gateway.submit("a hard question")
    async with open_runtime(handle_signals=False) as runtime:
        await runtime.supervisor.start_child(
            ChildSpec("bridge", service.run, shutdown_grace=service.stop_grace)
        )

        async def dead() -> bool:
            return await store.state(task_id) is CustodyState.DEAD

        await wait_until(dead, within=20)
        ARTIFACTS.mkdir(exist_ok=True)
        seen = await trio.to_thread.run_sync(
            retry_from_the_page, f"http://127.0.0.1:{service.admin_port}/ops", task_id, ARTIFACTS
        )
        with trio.fail_after(20):
            while (message := await gateway.message(task_id, wait=2))["status"] != "answered":
                pass

    assert message["reply"] == "answer to a hard question"
    assert runs == [task_id, task_id]
    assert GAVE_UP in seen["dead_row"]  # as text: no element made of it, nothing ran
    assert (seen["images"], seen["title"]) == (0, "tether operator")
    assert seen["health"] == "healthy"
    assert "Leader: tether-bridge-" in seen["pool"]
    assert "Lead sweeps here: p50 " in seen["pool"]  # issue #56
    assert seen["notice"] == f"task {task_id!r} re-driven: dead -> pending"
    journal = seen["journal"].splitlines()
    assert any("dead → pending" in line and "operator" in line for line in journal), journal
    assert "result → delivered" in journal[-1]
    # the token lives in this tab's sessionStorage only: never in the address, never a cookie
    assert ADMIN_TOKEN not in seen["url"]
    assert seen["storage"] == ["tether-admin-token"]
    assert seen["cookies"] == []
    for shot in ("ops-page-dead-letter.png", "ops-page-retried.png"):
        assert (ARTIFACTS / shot).stat().st_size > 10_000
