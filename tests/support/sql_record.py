"""Opt-in record of every SQL statement text run against SQLite and PostgreSQL (issue 46).

``TETHER_SQL_RECORD=<dir> uv run pytest`` turns it on (``pytest_configure``, below): it installs
itself in the test process and, for the session, writes a ``.pth`` line into the environment's
site-packages (as pytest-cov measures subprocesses), so every Python process started below the
session (bridges, workers, CLI verbs, their children) installs it at start-up too, whatever
environment variables its parent gave it. Unset, nothing is patched and no line is written.
``tools/sql_diff.py`` merges and compares the records.

What is recorded is the statement's text as written, whitespace collapsed: parameters are
bound, so their values never enter it. SQLite: ``sqlite3.connect`` hands out a connection
class whose ``execute``/``executemany``/``executescript`` (and its cursors') record (the trace
callback would see the values inlined). PostgreSQL: psycopg's ``Cursor.execute``,
``executemany``, ``stream``, ``copy`` and the connection's own commands (``BEGIN``,
``COMMIT``, ...). Both modules are patched when first imported, never imported for it.

Each process appends a statement to ``<dir>/<pid>-<nonce>.sql.tsv`` the first time it runs it
(a SIGKILLed process still leaves its statements), one line ``origin, backend, text, test``:
``origin`` is ``tether`` when the first caller outside the database modules is tether's code,
else ``other`` (the tests' own queries, fixtures); ``test`` is ``PYTEST_CURRENT_TEST`` then,
which subprocesses inherit. Counts go to ``<dir>/<pid>-<nonce>.counts.tsv``, rewritten every
few seconds and at exit (best effort: a killed process loses its last seconds of them).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import re
import secrets
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ENV = "TETHER_SQL_RECORD"
PTH_NAME = "tether_sql_record.pth"
_MODULE = "_tether_sql_record"  # the name a subprocess loads this file under
_FLUSH_S = 5.0
_SPACE = re.compile(r"\s+")
# frames of these modules are plumbing between tether's code and the statement
_SKIP = ("sqlite3", "psycopg", "psycopg_pool", "contextlib", _MODULE, __name__)


def normalise(text: str) -> str:
    """The statement's text with every run of whitespace made one space, ends trimmed."""
    return _SPACE.sub(" ", text).strip()


class Recorder:
    """One process's statements: first sightings appended at once, counts flushed now and then.
    Its files are made at the first statement: a process that runs none leaves none."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._lock = threading.Lock()
        self._reset()
        atexit.register(self.flush)
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._stem: Path | None = None
        self._counts: dict[tuple[str, str, str], int] = {}
        self._dirty = False
        self._flushed = time.monotonic()

    def _start(self) -> Path:
        self._directory.mkdir(parents=True, exist_ok=True)
        self._stem = self._directory / f"{os.getpid()}-{secrets.token_hex(4)}"
        with self._stem.with_suffix(".sql.tsv").open("a", encoding="utf-8") as out:
            out.write(f"# argv\t{_one_line(' '.join(sys.argv))}\n")
        return self._stem

    def record(self, backend: str, text: str) -> None:
        key = (_origin(), backend, normalise(text))
        with self._lock:
            count = self._counts.get(key, 0)
            self._counts[key] = count + 1
            self._dirty = True
            if count == 0:
                stem = self._stem or self._start()
                test = os.environ.get("PYTEST_CURRENT_TEST", "").removesuffix(" (call)")
                with stem.with_suffix(".sql.tsv").open("a", encoding="utf-8") as out:
                    out.write("\t".join((*key, _one_line(test))) + "\n")
            if time.monotonic() - self._flushed > _FLUSH_S:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._flushed = time.monotonic()
        if not self._dirty or self._stem is None:
            return
        self._dirty = False
        lines = (f"{n}\t" + "\t".join(key) + "\n" for key, n in self._counts.items())
        part = self._stem.with_suffix(".counts.part")
        part.write_text("".join(lines), encoding="utf-8")
        part.replace(self._stem.with_suffix(".counts.tsv"))


def _one_line(text: str) -> str:
    return text.replace("\t", " ").replace("\n", " ")


def _origin() -> str:
    """``tether`` when the first frame outside the plumbing is tether's own code."""
    frame = sys._getframe(2)
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if not name.startswith(_SKIP):
            return "tether" if name == "tether" or name.startswith("tether.") else "other"
        frame = frame.f_back  # type: ignore[assignment]
    return "other"


def _text(query: Any, conn: Any = None) -> str:
    """A statement given as ``str``, ``bytes`` or a psycopg ``sql.Composable``, as text."""
    if isinstance(query, str):
        return query
    if isinstance(query, bytes | bytearray | memoryview):
        return bytes(query).decode("utf-8", "replace")
    try:
        return str(query.as_string(conn))
    except Exception:  # a composable that cannot render here still leaves a trace
        return repr(query)


_recorder: Recorder | None = None


def _record(backend: str, query: Any, conn: Any = None) -> None:
    if _recorder is not None:
        _recorder.record(backend, _text(query, conn))


# SQLite --------------------------------------------------------------------------------------


def _patch_sqlite(sqlite3: Any) -> None:
    """``sqlite3.connect`` hands out recording connections (a caller's own factory kept)."""

    class RecordingCursor(sqlite3.Cursor):  # type: ignore[misc]
        def execute(self, sql: str, parameters: Any = (), /) -> Any:
            _record("sqlite", sql)
            return super().execute(sql, parameters)

        def executemany(self, sql: str, seq_of_parameters: Iterable[Any], /) -> Any:
            _record("sqlite", sql)
            return super().executemany(sql, seq_of_parameters)

        def executescript(self, sql_script: str, /) -> Any:
            _record("sqlite", sql_script)
            return super().executescript(sql_script)

    class RecordingConnection(sqlite3.Connection):  # type: ignore[misc]
        # Connection.execute runs its cursor in C, not through Cursor.execute: recorded here once
        def cursor(self, factory: Any = RecordingCursor) -> Any:
            return super().cursor(factory)

        def execute(self, sql: str, parameters: Any = (), /) -> Any:
            _record("sqlite", sql)
            return super().execute(sql, parameters)

        def executemany(self, sql: str, parameters: Iterable[Any], /) -> Any:
            _record("sqlite", sql)
            return super().executemany(sql, parameters)

        def executescript(self, sql_script: str, /) -> Any:
            _record("sqlite", sql_script)
            return super().executescript(sql_script)

    combined: dict[type[Any], type[Any]] = {sqlite3.Connection: RecordingConnection}
    original: Callable[..., Any] = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> Any:
        given = kwargs.get("factory", sqlite3.Connection)
        if given not in combined:
            name = f"Recording{given.__name__}"
            combined[given] = type(name, (RecordingConnection, given), {})
        kwargs["factory"] = combined[given]
        return original(*args, **kwargs)

    sqlite3.connect = sqlite3.dbapi2.connect = connect


# PostgreSQL ----------------------------------------------------------------------------------


def _patch_psycopg(psycopg: Any) -> None:
    cursor = psycopg.Cursor

    def wrap(cls: Any, name: str, conn_of: Callable[[Any], Any]) -> None:
        original = getattr(cls, name)

        def recorded(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            _record("postgres", query, conn_of(self))
            return original(self, query, *args, **kwargs)

        recorded.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(cls, name, recorded)

    for name in ("execute", "executemany", "stream", "copy"):
        wrap(cursor, name, lambda cur: cur.connection)
    # BEGIN, COMMIT, ROLLBACK, SAVEPOINT of conn.transaction(), conn.commit(): not cursor calls
    wrap(psycopg.Connection, "_exec_command", lambda conn: conn)


class _AfterImport:
    """A meta path finder that patches a module right after it is first imported: importing
    ``sqlite3`` or ``psycopg`` up front would change what a process loads (``test_start_time``
    holds ``tether --help`` to loading neither)."""

    def __init__(self, patches: dict[str, Callable[[Any], None]]) -> None:
        self._patches = patches

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        patch = self._patches.pop(fullname, None)
        if patch is None:
            return None
        if not self._patches:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


# Installing ----------------------------------------------------------------------------------


def install(directory: Path) -> None:
    """Record this process's statements into ``directory`` (once per process)."""
    global _recorder
    # the flag sits on ``sys``, not here: this file may be loaded twice in one process (as
    # ``support.sql_record`` and by the ``.pth`` line, which some interpreters here run twice)
    if getattr(sys, "_tether_sql_record", False):
        return
    sys._tether_sql_record = True  # type: ignore[attr-defined]
    _recorder = Recorder(directory)
    patches = {"sqlite3": _patch_sqlite, "psycopg": _patch_psycopg}
    for name in list(patches):
        if name in sys.modules:
            patches.pop(name)(sys.modules[name])
    if patches:
        sys.meta_path.insert(0, _AfterImport(patches))


def pth_path(site_dir: Path | None = None) -> Path:
    """The ``.pth`` line's file in ``site_dir`` (default: this environment's site-packages)."""
    return (site_dir or Path(sysconfig.get_paths()["purelib"])) / PTH_NAME


def descends_from(ancestor: int) -> bool:
    """Whether this process is ``ancestor`` or was started below it (Linux ``/proc``; where
    there is none, assume so)."""
    pid = os.getpid()
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return not Path("/proc/self").exists()
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the name is the ppid
    return False


def write_pth(directory: Path, *, site_dir: Path | None = None, session: int | None = None) -> Path:
    """Make every new interpreter of the environment started below ``session`` (default: this
    process) record into ``directory``. The directory is written into the line, not read from
    the environment: the tests start their children with every ``TETHER_*`` variable removed.
    Other processes of the environment (an editor's, a second session's) record nothing, nor
    does anything once the session is gone, should its line be left behind."""
    boot = (
        "import importlib.util as u, pathlib, sys\n"
        # some interpreters here run a .pth line twice
        f"if {_MODULE!r} not in sys.modules:\n"
        f"    s = u.spec_from_file_location({_MODULE!r}, {str(Path(__file__).resolve())!r})\n"
        "    m = u.module_from_spec(s); sys.modules[s.name] = m; s.loader.exec_module(m)\n"
        f"    if m.descends_from({session or os.getpid()}):\n"
        f"        m.install(pathlib.Path({str(directory.resolve())!r}))\n"
    )
    path = pth_path(site_dir)
    path.write_text(f"import sys; exec({boot!r})\n", encoding="utf-8")
    return path


def remove_pth(site_dir: Path | None = None) -> None:
    pth_path(site_dir).unlink(missing_ok=True)


def pytest_configure() -> None:
    """With ``ENV`` set, record this session and every process below it. ``tests/conftest.py``
    calls it; on a checkout without that hook, ``PYTHONPATH=tests pytest -p support.sql_record``
    loads this file as a plugin (twice does no harm)."""
    where = os.environ.get(ENV)
    if where:
        write_pth(Path(where))
        install(Path(where))


def pytest_unconfigure() -> None:
    if os.environ.get(ENV):
        remove_pth()
