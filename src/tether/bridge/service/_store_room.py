"""``tether store room`` and ``tether store forget-room``: an operator's look at a room's
conversation (issue #34), and its erasure everywhere tether keeps it (issue #53): the custody
store's copy (``RoomStore.forget_room``), then the gateway's, through its optional route
``POST /v1/rooms/<room>/forget``. Exit codes: ``ROOM_EXITS`` in ``tether._cli._bridge`` and
docs/guide/conversations.md.

The custody store is erased first, so nothing of the room is delivered or run after the verb
began; then the gateway; then the store once more, for a message of the room the bridge took
from the gateway between the two (a second pass over a room held nothing of is one
transaction that changes nothing). What is not erased is said in one line, with what to do.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from ..._plumbing._converter import unstructure
from ..._plumbing._redact import redact_url
from ..._plumbing._token_file import TokenFileError, read_token
from ..._plumbing._when import iso_time
from ..custody._conversation import ForgottenRoom, RoomView
from ..custody._roles import Store
from ._config import SETTINGS, BridgeConfig, ConfigError
from ._settings import ENV_PREFIX, env_name, read_table

SCHEMA_VERSION = 1
"""Of the ``--json`` document."""
GATEWAY_WAIT_S: Final = 30.0
"""How long ``forget-room`` keeps asking a gateway that does not answer (with backoff)."""
EXIT_NOT_ERASED: Final = 1
EXIT_TOKEN_REFUSED: Final = 3


@attrs.frozen
class GatewayTarget:
    """The gateway ``forget-room`` asks: the one ``tether bridge run`` polls with the same
    settings."""

    url: str
    token_file: Path
    client_name: str


@attrs.frozen
class NoGateway:
    """Why ``forget-room`` asks no gateway: ``said`` (one line) and the exit code (0: the
    operator asked for the custody store alone; 1: none is configured)."""

    said: str
    code: int


def gateway_to_ask(
    config: BridgeConfig,
    *,
    file: Path | None,
    flags: Mapping[str, Any],
    room: str,
    skip: bool,
    environ: Mapping[str, str] | None = None,
) -> GatewayTarget | NoGateway:
    """The gateway of ``config`` when one is configured (``--gateway``/``--token-file``,
    ``TETHER_GATEWAY``/``TETHER_TOKEN_FILE`` or the file's ``[bridge]`` table), or when the
    defaults name a gateway this machine runs (its token file exists: ``tether gateway`` made
    it); else ``NoGateway``. A configured gateway's token file must be usable (``ConfigError``,
    before anything is erased)."""
    if skip:
        return NoGateway(
            f"the gateway's copy of room {room!r} was not asked for (--no-gateway): erase it "
            "there by the gateway's own means",
            0,
        )
    if not _configured(file, flags, os.environ if environ is None else environ) and (
        not config.token_file.exists()
    ):
        return NoGateway(
            f"NOT erased: the gateway's copy of room {room!r}: no gateway is configured for "
            "this verb (give --gateway URL --token-file FILE as `tether bridge run` has them, "
            "TETHER_GATEWAY, or gateway in the config file's [bridge] table) and there is no "
            f"local gateway token at {config.token_file}; give one and run the verb again (the "
            "custody store's part is done), or --no-gateway to erase custody's copy alone",
            EXIT_NOT_ERASED,
        )
    try:
        read_token(config.token_file)
    except TokenFileError as exc:
        raise ConfigError(f"cannot use the gateway token: {exc}") from None
    return GatewayTarget(config.gateway, config.token_file, config.client_name)


GATEWAY_SETTINGS: Final = ("gateway", "token_file")


def _configured(file: Path | None, flags: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
    """Is a gateway set by a flag, the environment or the config file (not a default)?"""
    if any(flags.get(name) is not None for name in GATEWAY_SETTINGS):
        return True
    if any(env_name(name) in environ for name in GATEWAY_SETTINGS):
        return True
    if file is None and environ.get(ENV_PREFIX + "CONFIG"):
        file = Path(environ[ENV_PREFIX + "CONFIG"])
    return file is not None and any(
        name in read_table(file, "bridge", SETTINGS) for name in GATEWAY_SETTINGS
    )


@attrs.frozen
class GatewayAnswer:
    """What the gateway did with the room: ``forgotten`` messages, or ``said`` why not."""

    forgotten: int | None = None
    said: str = ""
    code: int = 0


async def ask_gateway(target: GatewayTarget, room: str, wait_s: float) -> GatewayAnswer:
    """``POST /v1/rooms/<room>/forget`` to ``target``, retried with backoff for ``wait_s``."""
    # the client (httpx) only when a gateway is asked: ``tether store room`` never pays for it
    from ..client._client import GatewayClient
    from ..client._errors import (
        GatewayAuthError,
        GatewayProtocolError,
        GatewayRequestError,
        GatewayUnavailable,
    )

    shown = redact_url(target.url)
    head = f"NOT erased: the gateway's copy of room {room!r} at {shown}"
    logging.getLogger("tether.bridge.gateway").addHandler(logging.NullHandler())  # said below
    client = GatewayClient(
        target.url, target.token_file, client_name=target.client_name, backoff_maximum=5.0
    )
    try:
        async with client:
            with trio.move_on_after(wait_s):
                forgotten = await client.forget_room(room)
                if forgotten is None:
                    return GatewayAnswer(
                        said=f"{head}: it has no route to forget a room (POST "
                        "/v1/rooms/<room>/forget answered 404): erase it there by the "
                        "gateway's own means",
                        code=EXIT_NOT_ERASED,
                    )
                return GatewayAnswer(forgotten)
    except GatewayAuthError as exc:
        return GatewayAnswer(said=f"{head}: {exc}", code=EXIT_TOKEN_REFUSED)
    except (GatewayRequestError, GatewayProtocolError, GatewayUnavailable, ValueError) as exc:
        return GatewayAnswer(said=f"{head}: {exc}", code=EXIT_NOT_ERASED)
    problem = client.status.error or "no answer"
    return GatewayAnswer(
        said=f"{head}: it did not answer within {wait_s:g} s ({problem}); run the verb again "
        "when it does (the custody store's part is done: again changes nothing there)",
        code=EXIT_NOT_ERASED,
    )


def room_document(view: RoomView) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    doc.update(unstructure(view))
    doc["turns"] = [unstructure(t) for t in view.turns]
    doc["state"] = dict(view.state)
    return doc


def render_room(view: RoomView, *, width: int = 100) -> str:
    """The room's turns, one line each (time, who, outcome, text cut to ``width``), then its
    state."""
    shown = len(view.turns)
    lines = [
        f"room {view.room}: {view.turn_count} turn(s) kept"
        + (f", the newest {shown} shown" if shown < view.turn_count else "")
        + f"; state version {view.version}, {view.state_bytes} bytes"
    ]
    for t in view.turns:
        text = " ".join(t.text.split())
        if len(text) > width:
            text = text[: width - 3] + "..."
        lines.append(f"  {iso_time(t.at)}  {t.role:<9}  {t.outcome:<11}  {t.task_id}  {text}")
    state = json.dumps(dict(view.state), indent=2, ensure_ascii=False)
    lines.append("state:" if view.state else "state: {} (empty)")
    if view.state:
        lines.extend("  " + line for line in state.splitlines())
    return "\n".join(lines)


async def show_room(store: Store, room: str, limit: int, as_json: bool) -> int:
    view = await store.room(room, limit=limit)
    if view is None:
        print(f"tether: the store holds no conversation of room {room!r}", file=sys.stderr)
        return 1
    print(json.dumps(room_document(view), indent=2) if as_json else render_room(view))
    return 0


async def forget_room(
    store: Store,
    room: str,
    gateway: GatewayTarget | NoGateway,
    *,
    postgres: bool,
    wait_s: float | None = None,
) -> int:
    """Erase ``room`` in the custody store, then at ``gateway`` (asked for ``wait_s``, default
    ``GATEWAY_WAIT_S``), then in the store again for what the bridge took meanwhile; print
    what was erased and, on stderr, what was not. The exit code."""
    started = time.monotonic()
    erased = await store.forget_room(room)
    answer = None
    if isinstance(gateway, GatewayTarget):
        answer = await ask_gateway(gateway, room, GATEWAY_WAIT_S if wait_s is None else wait_s)
        if answer.forgotten is not None:
            erased = _both(erased, await store.forget_room(room))
    print(custody_said(erased, time.monotonic() - started))
    print("  " + files_said(erased, postgres=postgres))
    if isinstance(gateway, NoGateway):
        print(gateway.said, file=sys.stderr if gateway.code else sys.stdout)
        return gateway.code
    assert answer is not None
    if answer.forgotten is None:
        print(answer.said, file=sys.stderr)
        return answer.code
    print(
        f"forgot room {room!r} at the gateway {redact_url(gateway.url)}: "
        f"{answer.forgotten} message(s) erased with their replies"
    )
    return 0


def custody_said(erased: ForgottenRoom, seconds: float) -> str:
    live = f" ({erased.cancelled} still in custody: cancelled first)" if erased.cancelled else ""
    return (
        f"forgot room {erased.room!r} in the custody store: {erased.turns} turn(s), "
        f"{'its state' if erased.state else 'no state'}, the text of {erased.tasks} task(s)"
        f"{live}, {erased.steps} step record(s) and {erased.asks} question(s) erased "
        f"(journaled as the operator's; {seconds:.2f}s)"
    )


def files_said(erased: ForgottenRoom, *, postgres: bool) -> str:
    """What the store's files still hold of the erased text."""
    if postgres:
        return (
            "PostgreSQL keeps the old row versions in the tables' pages until vacuum lets new "
            "rows overwrite them (VACUUM ran on them) and in its WAL until it is recycled: see "
            "'Forgetting a room' in the conversations guide"
        )
    if erased.scrubbed:
        return "no copy is left in the store's files (deleted content zeroed, the WAL truncated)"
    return (
        "the store's WAL was busy: its older pages keep the text until its next checkpoint; "
        "run the verb again to truncate it"
    )


def _both(first: ForgottenRoom, then: ForgottenRoom) -> ForgottenRoom:
    """Two passes of one erasure as one (the second finds what came in between)."""
    return ForgottenRoom(
        first.room,
        turns=first.turns + then.turns,
        state=first.state or then.state,
        tasks=first.tasks + then.tasks,
        cancelled=first.cancelled + then.cancelled,
        steps=first.steps + then.steps,
        asks=first.asks + then.asks,
        scrubbed=then.scrubbed,
    )
