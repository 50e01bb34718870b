from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _unfreeze_gc() -> Iterator[None]:
    """A ``BridgeService`` freezes the heap once it runs (``freeze_gc``); in the test process
    that would keep one test's garbage from ever being collected (and its unclosed-resource
    warnings from ever firing), so each test ends with everything collectable again."""
    yield
    gc.unfreeze()
