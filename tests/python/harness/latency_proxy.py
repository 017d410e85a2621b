"""A latency proxy for the S3 tests and the latency benchmark: an HTTP proxy on 127.0.0.1 in
front of a local S3 server (moto_server.py) that holds each request `delay_ms` milliseconds
before forwarding it, the way an object store's first byte comes 20-100 ms after the request
is sent, and counts the requests that pass.

Each connection is served by a thread of its own and each request waits out its delay on
that thread, so requests sent at once are held at once: the proxy adds latency, not a queue,
as a real object store does. The record of requests is shared by those threads under a lock.

    with LatencyProxy(server.port, delay_ms=20) as proxy:
        cfg = server.tiledb_config(vfs__s3__endpoint_override=proxy.endpoint)
        ...
        proxy.reset()
        ...                      # what is measured
        proxy.count(), proxy.rounds(), proxy.summary()

With `tls` (an `ssl.SSLContext` for a server, see `tls_server_context`) the proxy speaks
HTTPS to its clients, the way an object store does, and plain HTTP to the S3 server.

Run alone from tests/python: `python -m harness.latency_proxy UPSTREAM_PORT DELAY_MS [PORT]`
serves until interrupted.
"""

from __future__ import annotations

import collections
import datetime
import http.client
import ipaddress
import http.server
import socketserver
import ssl
import sys
import threading
import time
import urllib.parse

# Hop-by-hop headers (RFC 9110 7.6.1) are the proxy's own, not forwarded either way.
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
}
UPSTREAM_TIMEOUT = 60.0


def kind_of(method: str, target: str) -> str:
    """What an S3 request does, for the counts: LIST (a bucket listing), GET, HEAD, PUT,
    DELETE or POST."""
    parsed = urllib.parse.urlsplit(target)
    query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
    parts = [p for p in parsed.path.split("/") if p]
    if method == "GET" and len(parts) <= 1 and ("list-type" in query or "prefix" in query or "delimiter" in query):
        return "LIST"
    return method


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as libtiledb's S3 client expects
    # An answer is two writes (headers, then body): with Nagle's algorithm the body waits
    # for the client's delayed ACK of the headers, 40 ms on Linux, on a kept-alive
    # connection. A server answers at once.
    disable_nagle_algorithm = True
    server: "_Server"

    def log_message(self, format, *args):  # noqa: A002 -- the base class's name
        pass

    def setup(self) -> None:
        # The TLS handshake happens here, on the connection's own thread.
        tls = self.server.proxy.tls
        if tls is not None:
            self.request = tls.wrap_socket(self.request, server_side=True)
        super().setup()

    def _forward(self) -> None:
        proxy = self.server.proxy
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        span = proxy._record(self.command, self.path)
        try:
            self._answer(proxy, body)
        finally:
            span[1] = time.monotonic()

    def _answer(self, proxy: "LatencyProxy", body: bytes | None) -> None:
        if proxy.delay_s > 0:
            time.sleep(proxy.delay_s)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        conn = self.server.upstream_connection()
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            self.server.drop_upstream_connection()
            self.send_error(502, "upstream S3 server unreachable")
            return
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                self.send_header(k, v)
        if self.command == "HEAD":
            # A HEAD answer carries the object's length, without the object.
            self.send_header("Content-Length", resp.getheader("Content-Length") or "0")
            self.end_headers()
        else:
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            proxy._count_bytes(len(data))
        if resp.will_close:
            self.server.drop_upstream_connection()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward


class UpstreamPerThread:
    """A proxy server's connections to the S3 server on 127.0.0.1:`self.proxy.upstream_port`:
    one per thread (each client connection has a thread, and keeps one upstream connection
    alive as the client keeps its own), in `self._local`."""

    proxy: "LatencyProxy"
    _local: threading.local

    def upstream_connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection("127.0.0.1", self.proxy.upstream_port, timeout=UPSTREAM_TIMEOUT)
            self._local.conn = conn
        return conn

    def drop_upstream_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


class _Server(UpstreamPerThread, socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # A connection beyond the listen backlog has its SYN dropped, and the client retries a
    # second later; socketserver's default backlog of 5 did that to a client opening many
    # connections at once. An object store accepts them.
    request_queue_size = 128

    def __init__(self, addr, proxy: "LatencyProxy"):
        super().__init__(addr, _Handler)
        self.proxy = proxy
        self._local = threading.local()

    def handle_error(self, request, client_address) -> None:
        # A client that does not trust the certificate hangs up in the handshake: that is
        # the client's answer, not the proxy's failure.
        if not isinstance(sys.exc_info()[1], ssl.SSLError):
            super().handle_error(request, client_address)



class ServedOnAThread:
    """A socketserver (`self._server`) served on a thread of its own, named `thread_name`:
    start(), stop(), and a context manager that does both."""

    thread_name = "server"
    _server: socketserver.BaseServer
    _thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self):
        self._thread = threading.Thread(target=self._server.serve_forever, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(10)
            self._thread = None
        self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class LatencyProxy(ServedOnAThread):
    """The proxy on 127.0.0.1:port (a free port unless given), forwarding to the S3 server
    on 127.0.0.1:upstream_port after holding each request delay_ms. Always stop() it (it is
    also a context manager)."""

    thread_name = "latency_proxy"

    def __init__(self, upstream_port: int, delay_ms: float = 0, port: int = 0, tls: ssl.SSLContext | None = None):
        self.upstream_port = upstream_port
        self.delay_s = delay_ms / 1000.0
        self.tls = tls
        self._lock = threading.Lock()
        self._requests: list[tuple[str, str]] = []
        # [sent, answered] of each request (time.monotonic()), answered None until it is.
        self._spans: list[list] = []
        self._bytes = 0
        self._server = _Server(("127.0.0.1", port), self)

    def set_delay(self, delay_ms: float) -> None:
        self.delay_s = delay_ms / 1000.0

    # -- the record --------------------------------------------------------------------

    def _record(self, method: str, target: str) -> list:
        """Records a request; its span, whose end the handler sets once it has answered."""
        span = [time.monotonic(), None]
        with self._lock:
            self._requests.append((method, target))
            self._spans.append(span)
        return span

    def _count_bytes(self, n: int) -> None:
        with self._lock:
            self._bytes += n

    def reset(self) -> None:
        """Forget the requests seen so far."""
        with self._lock:
            self._requests.clear()
            self._spans = []
            self._bytes = 0

    def bytes_answered(self) -> int:
        """The bytes of the answers' bodies since the last reset."""
        with self._lock:
            return self._bytes

    def tile_reads(self) -> int:
        """GETs since the last reset of a fragment's files other than its metadata: reads
        of tiles."""
        return sum(
            1
            for m, t in self.requests()
            if m == "GET" and "/__fragments/" in key_of(t) and not key_of(t).endswith("/__fragment_metadata.tdb")
        )

    def rounds(self) -> int:
        """Round trips since the last reset: the longest chain of requests each sent after
        the one before it was answered (requests sent together are one round)."""
        with self._lock:
            spans = sorted((start, end if end is not None else float("inf")) for start, end in self._spans)
        depth: list[int] = []
        for i, (start, _end) in enumerate(spans):
            depth.append(1 + max((depth[j] for j in range(i) if spans[j][1] <= start), default=0))
        return max(depth, default=0)

    def requests(self) -> list[tuple[str, str]]:
        """(method, target) of each request since the last reset, in arrival order."""
        with self._lock:
            return list(self._requests)

    def count(self, prefix: str | None = None) -> int:
        """Requests since the last reset; with prefix, those whose path (after the bucket)
        or listing prefix starts with it."""
        if prefix is None:
            with self._lock:
                return len(self._requests)
        return sum(1 for m, t in self.requests() if key_of(t).startswith(prefix))

    def summary(self) -> dict[str, int]:
        """Requests since the last reset by kind (LIST, GET, HEAD, ...)."""
        return dict(collections.Counter(kind_of(m, t) for m, t in self.requests()))


def tls_server_context(directory) -> tuple[str, ssl.SSLContext]:
    """A certificate authority made for the test and a server certificate it signs for
    127.0.0.1 and localhost, written under `directory`: (the CA's PEM file, a server
    context presenting that certificate)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    valid = (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=1))

    def certificate(subject: str, key, issuer: str, issuer_key, ca: bool):
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid[0])
            .not_valid_after(valid[1])
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ca:
            builder = builder.add_extension(
                x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                              content_commitment=False, key_encipherment=False, data_encipherment=False,
                              key_agreement=False, encipher_only=False, decipher_only=False),
                critical=True,
            )
        else:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.DNSName("localhost"),
                ]),
                critical=False,
            ).add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = certificate("soma-mount test CA", ca_key, "soma-mount test CA", ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = certificate("localhost", server_key, "soma-mount test CA", ca_key, ca=False)
    pem = serialization.Encoding.PEM
    ca_file = f"{directory}/test-ca.pem"
    chain_file = f"{directory}/server.pem"
    key_file = f"{directory}/server-key.pem"
    with open(ca_file, "wb") as f:
        f.write(ca.public_bytes(pem))
    with open(chain_file, "wb") as f:
        f.write(server.public_bytes(pem))
    with open(key_file, "wb") as f:
        f.write(server_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain_file, key_file)
    return ca_file, context


def key_of(target: str) -> str:
    """The object key a request names (for a listing, its prefix), without the bucket."""
    parsed = urllib.parse.urlsplit(target)
    parts = parsed.path.lstrip("/").split("/", 1)
    if len(parts) == 2 and parts[1]:
        return urllib.parse.unquote(parts[1])
    query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
    return query.get("prefix", [""])[0]


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    proxy = LatencyProxy(int(argv[1]), float(argv[2]), int(argv[3]) if len(argv) == 4 else 0)
    print(f"proxy on {proxy.endpoint} -> 127.0.0.1:{proxy.upstream_port}, {argv[2]} ms", flush=True)
    try:
        proxy._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        print(proxy.summary())
        proxy._server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
