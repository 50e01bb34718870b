"""``render_status`` renders the service's pool section with the service's renderer (what
``tether status`` passes), and without one still shows it, as one line of JSON."""

from __future__ import annotations

from typing import Any

from tether.observe import HealthReport, StatusReport, render_status


def report(pool: dict[str, Any] | None) -> StatusReport:
    return StatusReport(
        health=HealthReport(ok=True, status="ok", problems=[], children=[], gateway=None),
        supervisors=[],
        sessions=[],
        custody=None,
        in_flight=None,
        custody_error=None,
        gateway=None,
        live_tasks=3,
        handler_failures=0,
        background_failures=None,
        pool=pool,
    )


def test_the_pool_section_goes_through_the_services_renderer_or_shows_as_json() -> None:
    section = {"stem": "blue", "workers": ["blue-w1"]}
    seen: list[dict[str, Any]] = []

    def pool_lines(doc: dict[str, Any]) -> list[str]:
        seen.append(doc)
        return [f"pool {doc['stem']}: {len(doc['workers'])} worker(s)"]

    rendered = render_status(report(section), pool_lines=pool_lines).splitlines()
    assert seen == [section]
    assert rendered == [
        "health: ok",
        "pool blue: 1 worker(s)",
        "3 live task(s), 0 handler failure(s)",
    ]
    plain = render_status(report(section)).splitlines()
    assert plain[1] == 'pool: {"stem": "blue", "workers": ["blue-w1"]}'
    assert render_status(report(None)).splitlines() == [
        "health: ok",
        "3 live task(s), 0 handler failure(s)",
    ]
