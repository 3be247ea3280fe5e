"""A fault-injecting HTTP proxy on loopback, between s3fs and the moto server.

s3fs talks to the proxy as if it were the S3 endpoint (``endpoint_url``); the proxy forwards
each request to the real server unless a rule matching it fires. A rule matches on method, path
(regex), query (regex), the presence of a request header and the request body (regex, for
APIs that name the object in the body: a GCS multipart upload), and fires for a share of matching
requests (``rate``, drawn from a seeded RNG), for the Nth matching requests (``nth``), or for
the first request to each distinct path (``first_per_path``: the first attempt of every object,
so that its retry goes through; with ``body``, the first request to each distinct body match),
at most ``limit`` times. What it does when it fires:

- ``drop_request``: read the request, close the connection, forward nothing;
- ``drop_response``: forward the request (the server acts on it), then close the client's
  connection without answering: the lost answer of a request that landed;
- ``error``: answer ``status`` (500, 503) with an S3 error body, forward nothing;
- ``delay``: wait ``delay`` seconds, then forward;
- ``delay_response``: forward, then wait ``delay`` seconds before answering (a client whose
  read timeout is shorter gives up on a request that landed: a timeout, then its retry);
- ``strip_header``: forward without ``header`` (a server that ignores a precondition).

Bounded: binds 127.0.0.1 only, forwards only to a loopback upstream, reads at most 64 MiB of a
request body, times out idle connections, keeps a bounded log and stops by itself after
``lifetime`` seconds. Every fault it injects is counted (``faults``), so that a test can check
its faults did happen.
"""

from __future__ import annotations

import collections
import http.client
import random
import re
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ACTIONS = ("drop_request", "drop_response", "error", "delay", "delay_response", "strip_header")
MAX_BODY = 64 * 1024 * 1024
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
              "trailer", "transfer-encoding", "upgrade"}
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
ERROR_CODES = {500: "InternalError", 503: "ServiceUnavailable", 502: "BadGateway"}


@dataclass
class Rule:
    """When a request matches and the trigger fires, do ``action`` (see the module doc)."""

    action: str
    method: str | None = None
    path: str | None = None
    query: str | None = None
    header: str | None = None
    body: str | None = None
    rate: float | None = None
    nth: tuple[int, ...] = ()
    first_per_path: bool = False
    limit: int | None = None
    status: int = 503
    delay: float = 0.0
    seed: int = 0
    # state
    matched: int = 0
    fired: int = 0
    _seen: set[str] = field(default_factory=set)
    _rng: random.Random | None = None

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown fault action {self.action!r}; one of {ACTIONS}")
        if self.action == "strip_header" and not self.header:
            raise ValueError("strip_header needs header=")
        self._rng = random.Random(self.seed)

    def matches(self, method: str, path: str, query: str, headers: Any, body: bytes = b""
                ) -> str | None:
        """None when the request does not match, else its key for ``first_per_path`` (the
        path, or the body match when ``body`` is set)."""
        if not ((self.method is None or method == self.method)
                and (self.path is None or re.search(self.path, path) is not None)
                and (self.query is None or re.search(self.query, query) is not None)
                and (self.header is None or headers.get(self.header) is not None)):
            return None
        if self.body is None:
            return path
        m = re.search(self.body, body.decode("latin-1"))
        return None if m is None else m.group(0)

    def fires(self, path: str) -> bool:
        """Called under the proxy's lock for a matching request: does the fault happen?"""
        self.matched += 1
        if self.limit is not None and self.fired >= self.limit:
            return False
        if self.first_per_path:
            hit = path not in self._seen
            self._seen.add(path)
        elif self.nth:
            hit = self.matched in self.nth
        elif self.rate is not None:
            assert self._rng is not None
            hit = self._rng.random() < self.rate
        else:
            hit = True
        if hit:
            self.fired += 1
        return hit


class FaultProxy:
    """The proxy: ``start()``, then point s3fs at ``url``; ``stop()`` (or the lifetime) ends it."""

    def __init__(self, upstream: str, rules: list[Rule] | None = None, *,
                 lifetime: float = 900.0, base_options: dict[str, Any] | None = None) -> None:
        u = urllib.parse.urlsplit(upstream)
        if u.scheme != "http" or u.hostname not in LOOPBACK or u.port is None:
            raise ValueError(f"the fault proxy forwards only to http://127.0.0.1:PORT, "
                             f"not {upstream!r}")
        self.upstream = (u.hostname, u.port)
        self.rules: list[Rule] = list(rules or [])
        self.lifetime = lifetime
        self.base_options = dict(base_options or {})
        self.lock = threading.Lock()
        #: faults injected, by action
        self.faults: collections.Counter[str] = collections.Counter()
        self.requests = 0
        #: requests being served now, and the most at once (how concurrent a client is)
        self.inflight = 0
        self.max_inflight = 0
        #: the last requests: (method, path, action or "forward")
        self.log: collections.deque[tuple[str, str, str]] = collections.deque(maxlen=2000)
        self._server: ThreadingHTTPServer | None = None
        self._timer: threading.Timer | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        proxy = self

        class Handler(_Handler):
            owner = proxy

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                         daemon=True, name="faultproxy").start()
        self._timer = threading.Timer(self.lifetime, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if self._timer is not None:
            self._timer.cancel()
        if server is not None:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> FaultProxy:
        return self.start() if self._server is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "the proxy is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def set_rules(self, rules: list[Rule]) -> None:
        with self.lock:
            self.rules = list(rules)

    def options(self, **extra: Any) -> dict[str, Any]:
        """storage_options reaching the server through this proxy: ``base_options`` (the moto
        options) with the endpoint replaced, plus ``extra``."""
        return {**self.base_options, "endpoint_url": self.url, **extra}

    def env(self) -> dict[str, str]:
        """Environment for a subprocess whose bare s3:// URLs should go through the proxy."""
        return {"AWS_ENDPOINT_URL_S3": self.url}

    # -- per request ---------------------------------------------------------------------------
    def decide(self, method: str, target: str, headers: Any, body: bytes = b"") -> Rule | None:
        u = urllib.parse.urlsplit(target)
        path = urllib.parse.unquote(u.path)
        with self.lock:
            self.requests += 1
            for rule in self.rules:
                key = rule.matches(method, path, u.query, headers, body)
                if key is not None and rule.fires(key):
                    self.faults[rule.action] += 1
                    self.log.append((method, path, rule.action))
                    return rule
            self.log.append((method, path, "forward"))
        return None


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"
    timeout = 60  # an idle client connection is closed after this

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def do_GET(self) -> None:
        self._serve()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts, total = [], 0
            while True:
                size = int(self.rfile.readline(1024).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                total += size
                if total > MAX_BODY:
                    raise ValueError("request body too large for the fault proxy")
                parts.append(self.rfile.read(size))
                self.rfile.readline(1024)
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise ValueError("request body too large for the fault proxy")
        return self.rfile.read(n) if n else b""

    def _serve(self) -> None:
        try:
            body = self._body()
        except (ValueError, OSError):
            self.close_connection = True
            return
        rule = self.owner.decide(self.command, self.path, self.headers, body)
        owner = self.owner
        with owner.lock:
            owner.inflight += 1
            owner.max_inflight = max(owner.max_inflight, owner.inflight)
        try:
            self._act(rule, body)
        finally:
            with owner.lock:
                owner.inflight -= 1

    def _act(self, rule: Rule | None, body: bytes) -> None:
        action = rule.action if rule else None
        if action == "drop_request":
            self._hang_up()
            return
        if action == "error":
            assert rule is not None
            code = ERROR_CODES.get(rule.status, "InternalError")
            self._answer(rule.status, [("Content-Type", "application/xml")],
                         f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>"
                         f"<Message>injected by the fault proxy</Message></Error>".encode())
            return
        if action == "delay":
            assert rule is not None
            time.sleep(min(rule.delay, 30.0))
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP
                   and k.lower() != "content-length"
                   and not (action == "strip_header" and rule is not None
                            and k.lower() == (rule.header or "").lower())]
        try:
            status, reason, rheaders, rbody = self._forward(headers, body)
        except OSError:
            self._hang_up()  # the server is gone: so is the answer
            return
        if action == "drop_response":
            self._hang_up()
            return
        if action == "delay_response":
            assert rule is not None
            time.sleep(min(rule.delay, 30.0))
        try:
            self._answer(status, rheaders, rbody, reason)
        except OSError:  # the client gave up waiting
            self.close_connection = True

    def _forward(self, headers: list[tuple[str, str]], body: bytes
                 ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.owner.upstream, timeout=60)
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for k, v in headers:
                conn.putheader(k, v)
            if body or self.command in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            rbody = resp.read()
            return resp.status, resp.reason, resp.getheaders(), rbody
        finally:
            conn.close()

    def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes,
                reason: str | None = None) -> None:
        self.send_response(status, reason)
        head = self.command == "HEAD"
        for k, v in headers:
            kl = k.lower()
            if kl in HOP_BY_HOP or kl in ("server", "date") or (kl == "content-length"
                                                                 and not head):
                continue
            self.send_header(k, v)
        if not head:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)
        self.wfile.flush()

    def _hang_up(self) -> None:
        """Close the client's connection without a word (what a lost packet looks like)."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
