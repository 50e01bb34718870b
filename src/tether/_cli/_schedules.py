"""``tether store schedules ...``, ``tether store send-event`` and ``tether store events``
(issue #52): the parsers and the verbs; what they print is ``bridge.service._store_schedules``
and ``_store_events``."""

from __future__ import annotations

import argparse
import json
import logging
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING

from ._parsers import CommandParser, Subparsers, add_command

if TYPE_CHECKING:
    from ..bridge.service._config import BridgeConfig

SCHEDULES_EXITS = """exit codes of schedules:
  0  shown; added, paused, resumed, removed
  1  pause, resume, remove: the store keeps no schedule of that name
  2  bad usage (a bad name, duration, cron line or time zone; a name kept already):
     nothing changed
"""
EVENTS_EXITS = """exit codes of send-event and events:
  0  kept (or a replay of one kept: nothing changed); shown; dropped
  1  send-event: that id was kept with another key or body; events drop: no such event
  2  bad usage (a bad id or key, a body that is not JSON or is too large): nothing changed
"""


def add_schedule_parsers(
    store_actions: Subparsers,
    epilog: str,
    config_help: str,
    store_options: Callable[[argparse.ArgumentParser], None],
) -> None:
    """The ``schedules``, ``send-event`` and ``events`` verbs of ``tether store``."""

    def verb(
        parent: Subparsers, name: str, text: str, description: str, exits: str
    ) -> CommandParser:
        parser = add_command(
            parent,
            name,
            help=text,
            description=description,
            epilog=config_help + "\n" + exits + "\n" + epilog,
        )
        store_options(parser)
        return parser

    schedules = verb(
        store_actions,
        "schedules",
        "schedules kept in the store: each one's next due time, last firing, paused or not",
        "Show the schedules the store keeps. Each due time fires once across every bridge and "
        "worker on the store, as a task whose id is the schedule's name and the due time. "
        "Times missed while everything was down fire once, as the latest (--catch-up all: "
        "each). Reads only.",
        SCHEDULES_EXITS,
    )
    schedules.add_argument("--json", action="store_true", help="print one JSON document")
    actions = schedules.add_subparsers(
        dest="schedules_command", required=False, metavar="[add|pause|resume|remove]"
    )
    add = verb(
        actions,
        "add",
        "keep a new schedule: --every 15m or --cron '0 9 * * 1-5' [--tz Europe/Paris]",
        "Keep schedule NAME: at each due time a task with BODY is taken into ROOM (its "
        "room's policy, tenant, queue and limits apply). --cron reads a cron line (5 fields, "
        "or 6 with seconds) in --tz: a time that does not exist one day (spring forward) "
        "fires at the first minute that does, one that comes twice fires once.",
        SCHEDULES_EXITS,
    )
    add.add_argument("name", help="letters, digits and _ . -, at most 64")
    add.add_argument("--room", required=True, help="the room its tasks go to")
    add.add_argument("--body", required=True, help="the message of each task it fires")
    when = add.add_mutually_exclusive_group(required=True)
    when.add_argument("--every", help="a duration: 90s, 15m, 2h, 1d (at least 1s)")
    when.add_argument("--cron", help="a cron line, e.g. '0 9 * * 1-5'")
    add.add_argument("--tz", default="UTC", help="the time zone of --cron (default: UTC)")
    add.add_argument("--queue", default=None, help="the queue of its tasks (default: default)")
    add.add_argument("--tenant", default=None, help="the tenant of its tasks")
    add.add_argument(
        "--catch-up",
        choices=("latest", "all"),
        default="latest",
        help="times missed while everything was down: fire the latest once (default) or each",
    )
    for name, text in (
        ("pause", "stop a schedule firing (kept, with its settings)"),
        ("resume", "start a paused schedule again, due next after now"),
        ("remove", "drop a schedule (the tasks it fired stay)"),
    ):
        verb(actions, name, text, text[0].upper() + text[1:] + ".", SCHEDULES_EXITS).add_argument(
            "name", help="the schedule's name"
        )

    send = verb(
        store_actions,
        "send-event",
        "send an event: every run waiting on its key wakes with its body",
        "Send an event of KEY with BODY (JSON: '{\"paid\": true}', '\"green\"', 42). It is "
        "kept before this returns, idempotent by --id, and kept for --ttl seconds for the "
        "runs that wait for KEY later (run.wait_for). Every run waiting on KEY wakes once.",
        EVENTS_EXITS,
    )
    send.add_argument("key", help="the event's key (the task id rule: e.g. payment.42)")
    send.add_argument("body", help="its body, JSON")
    send.add_argument("--id", default=None, help="the event's id (default: a new random one)")
    send.add_argument(
        "--ttl", type=float, default=None, help="seconds it is kept for later waits (default 7 d)"
    )
    events = verb(
        store_actions,
        "events",
        "kept events and the runs waiting on an event key",
        "Show the runs parked on an event (their key and when their wait times out) and the "
        "events kept for later waits. Reads only. `events drop ID` drops a kept event; "
        "`tether store cancel ID` cancels a waiting run.",
        EVENTS_EXITS,
    )
    events.add_argument("--json", action="store_true", help="print one JSON document")
    events.add_argument("--key", default=None, help="only this key")
    events.add_argument("--limit", type=int, default=100, help="events shown (default: 100)")
    drops = events.add_subparsers(dest="events_command", required=False, metavar="[drop]")
    verb(
        drops,
        "drop",
        "drop a kept event",
        "Drop a kept event: later waits do not take it.",
        EVENTS_EXITS,
    ).add_argument("id", help="the event's id")


async def run_schedules(config: BridgeConfig, args: argparse.Namespace) -> int:
    from ..bridge.custody._schedules import ScheduleSpec, check_schedule_name, parse_every
    from ..bridge.service import _store_schedules
    from ..bridge.service._config import ConfigError
    from ._opened import opened_store

    verb = getattr(args, "schedules_command", None)
    spec = None
    try:
        if verb == "add":
            every = None if args.every is None else parse_every(args.every)
            spec = ScheduleSpec(
                args.name,
                args.room,
                args.body,
                every=every,
                cron=args.cron,
                tz=args.tz,
                queue=args.queue,
                tenant=args.tenant,
                catch_up=args.catch_up,
            )
        elif verb is not None:
            check_schedule_name(args.name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    logging.getLogger("tether.bridge.schedules").addHandler(logging.NullHandler())
    async with opened_store(config, read_only=verb is None) as store:
        if spec is not None:
            try:
                return await _store_schedules.add_schedule(store, spec)
            except ValueError as exc:  # a name kept already, a body over the limit
                raise ConfigError(str(exc)) from None
        if verb is not None:
            return await _store_schedules.change_schedule(store, verb, args.name)
        return await _store_schedules.show_schedules(store, args.json)


async def run_events(config: BridgeConfig, args: argparse.Namespace) -> int:
    from ..bridge.custody._events import (
        DEFAULT_EVENT_TTL_S,
        check_event_id,
        check_event_key,
        check_ttl,
        event_body,
    )
    from ..bridge.service import _store_events
    from ..bridge.service._config import ConfigError
    from ._opened import opened_store

    logging.getLogger("tether.bridge.events").addHandler(logging.NullHandler())
    logging.getLogger("tether.custody").addHandler(logging.NullHandler())
    if args.store_command == "send-event":
        try:
            body = json.loads(args.body)
        except ValueError:
            raise ConfigError(
                f"BODY must be JSON (a text is quoted: '\"green\"'), got {args.body!r:.80}"
            ) from None
        id = args.id if args.id is not None else f"ev-{secrets.token_hex(8)}"
        ttl = DEFAULT_EVENT_TTL_S if args.ttl is None else args.ttl
        try:
            check_event_key(args.key)
            check_event_id(id)
            check_ttl(ttl)
            event_body(body)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        async with opened_store(config, read_only=False) as store:
            try:
                return await _store_events.send_event(store, id, args.key, body, ttl)
            except ValueError as exc:  # a body over the store's own limit
                raise ConfigError(str(exc)) from None
    dropping = getattr(args, "events_command", None) == "drop"
    try:
        if dropping:
            check_event_id(args.id)
        elif args.key is not None:
            check_event_key(args.key)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not dropping and args.limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {args.limit}")
    async with opened_store(config, read_only=not dropping) as store:
        if dropping:
            return await _store_events.drop_event(store, args.id)
        return await _store_events.show_events(store, args.key, min(args.limit, 10_000), args.json)
