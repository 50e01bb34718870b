"""The chat page end to end in headless Chromium: a message goes out, the reply shows up."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import httpx
import pytest
import trio

from support.browser import ARTIFACTS as ARTIFACTS
from support.browser import CHROMEDRIVER as CHROMEDRIVER
from support.browser import CHROMIUM as CHROMIUM
from support.browser import FLAGS as FLAGS
from support.browser import NEEDS_CHROMIUM
from support.gateway_fixtures import StartGateway
from tether.bridge import GatewayClient

pytestmark = NEEDS_CHROMIUM


def chat_in_browser(
    url: str, text: str, screenshot: Path, outcome: str = "answered"
) -> dict[str, str]:
    """Drive the page (blocking: run it in a thread); returns what the page showed once the
    reply's ``data-status`` is ``outcome`` (``answered``, or ``failed`` for a rejection)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    with tempfile.TemporaryDirectory(prefix="tether-chromium-") as profile:
        options = Options()
        options.binary_location = str(CHROMIUM)
        for flag in [*FLAGS, f"--user-data-dir={profile}"]:
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        try:
            driver.get(url)
            wait = WebDriverWait(driver, 20)
            wait.until(
                expected_conditions.text_to_be_present_in_element((By.ID, "notice"), "lobby")
            )
            driver.find_element(By.ID, "text").send_keys(text)
            driver.find_element(By.ID, "send").click()
            answered = (By.CSS_SELECTOR, f'.reply[data-status="{outcome}"]')
            wait.until(expected_conditions.presence_of_element_located(answered))
            shown = {
                "question": driver.find_element(By.CSS_SELECTOR, ".message .text").text,
                "reply": driver.find_element(*answered).text,
                "url": driver.current_url,
                "page": driver.find_element(By.TAG_NAME, "body").text,
            }
            screenshot.parent.mkdir(exist_ok=True)
            driver.save_screenshot(str(screenshot))
            driver.refresh()  # the room's history comes back from the gateway
            wait.until(expected_conditions.presence_of_element_located(answered))
            shown["reply_after_reload"] = driver.find_element(*answered).text
            return shown
        finally:
            driver.quit()


async def test_message_sent_from_the_page_gets_its_reply_shown(
    start_gateway: StartGateway, client_token_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium manager must never download a driver
    gateway = await start_gateway()
    screenshot = ARTIFACTS / "gateway-chat.png"
    if screenshot.exists():
        os.unlink(screenshot)
    answered: list[str] = []

    async def worker(client: GatewayClient) -> None:
        while True:
            for task in await client.poll_tasks(wait=5):
                await client.ack(task.id)
                await client.post_result(task.id, f"pong: {task.body}", worker="page-test")
                answered.append(task.id)
                return

    async with (
        GatewayClient(gateway.url, client_token_file) as client,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(worker, client)
        shown = await trio.to_thread.run_sync(
            chat_in_browser, f"{gateway.url}/#token={gateway.token}", "ping", screenshot
        )

    assert shown["question"] == "ping"
    assert shown["reply"] == shown["reply_after_reload"] == "pong: ping"
    assert "token" not in shown["url"], "the page must drop the token from its address"
    assert len(answered) == 1
    assert screenshot.stat().st_size > 1000


async def test_a_message_the_bridge_gave_up_on_shows_a_plain_sentence_not_the_error(
    start_gateway: StartGateway,
    client_token_file: Path,
    http: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 32.8: the person saw "No reply: the bridge gave up on this message:
    FlakyFailure: ...". They get a sentence and a reference to quote; the reason stays with
    the operators (the gateway's log, the message's ``reason`` field, ``tether store show``)."""
    monkeypatch.setenv("SE_OFFLINE", "true")
    gateway = await start_gateway()
    screenshot = ARTIFACTS / "gateway-chat-failed.png"
    reason = (
        "the bridge gave up on this message: attempt 5 of 5 failed: "
        "tether.agents.flaky.FlakyFailure: the flaky agent failed on purpose"
    )
    rejected: list[str] = []

    async def worker(client: GatewayClient) -> None:
        while True:
            for task in await client.poll_tasks(wait=5):
                await client.ack(task.id)
                assert await client.reject(task.id, reason)
                rejected.append(task.id)
                return

    async with (
        GatewayClient(gateway.url, client_token_file) as client,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(worker, client)
        shown = await trio.to_thread.run_sync(
            chat_in_browser, f"{gateway.url}/#token={gateway.token}", "crash", screenshot, "failed"
        )
    (task_id,) = rejected
    assert shown["reply"] == shown["reply_after_reload"] == failed_sentence(task_id)
    for detail in ("FlakyFailure", "tether.agents", "gave up", "attempt 5"):
        assert detail not in shown["page"], f"the page shows {detail!r}"
    # the operators keep the whole reason
    view = await http.get(
        f"{gateway.url}/v1/messages/{task_id}",
        headers={"Authorization": f"Bearer {gateway.token}"},
    )
    assert view.json()["reason"] == reason


def failed_sentence(task_id: str) -> str:
    """What the page says for a message that ended without a reply."""
    return (
        f"No reply: something went wrong and this message was not answered (reference {task_id})."
    )
