from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from tether.bridge.custody import Store
from tether.bridge.stores.postgres._throwaway import NoPostgres, throwaway_postgres

from .clock import FakeClock
from .custody import BACKENDS, Backend

PG_DSN_ENV = "TETHER_TEST_PG_DSN"


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A database of its own for this test session, dropped at the end.

    ``TETHER_TEST_PG_DSN`` (what ``.ci/run`` exports) names the server; without it the session
    starts a throwaway server (initdb + pg_ctl, no fsync: these tests check transactions, not
    disks). Neither possible: the postgres cases are skipped, saying why. A DSN that is set
    but does not work fails the tests: CI must really run them.
    """
    given = os.environ.get(PG_DSN_ENV)
    if given:
        yield from _own_database(given)
        return
    try:
        with throwaway_postgres(fsync=False) as server:
            yield server.dsn
    except NoPostgres as exc:
        pytest.skip(f"PostgreSQL backend not tested: {exc} and {PG_DSN_ENV} is not set")


def _own_database(server_dsn: str) -> Iterator[str]:
    name = f"tether_test_{secrets.token_hex(6)}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_conninfo(server_dsn, dbname=name)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return BACKENDS[request.param](tmp_path, request.getfixturevalue)


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
