"""The chat page as a person reads it, in headless Chromium (issue 32.8): it follows the
newest message as replies arrive, and each reply says who answered and when. Screenshots of
what the person saw go to test-artifacts/."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from support.gateway_fixtures import StartGateway
from tether.bridge import GatewayClient

from .test_browser import ARTIFACTS, CHROMEDRIVER, CHROMIUM, FLAGS

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason="needs the Debian packages chromium and chromium-driver (.ci/run installs them)",
    ),
]

EARLIER = 12  # enough history to overflow the 700-pixel window
REPLY_LINES = 15
CLOCK = re.compile(r"\d{1,2}:\d{2}:\d{2}")


def long_reply(body: str) -> str:
    return "\n".join(f"{body}: line {n}" for n in range(1, REPLY_LINES + 1))


def follow_in_browser(url: str) -> dict[str, Any]:
    """Open a room with history, send one message, wait for its long reply; report where the
    page was scrolled and what the reply's label said (blocking: run it in a thread)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    gap_js = (  # pixels of the message list below the visible part
        "const m = document.querySelector('main');"
        "return m.scrollHeight - m.scrollTop - m.clientHeight;"
    )
    seen: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tether-chromium-") as profile:
        options = Options()
        options.binary_location = str(CHROMIUM)
        for flag in [*FLAGS, f"--user-data-dir={profile}"]:
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        try:
            wait = WebDriverWait(driver, 20, poll_frequency=0.05)
            driver.get(url)
            wait.until(
                expected_conditions.text_to_be_present_in_element((By.ID, "notice"), "lobby")
            )
            newest = f"li.message:nth-child({EARLIER + 1})"
            driver.find_element(By.ID, "text").send_keys("the newest")
            driver.find_element(By.ID, "send").click()
            answered = (By.CSS_SELECTOR, f'{newest} .reply[data-status="answered"]')
            wait.until(expected_conditions.presence_of_element_located(answered))
            seen["gap"] = driver.execute_script(gap_js)
            ARTIFACTS.mkdir(exist_ok=True)
            driver.save_screenshot(str(ARTIFACTS / "gateway-chat-newest.png"))
            seen["reply"] = driver.find_element(*answered).text
            seen["from"] = driver.find_element(By.CSS_SELECTOR, f"{newest} .from").text
            labels = driver.find_elements(By.CSS_SELECTOR, f"{newest} .meta")
            seen["meta"] = labels[0].text if labels else ""
            return seen
        finally:
            driver.quit()


async def test_the_page_follows_the_newest_reply_and_labels_it_with_agent_and_time(
    start_gateway: StartGateway,
    client_token_file: Path,
    http: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium manager must never download a driver
    gateway = await start_gateway()
    auth = {"Authorization": f"Bearer {gateway.token}"}

    async def worker(client: GatewayClient) -> None:
        while True:
            for task in await client.poll_tasks(wait=5):
                await client.ack(task.id)
                await client.post_result(task.id, long_reply(task.body), worker="agent-w1")

    async with (
        GatewayClient(gateway.url, client_token_file) as client,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(worker, client)
        for n in range(EARLIER):
            await http.post(
                f"{gateway.url}/v1/messages",
                json={"room": "lobby", "text": f"earlier {n}", "id": f"e{n}"},
                headers=auth,
            )
        for n in range(EARLIER):
            view = await http.get(
                f"{gateway.url}/v1/messages/e{n}", params={"wait": 20}, headers=auth
            )
            assert view.json()["status"] == "answered"
        seen = await trio.to_thread.run_sync(
            follow_in_browser, f"{gateway.url}/#token={gateway.token}"
        )
        nursery.cancel_scope.cancel()

    assert seen["reply"] == long_reply("the newest")
    assert seen["gap"] <= 2, f"the newest reply is {seen['gap']} px below the fold"
    assert seen["meta"].startswith("agent-w1 · "), seen["meta"]
    assert CLOCK.search(seen["meta"]), seen["meta"]
    assert seen["from"].startswith("user · "), seen["from"]
    assert CLOCK.search(seen["from"]), seen["from"]
