"""``tether store tenants``: the tenants that share the store's queue (their weights and pending
tasks), and ``tenants set`` to give one a weight (``custody._tenants``)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..custody._roles import LimitStore
from ..custody._tenants import TenantView


def document(views: Sequence[TenantView]) -> dict[str, object]:
    """The ``--json`` document (version 1)."""
    return {
        "schema_version": 1,
        "tenants": [{"tenant": v.tenant, "weight": v.weight, "pending": v.pending} for v in views],
    }


def render(views: Sequence[TenantView]) -> str:
    if not views:
        return "no tenants: no task names one, no weight is set (tether store tenants set NAME)"
    lines = [f"{'tenant':<32} {'weight':>8} {'pending':>8}"]
    lines += [f"{v.tenant:<32} {v.weight:>8g} {v.pending:>8}" for v in views]
    return "\n".join(lines)


async def show_tenants(store: LimitStore, as_json: bool) -> int:
    views = await store.tenant_views()
    print(json.dumps(document(views), indent=2) if as_json else render(views))
    return 0


async def set_tenant_weight(store: LimitStore, tenant: str, weight: float) -> int:
    await store.set_tenant_weight(tenant, weight)
    print(render([v for v in await store.tenant_views() if v.tenant == tenant]))
    return 0
