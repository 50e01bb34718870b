"""``--baseline DIR``: one function of a benchmark run against another checkout's tether.

The other checkout's interpreter (``DIR/.venv/bin/python``) imports this folder's benchmark
module (the same measuring code) and calls one of its functions with JSON arguments; the JSON
result comes back on the last line of its output. Only that call is timed by the function
itself, so the interpreter's start is not in the figure.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

_CODE = (
    "import json, sys; sys.path.insert(0, sys.argv[1]); import importlib; "
    "m = importlib.import_module(sys.argv[2]); "
    "print(json.dumps(getattr(m, sys.argv[3])(*json.loads(sys.argv[4]))))"
)


def interpreter(checkout: Path) -> Path:
    """``checkout``'s interpreter; a clear exit if it has none."""
    python = checkout.resolve() / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"--baseline {checkout}: no {python} (run uv sync there first)")
    return python


def call(checkout: Path, module: str, function: str, *args: Any) -> Any:
    """``module.function(*args)`` run by ``checkout``'s interpreter, its JSON result."""
    done = subprocess.run(
        [str(interpreter(checkout)), "-c", _CODE, str(HERE), module, function, json.dumps(args)],
        cwd=checkout,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise SystemExit(f"--baseline {checkout}: {module}.{function} failed:\n{tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])
