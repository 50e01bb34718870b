"""File exchange: hand tasks to an agent that is another program, through files.

Custody stays in the store: the claim is renewed while a file waits, and files are archived only
once the result is stored. See docs/guide/pool.md and docs/guide/design.md, "File exchange".

Durable steps (issue #35) are not offered through the exchange: the outside program holds no
lease to fence a record with and has no channel to read recorded steps back, so its whole run is
one unit and a crash runs it again (docs/guide/durable-runs.md, "Outside programs").
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from ..._plumbing._atomic_file import remove_stale_tmp_at, write_atomic_at
from ..._plumbing._fs import ensure_private_dir
from ..._session import Session
from ..custody._roles import Store
from ..custody._rules import CustodyState, InvalidTaskId, Task, check_task_id
from ..runs._current import conversation_of
from ..runs._reply import AgentError, Reply
from ._agent import TASK_EVENT
from ._liveness import check_seconds
from ._worker import PoolWorker

log = logging.getLogger("tether.bridge.pool.files")

HEADER_KEY_RULE: Final = "[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
_KEY_RE: Final = re.compile(HEADER_KEY_RULE)
_ESCAPE_RE: Final = re.compile(r"[\\\x00-\x1f\x7f-\x9f\u2028\u2029]")
_UNESCAPE_RE: Final = re.compile(r"\\(?:x([0-9a-f]{2})|u([0-9a-f]{4})|(.))", re.DOTALL)
_NAMED: Final = {"\\": "\\\\", "\n": "\\n", "\r": "\\r"}


class HeaderRefused(AgentError):
    """A header key cannot be written safely; the task is refused for the file exchange."""


class ExchangeUnsafe(AgentError):
    """A folder of the exchange is not a real directory (a symlink, a file): not used."""


class ResultRefused(AgentError):
    """A result file broke the format (first line not ``task: <id>``, bad headers)."""


def escape_value(value: str) -> str:
    """Escape ``value`` so it stays on one header line (and round-trips)."""

    def sub(m: re.Match[str]) -> str:
        c = m.group()
        if c in _NAMED:
            return _NAMED[c]
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"

    return _ESCAPE_RE.sub(sub, value)


def unescape_value(value: str) -> str:
    def sub(m: re.Match[str]) -> str:
        hx, uni, ch = m.groups()
        if hx or uni:
            return chr(int(hx or uni, 16))
        named = {"\\": "\\", "n": "\n", "r": "\r"}
        if ch not in named:
            raise ValueError(f"unknown escape \\{ch} in header value {value!r:.80}")
        return named[ch]

    return _UNESCAPE_RE.sub(sub, value)


def check_header_key(key: str) -> str:
    if _KEY_RE.fullmatch(key) is None:
        raise HeaderRefused(f"header key {key[:80]!r} must match {HEADER_KEY_RULE}")
    return key


def format_message(headers: list[tuple[str, str]], body: str) -> str:
    """Headers (keys checked, values escaped), a blank line, then ``body``."""
    lines = [f"{check_header_key(k)}: {escape_value(v)}" for k, v in headers]
    return "\n".join(lines) + "\n\n" + body


def parse_message(text: str) -> tuple[list[tuple[str, str]], str]:
    """Split a message into its headers (unescaped, in order) and body; ``ValueError`` if bad."""
    head, sep, body = text.partition("\n\n")
    if not sep:
        if text.endswith("\n"):
            head, body = text[:-1], ""  # headers only, no blank line
        else:
            raise ValueError("no blank line between the headers and the body")
    headers: list[tuple[str, str]] = []
    for n, line in enumerate(head.split("\n"), 1):
        key, colon, value = line.partition(": ")
        if not colon or _KEY_RE.fullmatch(key) is None:
            raise ValueError(f"header line {n} is not 'key: value': {line[:80]!r}")
        headers.append((key, unescape_value(value)))
    return headers, body


def task_message(task: Task) -> str:
    """The outbox file of ``task``."""
    headers = [("task", task.id), ("priority", task.priority)]
    if task.room is not None:
        headers.append(("room", task.room))
    headers += [(f"header.{check_header_key(k)}", v) for k, v in sorted(task.headers.items())]
    return format_message(headers, task.body)


def parse_result(text: str, task_id: str) -> Reply:
    """The reply in a result file for ``task_id``, or ``ResultRefused`` saying what is wrong."""
    first = text.split("\n", 1)[0]
    if first != f"task: {task_id}":
        raise ResultRefused(
            f"result file for task {task_id!r} must start with the line 'task: {task_id}', "
            f"got {first[:80]!r}"
        )
    try:
        headers, body = parse_message(text)
    except ValueError as exc:
        raise ResultRefused(f"result file for task {task_id!r}: {exc}") from None
    fields: Mapping[str, str] = dict(headers)
    no_send = fields.get("no-send", "false")
    if no_send not in ("true", "false"):
        raise ResultRefused(f"result file for task {task_id!r}: no-send must be true or false")
    return Reply(body, no_send=no_send == "true")


_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FOLDERS: Final = ("outbox", "results", "archive", "refused")
_SHOWN_STRANGERS: Final = 10
"""Names a start's warning shows of the files that are not a task's (the rest counted)."""
_FINISHED: Final = frozenset({CustodyState.RESULT, CustodyState.DELIVERED, CustodyState.DEAD, None})
"""A task's state (None: gone from the store) once no run of it will read its files again."""
MAX_RESULT_FILE_BYTES: Final = 16 << 20
"""The largest result file read (the custody store bounds the reply again)."""


@attrs.frozen
class _Refusal:
    """Why a result file was left unread (it is moved to ``refused/`` as it is)."""

    why: str


@attrs.define(eq=False)
class FileExchange:
    """The adapter: ``factory`` is an agent factory; ``archive`` runs after a stored result.

    Every file operation happens relative to a descriptor of its folder opened with
    ``O_NOFOLLOW`` (``root`` itself is the operator's choice and may be a link): a folder that
    is or became a symlink is refused (``ExchangeUnsafe``); a result file that is a symlink,
    a FIFO, a directory, has other hard links or is over ``max_result_bytes`` is refused
    unread (moved to ``refused/`` and reported). Nothing outside the exchange is ever read,
    written or moved. On start it removes the tmp files of outbox writes whose process was
    killed mid-write (``remove_stale_tmp_at``), so a crash leaves no debris in ``outbox/``.
    """

    root: Path = attrs.field(converter=Path)
    poll_interval: float = 0.1
    max_result_bytes: int = MAX_RESULT_FILE_BYTES
    refused_count: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        check_seconds("poll_interval", self.poll_interval)
        for d in (self.root, self.outbox, self.results, self.archive_dir, self.refused_dir):
            ensure_private_dir(d)
        for name in _FOLDERS:
            with self._folder(name):
                pass
        with self._folder("outbox") as outbox:
            for stale in remove_stale_tmp_at(outbox):
                log.info("removed %s: an outbox write cut short by a killed process", stale)

    @property
    def outbox(self) -> Path:
        return self.root / "outbox"

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def archive_dir(self) -> Path:
        return self.root / "archive"

    @property
    def refused_dir(self) -> Path:
        return self.root / "refused"

    def factory(self, session: Session) -> None:
        session.add_handler(TASK_EVENT, self.exchange)

    async def exchange(self, task: Task) -> Reply:
        """Write the task to the outbox and wait for its result file. A task of a room first
        gets its conversation beside it (``<id>.conversation.json``: the history, the state,
        its version), and a ``results/<id>.state.json`` written before the result file is
        the room's new state (docs/guide/conversations.md)."""
        name = f"{task.id}.txt"
        if task.room is not None:
            talk = (await conversation_json(task)).encode("utf-8", "surrogatepass")
            await trio.to_thread.run_sync(self._write_outbox, f"{task.id}.conversation.json", talk)
        data = task_message(task).encode("utf-8", "surrogatepass")
        await trio.to_thread.run_sync(self._write_outbox, name, data)
        while True:
            read = await trio.to_thread.run_sync(self._read_result, name)
            if read is not None:
                break
            await trio.sleep(self.poll_interval)
        try:
            reply = _reply(read, task.id)
            if task.room is not None:
                state = await trio.to_thread.run_sync(self._read_result, f"{task.id}.state.json")
                if state is not None:
                    reply = attrs.evolve(reply, state=_state(state, task.id))
        except ResultRefused as exc:
            kept = await trio.to_thread.run_sync(self._refuse, name, task.id)
            self.refused_count += 1
            log.warning("refused %s (kept as %s): %s", self.results / name, kept, exc)
            raise
        return reply

    async def archive(self, task: Task) -> None:
        """Move both files of ``task`` to ``archive/`` (the outbox file first, so a program that
        answers every outbox file without a result never sees a half-archived pair)."""
        await trio.to_thread.run_sync(self._archive, task.id)

    async def archive_finished(self, store: Store) -> list[str]:
        """Archive the files of every task in ``outbox/`` or ``results/`` that is no longer in
        a worker's hands (its result stored, delivered, dead, or gone from the store): what a
        process killed between storing a result and archiving its files left behind. A task
        still in custody keeps its files (its next run reads the result file already there).
        Returns the ids archived. A file whose name is not a task id (an outside program's
        or a person's) is left where it is and named in a warning (issue #48: one stopped
        every start)."""
        ids, strangers = await trio.to_thread.run_sync(self._ids_in_exchange)
        if strangers:
            shown = ", ".join(f"{name!r:.80}" for name in sorted(strangers)[:_SHOWN_STRANGERS])
            more = len(strangers) - _SHOWN_STRANGERS
            log.warning(
                "left %d file(s) in outbox/ or results/ alone: not a task's file (a task id "
                "then .txt): %s%s",
                len(strangers),
                shown,
                f" and {more} more" if more > 0 else "",
            )
        done = []
        for id in sorted(ids):
            if await store.state(id) in _FINISHED:
                await trio.to_thread.run_sync(self._archive, id)
                done.append(id)
        if done:
            log.info(
                "archived the files of %d finished task(s) left by a killed process", len(done)
            )
        return done

    def _ids_in_exchange(self) -> tuple[set[str], set[str]]:
        """The task ids named by ``*.txt`` files in ``outbox/`` and ``results/``, and the
        names of the other ``*.txt`` files there (not a task id)."""
        ids: set[str] = set()
        strangers: set[str] = set()
        for folder in ("outbox", "results"):
            with self._folder(folder) as fd:
                for name in os.listdir(fd):
                    if not name.endswith(".txt") or name.startswith("."):
                        continue
                    try:
                        ids.add(check_task_id(name.removesuffix(".txt")))
                    except InvalidTaskId:
                        strangers.add(name)
        return ids, strangers

    @contextmanager
    def _folder(self, name: str) -> Iterator[int]:
        """A descriptor of the exchange's folder ``name``, never opened through a symlink."""
        root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=root_fd)
            except FileNotFoundError:  # removed while running: made again, privately
                os.mkdir(name, 0o700, dir_fd=root_fd)
                fd = os.open(name, _DIR_FLAGS, dir_fd=root_fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                raise ExchangeUnsafe(
                    f"{self.root / name} is not a directory (a symlink?); the file exchange "
                    "uses only real folders under its root and touched nothing there"
                ) from None
        finally:
            os.close(root_fd)
        try:
            yield fd
        finally:
            os.close(fd)

    def _write_outbox(self, name: str, data: bytes) -> None:
        with self._folder("outbox") as outbox:
            write_atomic_at(outbox, name, data)

    def _read_result(self, name: str) -> str | _Refusal | None:
        """The result file's text; None while there is none; a ``_Refusal`` for a file that
        is not a single-link regular file of bounded size (left unread)."""
        with self._folder("results") as results:
            try:
                fd = os.open(name, _READ_FLAGS, dir_fd=results)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    return _Refusal("is a symlink")
                raise
            try:
                return self._read_regular(fd)
            finally:
                os.close(fd)

    def _read_regular(self, fd: int) -> str | _Refusal:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return _Refusal("is not a regular file")
        if st.st_nlink != 1:
            return _Refusal(f"has {st.st_nlink} hard links (a link to another file?)")
        limit = self.max_result_bytes
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > limit:
                return _Refusal(f"is over the limit of {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", "surrogatepass")

    def _archive(self, id: str) -> None:
        with self._folder("archive") as archive:
            for folder, name, kept in (
                ("outbox", f"{id}.txt", f"{id}.task.txt"),
                ("outbox", f"{id}.conversation.json", f"{id}.conversation.json"),
                ("results", f"{id}.state.json", f"{id}.state.json"),
                ("results", f"{id}.txt", f"{id}.result.txt"),
            ):
                with self._folder(folder) as src:
                    try:
                        os.replace(name, kept, src_dir_fd=src, dst_dir_fd=archive)
                    except FileNotFoundError:
                        pass

    def _refuse(self, name: str, id: str) -> Path:
        """Move ``results/name`` as it is (a link moves as a link) to ``refused/``."""
        with self._folder("results") as results, self._folder("refused") as refused:
            n = 1
            while _exists(f"{id}.{n}.txt", refused):
                n += 1
            os.rename(name, f"{id}.{n}.txt", src_dir_fd=results, dst_dir_fd=refused)
        return self.refused_dir / f"{id}.{n}.txt"


def _reply(read: str | _Refusal, task_id: str) -> Reply:
    if isinstance(read, _Refusal):
        raise ResultRefused(f"result file for task {task_id!r} {read.why}; not read")
    return parse_result(read, task_id)


CONVERSATION_SCHEMA: Final = 1
"""Of ``<id>.conversation.json`` (``schema_version``)."""


async def conversation_json(task: Task) -> str:
    """What an outside program reads of ``task``'s room: ``{"schema_version": 1, "room",
    "history": [{"role", "text", "task_id", "at", "outcome"}, ...], "state", "version"}``."""
    talk = await conversation_of(task)
    return json.dumps(
        {
            "schema_version": CONVERSATION_SCHEMA,
            "room": task.room,
            "history": [
                {
                    "role": t.role,
                    "text": t.text,
                    "task_id": t.task_id,
                    "at": t.at,
                    "outcome": t.outcome,
                }
                for t in talk.history
            ],
            "state": dict(talk.state),
            "version": talk.version,
        },
        ensure_ascii=False,
        indent=1,
    )


def _state(read: str | _Refusal, task_id: str) -> dict[str, Any]:
    """The new state in ``results/<id>.state.json``, or ``ResultRefused``."""
    if isinstance(read, _Refusal):
        raise ResultRefused(f"state file for task {task_id!r} {read.why}; not read")
    try:
        value = json.loads(read)
    except ValueError as exc:
        raise ResultRefused(f"state file for task {task_id!r} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ResultRefused(
            f"state file for task {task_id!r} must hold a JSON object, got {type(value).__name__}"
        )
    return value


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def file_exchange_worker(
    store: Store,
    name: str,
    root: str | os.PathLike[str],
    *,
    result_poll_interval: float = 0.1,
    **options: Any,
) -> PoolWorker:
    """A ``PoolWorker`` whose agent is the outside program behind the files under ``root``.

    ``result_poll_interval``: how often a waiting task looks for its result file; the other
    options go to ``PoolWorker`` (``concurrency`` is how many tasks may wait at once).
    """
    exchange = FileExchange(Path(root), poll_interval=result_poll_interval)

    async def settle() -> None:
        await exchange.archive_finished(store)

    return PoolWorker(
        store, name, exchange.factory, after_complete=exchange.archive, on_start=settle, **options
    )
