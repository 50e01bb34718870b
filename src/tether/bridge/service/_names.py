"""Pool names: unique by default, and a name a live process uses is never taken twice.

A chosen name is refused while its beats in the store still move. See docs/guide/design.md, "Pool
names".
"""

from __future__ import annotations

import contextlib
import re
import secrets
import socket
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Final

import trio

from ..._plumbing._config_error import ConfigError
from ..._plumbing._lock_file import LockHeld, hold_lock
from ..custody._roles import PoolMemberStore
from ..pool._liveness import is_alive
from ..stores.postgres._dsn import is_postgres_dsn

STEM_MAX: Final = 56
"""Room for ``-w256`` and ``-lead`` inside the 64-character worker-name rule."""


CHOSE_ANOTHER: Final = (
    "give this process another --pool-name, or leave --pool-name unset for a unique one"
)


class NameInUse(ConfigError):
    """A pool name given explicitly is being used by another live process."""


def _clean(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "-", text).strip("-_")


def short_host(hostname: str | None = None) -> str:
    """The host's first label, made a valid worker-name part (at most 16 characters)."""
    name = socket.gethostname() if hostname is None else hostname
    return _clean(name.split(".", 1)[0])[:16] or "host"


def pool_stem(client_name: str, pool_name: str | None = None, *, host: str | None = None) -> str:
    """The prefix of a process's pool names: ``pool_name`` verbatim if given, else the client
    name, the short host and a random suffix (a new one each call: each process its own)."""
    if pool_name is not None:
        stem = _clean(pool_name)
        if stem != pool_name or not stem or len(stem) > STEM_MAX or not stem[0].isalnum():
            raise ConfigError(
                f"pool_name must be 1-{STEM_MAX} characters from [A-Za-z0-9_-], starting with a "
                f"letter or digit, got {pool_name!r}"
            )
        return stem
    suffix = secrets.token_hex(3)
    head = _clean(client_name) or "tether"
    hostpart = short_host(host)
    room = STEM_MAX - len(suffix) - 1  # what is left for "<head>-<host>"
    head = head[: max(1, room - len(hostpart) - 1)].strip("-_") or "tether"
    return f"{head}-{hostpart}"[:room] + f"-{suffix}"


def host_stem(client_name: str, *, host: str | None = None) -> str:
    """``<client name>-<short host>``, no random part: a bridge's default on a SQLite store.

    One bridge per SQLite file is the model (``delivery_leases`` is false there), so a
    restarted bridge keeps its names and its new workers claim what its predecessor was
    assigned at once, instead of the lead waiting out the dead names' ``dead_after``."""
    head = _clean(client_name) or "tether"
    hostpart = short_host(host)
    return f"{head[: STEM_MAX - len(hostpart) - 1].strip('-_') or 'tether'}-{hostpart}"


def worker_names(stem: str, count: int) -> list[str]:
    return [f"{stem}-w{i}" for i in range(1, count + 1)]


def lead_name(stem: str) -> str:
    return f"{stem}-lead"


async def check_names_free(
    store: PoolMemberStore,
    names: Collection[str],
    *,
    dead_after: float,
    watch: float,
    remedy: str = CHOSE_ANOTHER,
) -> None:
    """Refuse (``NameInUse``, ending with ``remedy``) if a live process beats under any of
    ``names`` (a recent beat must also move within ``watch`` seconds to count as live)."""
    wanted = set(names)
    now = store.clock()
    recent = {
        m.name: m.last_beat
        for m in await store.workers()
        if m.name in wanted and is_alive(m, now, dead_after)
    }
    if not recent:
        return
    await trio.sleep(watch)
    moved = sorted(
        m.name for m in await store.workers() if m.name in recent and m.last_beat != recent[m.name]
    )
    if moved:
        raise NameInUse(
            f"pool name {moved[0]} is in use by another live process (its beats in the store "
            f"keep moving); {remedy}"
        )


@contextlib.contextmanager
def one_bridge_per_file(store: str) -> Iterator[None]:
    """Hold ``<store>.bridge.lock`` for the block, or refuse with a ``ConfigError`` (exit 2).

    A bridge on a SQLite file keeps fixed pool names (``host_stem``) and delivers without
    delivery leases: a second one beside it would beat under the same names (both leading) and
    post every reply twice. The kernel frees the lock when the process dies, so a restart after
    a crash is never refused. PostgreSQL stores are shared by many bridges and need no lock.
    """
    if is_postgres_dsn(store):
        yield
        return
    path = Path(store).resolve()  # the file's own folder, whatever links lead to it
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(hold_lock(path.with_name(path.name + ".bridge.lock")))
        except LockHeld as exc:
            who = "" if exc.pid is None else f" (pid {exc.pid})"
            raise ConfigError(
                f"another tether bridge{who} runs on the store {store}: one bridge per SQLite "
                "file; stop it first, add workers with --workers or `tether worker run`, or use "
                "PostgreSQL for several bridges"
            ) from None
        yield
