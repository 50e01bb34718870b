"""A PostgreSQL primary with a synchronous standby, for failover tests (issue #45).

The primary is a throwaway server; the standby is a ``pg_basebackup -R`` copy of it, started on
its own port, streaming from it. Once the standby is attached the primary requires it
(``synchronous_standby_names = '*'``), so a synchronous commit returns only once the standby
has flushed it. ``fail_over()`` stops the primary at once (``-m immediate``: a crash) and
promotes the standby, as a managed PostgreSQL does.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import psycopg

from tether.bridge.stores.postgres._throwaway import USER, Throwaway, throwaway_postgres


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@attrs.define
class Replicated:
    primary: Throwaway
    standby_root: Path
    standby_port: int

    @property
    def password(self) -> str:
        return self.primary.password

    @property
    def url(self) -> str:
        """Both servers, the writable one found as libpq connects (no password: PGPASSWORD)."""
        return (
            f"postgresql://{USER}@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby_port}"
            "/postgres?target_session_attrs=read-write"
        )

    @property
    def standby_dsn(self) -> str:
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.standby_port}/postgres"

    def _pg(self, *args: str, env: dict[str, str] | None = None) -> None:
        cmd = [str(self.primary.bindir / args[0]), *args[1:]]
        if self.primary.run_as is not None:
            cmd = ["runuser", "-u", self.primary.run_as, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr.strip()}")

    def fail_over(self) -> None:
        """Crash the primary, then promote the standby (returns once it accepts writes)."""
        self.primary.pause("immediate")
        self._pg("pg_ctl", "-D", str(self.standby_root / "data"), "-w", "promote")

    def stop_standby(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._pg("pg_ctl", "-D", str(self.standby_root / "data"), "-m", "immediate", "stop")


def _sync_state(dsn: str) -> str | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT sync_state FROM pg_stat_replication").fetchone()
    return None if row is None else str(row[0])


@contextlib.contextmanager
def primary_with_standby() -> Iterator[Replicated]:
    """Start both servers (``NoPostgres`` if the binaries are missing); stop and delete both."""
    with throwaway_postgres(fsync=False) as primary:
        root = Path(tempfile.mkdtemp(prefix="tether-pg-standby-"))
        if primary.run_as is not None:
            owner = pwd.getpwnam(primary.run_as)
            os.chown(root, owner.pw_uid, owner.pw_gid)
        pair = Replicated(primary, root, _free_port())
        try:
            env = {**os.environ, "PGPASSWORD": primary.password}
            pair._pg(
                "pg_basebackup", "-D", str(root / "data"), "-R", "-X", "stream",
                "-h", "127.0.0.1", "-p", str(primary.port), "-U", USER,
                env=env,
            )  # fmt: skip
            options = (
                f"-p {pair.standby_port} -k {root} -c listen_addresses=127.0.0.1 "
                "-c fsync=off -c max_connections=200 -c hot_standby=on"
            )
            pair._pg(
                "pg_ctl", "-D", str(root / "data"), "-l", str(root / "log"), "-w",
                "-o", options, "start",
            )  # fmt: skip
            with psycopg.connect(primary.dsn, autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                conn.execute("SELECT pg_reload_conf()")
            deadline = time.monotonic() + 60
            while _sync_state(primary.dsn) != "sync":  # the standby attaches, then is required
                if time.monotonic() > deadline:
                    raise RuntimeError("the standby never became synchronous")
                time.sleep(0.05)
            yield pair
        finally:
            pair.stop_standby()
            shutil.rmtree(root, ignore_errors=True)
