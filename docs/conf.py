"""Sphinx configuration of tether's docs site (``uv run just docs``; strict in ``just test``).

Sphinx rather than mkdocs: it is what Trio documents itself with (autodoc reads our
docstrings, intersphinx could link to Trio's pages), MyST lets the guide stay Markdown that
reads well on GitHub too, and Sphinx is actively maintained while MkDocs 1.x has had no
release since 2024. ``nitpicky`` makes every unresolved cross-reference to tether's own API a
warning, and the strict build turns warnings into errors.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tether

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "tether"
author = "the tether developers"
copyright = "the tether developers"
release = version = tether.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "api_coverage",  # docs/_ext: every public name is in the reference, or the build warns
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# the build runs offline (CI reaches no documentation hosts): no inventories are fetched, so
# references to Trio, attrs or the standard library stay plain text instead of links
intersphinx_mapping: dict[str, tuple[str, str | None]] = {}

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}
autoclass_content = "class"

nitpicky = True
# names outside tether (no inventory offline) and private names in signatures
nitpick_ignore_regex = [
    (
        r"py:.*",
        r"(trio|trio_util|attrs|httpx|hypercorn|prometheus_client|psycopg|psycopg_pool)"
        r"(\..*)?",
    ),
    (
        r"py:.*",
        r"(typing|collections|contextlib|datetime|os|pathlib|logging|random|signal|"
        r"types|enum|re|sqlite3|abc|json|asyncio|concurrent)(\..*)?",
    ),
    (r"py:.*", r".*\._[a-z].*"),
]

html_theme = "furo"
html_title = f"tether {release}"
