"""``tether gateway serve``: run the reference gateway from the command line.

The server itself is imported only when the command runs. Its start lines say where it
listens and give the chat page's link with the token in the fragment (never sent to the
server): the user token when there is one, since the page needs only the user side.
"""

from __future__ import annotations

import argparse
import signal
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from ._parsers import Subparsers, add_command, add_group

if TYPE_CHECKING:
    from ..gateway._server import GatewaySettings

DEFAULT_DIR = Path("tether-data") / "gateway"


def add_gateway_parser(sub: Subparsers, epilog: str) -> None:
    from .._protocol._bounds import MAX_REQUEST_BYTES

    actions = add_group(
        sub,
        "gateway",
        help="the reference gateway (protocol v1)",
        epilog=epilog,
        dest="gateway_command",
    )
    serve = add_command(
        actions,
        "serve",
        help="serve the gateway and its chat page",
        description=(
            "Serve the v1 gateway protocol for bridges and a chat page at '/'. A missing "
            "token file is created with a fresh random token (mode 0600)."
        ),
        epilog=epilog,
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    serve.add_argument(
        "--port", type=int, default=8765, help="port; 0 picks a free one (default: %(default)s)"
    )
    serve.add_argument(
        "--token-file",
        type=Path,
        default=DEFAULT_DIR / "token",
        help="worker bearer token (opens everything) (default: %(default)s)",
    )
    serve.add_argument(
        "--user-token-file",
        type=Path,
        default=None,
        help="optional second token that opens only the user side (messages, the page)",
    )
    serve.add_argument(
        "--db",
        type=Path,
        default=DEFAULT_DIR / "gateway.db",
        help="SQLite database (default: %(default)s)",
    )
    serve.add_argument(
        "--lease",
        type=float,
        default=30.0,
        help="seconds a handed-out task waits for its ack before redelivery (default: %(default)s)",
    )
    serve.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="log lines as text or one JSON object each (default: %(default)s)",
    )
    serve.add_argument(
        "--max-body",
        type=int,
        default=MAX_REQUEST_BYTES,
        help="largest request body in bytes (default: %(default)s, which carries the custody "
        "store's largest result JSON-escaped)",
    )


def run_gateway(args: argparse.Namespace) -> int:
    """Run ``tether gateway <action>``; returns the exit code."""
    import trio

    from .._plumbing._logging import configure_logging
    from .._plumbing._token_file import ensure_token_file
    from ..gateway._app import AppLimits
    from ..gateway._server import GatewaySettings

    try:
        settings = GatewaySettings(
            token_file=args.token_file,
            db=args.db,
            host=args.host,
            port=args.port,
            user_token_file=args.user_token_file,
            lease=args.lease,
            limits=AppLimits(max_body=args.max_body),
        )
    except ValueError as exc:
        print(f"tether: error: {exc}", file=sys.stderr)
        return 2
    if ensure_token_file(settings.token_file):
        print(f"tether: created token file {settings.token_file}", file=sys.stderr)
    configure_logging("INFO", args.log_format)
    trio.run(_serve_until_signal, settings)
    return 0


async def _serve_until_signal(settings: GatewaySettings) -> None:
    import trio

    from .._core._util import open_nursery_unwrapped
    from ..gateway._server import serve

    async def until_signal() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                return

    async with open_nursery_unwrapped() as nursery:
        port = await nursery.start(partial(serve, settings, shutdown_trigger=until_signal))
        host = f"[{settings.host}]" if ":" in settings.host else settings.host
        print(
            f"tether gateway: http://{host}:{port}/ (token in {settings.token_file}, "
            f"database {settings.db}); Ctrl+C stops",
            flush=True,
        )
        print(f"tether gateway: chat page http://{host}:{port}/ ({_paste(settings)})", flush=True)


def _paste(settings: GatewaySettings) -> str:
    """Where the chat page's token is, never the token: a link that carried it stayed in the
    browser's history and session files, and this line in the journal (issue #48)."""
    if settings.user_token_file is not None:
        return f"paste the user token from {settings.user_token_file}"
    return (
        f"paste the token from {settings.token_file}; it opens everything: give people a "
        "--user-token-file"
    )
