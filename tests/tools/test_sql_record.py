"""``TETHER_SQL_RECORD``'s recorder (``support/sql_record.py``) in real processes: what a process
below the session runs is recorded as written, bound values never, and nothing elsewhere.

Each case gives a throwaway virtual environment the ``.pth`` line (it sees this environment's
packages through a path line), so the session's own environment is left alone."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from support import sql_record

_CHILD = """
import sqlite3, subprocess, sys
db = sqlite3.connect(":memory:", isolation_level=None)
db.execute("CREATE TABLE t (a)")
db.execute("INSERT INTO t VALUES (?)", ("secret-value",))
db.executemany("INSERT INTO t\\n   VALUES (?)", [(1,), (2,)])
cursor = db.cursor()
for _ in range(3):
    cursor.execute("SELECT a FROM t WHERE a = ?", ("secret-value",))
db.executescript("BEGIN; DELETE FROM t; COMMIT;")
grandchild = "import sqlite3; sqlite3.connect(':memory:').execute('SELECT 42')"
subprocess.run([sys.executable, "-c", grandchild], check=True)
"""

_POSTGRES_CHILD = """
import sys
import psycopg
from psycopg import sql
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    conn.execute("SELECT %s::text", ("secret-value",))
    with conn.transaction():
        conn.execute(sql.SQL("SELECT {} FROM pg_class LIMIT 1").format(sql.Identifier("relname")))
    with conn.cursor() as cur:
        cur.executemany("SELECT %s", [(1,), (2,)])
"""


def _venv(tmp_path: Path) -> tuple[Path, Path]:
    """A new environment's python and its site-packages; it sees this environment's packages."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "host.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python, Path(site)


def _recorded(records: Path) -> tuple[set[str], dict[str, int], str]:
    """The statements first seen, their counts summed, and every file's text."""
    seen, counts, text = set(), dict[str, int](), ""
    for path in sorted(records.iterdir()):
        text += path.read_text()
        for line in path.read_text().splitlines():
            fields = line.split("\t")
            if path.name.endswith(".sql.tsv") and not line.startswith("#"):
                seen.add("\t".join(fields[:3]))
            elif path.name.endswith(".counts.tsv"):
                key = "\t".join(fields[1:])
                counts[key] = counts.get(key, 0) + int(fields[0])
    return seen, counts, text


def test_a_process_below_the_session_and_its_child_record_sqlite_statements_as_written(
    tmp_path: Path,
) -> None:
    (python, site), records = _venv(tmp_path), tmp_path / "records"
    sql_record.write_pth(records, site_dir=site)
    subprocess.run([python, "-c", _CHILD], check=True, timeout=60)

    seen, counts, text = _recorded(records)
    assert seen == {
        "other\tsqlite\tCREATE TABLE t (a)",
        "other\tsqlite\tINSERT INTO t VALUES (?)",  # once by execute, once by executemany
        "other\tsqlite\tSELECT a FROM t WHERE a = ?",
        "other\tsqlite\tBEGIN; DELETE FROM t; COMMIT;",
        "other\tsqlite\tSELECT 42",  # the child's child
    }
    assert counts["other\tsqlite\tINSERT INTO t VALUES (?)"] == 2
    assert counts["other\tsqlite\tSELECT a FROM t WHERE a = ?"] == 3
    assert "secret-value" not in text
    assert len(list(records.glob("*.sql.tsv"))) == 2


def test_a_process_not_below_the_session_records_nothing(tmp_path: Path) -> None:
    (python, site), records = _venv(tmp_path), tmp_path / "records"
    other = subprocess.Popen(["sleep", "60"])  # alive, and no ancestor of the child
    try:
        sql_record.write_pth(records, site_dir=site, session=other.pid)
        subprocess.run([python, "-c", _CHILD], check=True, timeout=60)
    finally:
        other.kill()
        other.wait()
    assert not records.exists()


@pytest.mark.postgres
def test_psycopg_statements_and_transaction_commands_are_recorded_without_values(
    tmp_path: Path, postgres_dsn: str
) -> None:
    (python, site), records = _venv(tmp_path), tmp_path / "records"
    sql_record.write_pth(records, site_dir=site)
    subprocess.run([python, "-c", _POSTGRES_CHILD, postgres_dsn], check=True, timeout=60)

    seen, counts, text = _recorded(records)
    assert seen == {
        "other\tpostgres\tSELECT %s::text",
        "other\tpostgres\tBEGIN",
        'other\tpostgres\tSELECT "relname" FROM pg_class LIMIT 1',
        "other\tpostgres\tCOMMIT",
        "other\tpostgres\tSELECT %s",
    }
    assert counts["other\tpostgres\tSELECT %s"] == 1  # one executemany
    assert "secret-value" not in text
