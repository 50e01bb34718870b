"""A tenant's weight and the tenants' queues (issue #38), framed as ``_frame`` frames custody:
check the arguments, run the backend part's ``_name`` operation, log.

The turn arithmetic is ``custody._tenants``; each backend's ingest writes the turns.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from ..custody._tenants import DEFAULT_WEIGHT, TenantView, check_tenant, check_tenant_weight
from ._host import Host

log = logging.getLogger("tether.bridge.limits")


@attrs.define(eq=False)
class TenantsFrame(abc.ABC):
    """``LimitStore``'s tenant methods around a backend part's operations."""

    host: Host

    async def set_tenant_weight(self, tenant: str, weight: float) -> None:
        tenant, weight = check_tenant(tenant), check_tenant_weight(weight)
        await self._set_tenant_weight(tenant, weight)
        log.info("tenant %s: weight %g", tenant, weight)

    @abc.abstractmethod
    async def _set_tenant_weight(self, tenant: str, weight: float) -> None: ...

    async def tenant_views(self) -> Sequence[TenantView]:
        return await self._tenant_views()

    @abc.abstractmethod
    async def _tenant_views(self) -> list[TenantView]: ...


def tenant_views_of(rows: Iterable[Sequence[Any]]) -> list[TenantView]:
    """``(tenant, weight or None, pending)`` rows (both backends) as views."""
    return [
        TenantView(tenant, DEFAULT_WEIGHT if weight is None else float(weight), int(pending))
        for tenant, weight, pending in rows
    ]
