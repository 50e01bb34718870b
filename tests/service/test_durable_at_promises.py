"""Durable at promises: a machine crash at any moment loses nothing the gateway was told.

The store runs ``synchronous=NORMAL`` (the default): its commits wait for no disk and the writer
syncs the WAL before a promise. ``support.wal_cut`` records where each sync left the WAL; at
random moments of a real run (an in-process bridge, a real gateway over HTTP) the test copies
the store as a machine crash would leave it, the WAL cut back to the last sync, beside what the
gateway holds at that moment, and checks custody on each copy: every id the gateway saw acked
is in custody or done, every reply the gateway holds is a stored result. Then bridges run on
two of the copies to the end: nothing the gateway shows changes (a re-posted reply is
absorbed, never shown twice).
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import attrs
import trio

from support.gateway import RunningGateway
from support.service import answered_count, submit_many
from support.waiting import wait_until
from support.wal_cut import WalCut
from tether import ChildSpec, open_supervisor
from tether.bridge import BridgeConfig, BridgeService, CustodyState, SqliteStore

MESSAGES = 80
CUTS = 40
DONE = {CustodyState.RESULT, CustodyState.DELIVERED}


@attrs.frozen
class Seen:
    """What the gateway holds at one moment: the acked ids and the replies."""

    acked: frozenset[str]
    replies: dict[str, str]


def gateway_now(db: Path) -> Seen:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT id, acked_at, state, reply FROM tasks").fetchall()
    finally:
        conn.close()
    acked = frozenset(id for id, acked_at, _, _ in rows if acked_at is not None)
    return Seen(acked, {id: reply for id, _, state, reply in rows if state == "answered"})


def config(gateway: RunningGateway, token_file: Path, store: Path) -> BridgeConfig:
    return BridgeConfig(
        gateway=gateway.url,
        token_file=token_file,
        store=str(store),
        workers=2,
        poll_wait=0.5,
        lease_s=1.5,  # a recovering bridge takes over the dead one's claims soon
        grace=1.0,
    )


async def run_until(service: BridgeService, done: object) -> None:
    async with open_supervisor(name="test") as supervisor:
        await supervisor.start_child(
            ChildSpec("bridge", service.run, shutdown_grace=service.stop_grace)
        )
        await wait_until(done, within=60.0)  # type: ignore[arg-type]


async def test_a_machine_crash_at_any_moment_keeps_every_promise(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    rng = random.Random()
    path = tmp_path / "custody.db"
    shim = WalCut(path)
    cuts: list[tuple[Path, Seen, int]] = []
    async with await SqliteStore.open(path) as store:
        await shim.install(store)
        service = BridgeService(config(gateway, token_file, path), store=store)

        async def cut_at_random_moments() -> None:
            async def acked() -> bool:
                return bool(gateway_now(gateway.db).acked)

            await wait_until(acked, step=0.01)
            for n in range(CUTS):
                seen = gateway_now(gateway.db)  # first: every promise in it is synced by now
                copy = shim.cut(tmp_path / f"cut-{n}")
                cuts.append((copy, seen, shim.written - shim.synced))
                if len(seen.replies) == MESSAGES:
                    return
                await trio.sleep(rng.uniform(0.0, 0.05))  # a random moment, not a wait

        async def everything_answered() -> bool:
            return await answered_count(gateway) == MESSAGES

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cut_at_random_moments)
            ids = await submit_many(gateway, [f"hi {i}" for i in range(MESSAGES)], "crash")
            await run_until(service, everything_answered)
    final = gateway_now(gateway.db)
    assert len(final.replies) == MESSAGES

    assert any(lost > 0 for _, _, lost in cuts), "no cut lost an unsynced write: nothing shown"
    assert any(seen.acked for _, seen, _ in cuts), "no cut came after an ack: nothing shown"
    for copy, seen, _ in cuts:
        async with await SqliteStore.open(copy) as after:
            for id in seen.acked:
                record = await after.get(id)
                assert record is not None, f"{copy.parent.name}: acked {id} is lost"
            for id, reply in seen.replies.items():
                record = await after.get(id)
                assert record is not None, (copy.parent.name, id)
                assert record.state in DONE, (copy.parent.name, id)
                assert record.result == reply

    for copy, _, _ in rng.sample(cuts, 2):  # life goes on after the crash
        async with await SqliteStore.open(copy) as after:

            async def all_delivered() -> bool:
                counts = await after.counts()
                return sum(counts.values()) == counts[CustodyState.DELIVERED]

            service = BridgeService(config(gateway, token_file, copy), store=after)
            await run_until(service, all_delivered)
        assert gateway_now(gateway.db) == final  # no reply changed, none shown twice
    assert set(final.replies) == set(ids)
