"""The pool section of ``/status`` as ``tether status`` prints it, and its round trip."""

from __future__ import annotations

from tether._plumbing._converter import structure, unstructure
from tether.bridge.pool import PoolStatus
from tether.bridge.pool._status import iso, render_pool


def status(**changes: object) -> PoolStatus:
    fields: dict[str, object] = {
        "stem": "blue",
        "workers": ["blue-w1", "blue-w2"],
        "lead": "blue-lead",
        "leading": False,
        "leading_since": None,
        "leader": "red-lead",
        "leader_beating_since": "2026-12-01T01:00:00.000Z",
        "workers_seen": ["blue-w1", "blue-w2", "red-w1"],
    }
    fields.update(changes)
    return PoolStatus(**fields)  # type: ignore[arg-type]


def test_a_standby_names_the_leader_and_the_workers_of_the_whole_pool() -> None:
    lines = render_pool(status(leaderless=["blue-w2"]))
    assert lines == [
        "pool blue: 2 worker(s); stands by (as blue-lead)",
        "  leader: red-lead (beating since 2026-12-01T01:00:00.000Z)",
        "  live workers in the pool (3): blue-w1, blue-w2, red-w1",
        "  leaderless here: blue-w2",
    ]


def test_the_leader_says_since_when_and_no_candidate_says_so() -> None:
    since = iso(1_796_000_000.0)
    assert since == "2026-11-30T00:53:20.000Z"
    leading = status(leading=True, leading_since=since, leader="blue-lead")
    assert render_pool(leading)[0] == f"pool blue: 2 worker(s); LEADS since {since} (as blue-lead)"
    alone = render_pool(status(lead=None, leader=None, workers_seen=[]))
    assert alone == ["pool blue: 2 worker(s); no lead candidate here"]
    nobody = render_pool(status(leader=None))
    assert nobody[1] == "  leader: none alive (workers claim directly)"


def test_the_section_survives_the_json_round_trip_of_tether_status() -> None:
    original = status(leaderless=["blue-w1"])
    assert structure(unstructure(original), PoolStatus) == original
