"""Property-based fuzz of every route of the gateway and the admin endpoint (issue 22).

Generated methods, paths, query strings, headers and bodies (JSON shaped like the protocol's
records with hostile values, raw bytes, deep nesting, huge integers, NaN) go to the real ASGI
apps in-process. Whatever arrives: never a 5xx, never a traceback or an error in the log, and
a refused request (4xx) changes nothing stored (the gateway's SQLite file, table by table).

One app per test lives in a Trio run on a helper thread for all examples; each example is one
call into it (``trio.from_thread.run``), so the state carries across examples as it would
across requests. The real-server tests of each finding class are in
``tests/gateway/test_hostile.py``.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether import open_runtime
from tether._http._auth import TokenSource
from tether.bridge import write_token
from tether.gateway import AppLimits, GatewayApp
from tether.gateway._store import GatewayStore
from tether.observe import Observed
from tether.observe._app import AdminApp

WORKER_TOKEN = "worker-token-fuzz-1"
USER_TOKEN = "user-token-fuzz-22"
ADMIN_TOKEN = "admin-token-fuzz-333"
FUZZ = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# -- a Trio run on a helper thread, hosting one app for all examples --------------------------


@attrs.define
class Host:
    token: trio.lowlevel.TrioToken
    app: Any
    db: Path | None = None


@contextmanager
def hosted(setup: Callable[[], AbstractAsyncContextManager[Host]]) -> Iterator[Host]:
    box: dict[str, Any] = {}
    ready = threading.Event()

    async def main() -> None:
        async with setup() as host:
            box["host"], box["stop"] = host, trio.Event()
            ready.set()
            await box["stop"].wait()

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # re-raised in the test's thread
            box["error"] = exc
            ready.set()

    thread = threading.Thread(target=run, name="fuzz-trio")
    thread.start()
    ready.wait(60)
    try:
        if "error" in box:
            raise box["error"]
        yield box["host"]
    finally:
        if "stop" in box:
            trio.from_thread.run_sync(box["stop"].set, trio_token=box["host"].token)
        thread.join(60)
    if "error" in box:
        raise box["error"]


@attrs.frozen
class Call:
    method: str
    path: str
    query: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes


async def _asgi(app: Any, call: Call) -> tuple[int, bytes]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": call.method,
        "scheme": "http",
        "path": call.path,
        "raw_path": call.path.encode("utf-8", "surrogateescape"),
        "query_string": call.query,
        "root_path": "",
        "headers": call.headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8765),
    }
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": call.body, "more_body": False}
        await trio.sleep_forever()  # the client stays until the answer
        raise AssertionError("unreachable")

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    with trio.fail_after(30):
        await app(scope, receive, send)
    starts = [m for m in sent if m["type"] == "http.response.start"]
    assert len(starts) == 1, sent
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return int(starts[0]["status"]), body


def request(host: Host, call: Call) -> tuple[int, bytes]:
    return trio.from_thread.run(_asgi, host.app, call, trio_token=host.token)


def dump(db: Path) -> list[tuple[str, list[Any]]]:
    """Every row of every table, in a stable order."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = [
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY 1")
        ]
        return [(t, sorted(map(repr, conn.execute(f'SELECT * FROM "{t}"')))) for t in tables]
    finally:
        conn.close()


def strict_json(body: bytes) -> Any:
    """``body`` parsed as JSON a strict parser reads (no NaN or Infinity)."""

    def refuse(constant: str) -> None:
        raise AssertionError(f"the answer holds {constant}, which is not JSON")

    return json.loads(body, parse_constant=refuse)


def logged_trouble(caplog: pytest.LogCaptureFixture, before: int) -> list[str]:
    return [
        f"{r.levelname} {r.name}: {r.getMessage()}"
        for r in caplog.records[before:]
        if r.exc_info or r.exc_text or r.levelno >= logging.ERROR
    ]


# -- strategies ---------------------------------------------------------------------------

IDS = ["t1", "t2", "t3", "t4", "nope", "a..b", "", "x" * 129, "é", "a/b", "t1\x00", "-x"]
an_id = st.sampled_from(IDS) | st.text(max_size=12)
a_label = st.sampled_from(["b1", "lobby", "r", "", "a b", "x" * 129, "é"]) | st.text(max_size=10)
some_text = st.text(max_size=40) | st.sampled_from(
    ["", "   ", "a\nb", "\x00", "\ud800", "x" * 3000, "\x1b[31m", "\u2028"]
)
any_int = st.integers() | st.sampled_from([0, -1, 1, 2**63 - 1, 2**63, -(2**63) - 1, 10**40])
any_float = st.floats() | any_int
json_leaf = st.none() | st.booleans() | any_int | st.floats() | some_text
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _or_any(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return strategy | json_value


result_like = st.fixed_dictionaries(
    {},
    optional={
        "id": _or_any(an_id),
        "body": _or_any(some_text),
        "no_send": _or_any(st.booleans()),
        "metadata": _or_any(
            st.fixed_dictionaries(
                {}, optional={"worker": _or_any(a_label), "attempt": _or_any(any_int)}
            )
        ),
    },
)
FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "id": an_id,
    "ids": st.lists(an_id, max_size=5),
    "durable": st.booleans(),
    "body": some_text,
    "no_send": st.booleans(),
    "metadata": st.fixed_dictionaries({}, optional={"worker": a_label, "attempt": any_int}),
    "results": st.lists(result_like, max_size=4),
    "reason": some_text,
    "kind": st.sampled_from(["stall", "other", ""]),
    "age_s": any_float,
    "detail": some_text,
    "client": a_label,
    "protocol_version": st.just(1) | any_int,
    "inflight": any_int,
    "version": some_text,
    "uptime_s": any_float,
    "room": a_label,
    "text": some_text,
    "sender": a_label,
}
protocol_object = st.fixed_dictionaries(
    {}, optional={k: _or_any(v) for k, v in FIELDS.items()}
) | st.dictionaries(st.sampled_from(sorted(FIELDS)) | st.text(max_size=6), json_value, max_size=5)


def _encode(doc: Any, ascii_only: bool) -> bytes:
    return json.dumps(doc, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


HOSTILE_BODIES = [
    b"",
    b"{",
    b"null",
    b"[]",
    b"\xff\xfe",
    b'{"id": NaN}',
    b'{"inflight": Infinity}',
    b'{"age_s": 1e999}',
    b'{"inflight": ' + b"9" * 5000 + b"}",
    b'{"a":' * 5000 + b"1" + b"}" * 5000,
    b"[" * 40 + b"]" * 40,
    b'{"text": "\\ud800"}',
]
a_body = (
    st.builds(_encode, protocol_object, st.booleans())
    | st.builds(_encode, json_value, st.booleans())
    | st.sampled_from(HOSTILE_BODIES)
    | st.binary(max_size=40)
    | st.integers(0, 3000).map(lambda n: b"[" * n + b"]" * n)
)
QUERY_KEYS = ["wait", "limit", "room", "stacks", "kinds", "x"]
query_value = st.sampled_from(
    ["0", "1", "0.5", "1e-05", "-1", "inf", "nan", "1_0", "²", "١", "9" * 30, "", "lobby", "all"]
) | st.text(max_size=8)
a_query = (
    st.lists(st.tuples(st.sampled_from(QUERY_KEYS), query_value), max_size=3).map(
        lambda pairs: urlencode(pairs).encode()
    )
    | st.binary(max_size=30)
    | st.just(b"")
)
header_bytes = st.binary(max_size=20)


def _headers(token: str) -> st.SearchStrategy[list[tuple[bytes, bytes]]]:
    auth = (
        st.sampled_from(
            [f"Bearer {token}", f"Bearer {token}", f"Bearer {USER_TOKEN}", "Bearer nope", "Basic x"]
        ).map(str.encode)
        | header_bytes
    )
    content_type = (
        st.sampled_from(
            [b"application/json", b"application/json; charset=utf-8", b"text/plain", b""]
        )
        | header_bytes
    )
    length = st.sampled_from([b"0", b"5", b"99999999999999999999", b"\xc2\xb2", b"-1"])
    return st.builds(
        lambda a, c, n, client, extra: [
            *([(b"authorization", a)] if a is not None else []),
            *([(b"content-type", c)] if c is not None else []),
            *([(b"content-length", n)] if n is not None else []),
            *([(b"x-tether-client", client)] if client is not None else []),
            *extra,
        ],
        st.none() | auth,
        st.none() | content_type,
        st.none() | st.none() | length,
        st.none() | st.sampled_from([b"b1", b"a b", b"x" * 200]) | header_bytes,
        st.lists(st.tuples(header_bytes.map(bytes.lower), header_bytes), max_size=2),
    )


METHODS = st.sampled_from(["GET", "POST", "POST", "PUT", "DELETE", "HEAD", "PATCH", "OPTIONS"])

# route -> (method, the fields of its record); "{id}" in a path is filled with the body's id
ROUTES: dict[str, tuple[str, tuple[str, ...]]] = {
    "/v1/tasks": ("GET", ()),
    "/v1/stats": ("GET", ()),
    "/v1/tasks/{id}/ack": ("POST", ("id", "durable")),
    "/v1/tasks/{id}/reject": ("POST", ("id", "reason")),
    "/v1/acks": ("POST", ("ids", "durable")),
    "/v1/results": ("POST", ("id", "body", "no_send", "metadata")),
    "/v1/results/batch": ("POST", ("results",)),
    "/v1/notices": ("POST", ("id", "kind", "age_s", "detail")),
    "/v1/heartbeat": ("POST", ("client", "protocol_version", "inflight", "version", "uptime_s")),
    "/v1/leases/release": ("POST", ("client",)),
    "/v1/messages": ("POST", ("room", "text", "sender", "id")),
    "/v1/messages?": ("GET", ()),
    "/v1/messages/{id}": ("GET", ()),
    "/": ("GET", ()),
    "/healthz": ("GET", ()),
    "/metrics": ("GET", ()),
    "/tasks": ("GET", ()),
    "/status": ("GET", ()),
}
WORKER_ROUTES = [
    r
    for r in ROUTES
    if r.startswith(("/v1/tasks", "/v1/acks", "/v1/res", "/v1/n", "/v1/h", "/v1/l", "/v1/stats"))
]
USER_ROUTES = ["/v1/messages", "/v1/messages?", "/v1/messages/{id}", "/", "/healthz"]
ADMIN_ROUTES = ["/healthz", "/metrics", "/tasks", "/status"]


@st.composite
def well_formed(draw: st.DrawFn, routes: list[str], token: str) -> Call:
    """A request a client could send: the route's method, a valid token, JSON declared, the
    route's record with every field present (values plausible or hostile), or a hostile
    body; queries of the route's parameters."""
    route = draw(st.sampled_from(routes))
    method, fields = ROUTES[route]
    doc = {k: draw(_or_any(FIELDS[k]) if draw(st.booleans()) else FIELDS[k]) for k in fields}
    path_id = doc.get("id") if isinstance(doc.get("id"), str) else draw(an_id)
    if draw(st.integers(0, 9)) == 0:
        path_id = draw(an_id)  # the body's id and the path's differ
    path = route.rstrip("?").replace("{id}", str(path_id).replace("/", "%2F") or "x")
    body = b""
    if method == "POST":
        body = draw(
            st.builds(_encode, st.just(doc), st.booleans())
            | st.builds(_encode, st.just(doc), st.booleans())
            | st.sampled_from(HOSTILE_BODIES)
        )
    query = draw(a_query) if method == "GET" else b""
    if route == "/v1/messages?":
        query = b"room=lobby&" + query
    headers = [
        (b"authorization", f"Bearer {token}".encode()),
        (b"content-type", b"application/json"),
    ]
    return Call(method, path, query, headers, body)


def _calls(paths: st.SearchStrategy[str], routes: list[str], token: str) -> st.SearchStrategy[Call]:
    anything = st.builds(Call, METHODS, paths, a_query, _headers(token), a_body)
    shaped = well_formed(routes, token)
    return st.one_of(shaped, shaped, shaped, anything)


WORKER_PATHS = st.one_of(
    st.sampled_from(sorted(r for r in WORKER_ROUTES if "{" not in r)),
    st.builds(lambda i, a: f"/v1/tasks/{i}/{a}", an_id, st.sampled_from(["ack", "reject"])),
)
USER_PATHS = st.one_of(
    st.sampled_from(["/", "/app.js", "/style.css", "/healthz", "/v1/messages"]),
    st.builds(lambda i: f"/v1/messages/{i}", an_id),
    st.text(max_size=20).map(lambda p: "/" + p),
)

# -- the gateway ----------------------------------------------------------------------------


@asynccontextmanager
async def gateway_host(tmp_path: Path) -> AsyncIterator[Host]:
    worker, user = tmp_path / "worker-token", tmp_path / "user-token"
    write_token(worker, WORKER_TOKEN)
    write_token(user, USER_TOKEN)
    db = tmp_path / "gateway.db"
    store = await GatewayStore.open(db)
    try:
        app = GatewayApp(
            store,
            TokenSource(worker),
            TokenSource(user),
            limits=AppLimits(max_body=64 * 1024, max_wait=0.0),
        )
        host = Host(trio.lowlevel.current_trio_token(), app, db)
        auth = [(b"authorization", f"Bearer {WORKER_TOKEN}".encode())]
        json_auth = [*auth, (b"content-type", b"application/json")]
        for n in (1, 2, 3, 4):  # t1-t4: queued, then t1-t3 leased, t1-t2 acked, t1 answered
            body = json.dumps({"room": "lobby", "text": f"m{n}", "id": f"t{n}"}).encode()
            await _asgi(app, Call("POST", "/v1/messages", b"", json_auth, body))
        await _asgi(app, Call("GET", "/v1/tasks", b"limit=3", auth, b""))
        for n in (1, 2):
            body = json.dumps({"id": f"t{n}", "durable": True}).encode()
            await _asgi(app, Call("POST", f"/v1/tasks/t{n}/ack", b"", json_auth, body))
        body = json.dumps({"id": "t1", "body": "the reply"}).encode()
        await _asgi(app, Call("POST", "/v1/results", b"", json_auth, body))
        yield host
    finally:
        store.close()


def _check_gateway(host: Host, call: Call, caplog: pytest.LogCaptureFixture) -> None:
    assert host.db is not None
    logged = len(caplog.records)
    before = dump(host.db)
    status, body = request(host, call)
    assert status < 500, (status, body[:300])
    assert not logged_trouble(caplog, logged)
    if call.path in ("/", "/app.js", "/style.css") and status == 200:
        return
    answer = strict_json(body)
    if status >= 400:
        assert answer["error"]
        assert dump(host.db) == before, (status, body[:300])


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    tmp = tmp_path_factory.mktemp("gateway-fuzz")
    with hosted(lambda: gateway_host(tmp)) as host:
        yield host


@FUZZ
@given(call=_calls(WORKER_PATHS, WORKER_ROUTES, WORKER_TOKEN))
def test_gateway_worker_routes_never_fail_on_any_request(
    gateway: Host, caplog: pytest.LogCaptureFixture, call: Call
) -> None:
    _check_gateway(gateway, call, caplog)


@FUZZ
@given(call=_calls(USER_PATHS, USER_ROUTES, USER_TOKEN))
def test_gateway_user_routes_and_pages_never_fail_on_any_request(
    gateway: Host, caplog: pytest.LogCaptureFixture, call: Call
) -> None:
    _check_gateway(gateway, call, caplog)


# -- the admin endpoint -----------------------------------------------------------------------

ADMIN_PATHS = st.sampled_from(["/healthz", "/metrics", "/tasks", "/status"]) | st.text(
    max_size=12
).map(lambda p: "/" + p)


@asynccontextmanager
async def admin_host(tmp_path: Path) -> AsyncIterator[Host]:
    token = tmp_path / "admin-token"
    write_token(token, ADMIN_TOKEN)
    async with open_runtime(handle_signals=False, grace=1.0) as runtime:
        app = AdminApp(Observed.of_runtime(runtime), TokenSource(token))
        yield Host(trio.lowlevel.current_trio_token(), app)


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    tmp = tmp_path_factory.mktemp("admin-fuzz")
    with hosted(lambda: admin_host(tmp)) as host:
        yield host


@FUZZ
@given(call=_calls(ADMIN_PATHS, ADMIN_ROUTES, ADMIN_TOKEN))
def test_admin_routes_never_fail_on_any_request(
    admin: Host, caplog: pytest.LogCaptureFixture, call: Call
) -> None:
    logged = len(caplog.records)
    status, body = request(admin, call)
    assert status < 500, (status, body[:300])
    assert not logged_trouble(caplog, logged)
    if call.path != "/metrics" or status != 200:
        answer = strict_json(body)
        if status >= 400:
            assert answer["error"]
