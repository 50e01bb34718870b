"""tether's import graph has no cycle, and keeps DESIGN.md's layers (the import-linter contracts
in pyproject.toml, also run by ``just lint``).

A cycle is read from runtime imports only: a ``TYPE_CHECKING`` import runs nothing (the leaf
``_core/_context.py`` names the runtime's types that way, like trio's ``_run_context``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable, Mapping, Set
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def import_graph() -> dict[str, set[str]]:
    """Each tether module and the tether modules it imports at run time."""
    graph = grimp.build_graph("tether", exclude_type_checking_imports=True, cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def cycles(graph: Mapping[str, Set[str]]) -> list[list[str]]:
    """One shortest cycle through each group of modules that import each other (Tarjan's
    strongly connected components, iterative), each as ``[a, b, ..., a]``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph.get(node, ()):
                        components.append(component)
    return [shortest_cycle(graph, component) for component in components]


def shortest_cycle(graph: Mapping[str, Set[str]], component: Set[str]) -> list[str]:
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:  # breadth first inside the component, back to the start
        following = []
        for node in frontier:
            for target in sorted(graph[node] & component):
                if target == start:
                    return [*paths[node], start]
                if target not in paths:
                    paths[target] = [*paths[node], target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def test_the_cycle_finder_names_a_cycle_and_passes_a_tree() -> None:
    tree = {"a": {"b", "c"}, "b": {"c"}, "c": set()}
    assert cycles(tree) == []
    looped = {**tree, "c": {"d"}, "d": {"b"}, "e": {"e"}}
    assert sorted(cycles(looped)) == [["b", "c", "d", "b"], ["e", "e"]]


def test_no_module_of_tether_is_part_of_an_import_cycle() -> None:
    graph = import_graph()
    assert "tether._core._context" in graph  # the graph is tether's, every module of it
    found = [" -> ".join(cycle) for cycle in cycles(graph)]
    assert not found, "import cycle(s) in src/tether:\n" + "\n".join(found)


def test_the_layer_contracts_hold() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
