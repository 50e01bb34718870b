"""Headless Chromium for the page tests (the gateway's chat page, the operator page): the
Debian ``chromium`` + ``chromium-driver`` packages driven by selenium, never a download.
Screenshots go to ``ARTIFACTS`` (test-artifacts/ at the repository's root)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

NEEDS_CHROMIUM = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason="needs the Debian packages chromium and chromium-driver (.ci/run installs them)",
    ),
]

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-quic",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1000,700",
]


@contextmanager
def chromium(window: str = "1000,700") -> Iterator[Any]:
    """A selenium Chrome driver on a fresh profile, quit at the end (blocking: use it in a
    thread). Set ``SE_OFFLINE=true`` first: selenium's manager must never download a driver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="tether-chromium-") as profile:
        options = Options()
        options.binary_location = str(CHROMIUM)
        flags = [f for f in FLAGS if not f.startswith("--window-size=")]
        for flag in [*flags, f"--window-size={window}", f"--user-data-dir={profile}"]:
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        try:
            yield driver
        finally:
            driver.quit()
