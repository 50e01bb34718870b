"""A disposable local PostgreSQL server for tests, benchmarks and demos.

``initdb`` into a fresh temporary directory, ``pg_ctl start`` on 127.0.0.1 and a free port,
password authentication (SCRAM, a random password) even on loopback, and ``pg_ctl stop`` plus
removal of the directory on exit. PostgreSQL refuses to run as root, so under root the server
runs as the ``postgres`` system user when there is one. ``find_bindir()`` looks on ``PATH`` and
then in Debian's ``/usr/lib/postgresql/<version>/bin``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs

USER = "tether"


class NoPostgres(RuntimeError):
    """No PostgreSQL server binaries here, or no user that may run them."""


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or None."""
    initdb = shutil.which("initdb")
    if initdb is not None and shutil.which("pg_ctl") is not None:
        return Path(initdb).resolve().parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return versions[-1].parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@attrs.define
class Throwaway:
    """A running throwaway server; ``dsn`` includes its password (it is a test server)."""

    bindir: Path
    root: Path
    port: int
    password: str
    run_as: str | None
    options: str = ""
    """The server's start options (``resume`` starts it with them again)."""
    paused: bool = False
    """Stopped by ``pause`` (``stop`` then only deletes the files)."""

    @property
    def dsn(self) -> str:
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self.run_as is not None:
            cmd = ["runuser", "-u", self.run_as, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr.strip()}")

    def pause(self, mode: str = "fast") -> None:
        """Stop the server but keep its files (``resume`` starts it again): an outage."""
        self._run("pg_ctl", "-D", str(self.root / "data"), "-m", mode, "-w", "stop")
        self.paused = True

    def resume(self) -> None:
        """Start the server ``pause`` stopped; returns once it accepts connections."""
        data, log = str(self.root / "data"), str(self.root / "log")
        self._run("pg_ctl", "-D", data, "-l", log, "-w", "-o", self.options, "start")
        self.paused = False

    def stop(self) -> None:
        try:
            if not self.paused:
                self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def throwaway_postgres(
    *, fsync: bool = True, max_connections: int = 200, settings: Mapping[str, str] | None = None
) -> Iterator[Throwaway]:
    """Start a private server, yield it, stop it and delete its files.

    ``fsync=False`` makes commits skip the disk flush: fine for tests of transactional logic,
    never for durability claims or benchmarks. ``settings`` are more server settings (``-c``),
    e.g. ``{"shared_preload_libraries": "pg_stat_statements"}`` for a benchmark.
    """
    bindir = find_bindir()
    if bindir is None:
        raise NoPostgres("no PostgreSQL server binaries (initdb, pg_ctl) found")
    run_as = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            raise NoPostgres("running as root and there is no 'postgres' user") from None
        run_as = owner.pw_name
    root = Path(tempfile.mkdtemp(prefix="tether-pg-"))
    server: Throwaway | None = None
    try:
        if run_as is not None:
            os.chown(root, owner.pw_uid, owner.pw_gid)
        password = secrets.token_urlsafe(24)
        pwfile = root / "pw"
        pwfile.write_text(password + "\n")
        if run_as is not None:
            os.chown(pwfile, owner.pw_uid, owner.pw_gid)
        server = Throwaway(bindir, root, _free_port(), password, run_as)
        server._run(
            "initdb",
            "-D",
            str(root / "data"),
            "-U",
            USER,
            "--auth=scram-sha-256",
            f"--pwfile={pwfile}",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        )
        pwfile.unlink()
        flag = "on" if fsync else "off"
        for attempt in range(3):  # the free port may be taken before the server binds it
            if attempt:
                server.port = _free_port()
            options = (
                f"-p {server.port} -k {root} -c listen_addresses=127.0.0.1 "
                f"-c max_connections={max_connections} -c fsync={flag} "
                f"-c synchronous_commit={flag} -c full_page_writes={flag}"
            )
            for name, value in (settings or {}).items():
                options += f" -c {name}={value}"
            try:
                data, log = str(root / "data"), str(root / "log")
                server._run("pg_ctl", "-D", data, "-l", log, "-w", "-o", options, "start")
                server.options = options
                break
            except RuntimeError:
                if attempt == 2:
                    raise
    except BaseException:
        if server is not None:
            with contextlib.suppress(Exception):
                server.stop()
        shutil.rmtree(root, ignore_errors=True)
        raise
    try:
        yield server
    finally:
        server.stop()
