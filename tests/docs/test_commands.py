"""Every ``tether ...`` command the docs show is one the CLI has, with options it takes: a
renamed verb or flag fails here instead of rotting in a shell transcript the tests never run.

Checked: each line of every ``console`` block and every inline code span that starts with
``tether`` (after ``$``, ``uv run``, ``VAR=value`` prefixes), in the docs pages and the README.
"""

from __future__ import annotations

import argparse
import functools
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from support.docs_blocks import blocks
from tether._cli._main import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    *sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts),
    ROOT / "README.md",
]


def console_lines(page: Path) -> Iterator[tuple[int, str]]:
    """``(line, command)`` for each command of the page's console blocks (continuations
    joined; in a block with ``$`` prompts only the prompted lines) and each inline code span
    that starts with ``tether``."""
    for block in blocks(page):
        if block.lang != "console":
            continue
        joined = block.code.replace("\\\n", " ")
        lines = joined.splitlines()
        # a transcript with prompts: the other lines are output (which may name tether too)
        prompted = any(line.startswith("$") for line in lines)
        for offset, line in enumerate(lines, start=1):
            if line.startswith("$") or not prompted:
                yield block.line + offset, line
    tokens = MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8"))
    for token in tokens:
        for child in token.children or []:
            if child.type == "code_inline" and child.content.startswith("tether "):
                yield (token.map[0] + 1 if token.map else 0), child.content


def tether_words(line: str) -> list[str] | None:
    """The words after ``tether`` in a shell line, without comments; None if no command."""
    line = line.split(" #", 1)[0].strip()
    line = line.removeprefix("$").strip()
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    while words and (re.fullmatch(r"[A-Z_]+=\S*", words[0]) or words[0] in ("uv", "run")):
        words = words[1:]
    if not words or words[0] != "tether":
        return None
    return [w.strip("[]") for w in words[1:]]


@functools.cache
def cli() -> argparse.ArgumentParser:
    return build_parser()


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def check(words: list[str]) -> str | None:
    """What is wrong with ``tether <words>``, or None."""
    parser, path = cli(), ["tether"]
    rest = list(words)
    while rest and (choices := subparsers(parser)):
        verb = rest.pop(0)
        if verb.startswith("-") or verb.endswith("..."):
            break  # options, or "tether store ..." (any of its verbs)
        if verb not in choices:
            return f"{' '.join(path)} has no command {verb!r} (it has {sorted(choices)})"
        parser = choices[verb]
        path.append(verb)
    options = {s for action in parser._actions for s in action.option_strings}
    for word in rest:
        flag = word.split("=", 1)[0]
        if flag.startswith("--") and flag not in options:
            return f"{' '.join(path)} has no option {flag} (it has {sorted(options)})"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_command_shown_exists_with_its_options(page: Path) -> None:
    wrong = []
    for line_no, line in console_lines(page):
        words = tether_words(line)
        if words is not None and (problem := check(words)) is not None:
            wrong.append(f"{page.name}:{line_no}: {line.strip()!r}: {problem}")
    assert not wrong, "\n".join(wrong)


def test_the_check_catches_a_wrong_verb_and_a_wrong_flag() -> None:
    assert check(["bridge", "run", "--workers", "4", "--store=x.db"]) is None
    assert check(["store", "show", "ID", "--json"]) is None
    assert check(["store", "..."]) is None
    assert check(["bridge", "start"]) is not None
    assert "no option --worker" in (check(["bridge", "run", "--worker", "4"]) or "")
    assert tether_words("$ PYTHONPATH=examples uv run tether demo  # x") == ["demo"]
    assert tether_words("pip install uv") is None


def test_output_lines_of_a_transcript_are_not_commands(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```console\n$ tether gateway serve\ntether gateway: http://127.0.0.1:8765/\n"
        "$ tether bridge run --nosuch\n```\n\n```console\ntether demo\n```\n"
    )
    assert [line for _, line in console_lines(page)] == [
        "$ tether gateway serve",
        "$ tether bridge run --nosuch",
        "tether demo",
    ]
