"""The chat page and a room's bounded history (issue #48) in headless Chromium: a long
message shows cut, with a button that reads it whole; a short one has no button."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from support.browser import NEEDS_CHROMIUM, chromium
from support.gateway_fixtures import StartGateway
from tether.gateway._history import SHOWN_CHARS

pytestmark = NEEDS_CHROMIUM


def open_whole(url: str, long_id: str, short_id: str) -> dict[str, Any]:
    """Open the room, read the long message as shown, click its button (blocking)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as shown
    from selenium.webdriver.support.ui import WebDriverWait

    with chromium() as driver:
        wait = WebDriverWait(driver, 20, poll_frequency=0.05)
        driver.get(url)
        wait.until(shown.text_to_be_present_in_element((By.ID, "notice"), "lobby"))
        item = driver.find_element(By.CSS_SELECTOR, f'li[data-id="{long_id}"]')
        short = driver.find_element(By.CSS_SELECTOR, f'li[data-id="{short_id}"]')
        seen: dict[str, Any] = {
            "cut": len(item.find_element(By.CSS_SELECTOR, ".text").text),
            "button": item.find_element(By.CSS_SELECTOR, "button.whole").is_displayed(),
            "short_button": short.find_element(By.CSS_SELECTOR, "button.whole").is_displayed(),
        }
        item.find_element(By.CSS_SELECTOR, "button.whole").click()
        wait.until(lambda _: len(item.find_element(By.CSS_SELECTOR, ".reply").text) == 9_000)
        seen["whole"] = len(item.find_element(By.CSS_SELECTOR, ".text").text)
        seen["button_after"] = item.find_element(By.CSS_SELECTOR, "button.whole").is_displayed()
        return seen


async def test_a_cut_message_is_shown_whole_on_a_click(
    start_gateway: StartGateway, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium manager must never download a driver
    gateway = await start_gateway()
    headers = gateway.headers()
    ids = [await gateway.submit("w" * 5_000), await gateway.submit("short")]
    replies = dict(zip(ids, ("r" * 9_000, "ok"), strict=True))
    tasks = (await http.get(f"{gateway.url}/v1/tasks", headers=headers)).json()["tasks"]
    assert sorted(task["id"] for task in tasks) == sorted(ids)
    for id, body in replies.items():
        ack = {"id": id, "durable": True}
        await http.post(f"{gateway.url}/v1/tasks/{id}/ack", json=ack, headers=headers)
        await http.post(f"{gateway.url}/v1/results", json={"id": id, "body": body}, headers=headers)
    url = f"{gateway.url}/#token={gateway.token}"
    seen = await trio.to_thread.run_sync(open_whole, url, ids[0], ids[1])
    assert (seen["cut"], seen["button"], seen["short_button"]) == (SHOWN_CHARS, True, False)
    assert (seen["whole"], seen["button_after"]) == (5_000, False)
