from __future__ import annotations

import gc
import logging
from collections.abc import Iterator

import pytest

from support import sql_record


def pytest_configure(config: pytest.Config) -> None:
    """``TETHER_SQL_RECORD=<dir>``: record every SQL statement of this session and of every
    Python process it starts (``support/sql_record.py``; ``tools/sql_diff.py`` reads them)."""
    sql_record.pytest_configure()


def pytest_unconfigure(config: pytest.Config) -> None:
    sql_record.pytest_unconfigure()


@pytest.fixture(autouse=True)
def _unfreeze_gc() -> Iterator[None]:
    """A ``BridgeService`` freezes the heap once it runs (``freeze_gc``); in the test process
    that would keep one test's garbage from ever being collected (and its unclosed-resource
    warnings from ever firing), so each test ends with everything collectable again."""
    yield
    gc.unfreeze()


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """A test that runs a ``tether`` verb in process configures logging as the command does: the
    root logger's handler then writes to that test's captured stderr, closed once it ends. Each
    test leaves the root handlers, the root level and httpx's level as it found them."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    httpx_level = logging.getLogger("httpx").level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("httpx").setLevel(httpx_level)
