"""``tools/sql_diff.py`` as the lead runs it: two runs' records in, the differing statements out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SQL_DIFF = Path(__file__).resolve().parents[2] / "tools" / "sql_diff.py"


def _run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SQL_DIFF), *map(str, argv)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _records(where: Path, stem: str, seen: list[str], counts: list[str] | None) -> Path:
    """One process's files as ``tests/support/sql_record.py`` writes them."""
    where.mkdir(exist_ok=True)
    (where / f"{stem}.sql.tsv").write_text("# argv\tpytest\n" + "".join(f"{s}\n" for s in seen))
    if counts is not None:
        (where / f"{stem}.counts.tsv").write_text("".join(f"{c}\n" for c in counts))
    return where


def test_merge_makes_one_set_with_the_runs_made_up_names_replaced_and_counts_summed(
    tmp_path: Path,
) -> None:
    records = tmp_path / "records"
    select_a = 'SELECT id FROM "s_0a1b2c3d4e".tasks WHERE id = %s'
    select_b = 'SELECT id FROM "s_9f8e7d6c5b".tasks WHERE id = %s'
    _records(
        records,
        "1-aa",
        [f"tether\tpostgres\t{select_a}\ttests/b.py::two"],
        [f"3\ttether\tpostgres\t{select_a}"],
    )
    _records(
        records,
        "2-bb",
        [f"tether\tpostgres\t{select_b}\ttests/a.py::one", "other\tsqlite\tPRAGMA user_version\t"],
        None,  # SIGKILLed before its first flush: its statements ran at least once
    )
    done = _run("merge", records)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        'postgres\ttether\t3\tSELECT id FROM "s_<hex>".tasks WHERE id = %s\ttests/a.py::one',
        "sqlite\tother\t1\tPRAGMA user_version\t",
    ]


def test_diff_says_identical_for_the_same_statements_and_lists_each_difference(
    tmp_path: Path,
) -> None:
    same = "tether\tsqlite\tSELECT state FROM tasks WHERE id = ?\tt::x"
    before = _records(
        tmp_path / "before", "1-aa", [same, "tether\tsqlite\tDELETE FROM old\tt::y"], None
    )
    after = _records(tmp_path / "after", "7-cc", [same], None)
    (tmp_path / "after" / "8-dd.sql.tsv").write_text("tether\tsqlite\tDELETE FROM new\tt::z\n")

    identical = _run("diff", before, before)
    assert (identical.returncode, identical.stdout.splitlines()[-1]) == (0, "identical")

    differing = _run("diff", before, after)
    assert differing.returncode == 1, differing.stderr
    lines = differing.stdout.splitlines()
    assert "== sqlite / tether: 2 before, 2 after, 1 added, 1 removed" in lines
    assert "-       1x  DELETE FROM old" in lines
    assert "+       1x  DELETE FROM new" in lines
    assert "           first in: t::z" in lines
    assert lines[-1] == "2 statements differ"

    merged = tmp_path / "before.tsv"
    assert _run("merge", before, "-o", merged).returncode == 0
    assert _run("diff", merged, before).returncode == 0  # a merged set compares as its records


def test_a_damaged_record_is_refused_naming_the_file_and_line(tmp_path: Path) -> None:
    records = _records(tmp_path / "r", "1-aa", ["tether\tsqlite\tSELECT 1"], None)
    done = _run("merge", records)
    assert done.returncode == 1
    assert (
        done.stderr.strip()
        == f"{records / '1-aa.sql.tsv'}:2: expected 4 tab-separated fields, got 3"
    )


def test_any_schema_makes_one_statement_of_a_statement_on_each_fixed_schema(
    tmp_path: Path,
) -> None:
    records = _records(
        tmp_path / "r",
        "1-aa",
        [
            'tether\tpostgres\tSELECT 1 FROM "opcli".tasks\tt::a',
            'tether\tpostgres\tSELECT 1 FROM "tether".tasks\tt::b',
        ],
        None,
    )
    assert len(_run("merge", records).stdout.splitlines()) == 2
    done = _run("merge", records, "--any-schema")
    assert done.stdout.splitlines() == ['postgres\ttether\t2\tSELECT 1 FROM "<schema>".tasks\tt::a']
