"""The display's HTTP server: the standard library's ``ThreadingHTTPServer``, read-only.

What it serves: the page's static files (HTML, script, style, Plotly.js and its licence),
read from the package once at start into memory, by exact name (no request path reaches the
file system), and the JSON API (:mod:`.api`). Only GET and HEAD; anything else is a 405.

Bounds, so no client can take the service down or slow the correlator: a request line of at
most :data:`MAX_URL` bytes (414), the standard library's limits on header lines and count, no
request body read (HTTP/1.0: one request per connection); at most :data:`MAX_CLIENTS`
requests served at once (503 beyond); per client address a token bucket of
:data:`RATE_PER_S` requests a second with bursts of :data:`BURST` (429 beyond); a socket
timeout of :data:`TIMEOUT_S` seconds, so a browser that stops reading holds one thread for
that long and nothing else: the pipeline never waits on the server (:mod:`.live`).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from .api import Api, DumpStore, _json
from .model import HealthMarks

log = logging.getLogger(__name__)

MAX_URL = 2048
MAX_CLIENTS = 16
RATE_PER_S = 40.0
BURST = 80.0
TIMEOUT_S = 10.0
#: The page's files: URL path -> (package file, content type).
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/display.js": ("display.js", "text/javascript; charset=utf-8"),
    "/display.css": ("display.css", "text/css; charset=utf-8"),
    "/plotly.min.js": ("plotly.min.js", "text/javascript; charset=utf-8"),
    "/plotly.LICENSE.txt": ("plotly.LICENSE.txt", "text/plain; charset=utf-8"),
}


def static_files() -> dict[str, tuple[bytes, str]]:
    """Every file of :data:`STATIC`, read from the package."""
    root = resources.files(__package__) / "static"
    cache: dict[str, bytes] = {}
    out = {}
    for url, (name, ctype) in STATIC.items():
        if name not in cache:
            cache[name] = (root / name).read_bytes()
        out[url] = (cache[name], ctype)
    return out


class RateLimiter:
    """A token bucket per client address (:data:`RATE_PER_S`, :data:`BURST`); the table of
    addresses is bounded (the oldest forgotten first)."""

    def __init__(self, rate: float = RATE_PER_S, burst: float = BURST,
                 clients: int = 1024) -> None:
        self.rate, self.burst, self.clients = rate, burst, clients
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, client: str) -> bool:
        now = time.monotonic()
        with self._lock:
            tokens, then = self._buckets.pop(client, (self.burst, now))
            tokens = min(self.burst, tokens + (now - then) * self.rate)
            ok = tokens >= 1
            self._buckets[client] = (tokens - 1 if ok else tokens, now)
            while len(self._buckets) > self.clients:
                del self._buckets[next(iter(self._buckets))]
            return ok


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = TIMEOUT_S
    server_version = "xengine-display"
    sys_version = ""

    def parse_request(self) -> bool:  # the request line is read; refuse a long one here
        if len(self.raw_requestline) > MAX_URL:
            self.requestline, self.request_version, self.command = "", "HTTP/1.0", "GET"
            self.close_connection = True
            self._send(HTTPStatus.REQUEST_URI_TOO_LONG,
                       _json({"error": f"request line over {MAX_URL} bytes"}))
            return False
        return super().parse_request()

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def _refuse_method(self) -> None:
        self.close_connection = True
        self._send(HTTPStatus.METHOD_NOT_ALLOWED,
                   _json({"error": f"{self.command[:16]} is not served: the display is "
                                   "read-only (GET, HEAD)"}), allow="GET, HEAD")

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = \
        _refuse_method

    def _serve(self, body: bool) -> None:
        srv = self.server
        if not srv.limiter.allow(self.client_address[0]):
            self._send(HTTPStatus.TOO_MANY_REQUESTS, _json({"error": "too many requests"}),
                       body=body, retry_after="1")
            return
        if not srv.slots.acquire(blocking=False):
            self._send(HTTPStatus.SERVICE_UNAVAILABLE, _json({"error": "busy"}), body=body,
                       retry_after="1")
            return
        try:
            url = urlsplit(self.path)
            static = srv.static.get(url.path)
            if static is not None:
                data, ctype = static
                self._send(HTTPStatus.OK, data, ctype, body=body,
                           cache="max-age=3600" if url.path.endswith(".min.js") else "no-cache")
                return
            try:
                code, data = srv.api.handle(url.path, url.query)
            except Exception as exc:  # a fault of ours: one line, never a traceback
                log.exception("display: %s", self.path[:200])
                code, data = 500, _json({"error": f"internal error: {type(exc).__name__}"})
            self._send(HTTPStatus(code), data, body=body)
        finally:
            srv.slots.release()

    def _send(self, code: HTTPStatus, data: bytes, ctype: str = "application/json",
              body: bool = True, cache: str = "no-cache", **headers: str) -> None:
        try:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", cache)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Content-Security-Policy",
                             "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                             "img-src 'self' data: blob:")
            for name, value in headers.items():
                self.send_header(name.replace("_", "-").title(), value)
            self.end_headers()
            if body:
                self.wfile.write(data)
        except OSError:  # the client went away: its loss
            self.close_connection = True

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """The standard library's errors (bad request line, too many headers) as JSON, with a
        status line even to what reads as an HTTP/0.9 request (garbage)."""
        self.close_connection = True
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            self.request_version = "HTTP/1.0"
        self._send(HTTPStatus(code), _json({"error": message or HTTPStatus(code).phrase}))

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("display %s: " + format, self.address_string(), *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64
    api: Api
    static: dict[str, tuple[bytes, str]]
    limiter: RateLimiter
    slots: threading.BoundedSemaphore


#: The interpreter's thread switch interval while a display serves (seconds; CPython's default
#: is 5 ms): a pipeline block thread that wants the GIL while the server's thread computes an
#: answer waits at most this long. On a loaded 2-core machine, three polling browsers cost the
#: chain at S = 256 a median 14 % of its rate with the default and 4 % with 1 ms, in one pair
#: of runs of benchmarks/bench_display.py each (noisy: docs/performance.md has the latest).
SWITCH_INTERVAL_S = 0.001


class DisplayServer:
    """The display over ``store`` at ``address:port`` (port 0: a free one, :attr:`url` says
    which), serving in a daemon thread until :meth:`close`. While it serves, the interpreter's
    switch interval is at most :data:`SWITCH_INTERVAL_S` (restored by :meth:`close`)."""

    def __init__(self, store: DumpStore, address: str = "127.0.0.1", port: int = 0, *,
                 marks: HealthMarks | None = None) -> None:
        self.api = Api(store, marks)
        self._server = _Server((address, port), _Handler)
        self._server.api = self.api
        self._server.static = static_files()
        self._server.limiter = RateLimiter()
        self._server.slots = threading.BoundedSemaphore(MAX_CLIENTS)
        host, self.port = self._server.server_address[:2]
        self.url = f"http://{host}:{self.port}/"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.2}, name="display",
                                        daemon=True)
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch, SWITCH_INTERVAL_S))
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
        sys.setswitchinterval(self._switch)
