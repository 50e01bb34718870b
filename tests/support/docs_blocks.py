"""The code blocks of the docs' Markdown pages, and how each kind is checked.

A page is parsed with markdown-it (the parser MyST, and so the docs site, uses), so the blocks
found here are exactly the blocks the site shows. Each fenced block is one of:

- ``python``: executed. The blocks of one page run in order in one namespace (a page tells
  one story), each compiled under its page and line so a traceback points into the page.
  A block may ``trio.run(main)`` as a user would, or ``await`` at top level (run with
  ``trio.run`` too). A block whose first line is a comment naming a file (``# myagent.py``)
  is also saved under that name in the working directory, so a later block imports it as the
  reader's own file would be (``from myagent import factory``).
- ``toml`` / ``json``: parsed (a settings or protocol sample must at least be well formed).
- ``console``: a shell transcript; ``text``: a layout or sample output. Not run.
- ``{directive}``: MyST directives (``toctree``, ``eval-rst``), which Sphinx checks.

Any other fence, a bare one included, is an error naming the page and line: nothing in the
docs escapes being run or being marked as not code.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import trio
from markdown_it import MarkdownIt

NOT_RUN = frozenset({"console", "text"})
SAVED_AS = re.compile(r"# ([A-Za-z_][A-Za-z0-9_]*\.py)\n")
"""The first line of a block the reader saves as a file (``# myagent.py``)."""
PARSED: dict[str, Callable[[str], object]] = {"toml": tomllib.loads, "json": json.loads}


class DocsBlockError(AssertionError):
    """A block of a docs page is not marked, or failed to run or parse."""


@attrs.frozen
class Block:
    """One fenced block: its page, its first line (1-based, the fence), language, code."""

    page: Path
    line: int
    lang: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, in order."""
    tokens = MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8"))
    found = []
    for token in tokens:
        if token.type == "fence" and token.map is not None:
            lang = token.info.strip().split(maxsplit=1)[0] if token.info.strip() else ""
            found.append(Block(page, token.map[0] + 1, lang, token.content))
    return found


def check_page(page: Path) -> int:
    """Run or parse every block of ``page``; returns how many Python blocks ran."""
    saved: list[str] = []
    here = os.getcwd()
    sys.path.insert(0, here)
    try:
        return _check_blocks(page, saved)
    finally:
        sys.path.remove(here)
        for module in saved:  # another page may save a file of the same name
            sys.modules.pop(module, None)


def _check_blocks(page: Path, saved: list[str]) -> int:
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    ran = 0
    for block in blocks(page):
        if block.lang in NOT_RUN or block.lang.startswith("{"):
            continue
        if block.lang in PARSED:
            try:
                PARSED[block.lang](block.code)
            except ValueError as exc:
                raise DocsBlockError(f"{block.where}: this {block.lang} block: {exc}") from exc
            continue
        if block.lang != "python":
            raise DocsBlockError(
                f"{block.where}: a code block marked {block.lang or 'with no language'!r}; "
                "mark it python (run by the tests), console (a shell transcript) or text "
                "(a layout or sample output)"
            )
        named = SAVED_AS.match(block.code)
        if named is not None:
            Path(named.group(1)).write_text(block.code, encoding="utf-8")
            saved.append(named.group(1).removesuffix(".py"))
        run_python(block, namespace)
        ran += 1
    return ran


def run_python(block: Block, namespace: dict[str, Any]) -> None:
    """Execute one block in ``namespace``; a top-level ``await`` runs under ``trio.run``."""
    # blank lines up to the block's first line, so tracebacks give the page's line numbers
    source = "\n" * block.line + block.code
    try:
        code = compile(
            source, str(block.page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
        )
    except SyntaxError as exc:
        raise DocsBlockError(f"{block.where}: this python block does not compile: {exc}") from exc
    try:
        if code.co_flags & inspect.CO_COROUTINE:

            async def top_level() -> None:
                await eval(code, namespace)

            trio.run(top_level)
        else:
            exec(code, namespace)
    except Exception as exc:
        raise DocsBlockError(f"{block.where}: this python block failed: {exc!r}") from exc
