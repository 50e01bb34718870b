"""An operator's verbs answer at once (issue #56): ``tether --help`` and ``tether store status``
import what they need and nothing else. Held by the modules a fresh interpreter loads, not by
a wall clock (a busy 2-core box makes any time bound luck): each heavy library below costs a
tenth of a second or more to import, and together they made every verb take a second."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = frozenset(
    {"httpx", "psycopg", "psycopg_pool", "hypercorn", "opentelemetry", "prometheus_client"}
)
"""Libraries no operator's verb on a SQLite store needs: the gateway client, PostgreSQL, the
HTTP server, tracing, metrics."""
NOT_FOR_HELP = HEAVY | {"trio", "cattrs", "sqlite3"}
"""Naming the verbs needs neither the runtime, nor the converter, nor a store."""
NOT_FOR_STATUS = HEAVY | {"cattrs"}

_PROBE = """
import contextlib, io, json, sys
from tether._cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code, "out": out.getvalue(),
                  "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def _run(*argv: str) -> tuple[int, str, set[str]]:
    """The verb's exit code, its output and the top-level modules loaded, in a new process."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    report = json.loads(done.stdout)
    return report["code"], report["out"], set(report["modules"])


def test_help_names_the_verbs_without_loading_the_runtime_or_any_library_of_a_verb() -> None:
    code, out, modules = _run("--help")
    assert code == 0
    assert "store" in out
    assert "bridge" in out
    assert not modules & NOT_FOR_HELP, sorted(modules & NOT_FOR_HELP)


def test_a_verbs_help_loads_no_library_of_the_verb() -> None:
    code, out, modules = _run("bridge", "run", "--help")
    assert code == 0
    assert "--store" in out
    assert not modules & NOT_FOR_HELP, sorted(modules & NOT_FOR_HELP)


def test_store_status_loads_the_store_and_nothing_of_the_gateway_or_the_server(
    new_store: Path,
) -> None:
    code, out, modules = _run("store", "status", "--store", str(new_store))
    assert code == 0
    assert "pending" in out
    assert {"trio", "sqlite3"} <= modules
    assert not modules & NOT_FOR_STATUS, sorted(modules & NOT_FOR_STATUS)
