"""Fair shares (issue #38): the tenants of a store take turns in its queue, so one tenant's
burst cannot starve another's single message.

A task names its tenant in its ``tenant`` header (the gateway task's ``tenant``). The queue is
ordered by priority, then *turn*, then age; a task's turn is fixed when it is taken into
custody, by start-time fair queueing: the tenant's next turn is one step (``1 / weight``) past
the later of its own last turn still pending and the queue's *clock*, the earliest turn
pending among tenants' tasks of that priority. A tenant with a backlog thus queues each new
task behind its own, while a tenant that sends one message after a quiet spell starts at the
clock: its message runs within one turn of every busy tenant, whatever their backlogs. With
weights, a tenant of weight 3 takes three turns to another's one.

The turn is computed once, at ingest, in the ingest's transaction, so claims and the lead's
sweeps read the queue in one index order (no per-read interleaving); concurrent ingests on
PostgreSQL may give two tasks of one tenant the same turn (then age orders them). A task
without a tenant has turn 0: it is nobody's share and queues by priority and age ahead of
tenants' turns (a deployment that names tenants names them for every message). A retried or
returned task keeps its turn, as it keeps its age.
"""

from __future__ import annotations

from typing import Final

import attrs

from ..._protocol._bounds import InvalidTask, check_label
from ._limits import check_positive

TENANT_HEADER: Final = "tenant"
"""The header naming a task's tenant (``Task.tenant``): a label like a gateway room's name, set
by ingest from the gateway task's ``tenant``."""
DEFAULT_WEIGHT: Final = 1.0
"""A tenant's weight until an operator sets one (``tether store tenants set``)."""
NO_TURN: Final = 0.0
"""The turn of a task without a tenant."""


def check_header_label(value: object, header: str) -> str:
    """``value`` if it is a valid label for header ``header`` (a tenant's, a queue's name),
    else ``InvalidTask`` naming the header."""
    if not isinstance(value, str):
        raise InvalidTask(f"{header} must be a str, got {type(value).__name__}")
    try:
        return check_label(value, header)
    except ValueError as exc:
        raise InvalidTask(str(exc)) from None


def check_tenant(tenant: object) -> str:
    """``tenant`` if it is a valid tenant name (a label), else ``InvalidTask`` naming it."""
    return check_header_label(tenant, TENANT_HEADER)


def check_tenant_weight(weight: object) -> float:
    """A tenant's weight is a finite number > 0 (its share beside a tenant of weight 1)."""
    return check_positive(weight, "a tenant's weight")


def next_turn(clock: float | None, last: float | None, weight: float) -> float:
    """The turn of a tenant's new task: one step of ``1 / weight`` past the later of the
    queue's clock (the earliest tenant turn pending at its priority; None: none pending) and
    the tenant's own last pending turn (None: none pending)."""
    return max(clock or NO_TURN, last or NO_TURN) + 1.0 / weight


@attrs.frozen
class TenantView:
    """A tenant as ``tether store tenants`` shows it."""

    tenant: str
    weight: float
    pending: int
    """Its tasks pending now (waiting for a worker)."""
