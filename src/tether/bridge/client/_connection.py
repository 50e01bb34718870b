"""The gateway client's connection: settings, the HTTP client and its token, the one request
path and the connection's status.

Transient trouble is retried with backoff until it succeeds or is cancelled; a refusal raises one
clear error; an optional endpoint a gateway lacks is asked once. See docs/guide/design.md, "The
bridge's client".
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import random
import secrets
import ssl
import time
from collections import OrderedDict
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import attrs
import httpx
import trio

from ..._backoff import Backoff
from ..._plumbing._redact import redact_url
from ..._plumbing._token_file import TokenFileError, read_token
from ..._plumbing._when import clock_time, duration
from ..._protocol._bounds import MAX_REQUEST_BYTES
from ..._protocol._connection import ConnectionStatus, utc_now_iso
from ..._protocol._messages import CLIENT_HEADER, MAX_BATCH, check_label
from ._answers import error_detail, read_bounded, retry_after_of
from ._errors import GatewayAuthError, GatewayRequestError, GatewayUnavailable
from ._status_file import StatusFile

log = logging.getLogger("tether.bridge.gateway")

_TRANSIENT_STATUS = frozenset({408, 429})

MAX_TASK_WIRE_BYTES = MAX_REQUEST_BYTES
"""The most bytes one task can take in a poll's answer: the largest allowed body JSON-escaped,
plus its envelope (``_protocol._bounds``). A poll's answer is read up to ``limit`` of these."""

MAX_ANSWER_BYTES = 1 << 20
"""The most bytes read of any other answer (acks, receipts, batch items, an error's text):
all are small; a gateway sending more is not speaking protocol v1."""

POLL_BYTES_MAX = 32 << 20
"""The most bytes of a poll's answer read at all. A full poll of 100 tasks of the largest size
would be ~636 MB; after an answer over this, the next poll asks for only as many tasks as surely
fit (5), so a gateway sending huge tasks is drained, a few at a time, within this memory."""

REFUSED_MEMORY = 10_000
"""How many refused task ids a client remembers (so each is logged and rejected once)."""

LEASE_RELEASE_TIMEOUT = 2.0
"""Most seconds :meth:`GatewayClient.release_leases` may take (it runs while stopping)."""

HOT_PATHS = frozenset({"/v1/tasks", "/v1/acks", "/v1/results", "/v1/results/batch"})
"""Paths asked every round under load: their absolute URLs are built once per client (httpx
would parse and join a relative one on every request: ~8% of a reply batch's post)."""


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default verifying TLS context (its CA bundle, ``SSL_CERT_FILE``/``SSL_CERT_DIR``
    honoured), made once per process: loading the bundle is slow, and every client (a
    restarted bridge, the demo's second bridge, each test) would otherwise pay it again."""
    return httpx.create_ssl_context()


def package_version() -> str | None:
    try:
        return importlib.metadata.version("tether")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - source checkout
        return None


@attrs.define(eq=False)
class GatewayConnection:
    """A client's connection to one gateway: its settings and state, the HTTP client and the
    token, the one request path (retries with backoff, a re-read token, outage lines) and the
    status it publishes. :class:`GatewayClient` adds the protocol's calls."""

    base_url: str
    token_file: Path
    client_name: str = "tether-bridge"
    status_file: Path | None = None
    poll_wait: float = 30.0
    poll_limit: int = MAX_BATCH
    """Tasks one poll may lease (the protocol's most, 100): a round is one commit and one ack
    request however many it holds, so a busy gateway is drained in few round trips."""
    timeout_margin: float = 10.0
    request_timeout: float = 30.0
    backoff_initial: float = 1.0
    backoff_maximum: float = 60.0
    release_timeout: float = LEASE_RELEASE_TIMEOUT
    rng: random.Random = attrs.field(factory=random.Random)
    transport: httpx.AsyncBaseTransport | None = None
    pool_name: str | None = None
    """The stem of the bridge's pool names, shown in the status file (``pool``)."""

    lease_holder: str = attrs.field(default="", init=False)
    """Who holds this client's gateway leases (``X-Tether-Client``): ``client_name`` and a
    random suffix, unique per client object (so per bridge run)."""
    heartbeat_supported: bool = attrs.field(default=True, init=False)
    batches_supported: bool = attrs.field(default=True, init=False)
    reject_supported: bool = attrs.field(default=True, init=False)
    notices_supported: bool = attrs.field(default=True, init=False)
    release_supported: bool = attrs.field(default=True, init=False)
    progress_supported: bool = attrs.field(default=True, init=False)
    poll_bytes_max: int = POLL_BYTES_MAX
    """The most bytes any poll's answer may take (see ``poll_bytes_cap``)."""
    rejects_supported: bool = attrs.field(default=True, init=False)
    refused_memory: int = REFUSED_MEMORY
    rejected_tasks: int = attrs.field(default=0, init=False)
    _poll_ask: int = attrs.field(default=0, init=False)
    """The ``limit`` the next poll asks for: ``poll_limit``, or after an answer over
    ``poll_bytes_max`` as many as surely fit in it (then ``poll_limit`` again)."""
    _refused: OrderedDict[str, bool] = attrs.field(factory=OrderedDict, init=False)
    """Polled tasks refused, by key (``Refusal.key``), oldest first: True once the gateway
    was told (or cannot be), False while the rejection has yet to get through."""
    _http: httpx.AsyncClient | None = attrs.field(default=None, init=False)
    _urls: dict[str, httpx.URL] = attrs.field(factory=dict, init=False)
    """The absolute URLs of ``HOT_PATHS``, built on first use."""
    _token: str = attrs.field(default="", init=False)
    shown_url: str = attrs.field(init=False, default="")
    """``base_url`` as logs, errors and the status file show it (``tether._plumbing._redact``)."""
    _status: ConnectionStatus = attrs.field(init=False)
    _status_writer: StatusFile | None = attrs.field(default=None, init=False)
    _started_at: float = attrs.field(default=0.0, init=False)
    _beat_after_outage: trio.Event = attrs.field(factory=trio.Event, init=False)
    """Set when the gateway answers again after an outage that made a good heartbeat stale:
    the heartbeat loop beats at once instead of at its next interval."""
    _heartbeat_marked_by_outage: bool = attrs.field(default=False, init=False)
    _outage_since: float | None = attrs.field(default=None, init=False)
    _outage_kind: str = attrs.field(default="unreachable", init=False)
    """When the gateway stopped answering (Trio clock), while it does not answer."""

    def __attrs_post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")
        self.shown_url = redact_url(self.base_url)
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"gateway url must start with http:// or https://: {self.shown_url}")
        if "@" in self.base_url.split("://", 1)[1].split("/", 1)[0]:
            # httpx would turn it into Basic auth, replacing the bearer token
            raise ValueError(
                f"gateway url {self.shown_url} must not carry a user or password; "
                "the token comes from the token file"
            )
        if "?" in self.base_url or "#" in self.base_url:
            raise ValueError(
                f"gateway url {self.shown_url} must not carry a query or fragment "
                "(request paths are appended to it)"
            )
        check_label(self.client_name, "client name")
        if not 0 <= self.poll_wait <= 300:
            raise ValueError(f"poll_wait must be within 0-300 seconds, got {self.poll_wait}")
        if not 0 < self.backoff_initial <= self.backoff_maximum:
            # a zero first delay would retry a down gateway in a hot loop
            raise ValueError(
                f"backoff needs 0 < initial <= maximum, got {self.backoff_initial} "
                f"and {self.backoff_maximum}"
            )
        if not 0 < self.release_timeout <= 60:
            raise ValueError(
                f"release_timeout must be within 0-60 seconds (> 0), got {self.release_timeout}"
            )
        if not 1 <= self.poll_limit <= MAX_BATCH:
            raise ValueError(f"poll_limit must be within 1-{MAX_BATCH}, got {self.poll_limit}")
        if self.poll_bytes_max < MAX_TASK_WIRE_BYTES:
            raise ValueError(
                f"poll_bytes_max must hold one task of the largest size "
                f"({MAX_TASK_WIRE_BYTES} bytes), got {self.poll_bytes_max}"
            )
        self._poll_ask = self.poll_limit
        self.lease_holder = f"{self.client_name[:121]}-{secrets.token_hex(3)}"
        self._status = ConnectionStatus(
            gateway=self.shown_url, client=self.client_name, pool=self.pool_name
        )
        if self.status_file is not None:
            self._status_writer = StatusFile(self.status_file)

    async def __aenter__(self) -> Self:
        self._token = await self._read_token()
        self._started_at = trio.current_time()
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            transport=self.transport,
            verify=_tls_context(),
            timeout=self.request_timeout,
            headers={
                "User-Agent": f"tether-gateway-client/{package_version() or 'dev'}",
                CLIENT_HEADER: self.lease_holder,
            },
        )
        await self._publish()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        http, self._http = self._http, None
        if http is not None:
            with trio.CancelScope(shield=True):
                await http.aclose()

    @property
    def status(self) -> ConnectionStatus:
        return self._status

    # -- the one request path ----------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        payload: Any = None,
        params: dict[str, str] | None = None,
        http_timeout: httpx.Timeout | None = None,
        optional: bool = False,
        retry: bool = True,
        max_bytes: int = MAX_ANSWER_BYTES,
        judge_answer: bool = False,
    ) -> httpx.Response | None:
        """Send a request; back off on transient errors, re-read the token once on 401/403.

        The answer is read as a stream and refused (``GatewayProtocolError``) past
        ``max_bytes``. Returns None only for an ``optional`` endpoint the gateway does not
        have. ``judge_answer``: the caller decides whether a 2xx answer ends an outage (it
        may not be protocol v1) and calls ``_answered`` itself.
        """
        if self._http is None:
            raise RuntimeError("GatewayClient used outside its 'async with' block")
        backoff = Backoff(self.backoff_initial, self.backoff_maximum, rng=self.rng)
        token_reread = False
        while True:
            retry_after: float | None = None
            try:
                response = await read_bounded(
                    self._http,
                    self._http.build_request(
                        method,
                        self._url(path),
                        json=payload,
                        params=params,
                        headers={"Authorization": f"Bearer {self._token}"},
                        timeout=(
                            http_timeout if http_timeout is not None else httpx.USE_CLIENT_DEFAULT
                        ),
                    ),
                    max_bytes,
                    what,
                )
            except httpx.TransportError as exc:
                problem = f"{what}: {type(exc).__name__}: {exc or 'no detail'}"
            else:
                status = response.status_code
                if status in (401, 403):
                    if token_reread:
                        raise await self._auth_failure(what, response, "after re-reading it")
                    token_reread = True
                    fresh = await self._read_token()
                    if fresh == self._token:
                        raise await self._auth_failure(what, response, "and the file is unchanged")
                    log.info("gateway refused the token; re-read %s, retrying", self.token_file)
                    self._token = fresh
                    continue
                if status < 400:
                    if not judge_answer:
                        await self._answered()
                    return response
                if optional and status in (404, 405):
                    await self._answered()
                    return None
                if status < 500 and status not in _TRANSIENT_STATUS:
                    await self._answered()
                    raise GatewayRequestError(status, error_detail(response), what)
                problem = f"{what}: HTTP {status}: {error_detail(response)}"
                retry_after = retry_after_of(response)
            problem = self._redact(problem)
            if not retry:
                await self._publish(connected=False, error=problem)
                raise GatewayUnavailable(problem)
            delay = backoff.next_delay()
            if retry_after is not None:
                delay = min(max(delay, retry_after), self.backoff_maximum)
            self._unreachable(problem, delay)
            await self._publish(connected=False, error=problem, backoff_s=round(delay, 3))
            await trio.sleep(delay)

    def _url(self, path: str) -> httpx.URL | str:
        """``path`` as the request's URL: a hot path's absolute URL (built once), else the
        path itself, joined to ``base_url`` by httpx."""
        if path not in HOT_PATHS:
            return path
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx.URL(self.base_url + path)
        return url

    def _unreachable(self, problem: str, delay: float, what: str = "unreachable") -> None:
        """Log an outage once, as it begins, with the next try's time (the requests failing
        in it say so at DEBUG): a person watching the log knows it is being dealt with.
        ``what`` says what kind of outage: unreachable, or answering outside protocol v1."""
        next_try = f"next try at {clock_time(time.time() + delay)} (in {delay:.1f} s)"
        if self._outage_since is not None:
            log.debug("gateway %s still %s (%s); %s", self.shown_url, what, problem, next_try)
            return
        self._outage_since = trio.current_time()
        self._outage_kind = what
        log.warning(
            "gateway %s %s (%s); %s, then less often (at most %g s apart); "
            "a line says when it answers again",
            self.shown_url,
            what,
            problem,
            next_try,
            self.backoff_maximum,
        )

    async def _answered(self) -> None:
        """The gateway answered: the end of an outage, if one was going on, gets its line (at
        the outage's level: whoever saw it begin sees it end)."""
        if self._outage_since is not None:
            lasted = trio.current_time() - self._outage_since
            self._outage_since = None
            log.warning(
                "gateway %s answers again after %s %s",
                self.shown_url,
                duration(lasted),
                "unreachable" if self._outage_kind == "unreachable" else "answering outside v1",
            )
        await self._publish(connected=True, ok=True)

    async def _auth_failure(
        self, what: str, response: httpx.Response, when: str
    ) -> GatewayAuthError:
        message = self._redact(
            f"gateway {self.shown_url} refused the token in {self.token_file} "
            f"(HTTP {response.status_code}: {error_detail(response)}) {when}; "
            "put the gateway's current token in that file"
        )
        await self._publish(connected=False, error=message)
        log.error("%s (during %s)", message, what)
        return GatewayAuthError(message)

    async def _read_token(self) -> str:
        try:
            return await trio.to_thread.run_sync(read_token, self.token_file)
        except TokenFileError as exc:
            message = f"cannot use the gateway token: {exc}"
            await self._publish(connected=False, error=message)
            raise GatewayAuthError(message) from None

    def _redact(self, text: str) -> str:
        return text.replace(self._token, "[token]") if self._token else text

    async def _publish(
        self,
        *,
        connected: bool | None = None,
        ok: bool = False,
        error: str | None = None,
        backoff_s: float | None = None,
        heartbeat: str | None = None,
    ) -> None:
        status = self._status
        if heartbeat is not None:  # a beat's own outcome
            self._heartbeat_marked_by_outage = False
        elif connected is False and status.heartbeat == "ok":
            heartbeat = "failing"  # a beat cannot get through either: "ok" would be stale
            self._heartbeat_marked_by_outage = True
        elif connected and self._heartbeat_marked_by_outage:
            self._heartbeat_marked_by_outage = False
            self._beat_after_outage.set()  # find out now, not a heartbeat interval later
        if connected is not None:
            failures = 0 if connected else status.consecutive_failures + 1
            status = attrs.evolve(
                status,
                connected=connected,
                error=None if connected else error,
                backoff_s=backoff_s,
                consecutive_failures=failures,
            )
        if ok:
            status = attrs.evolve(status, last_ok=utc_now_iso())
        if heartbeat is not None:
            status = attrs.evolve(status, heartbeat=heartbeat)
        self._status = status
        if self._status_writer is not None:
            await self._status_writer.publish(status)
