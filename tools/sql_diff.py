"""Merge the SQL records of a test run into one set, and compare two such sets (issue 46).

``TETHER_SQL_RECORD=<dir> uv run pytest`` leaves one pair of files per process in ``<dir>``
(``tests/support/sql_record.py``): ``*.sql.tsv``, each statement the first time that process
ran it (``origin, backend, text, test``), and ``*.counts.tsv`` (``count, origin, backend,
text``). This script::

    python tools/sql_diff.py merge <dir> [-o set.tsv]      # one sorted set of distinct statements
    python tools/sql_diff.py diff <before> <after> [--counts]   # each a <dir> or a merged set

``diff`` prints the statements only one side ran (``-`` removed, ``+`` added), grouped by
backend and origin, and exits 1 when there are any. Only statement texts are compared, never
call sites, so code moved between modules compares equal.

Texts are compared after replacing what a run makes up on the spot: the tests' random schema
and database names (``s_1f2e3d4c5b`` -> ``s_<hex>``, ``t12_0a1b2c3d`` -> ``t_<hex>``) and
absolute paths in string literals (``'/tmp/...'`` -> ``'<path>'``); ``--any-schema`` also
makes every schema qualifying a table ``"<schema>"`` (the suite's fixed schemas repeat each
statement a dozen times; a statement qualified with the wrong schema then hides). Counts
depend on timing (polls, retries, a SIGKILLed process loses its last seconds of them): they
are shown, and ``--counts`` lists statements whose total moved over twofold, as leads only.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

_VOLATILE = (
    # a test's schema or database: letters, a counter, an underscore, 8-12 random hex digits
    (
        re.compile(
            r"(?<![0-9A-Za-z_])([A-Za-z]+(?:_[A-Za-z]+)*?)\d*_[0-9a-f]{8,12}(?![0-9A-Za-z])"
        ),
        r"\1_<hex>",
    ),
    (re.compile(r"'/[^']*'"), "'<path>'"),
)
_SCHEMA = (re.compile(r'"[^"]+"\.'), '"<schema>".')


class Key(NamedTuple):
    backend: str
    origin: str
    text: str


class Seen(NamedTuple):
    runs: int
    test: str  # the first test (by name) during which a process ran it; "" outside a test


def canonical(text: str, *, any_schema: bool = False) -> str:
    """The statement's text with the run's made-up names replaced by placeholders (and with
    ``any_schema`` every schema that qualifies a table's name)."""
    for pattern, placeholder in (*_VOLATILE, *([_SCHEMA] if any_schema else [])):
        text = pattern.sub(placeholder, text)
    return text


def _rows(path: Path, width: int) -> Iterable[list[str]]:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != width:
            sys.exit(f"{path}:{number}: expected {width} tab-separated fields, got {len(fields)}")
        yield fields


def merge(directory: Path, *, any_schema: bool = False) -> dict[Key, Seen]:
    """Every distinct statement in a records directory, with its total count and first test."""
    if not directory.is_dir():
        sys.exit(f"{directory}: not a directory of SQL records")
    tests: dict[Key, str] = {}
    sightings: dict[Key, int] = {}  # a process that saw a statement ran it at least once
    for path in sorted(directory.glob("*.sql.tsv")):
        for origin, backend, text, test in _rows(path, 4):
            key = Key(backend, origin, canonical(text, any_schema=any_schema))
            tests[key] = min(tests.get(key, test), test, key=lambda t: (t == "", t))
            sightings[key] = sightings.get(key, 0) + 1
    counts: dict[Key, int] = {}
    for path in sorted(directory.glob("*.counts.tsv")):
        for count, origin, backend, text in _rows(path, 4):
            key = Key(backend, origin, canonical(text, any_schema=any_schema))
            counts[key] = counts.get(key, 0) + int(count)
    if not tests:
        sys.exit(f"{directory}: no *.sql.tsv records in it")
    return {key: Seen(max(counts.get(key, 0), sightings[key]), tests[key]) for key in sorted(tests)}


def write_set(statements: dict[Key, Seen], out: Path | None) -> None:
    lines = [
        f"{k.backend}\t{k.origin}\t{s.runs}\t{k.text}\t{s.test}\n" for k, s in statements.items()
    ]
    if out is None:
        sys.stdout.writelines(lines)
    else:
        out.write_text("".join(lines), encoding="utf-8")


def load(where: Path, *, any_schema: bool = False) -> dict[Key, Seen]:
    """A records directory (merged here) or a set written by ``merge``."""
    if where.is_dir():
        return merge(where, any_schema=any_schema)
    statements: dict[Key, Seen] = {}
    for backend, origin, count, text, test in _rows(where, 5):
        key = Key(backend, origin, canonical(text, any_schema=any_schema))
        seen = statements.get(key)
        runs = int(count) + (seen.runs if seen else 0)
        statements[key] = Seen(runs, min(test, seen.test) if seen else test)
    return statements


def diff(before: dict[Key, Seen], after: dict[Key, Seen], *, counts: bool) -> int:
    """Print what differs; the number of statements only one side ran."""
    groups = sorted({(k.backend, k.origin) for k in (*before, *after)})
    differing = 0
    for backend, origin in groups:
        old = {k for k in before if (k.backend, k.origin) == (backend, origin)}
        new = {k for k in after if (k.backend, k.origin) == (backend, origin)}
        gone, came = sorted(old - new), sorted(new - old)
        differing += len(gone) + len(came)
        print(
            f"== {backend} / {origin}: {len(old)} before, {len(new)} after, "
            f"{len(came)} added, {len(gone)} removed"
        )
        for sign, keys, side in (("-", gone, before), ("+", came, after)):
            for key in keys:
                seen = side[key]
                print(f"{sign} {seen.runs:>7}x  {key.text}")
                print(f"           first in: {seen.test or '(outside a test)'}")
        if counts:
            for key in sorted(old & new):
                a, b = before[key].runs, after[key].runs
                if max(a, b) > 2 * min(a, b):
                    print(f"~ {a:>7}x -> {b}x  {key.text}")
    print("identical" if not differing else f"{differing} statements differ")
    return differing


_ANY_SCHEMA = 'one statement for every PostgreSQL schema a test chose ("s1".t, "s2".t)'


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    m = verbs.add_parser("merge", help="one sorted set of the distinct statements of a records dir")
    m.add_argument("records", type=Path)
    m.add_argument("-o", "--output", type=Path, help="write the set here (default: stdout)")
    m.add_argument("--any-schema", action="store_true", help=_ANY_SCHEMA)
    d = verbs.add_parser("diff", help="the statements only one of two runs ran")
    d.add_argument("before", type=Path, help="a records dir or a set written by merge")
    d.add_argument("after", type=Path, help="a records dir or a set written by merge")
    d.add_argument("--counts", action="store_true", help="also list counts that moved over 2x")
    d.add_argument("--any-schema", action="store_true", help=_ANY_SCHEMA)
    args = parser.parse_args(argv)
    if args.verb == "merge":
        write_set(merge(args.records, any_schema=args.any_schema), args.output)
        return 0
    before, after = (load(w, any_schema=args.any_schema) for w in (args.before, args.after))
    return 1 if diff(before, after, counts=args.counts) else 0


if __name__ == "__main__":
    sys.exit(main())
