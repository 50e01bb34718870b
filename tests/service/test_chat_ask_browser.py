"""The chat page while an agent asks the person (issue 47.4), in headless Chromium on a real
gateway and a real bridge: the page said "queued for an agent..." while the question waited,
showed the final reply above the person's answer, and the answer itself read "(closed without
a reply)". The page shows the person's message, the agent's question, the person's answer and
the reply, in that order (after a reload too), and says it waits for the person's answer.
Screenshots go to test-artifacts/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from support.browser import ARTIFACTS, NEEDS_CHROMIUM, chromium
from support.gateway import RunningGateway
from support.service import admin_bridge_config
from tether import ChildSpec, Session, open_runtime
from tether.bridge import BridgeService, SqliteStore, Task, run_of

pytestmark = NEEDS_CHROMIUM

ASKED = "which day: friday or saturday?"


async def handle(task: Task) -> str:
    answer = await run_of(task).ask(ASKED, timeout=300)
    return f"booked a table for {answer}"


def factory(session: Session) -> None:
    session.add_handler("task", handle)


def turns(driver: Any) -> list[str]:
    """The conversation as the page shows it, in order: each shown message, question, reply
    and status line (hidden and empty parts left out)."""
    from selenium.webdriver.common.by import By

    parts = driver.find_elements(
        By.CSS_SELECTOR, "#messages .text, #messages .question, #messages .reply"
    )
    return [p.text for p in parts if p.text]


def ask_and_answer(url: str, shots: Path) -> dict[str, Any]:
    """Send a message, wait for the agent's question, answer it, wait for the reply (blocking:
    run it in a thread). Returns what the page showed at each point."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as shown
    from selenium.webdriver.support.ui import WebDriverWait

    seen: dict[str, Any] = {}
    with chromium(window="900,900") as driver:
        driver.get(url)
        wait = WebDriverWait(driver, 30, poll_frequency=0.05)
        wait.until(shown.text_to_be_present_in_element((By.ID, "notice"), "lobby"))
        driver.find_element(By.ID, "text").send_keys("a table for two, please")
        driver.find_element(By.ID, "send").click()
        wait.until(shown.text_to_be_present_in_element((By.CSS_SELECTOR, ".question"), ASKED))
        seen["waiting"] = turns(driver)
        driver.save_screenshot(str(shots / "chat-ask-waiting.png"))
        driver.find_element(By.ID, "text").send_keys("saturday")
        driver.find_element(By.ID, "send").click()
        replied = (By.CSS_SELECTOR, '.reply[data-status="answered"]')
        wait.until(shown.presence_of_element_located(replied))
        seen["answered"] = turns(driver)
        driver.save_screenshot(str(shots / "chat-ask-answered.png"))
        driver.refresh()  # the room's history comes back from the gateway
        wait.until(shown.presence_of_element_located(replied))
        seen["reloaded"] = turns(driver)
        seen["page"] = driver.find_element(By.TAG_NAME, "body").text
    return seen


async def test_the_chat_page_shows_question_answer_and_reply_in_order(
    gateway: RunningGateway,
    token_file: Path,
    store: SqliteStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium manager must never download a driver
    config = admin_bridge_config(gateway.url, token_file, tmp_path, "chat-ask-admin", workers=1)
    service = BridgeService(config, store=store, factory=factory)
    ARTIFACTS.mkdir(exist_ok=True)
    async with open_runtime(handle_signals=False) as runtime:
        await runtime.supervisor.start_child(
            ChildSpec("bridge", service.run, shutdown_grace=service.stop_grace)
        )
        seen = await trio.to_thread.run_sync(
            ask_and_answer, f"{gateway.url}/#token={gateway.token}", ARTIFACTS
        )
    # while the question waits: the question, and a status that says whose turn it is
    assert seen["waiting"] == [
        "a table for two, please",
        ASKED,
        "waiting for your answer to the question above…",
    ]
    expected = ["a table for two, please", ASKED, "saturday", "booked a table for saturday"]
    assert seen["answered"] == expected
    assert seen["reloaded"] == expected
    assert "closed without a reply" not in seen["page"]
    assert "queued for an agent" not in seen["page"]
