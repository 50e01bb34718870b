"""The `tether` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ._cli_observe import add_observe_parsers, run_ps, run_status
from .gateway._command import add_gateway_parser, run_gateway

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

EPILOG = """exit codes:
  0  success
  1  a runtime error (one line on stderr says what)
  2  bad usage or bad configuration
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
        help="run the bundled demo",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument("--seconds", type=float, default=1.5, help="how long the demo runs")
    add_gateway_parser(sub, EPILOG)
    add_observe_parsers(sub, EPILOG)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            from .examples.live_tree import run_demo

            run_demo(seconds=args.seconds)
            return EXIT_OK
        if args.command == "gateway":
            return run_gateway(args)
        if args.command == "ps":
            return run_ps(args)
        if args.command == "status":
            return run_status(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the CLI's contract: one clear line, never a traceback
        print(f"tether: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
