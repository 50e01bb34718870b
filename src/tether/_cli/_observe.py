"""``tether ps`` and ``tether status``: read a service's ``/tasks`` and ``/status`` with the bearer
token from a file, and render them (``--json`` prints the document as received)."""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any

from .._plumbing._config_error import ConfigError
from ._parsers import CommandParser, Subparsers, add_command

DEFAULT_URL = "http://127.0.0.1:8766"
DEFAULT_TOKEN_FILE = Path("tether-data") / "bridge" / "admin-token"
URL_ENV = "TETHER_ADMIN_URL"
TOKEN_FILE_ENV = "TETHER_ADMIN_TOKEN_FILE"


class AdminRequestError(Exception):
    """The admin endpoint could not be reached or refused the request (one-line message)."""


def add_observe_parsers(sub: Subparsers, epilog: str) -> None:
    common = CommandParser(add_help=False)
    common.add_argument(
        "--url",
        default=None,
        help=f"admin endpoint base URL (default: ${URL_ENV} or {DEFAULT_URL})",
    )
    common.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help=f"file holding the admin bearer token (default: ${TOKEN_FILE_ENV} or "
        f"{DEFAULT_TOKEN_FILE})",
    )
    common.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for an answer (default: 10)"
    )
    common.add_argument("--json", action="store_true", help="print the JSON document as received")
    ps = add_command(
        sub,
        "ps",
        parents=[common],
        help="the live task tree of a running service",
        description="Show a running service's live Trio tasks as a tree: name, [owner], age.",
        epilog=epilog,
    )
    ps.add_argument("--stacks", action="store_true", help="show where each task is waiting")
    ps.add_argument(
        "--all", action="store_true", help="include Trio's system tasks and the harness"
    )
    add_command(
        sub,
        "status",
        parents=[common],
        help="health, supervised children (with backoff), sessions and custody counts",
        epilog=epilog,
    )


def _get(args: argparse.Namespace, path: str, params: dict[str, str]) -> Any:
    import httpx

    from .._plumbing._token_file import TokenFileError, read_token

    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise ConfigError(f"--timeout must be a number of seconds above 0, got {args.timeout:g}")
    url = (args.url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
    token_file = args.token_file or Path(os.environ.get(TOKEN_FILE_ENV) or DEFAULT_TOKEN_FILE)
    try:
        token = read_token(token_file)
    except TokenFileError as exc:
        raise AdminRequestError(str(exc)) from None
    try:
        response = httpx.get(
            url + path,
            params=params,
            headers={"authorization": f"Bearer {token}"},
            timeout=args.timeout,
        )
    except httpx.TimeoutException:
        raise AdminRequestError(
            f"the admin endpoint at {url} did not answer within {args.timeout:g} s"
        ) from None
    except httpx.HTTPError as exc:
        raise AdminRequestError(f"cannot reach the admin endpoint at {url}: {exc}") from None
    if response.status_code in (401, 403):
        raise AdminRequestError(
            f"the admin endpoint at {url} refused the token in {token_file} "
            f"(HTTP {response.status_code})"
        )
    # /healthz-style 503 still carries the document; /status always answers 200
    if response.status_code != 200:
        raise AdminRequestError(
            f"GET {url}{path} answered HTTP {response.status_code}: {response.text[:200]}"
        )
    try:
        return response.json()
    except ValueError:
        raise AdminRequestError(f"GET {url}{path} did not answer JSON") from None


def run_ps(args: argparse.Namespace) -> int:
    from .._core._task_tree import TaskNode, render_nodes
    from .._plumbing._converter import structure

    params = {"stacks": "1" if args.stacks else "0", "kinds": "all" if args.all else "user"}
    doc = _get(args, "/tasks", params)
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    nodes = structure(doc["tasks"], list[TaskNode])
    print(render_nodes(nodes))
    return 0


def run_status(args: argparse.Namespace) -> int:
    from .._plumbing._converter import structure
    from ..bridge.pool._status import PoolStatus, render_pool
    from ..observe._status import StatusReport, render_status

    doc = _get(args, "/status", {})
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0

    def pool_lines(section: dict[str, Any]) -> list[str]:
        return render_pool(structure(section, PoolStatus))

    print(render_status(structure(doc, StatusReport), pool_lines=pool_lines))
    return 0
