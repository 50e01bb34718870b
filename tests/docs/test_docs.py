"""Every code block of the docs runs (or is marked as not code): the docs cannot rot.

See ``docs_blocks`` for what each kind of block gets. Blocks run in a fresh temporary
directory per page, so files they write (token files, stores) never land in the repository.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from support.docs_blocks import DocsBlockError, blocks, check_page

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)
GUIDES = [p for p in PAGES if p.parent.name == "guide"]


def page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("page", [*PAGES, ROOT / "README.md"], ids=page_id)
def test_every_block_of_the_page_runs(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    check_page(page)


def test_the_guide_has_a_page_per_part_and_runs_code() -> None:
    names = {p.stem for p in GUIDES}
    assert names >= {
        "runtime",
        "sessions",
        "supervisors",
        "bridge",
        "pool",
        "gateway",
        "postgres",
        "observability",
    }
    python = [b for p in GUIDES for b in blocks(p) if b.lang == "python"]
    assert len(python) >= len(names), "each guide shows code that runs"


# -- the collector itself: a broken block must fail, and say where ----------------------------


def write(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    return page


def test_a_failing_python_block_fails_naming_its_page_and_line(tmp_path: Path) -> None:
    page = write(
        tmp_path,
        "# t\n\n```python\nx = 1\n```\n\ntext\n\n```python\nassert x == 2, 'x is not 2'\n```\n",
    )
    with pytest.raises(DocsBlockError, match=r"page\.md:9: this python block failed") as info:
        check_page(page)
    assert "x is not 2" in str(info.value)
    # the traceback points at the page's own line
    tb = info.value.__cause__.__traceback__ if info.value.__cause__ else None
    lines = []
    while tb is not None:
        lines.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    assert (str(page), 10) in lines


def test_a_block_without_a_kind_fails(tmp_path: Path) -> None:
    page = write(tmp_path, "# t\n\n```\nrm -rf /\n```\n")
    with pytest.raises(DocsBlockError, match=r"page\.md:3: a code block marked 'with no language'"):
        check_page(page)
    with pytest.raises(DocsBlockError, match="marked 'sh'"):
        check_page(write(tmp_path, "```sh\nls\n```\n"))


def test_a_block_that_does_not_compile_or_parse_fails(tmp_path: Path) -> None:
    with pytest.raises(DocsBlockError, match="does not compile"):
        check_page(write(tmp_path, "```python\ndef f(:\n```\n"))
    with pytest.raises(DocsBlockError, match="this toml block"):
        check_page(write(tmp_path, "```toml\n[bridge\n```\n"))
    with pytest.raises(DocsBlockError, match="this json block"):
        check_page(write(tmp_path, '```json\n{"a": }\n```\n'))


def test_blocks_share_a_page_and_top_level_await_runs_under_trio(tmp_path: Path) -> None:
    page = write(
        tmp_path,
        "```python\nimport trio\nseen = []\n```\n\n"
        "```python\nawait trio.sleep(0)\nseen.append(trio.lowlevel.current_task().name)\n```\n\n"
        "```console\n$ not run\n```\n\n```python\nassert len(seen) == 1\n```\n",
    )
    assert check_page(page) == 3


def test_the_bridge_pages_examples_stop_without_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 32.9: the in-process bridge ended with "could not give unacked leases back:
    ConnectError" (the gateway stopped before the bridge). A copied example must end clean."""
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="tether"):
        check_page(ROOT / "docs" / "guide" / "bridge.md")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
