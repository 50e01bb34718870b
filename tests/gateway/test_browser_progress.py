"""A message's life on the chat page, live, in headless Chromium: a real bridge streams a reply
(its partial text shows before the reply), a slow run raises a stall notice, a failing one
ends as a dead letter, said in a plain sentence. Screenshots are kept in test-artifacts/."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import trio

from support.gateway_fixtures import StartGateway
from tether import Session
from tether.agents import slow_stream
from tether.bridge import BridgeConfig, BridgeService, Task

from .test_browser import ARTIFACTS, CHROMEDRIVER, CHROMIUM, FLAGS

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason="needs the Debian packages chromium and chromium-driver (.ci/run installs them)",
    ),
]

STORY = "tell me a story about progress people can see"


def agent(session: Session) -> None:
    """slow_stream (0.25 s a word) for most messages; "slow..." takes 6 s saying nothing
    more; "crash" fails (one attempt allowed: a dead letter)."""

    @session.on("task")
    async def handle(task: Task) -> str:
        if task.body == "crash":
            raise RuntimeError("boom: the agent fell over")
        if task.body.startswith("slow"):
            await trio.sleep(6.0)
            return "done, slowly"
        return await slow_stream.answer(task, delay=0.25)


def watch_page(url: str) -> dict[str, Any]:
    """Drive the page (blocking: run it in a thread) and report what it showed when."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    seen: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tether-chromium-") as profile:
        options = Options()
        options.binary_location = str(CHROMIUM)
        for flag in [*FLAGS, f"--user-data-dir={profile}"]:
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        wait = WebDriverWait(driver, 60, poll_frequency=0.05)

        def send(text: str) -> None:
            driver.find_element(By.ID, "text").send_keys(text)
            driver.find_element(By.ID, "send").click()

        def reply_of(n: int, status: str) -> Any:
            found = driver.find_elements(
                By.CSS_SELECTOR, f'li.message:nth-child({n}) .reply[data-status="{status}"]'
            )
            return found[0] if found else False

        def shot(name: str) -> None:
            ARTIFACTS.mkdir(exist_ok=True)
            driver.save_screenshot(str(ARTIFACTS / name))

        try:
            driver.get(url)
            wait.until(
                expected_conditions.text_to_be_present_in_element((By.ID, "notice"), "lobby")
            )
            # 1. a streamed reply: partial text first, then the whole reply
            send(STORY)
            streaming = wait.until(lambda d: reply_of(1, "streaming"))
            seen["partial"] = streaming.text
            seen["life"] = driver.find_element(
                By.CSS_SELECTOR, "li.message:nth-child(1) .life"
            ).text
            shot("gateway-progress-streaming.png")
            seen["reply"] = wait.until(lambda d: reply_of(1, "answered")).text
            seen["life_after"] = driver.find_element(
                By.CSS_SELECTOR, "li.message:nth-child(1) .life"
            ).is_displayed()
            # 2. a slow run: the stall notice shows while it works, then the reply
            send("slow: think hard")
            stall = (By.CSS_SELECTOR, "li.message:nth-child(2) .stall")
            wait.until(expected_conditions.visibility_of_element_located(stall))
            seen["stall"] = driver.find_element(*stall).text
            seen["stalled_reply"] = driver.find_element(
                By.CSS_SELECTOR, "li.message:nth-child(2) .reply"
            ).text
            shot("gateway-progress-stall.png")
            seen["slow_reply"] = wait.until(lambda d: reply_of(2, "answered")).text
            # 3. a dead letter: a plain sentence, the reason stays with the operators
            send("crash")
            seen["dead"] = wait.until(lambda d: reply_of(3, "failed")).text
            shot("gateway-progress-dead.png")
            return seen
        finally:
            driver.quit()


async def test_the_page_shows_streaming_stalls_and_dead_letters_live(
    start_gateway: StartGateway,
    client_token_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium manager must never download a driver
    gateway = await start_gateway()
    config = BridgeConfig(
        gateway=gateway.url,
        token_file=client_token_file,
        store=str(tmp_path / "custody.db"),
        workers=1,
        poll_wait=0.5,
        stall_after=1.0,
        max_attempts=1,
        grace=1.0,
        synchronous="NORMAL",
    )
    service = BridgeService(config, factory=agent, freeze_gc=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        seen = await trio.to_thread.run_sync(watch_page, f"{gateway.url}/#token={gateway.token}")
        nursery.cancel_scope.cancel()

    final = f"stream: {STORY}"
    assert seen["reply"] == final
    # the partial reply showed before the reply was whole
    assert seen["partial"].startswith("stream:")
    assert final.startswith(seen["partial"])
    assert seen["partial"] != final
    assert seen["life"].startswith("working since ")
    assert seen["life_after"] is False  # the life line goes once the reply is there
    assert seen["stall"].startswith("Taking longer than usual:")
    assert seen["stalled_reply"] == "an agent is working on it…"
    assert seen["slow_reply"] == "done, slowly"
    assert seen["dead"].startswith("No reply: something went wrong")
    assert "boom" not in seen["dead"]  # the agent's error is for the operators
    for name in ("streaming", "stall", "dead"):
        assert (ARTIFACTS / f"gateway-progress-{name}.png").stat().st_size > 1000
