"""``tether store limits``: each key's limit as every process on the store shares it (rate,
tokens left, permits in flight, paused until, waiters), and ``limits set`` to declare one."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from ..custody._limits import LimitSpec, LimitView
from ..custody._roles import LimitStore


def document(views: Sequence[LimitView], now: float) -> dict[str, object]:
    """The ``--json`` document (version 1)."""
    return {
        "schema_version": 1,
        "limits": [
            {
                "key": v.spec.key,
                "rate_per_s": v.spec.rate,
                "burst": v.spec.burst,
                "concurrency": v.spec.concurrency,
                "tokens": None if math.isinf(v.tokens) else round(v.tokens, 3),
                "in_flight": v.in_flight,
                "paused_for_s": None if v.paused_until is None else v.paused_until - now,
                "waiters": v.waiters,
            }
            for v in views
        ],
    }


def render(views: Sequence[LimitView], now: float) -> str:
    if not views:
        return "no limits declared (tether store limits set KEY --rate 500/min ...)"
    lines = [
        f"{'key':<32} {'rate/s':>8} {'burst':>6} {'tokens':>8} {'cap':>5} {'held':>5} "
        f"{'waiting':>7}  paused"
    ]
    for v in views:
        spec = v.spec
        lines.append(
            f"{spec.key:<32} {'-' if spec.rate is None else f'{spec.rate:g}':>8} "
            f"{'-' if spec.rate is None else f'{spec.burst:g}':>6} "
            f"{'-' if math.isinf(v.tokens) else f'{v.tokens:.1f}':>8} "
            f"{'-' if spec.concurrency is None else spec.concurrency:>5} {v.in_flight:>5} "
            f"{v.waiters:>7}  "
            + ("-" if v.paused_until is None else f"{v.paused_until - now:.1f}s more")
        )
    return "\n".join(lines)


async def show_limits(store: LimitStore, as_json: bool) -> int:
    views, now = await store.limit_views(), store.clock()
    print(json.dumps(document(views, now), indent=2) if as_json else render(views, now))
    return 0


async def set_limit(store: LimitStore, spec: LimitSpec) -> int:
    await store.set_limit(spec)
    [view] = [v for v in await store.limit_views() if v.spec.key == spec.key]
    print(render([view], store.clock()))
    return 0
