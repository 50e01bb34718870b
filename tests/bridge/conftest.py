from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tether.bridge import Store

from .custody_support import BACKENDS, Backend, FakeClock


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return BACKENDS[request.param](tmp_path)


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def where(backend: Backend) -> Any:
    return backend.fresh()


@pytest.fixture
async def store(backend: Backend, where: Any, fake_clock: FakeClock) -> AsyncIterator[Store]:
    s = await backend.open(where, fake_clock)
    try:
        yield s
    finally:
        await s.aclose()
