"""The chat page's tenant (issue #38, item 3) in headless Chromium: ``?tenant=`` prefills the
Tenant field, a message sent with it names that tenant, and one sent with the field cleared
names none (so a demo opens one tab per tenant)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from support.browser import NEEDS_CHROMIUM, chromium
from support.gateway_fixtures import StartGateway

pytestmark = NEEDS_CHROMIUM


def send_twice(url: str) -> dict[str, Any]:
    """Open the page at ``url``, send one message with the prefilled tenant and one with the
    field cleared; returns the prefilled value and the two message ids (blocking)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    with chromium() as driver:
        wait = WebDriverWait(driver, 20, poll_frequency=0.05)
        driver.get(url)
        wait.until(expected_conditions.text_to_be_present_in_element((By.ID, "notice"), "lobby"))
        tenant = driver.find_element(By.ID, "tenant")
        seen: dict[str, Any] = {"prefilled": tenant.get_attribute("value")}
        sent = (By.CSS_SELECTOR, "li[data-id]")
        for n, text in enumerate(["from acme", "from nobody"], start=1):
            if n == 2:
                tenant.clear()
            driver.find_element(By.ID, "text").send_keys(text)
            driver.find_element(By.ID, "send").click()
            wait.until(
                expected_conditions.presence_of_element_located(
                    (By.CSS_SELECTOR, f"li[data-id]:nth-child({n})")
                )
            )
        seen["ids"] = [item.get_attribute("data-id") for item in driver.find_elements(*sent)]
        return seen


async def test_the_page_sends_the_tenant_its_link_names_and_none_once_cleared(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium manager must never download a driver
    gateway = await start_gateway()
    seen = await trio.to_thread.run_sync(
        send_twice, f"{gateway.url}/?tenant=acme#token={gateway.token}"
    )
    assert seen["prefilled"] == "acme"
    first, second = seen["ids"]
    assert (await gateway.message(first))["tenant"] == "acme"
    assert (await gateway.message(second))["tenant"] is None
