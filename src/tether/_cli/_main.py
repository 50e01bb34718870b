"""The `tether` command."""

from __future__ import annotations

import argparse
import os
import select
import sys
from collections.abc import Iterator, Sequence

from .._plumbing._config_error import ConfigError
from ._bridge import EXIT_AUTH, add_bridge_parsers, run_bridge, run_store
from ._ctrl_c import answer_ctrl_c
from ._gateway import add_gateway_parser, run_gateway
from ._observe import add_observe_parsers, run_ps, run_status
from ._parsers import CommandParser, add_command
from ._worker import add_worker_parsers, run_worker

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
"""A second SIGINT/SIGTERM (or Ctrl+C) stopped it at once: 128 + SIGINT, as shells report."""
EXIT_PIPE = 141
"""Its output pipe closed early (``| head``): 128 + SIGPIPE, the status ``yes | head`` gives
``yes``; quiet, as Unix tools are (a shell shows it only under ``set -o pipefail``)."""
EXIT_CODES = (EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_AUTH, EXIT_INTERRUPTED, EXIT_PIPE)

EPILOG = f"""exit codes:
  0  success (also after a graceful stop on SIGINT/SIGTERM)
  1  a runtime error (one line on stderr says what)
  2  bad usage or bad configuration (also a token file missing or too open)
  {EXIT_AUTH}  the gateway refused the token (after re-reading the token file)
  {EXIT_INTERRUPTED}  stopped at once by a second SIGINT/SIGTERM or Ctrl+C (nothing acknowledged
       is lost: the next run takes up the tasks in hand)
  {EXIT_PIPE}  the output pipe closed early (e.g. `tether ps | head`); nothing is printed
"""

MAX_CAUSES = 3
"""Causes named in the one error line; the rest are counted."""
MAX_CAUSE_CHARS = 300


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="tether",
        description="tether: a Trio runtime for agent services, and its bundled bridge.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = add_command(
        sub,
        "demo",
        help="a local gateway + a bridge with the echo agent, a few hundred messages end to end",
        description=(
            "Start a local gateway and a bridge (4 workers, the bundled echo agent) in a "
            "temporary directory, send messages, wait for every reply, print a summary."
        ),
        epilog=EPILOG,
    )
    demo.add_argument(
        "--messages", type=int, default=300, help="messages to send (default: %(default)s)"
    )
    demo.add_argument("--workers", type=int, default=4, help="bridge workers (default: 4)")
    demo.add_argument(
        "--agent",
        default="tether.agents.echo:factory",
        help="agent factory module:factory (default: %(default)s)",
    )
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    example = add_command(sub, "example", help="small runtime examples", epilog=EPILOG)
    examples = example.add_subparsers(dest="example", required=True, metavar="NAME")
    tree = examples.add_parser("tree", help="print the live task tree of a small service")
    tree.add_argument("--seconds", type=float, default=1.5, help="how long it runs")
    add_bridge_parsers(sub, EPILOG)
    add_worker_parsers(sub, EPILOG)
    add_gateway_parser(sub, EPILOG)
    add_observe_parsers(sub, EPILOG)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    answer_ctrl_c()  # again: main() may be called without importing tether._cli first
    args = build_parser().parse_args(argv)
    try:
        code = _run(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except ConfigError as exc:
        print(f"tether: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # the CLI's contract: one clear line, never a traceback
        if _refused_token(exc):
            print(f"tether: error: {exc}", file=sys.stderr)
            return EXIT_AUTH
        if any(isinstance(e, BrokenPipeError) for e in _leaves(exc)) and _stdout_closed():
            _quiet_stdout()
            return EXIT_PIPE
        print(f"tether: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    return code


def _run(args: argparse.Namespace) -> int:
    if args.command == "demo":
        from ._demo import run_demo

        return run_demo(
            messages=args.messages, workers=args.workers, agent=args.agent, quiet=args.quiet
        )
    if args.command == "example":
        from ._live_tree import run_demo as run_tree

        run_tree(seconds=args.seconds)
        return EXIT_OK
    if args.command == "bridge":
        return run_bridge(args)
    if args.command == "worker":
        return run_worker(args)
    if args.command == "store":
        return run_store(args)
    if args.command == "gateway":
        return run_gateway(args)
    if args.command == "ps":
        return run_ps(args)
    if args.command == "status":
        return run_status(args)
    return EXIT_USAGE


def _refused_token(exc: Exception) -> bool:
    """True for the gateway client's GatewayAuthError. Read from the loaded module, not
    imported: a verb that never loaded the client (httpx: a third of a second) cannot have
    raised it, and ``tether --help`` should not pay for it (issue #56)."""
    client = sys.modules.get("tether.bridge.client._errors")
    return client is not None and isinstance(exc, client.GatewayAuthError)


def _stdout_closed() -> bool:
    """True when nobody reads our stdout any more (a pipe whose reader exited): the one case
    a BrokenPipeError is the reader's choice, not our failure (a socket's is an error)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no real stdout (closed, or replaced)
        return False


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what is still buffered
    does not print "Exception ignored ... BrokenPipeError" (the recipe in Python's docs)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def _one_line(exc: BaseException | None) -> str:
    """Every distinct leaf cause of ``exc`` (an exception group is a tree), as one bounded line:
    several errors ending a run at once are each named, not "N sub-exceptions"."""
    causes = list(dict.fromkeys(_describe(leaf) for leaf in _leaves(exc)))
    if len(causes) <= 1:
        return causes[0] if causes else "unknown error"
    shown = "; ".join(causes[:MAX_CAUSES])
    more = len(causes) - MAX_CAUSES
    return f"{len(causes)} errors: {shown}" + (f"; and {more} more" if more > 0 else "")


def _leaves(exc: BaseException | None) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    elif exc is not None:
        yield exc


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if len(text) > MAX_CAUSE_CHARS:
        text = text[: MAX_CAUSE_CHARS - 3] + "..."
    return text
