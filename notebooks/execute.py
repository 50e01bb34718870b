"""Re-execute notebooks in place, keeping their outputs (so pictures show when browsing).

    uv run python notebooks/execute.py notebooks/*.ipynb

The test suite executes every notebook again in memory (tests/test_notebooks.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def execute_in_place(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    for cell in nb.cells:
        if cell.cell_type == "code":
            # stderr carries machine-specific noise (kernel transport warnings, log lines)
            cell.outputs = [o for o in cell.outputs if o.get("name") != "stderr"]
            cell.metadata.pop("execution", None)
    nbformat.write(nb, path)


def main(argv: list[str]) -> int:
    for arg in argv:
        execute_in_place(Path(arg))
        print(f"executed {arg}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
