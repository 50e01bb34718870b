# tether's tasks. `uv run just <recipe>`; `just --list` shows them all.
set shell := ["bash", "-euo", "pipefail", "-c"]

default: test

# install everything the project needs (from uv.lock)
setup:
    uv sync --locked --all-extras

# the main job: a local gateway, a bridge and the demo agent, end to end
demo *ARGS:
    uv run tether demo {{ARGS}}

# lint, types, the docs site (strict), then the whole test suite (notebooks, docs' code)
test: lint docs-strict
    uv run pytest

# build the docs site into docs/_build/html (open docs/_build/html/index.html)
docs *ARGS:
    uv run sphinx-build -q -n -b html docs docs/_build/html {{ARGS}}

# the docs site from scratch, warnings as errors (a broken reference or a stray page fails)
docs-strict:
    uv run sphinx-build -q -n -W --keep-going -E -b html docs docs/_build/html

# ruff (lint + format check), mypy --strict, and the layers' import contracts (pyproject.toml)
lint:
    uv run ruff check .
    uv run ruff format --check .
    uv run mypy
    uv run lint-imports

# format the code in place
fmt:
    uv run ruff format .
    uv run ruff check --fix .

# re-execute the notebooks in place (outputs kept for browsing)
notebooks:
    uv run python notebooks/execute.py notebooks/*.ipynb

# every benchmark; each prints ratios measured in one run
bench:
    for b in benchmarks/*.py; do echo "== $b"; uv run python "$b"; done

# what CI runs
ci: setup test
