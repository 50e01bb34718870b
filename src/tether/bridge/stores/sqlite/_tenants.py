"""Tenants on SQLite (issue #38): a tenant's weight and the tenants' queues, as the tenants
part's jobs; a new task's turn is read in its ingest's own transaction (``next_turn``).
"""

from __future__ import annotations

import sqlite3

import attrs

from ...custody._tenants import DEFAULT_WEIGHT, TenantView
from ...custody._tenants import next_turn as next_tenant_turn
from .._tenants_frame import TenantsFrame, tenant_views_of
from . import _sql as sql
from ._db import SqliteDb


def next_turn(conn: sqlite3.Connection, tenant: str, rank: int) -> float:
    """A new task's turn among the tenants (``custody._tenants.next_turn``), read in the
    ingest's transaction: a later task of the same ingest sees the earlier ones' turns."""
    clock, last, weight = conn.execute(
        sql.TURN_INPUTS, {"tenant": tenant, "priority": rank}
    ).fetchone()
    return next_tenant_turn(clock, last, DEFAULT_WEIGHT if weight is None else weight)


@attrs.define(eq=False)
class SqliteTenants(TenantsFrame):
    """The tenants part on the store's ``SqliteDb``."""

    db: SqliteDb

    async def _set_tenant_weight(self, tenant: str, weight: float) -> None:
        await self.db.write(lambda conn: conn.execute(sql.SET_TENANT_WEIGHT, (tenant, weight)))

    async def _tenant_views(self) -> list[TenantView]:
        return await self.db.read(lambda conn: tenant_views_of(conn.execute(sql.TENANT_VIEWS)))
