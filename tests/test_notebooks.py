"""Every notebook in notebooks/ executes headless, top to bottom, without an error.

pytest-trio's ``trio_mode`` breaks ``pytest --nbmake`` (pytest-trio#132), so the notebooks are
run from this plain synchronous test with nbclient.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_headless(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    images = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if "image/png" in out.get("data", {})
    ]
    assert images, f"{path.name} should draw at least one picture"


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS
