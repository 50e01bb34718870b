"""The `tether` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ._cli_observe import add_observe_parsers, run_ps, run_status
from .bridge.service._command import EXIT_AUTH, add_bridge_parsers, run_bridge, run_store
from .bridge.service._worker_command import add_worker_parsers, run_worker
from .gateway._command import add_gateway_parser, run_gateway

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

EPILOG = f"""exit codes:
  0  success (also after a graceful stop on SIGINT/SIGTERM)
  1  a runtime error (one line on stderr says what)
  2  bad usage or bad configuration
  {EXIT_AUTH}  the gateway refused the token (after re-reading the token file)
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tether",
        description="tether: a Trio runtime for agent services, and its bundled bridge.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser(
        "demo",
        help="a local gateway + a bridge with the echo agent, a few hundred messages end to end",
        description=(
            "Start a local gateway and a bridge (4 workers, the bundled echo agent) in a "
            "temporary directory, send messages, wait for every reply, print a summary."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    example = sub.add_parser(
        "example",
        help="small runtime examples",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    examples = example.add_subparsers(dest="example", required=True, metavar="NAME")
    tree = examples.add_parser("tree", help="print the live task tree of a small service")
    tree.add_argument("--seconds", type=float, default=1.5, help="how long it runs")
    add_bridge_parsers(sub, EPILOG)
    add_worker_parsers(sub, EPILOG)
    add_gateway_parser(sub, EPILOG)
    add_observe_parsers(sub, EPILOG)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from .bridge.service._config import ConfigError
    from .bridge.wire._client import GatewayAuthError

    args = build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            from ._demo import run_demo

            return run_demo(
                messages=args.messages, workers=args.workers, agent=args.agent, quiet=args.quiet
            )
        if args.command == "example":
            from .examples.live_tree import run_demo as run_tree

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
    except KeyboardInterrupt:
        return 130
    except ConfigError as exc:
        print(f"tether: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except GatewayAuthError as exc:
        print(f"tether: error: {exc}", file=sys.stderr)
        return EXIT_AUTH
    except Exception as exc:  # the CLI's contract: one clear line, never a traceback
        print(f"tether: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_USAGE


def _one_line(exc: BaseException) -> str:
    """The innermost single error of a group, as one line."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
