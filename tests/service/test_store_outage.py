"""A PostgreSQL outage under two real bridges (issue 33, items 1-3): its own throwaway server,
stopped for about three leases while runs are in flight, then started again.

Nobody is blamed (no attempt spent, no suspect, no second run of work that was alive), the
bridges answer a new message within 5 s of the server's return, and through the outage every
admin route answers within 1 s while ``/healthz`` is 503 on both bridges.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio

from support.gateway import RunningGateway, free_port
from support.service import BridgeProcess, answered_count
from support.waiting import wait_until
from tether.bridge import PostgresStore, write_token
from tether.bridge.stores.postgres._throwaway import NoPostgres, Throwaway, throwaway_postgres

pytestmark = pytest.mark.slow

LEASE_S = 2.0
OUTAGE_S = 3 * LEASE_S
RUN_S = OUTAGE_S + 3.0
"""Each long run outlives the outage: it starts before and ends after."""
LONG = 4
ADMIN_TOKEN = "outage-admin-token-7c2e"
ROUTES = ("/healthz", "/metrics", "/status", "/tasks")


@pytest.fixture
def server() -> Iterator[Throwaway]:
    try:
        with throwaway_postgres(fsync=False) as server:
            yield server
    except NoPostgres as exc:
        pytest.skip(f"needs its own PostgreSQL server to stop and start: {exc}")


def _runs(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


async def _get(http: httpx.AsyncClient, port: int, route: str) -> tuple[int, float]:
    started = time.monotonic()
    response = await http.get(
        f"http://127.0.0.1:{port}{route}",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=5.0,
    )
    return response.status_code, time.monotonic() - started


async def test_a_postgres_outage_blames_nobody_and_recovers_in_seconds(
    server: Throwaway, gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    admin_token = tmp_path / "admin" / "token"
    admin_token.parent.mkdir(mode=0o700)
    write_token(admin_token, ADMIN_TOKEN)
    ports = [free_port(), free_port()]
    settings = ["--lease-s", str(LEASE_S), "--grace", "2", "--room-policy", "concurrent"]
    bridges = [
        await BridgeProcess.start(
            gateway.url,
            token_file,
            f"postgresql://tether@127.0.0.1:{server.port}/postgres",
            tmp_path / f"bridge-{n}.log",
            agent="support.agents.outage:factory",
            workers=2,
            extra=[*settings, "--admin-port", str(port), "--admin-token-file", str(admin_token)],
            env={"OUTAGE_RUNS_FILE": str(runs), "PGPASSWORD": server.password},
        )
        for n, port in enumerate(ports)
    ]

    def logs() -> str:
        return "\n".join(b.log_tail() for b in bridges)

    async with httpx.AsyncClient() as http:

        async def healthz_is(code: int) -> bool:
            for port in ports:
                try:
                    if (await _get(http, port, "/healthz"))[0] != code:
                        return False
                except httpx.TransportError:
                    return False  # not listening yet
            return True

        await wait_until(lambda: healthz_is(200), within=30, step=0.1)
        ids = [await gateway.submit(f"long {RUN_S}", room=f"r{i}") for i in range(LONG)]
        await wait_until(lambda: _alive(runs, ids), within=20, step=0.05)

        server.pause("fast")  # the outage: every run is in flight
        down_at = time.monotonic()
        await wait_until(lambda: healthz_is(503), within=5, step=0.1)
        slowest = 0.0
        for port in ports:
            for route in ROUTES:
                code, took = await _get(http, port, route)
                slowest = max(slowest, took)
                assert took < 1.0, (port, route, took)
                assert code == (503 if route == "/healthz" else 200), (port, route, code)
        await trio.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))
        assert await healthz_is(503), logs()  # still down, on both

        await trio.to_thread.run_sync(server.resume)  # returns once it accepts connections
        back_at = time.monotonic()
        print(
            f"\noutage {back_at - down_at:.1f} s (lease {LEASE_S:g} s); slowest admin "
            f"answer during it {slowest * 1000:.0f} ms"
        )
        quick = await gateway.submit("quick", room="after")
        answered = await answered_count(gateway)

        async def quick_answered() -> bool:
            return (await gateway.message(quick))["reply"] is not None

        await wait_until(quick_answered, within=15, step=0.05)
        recovery = time.monotonic() - back_at
        print(f"a new message answered {recovery:.2f} s after PostgreSQL accepted connections")
        assert recovery < 5.0, logs()

        async def all_answered() -> bool:
            return await answered_count(gateway) >= answered + LONG

        await wait_until(all_answered, within=RUN_S + 10, step=0.1)
        await wait_until(lambda: healthz_is(200), within=5, step=0.1)
        for bridge in bridges:
            assert await bridge.stop() == 0, bridge.log_tail()

    # no second run of work that was alive, no attempt spent, no suspect
    started = _runs(runs)
    assert sorted(started) == sorted([*ids, quick]), logs()
    store = await PostgresStore.open(server.dsn, create=False)
    try:
        for id in ids:
            rec = await store.get(id)
            assert rec is not None
            assert (rec.attempt, rec.crash_count, rec.suspect) == (1, 0, False), rec
            assert (await gateway.message(id))["reply"] == f"echo: long {RUN_S}"
    finally:
        await store.aclose()
    assert "Traceback" not in logs()


async def _alive(runs: Path, ids: list[str]) -> bool:
    return sorted(_runs(runs)) == sorted(ids)
