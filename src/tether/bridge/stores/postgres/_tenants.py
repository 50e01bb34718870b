"""Tenants on PostgreSQL (issue #38): a tenant's weight and the tenants' queues, as the tenants
part; the turns of an ingest's tasks are computed from one read in its transaction (``turns``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ...custody._tenants import DEFAULT_WEIGHT, NO_TURN, TenantView, next_turn
from .._tenants_frame import TenantsFrame, tenant_views_of
from ._db import PostgresDb


@attrs.define(eq=False)
class PostgresTenants(TenantsFrame):
    """The tenants part on the store's ``PostgresDb``."""

    db: PostgresDb

    async def _set_tenant_weight(self, tenant: str, weight: float) -> None:
        sql, params = self.db.sql.set_tenant_weight, {"tenant": tenant, "weight": weight}
        await self.db.run(lambda conn: conn.execute(sql, params))

    async def _tenant_views(self) -> list[TenantView]:
        sql = self.db.sql.tenant_views
        return await self.db.run(lambda conn: tenant_views_of(conn.execute(sql).fetchall()))


def turns(read: Sequence[Sequence[Any]], params: Mapping[str, Any]) -> list[float]:
    """The turns of an ingest's tasks (``custody._tenants.next_turn``), in order, from the
    ``turns`` read of each task's tenant and priority: a later task of the same tenant and
    priority queues after the earlier ones of the batch."""
    last: dict[tuple[str, int], float] = {}
    out: list[float] = []
    for (tenant, rank, clock, pending_last, weight), head in zip(
        read, params["tenants"], strict=True
    ):
        if head is None:
            out.append(NO_TURN)
            continue
        key = (tenant, rank)
        turn = next_turn(clock, last.get(key, pending_last), weight or DEFAULT_WEIGHT)
        last[key] = turn
        out.append(turn)
    return out
