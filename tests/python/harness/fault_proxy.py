"""A fault-injecting HTTP proxy for the S3 front's tests: on 127.0.0.1 in front of a local S3
server (s3sfs_server.py), it forwards each request unchanged (the Host header too, so a signature
made for the proxy's address verifies at the server) and records it, except where the test
has armed a fault:

- `fail_next(n, status, code)`: the next n matching requests are answered by the proxy
  itself with an S3 error (503 ServiceUnavailable, 503 SlowDown, ...), as S3 does under load;
- `cut_next_range(how)`: the next ranged answer (206) is cut short, once: "dropped" sends the
  headers of the whole range and half its bytes, then closes the connection; "shorter" sends
  a well-formed 206 whose Content-Range covers half of what was asked;
- `expired_tokens`: a callable saying whether a session token has expired; a request
  carrying one is answered 400 ExpiredToken, as S3 answers it.

`ConnectionTrap` is a listener that only counts the connections made to it: it stands for a
host that must never be contacted.

The ideas (a thread per connection, a kept-alive upstream connection per thread, hop-by-hop
headers left out) are those of latency_proxy.py's LatencyProxy, whose helpers this imports.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import socket
import socketserver
import threading
import uuid
from dataclasses import dataclass, field
from typing import Callable

from harness.latency_proxy import HOP_BY_HOP, ServedOnAThread, UpstreamPerThread, key_of, kind_of

# Each fault's S3 error: (status, message).
S3_ERRORS = {
    "ServiceUnavailable": (503, "Service is unable to handle request."),
    "SlowDown": (503, "Please reduce your request rate."),
    "ExpiredToken": (400, "The provided token has expired."),
    "InternalError": (500, "We encountered an internal error. Please try again."),
}


def is_object_get(request: "Seen") -> bool:
    """A GET of an object (not a listing)."""
    return kind_of(request.method, request.target) == "GET"


@dataclass
class Seen:
    """A request the proxy received, and what the proxy did with it."""

    method: str
    target: str
    headers: dict[str, str]
    status: int | None = None  # the status answered
    fault: str | None = None  # the fault the proxy injected, if any

    @property
    def key(self) -> str:
        return key_of(self.target)

    @property
    def ranged(self) -> bool:
        return "range" in {k.lower() for k in self.headers}


@dataclass
class _Armed:
    what: str  # an S3 error code, or "cut:dropped" / "cut:shorter"
    times: int
    match: Callable[[Seen], bool]
    fired: list = field(default_factory=list)


def error_body(code: str, target: str) -> bytes:
    message = S3_ERRORS.get(code, (0, code))[1]
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        f"<Resource>{target.split('?')[0]}</Resource><RequestId>{uuid.uuid4().hex[:16].upper()}</RequestId></Error>"
    ).encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: "_Server"

    def log_message(self, format, *args):  # noqa: A002 -- the base class's name
        pass

    def _handle(self) -> None:
        proxy = self.server.proxy
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        seen = Seen(self.command, self.path, headers)
        proxy._record(seen)
        token = self.headers.get("x-amz-security-token")
        if token is not None and proxy.expired_tokens is not None and proxy.expired_tokens(token):
            seen.fault = "ExpiredToken"
            self._error(seen, "ExpiredToken")
            return
        fault = proxy._take(lambda a: not a.what.startswith("cut:"), seen)
        if fault is not None:
            seen.fault = fault
            self._error(seen, fault)
            return
        conn = self.server.upstream_connection()
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            self.server.drop_upstream_connection()
            seen.status = 502
            self.send_error(502, "upstream S3 server unreachable")
            return
        if resp.will_close:
            self.server.drop_upstream_connection()
        out_headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP and k.lower() != "content-length"]
        cut = None
        if resp.status == 206 and self.command == "GET" and len(data) >= 2:
            cut = proxy._take(lambda a: a.what.startswith("cut:"), seen)
        seen.status = resp.status
        if cut == "cut:shorter":
            seen.fault = cut
            half = len(data) // 2
            first, _last, total = _content_range(resp.getheader("Content-Range") or "")
            out_headers = [(k, v) for k, v in out_headers if k.lower() != "content-range"]
            out_headers.append(("Content-Range", f"bytes {first}-{first + half - 1}/{total}"))
            data = data[:half]
        self.send_response(resp.status, resp.reason)
        for k, v in out_headers:
            self.send_header(k, v)
        if self.command == "HEAD":
            self.send_header("Content-Length", resp.getheader("Content-Length") or "0")
            self.end_headers()
            return
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if cut == "cut:dropped":
            seen.fault = cut
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(data)

    def _error(self, seen: Seen, code: str) -> None:
        status = S3_ERRORS.get(code, (500, ""))[0]
        seen.status = status
        body = error_body(code, self.path)
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("x-amz-request-id", uuid.uuid4().hex[:16].upper())
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


def _content_range(value: str) -> tuple[int, int, str]:
    """(first, last, total) of a Content-Range header "bytes FIRST-LAST/TOTAL"."""
    span, _, total = value.removeprefix("bytes ").partition("/")
    first, _, last = span.partition("-")
    return int(first), int(last), total


class _Server(UpstreamPerThread, socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, proxy: "FaultProxy"):
        super().__init__(addr, _Handler)
        self.proxy = proxy
        self._local = threading.local()



class FaultProxy(ServedOnAThread):
    """The proxy on 127.0.0.1:port (a free port unless given), forwarding to the S3 server
    on 127.0.0.1:upstream_port. Always stop() it (it is also a context manager)."""

    thread_name = "fault_proxy"

    def __init__(self, upstream_port: int, port: int = 0):
        self.upstream_port = upstream_port
        self.expired_tokens: Callable[[str], bool] | None = None
        self._lock = threading.Lock()
        self._seen: list[Seen] = []
        self._armed: list[_Armed] = []
        self._server = _Server(("127.0.0.1", port), self)


    # -- faults ------------------------------------------------------------------------

    def fail_next(self, times: int, code: str, match: Callable[[Seen], bool] = is_object_get) -> list[Seen]:
        """Answer the next `times` requests that `match` (given each request's Seen) with the
        S3 error `code` (a key of S3_ERRORS). Returns the list the faulted requests are added
        to."""
        armed = _Armed(code, times, match)
        with self._lock:
            self._armed.append(armed)
        return armed.fired

    def cut_next_range(self, how: str, match: Callable[[Seen], bool] = is_object_get) -> list[Seen]:
        """Cut the next ranged answer (206) to a `match`ing request short, once: how is
        "dropped" (connection closed after half the bytes) or "shorter" (a 206 for half the
        range). Returns the list the cut request is added to."""
        assert how in ("dropped", "shorter"), how
        armed = _Armed(f"cut:{how}", 1, match)
        with self._lock:
            self._armed.append(armed)
        return armed.fired

    def armed(self) -> int:
        """Faults still waiting for a request."""
        with self._lock:
            return sum(a.times for a in self._armed)

    def _take(self, kind: Callable[[_Armed], bool], seen: Seen) -> str | None:
        with self._lock:
            for a in self._armed:
                if a.times > 0 and kind(a) and a.match(seen):
                    a.times -= 1
                    a.fired.append(seen)
                    return a.what
        return None

    # -- the record --------------------------------------------------------------------

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self._seen.append(seen)

    def seen(self) -> list[Seen]:
        """Every request received since the last reset, in arrival order."""
        with self._lock:
            return list(self._seen)

    def reset(self) -> None:
        with self._lock:
            self._seen.clear()


class ConnectionTrap:
    """A TCP listener on host:port that accepts connections, records where from and what
    they first sent, and closes them: it stands for a host nothing may contact."""

    def __init__(self, host: str, port: int = 0):
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self.host, self.port = self._sock.getsockname()
        self.connections: list[tuple[tuple, bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="connection-trap", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, addr = self._sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    first = conn.recv(4096)
                except OSError:
                    first = b""
            self.connections.append((addr, first))

    def __enter__(self) -> "ConnectionTrap":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()
