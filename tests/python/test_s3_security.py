"""The daemon's S3 front against a server that verifies every signature, and as another local
process would attack it (docs/REFERENCE.md "The S3 front"; docs/SEMANTICS.md "Security").

Every mount here is of an `s3://` URI without `--s3-direct`, so libtiledb's requests go
through the front, which signs them again with the user's keys; the store is s3s-fs
(harness/s3sfs_server.py), which refuses any request whose SigV4 signature is not right. Expectations come
from tiledbsoma reading the same S3 URIs (test_remote.py's comparisons) and from the contract
of the issue:

1. Content: every object of a store (its metadata.json, schema.json, data.csv and
   data.parquet) reads as tiledbsoma reads it; keys with spaces, unicode, `+`, `%` and `=`
   in their names; path-style and virtual-hosted addressing (names in /etc/hosts made by
   the test), an endpoint with its scheme; an array whose listings span more than one page
   of 1,000 keys.
2. Faults between the front and the store (harness/fault_proxy.py): 503 ServiceUnavailable and
   SlowDown are retried, a ranged answer cut short is read again: files are whole.
3. As another process: requests not signed with the front's own key are refused (403),
   writes too, and a declared body is not read; group members naming another bucket or
   host send nothing there; 1,500 idle connections and 200 half-sent requests leave the
   front serving within seconds, on a bounded number of threads, and the half-sent ones are
   dropped after the 10 s head timeout; beyond 4,096 connections the oldest idle ones are
   dropped; libtiledb's debug log holds no key of the user's, and what the daemon writes is
   private (umask 077).

Run: .venv/bin/python -m pytest tests/python/test_s3_security.py -q
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import hashlib
import os
import re
import socket
import stat
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from harness import tree_reference
import test_tree as tt
from harness.mount import mount_guard, wait_until
from harness.settings import within
from harness.fault_proxy import ConnectionTrap, FaultProxy, Seen
from harness.moto_server import REGION, config_args, soma_context
from harness.s3sfs_server import ACCESS_KEY, SECRET_KEY, S3sFsServer, local_files, s3s_fs_binary
from harness import formats
from test_remote import S3_DIRECT, check_soma_object, run_bounded

import tiledbsoma

BUCKET = "somabucket"
STORE = "pbmc"
# a prefix with a space, '+', '%', '=' and a non-ASCII letter
ODD_PREFIX = "odd key +%=é"
FRONT_LISTENING = re.compile(r"s3 front: listening on 127\.0\.0\.1:(\d+)")
FRONT_CREDENTIALS = re.compile(r"s3 front: credentials from (.+?)\s*$", re.M)


# --------------------------------------------------------------------------------------
# helpers (test_s3_credentials.py uses them too)


def require_s3s_fs() -> None:
    """Skip, loudly, when s3s-fs is not installed (scripts/setup installs it; CI has it)."""
    if s3s_fs_binary() is None:
        msg = ("S3s-FS IS NOT INSTALLED: the S3 front's tests against a signature-verifying "
               "server did NOT run (scripts/setup installs it: cargo install s3s-fs --version 0.14.1 "
               "--features binary --locked)")
        print(f"\n*** {msg} ***", file=sys.stderr)
        pytest.skip(msg)


def isolate_aws(monkeypatch, home: Path) -> None:
    """This process's environment (which the daemons it starts inherit) without any AWS_*
    variable of the user's, HOME a directory of the test's (no ~/.aws of the machine's),
    shared config and credentials files that do not exist, and instance metadata off, so
    that no SDK probes 169.254.169.254."""
    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    home.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(home / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(home / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def front_mount(server: S3sFsServer, path: str, *extra: str, tiledb: dict | None = None, bucket: str = BUCKET,
                **guard):
    """A mount (mount_guard) of s3://bucket/path served by `server` through the front, with
    -v (so the front logs its port and where its keys came from) and the server's libtiledb
    settings, `tiledb`'s on top (a value of None drops a setting)."""
    cfg = config_args(server.tiledb_config(**(tiledb or {})))
    return mount_guard(f"s3://{bucket}/{path}", "-v", *cfg, *extra, **guard)


def daemon_log(mp, log_file: Path | None = None) -> str:
    """What the daemon of the mount mp logged: its output, or its --log-file if given."""
    try:
        return Path(log_file or mp.log).read_text(errors="replace")
    except FileNotFoundError:
        return ""


def front_port(mp, log_file: Path | None = None) -> int:
    """The front's port, from the daemon's log line `s3 front: listening on 127.0.0.1:PORT`."""
    found = None

    def logged():
        nonlocal found
        found = FRONT_LISTENING.search(daemon_log(mp, log_file))
        return found is not None

    assert wait_until(logged, 5), (
        f"no 's3 front: listening on 127.0.0.1:PORT' in the log:\n{daemon_log(mp, log_file)[-3000:]}")
    return int(found.group(1))


def front_credentials_source(mp, log_file: Path | None = None) -> str:
    """SOURCE of the daemon's first log line `s3 front: credentials from SOURCE` (the one
    it logs when it starts; later ones may say that they were fetched again)."""
    found = FRONT_CREDENTIALS.findall(daemon_log(mp, log_file))
    assert found, f"no 's3 front: credentials from ...' in the log:\n{daemon_log(mp, log_file)[-3000:]}"
    return found[0]


def compare_arrays(mp, server: S3sFsServer, fixtures_dir: Path, uri: str, rels, store: str = STORE,
                   cfg: dict | None = None) -> list[str]:
    """metadata.json, schema.json, data.csv and data.parquet of each object `rel` under the
    mount `mp` of `uri`, against tiledbsoma reading `uri`/rel from the server (with `cfg`,
    else the server's settings). metadata.json is the local reference's (tree_reference corrects
    tiledbsoma's misreads), as in test_remote.test_s3_matches_tiledbsoma_reading_s3."""
    ctx = soma_context(cfg or server.tiledb_config())
    nodes = {n.relpath: n for n in tree_reference.walk_store(fixtures_dir, store)}
    problems: list[str] = []
    for rel in rels:
        node = nodes[tuple(Path(rel).parts)]
        with tiledbsoma.open(f"{uri}/{rel}".rstrip("/"), context=ctx) as obj:
            check_soma_object(Path(mp) / rel, f"{store}/{rel}", obj, problems,
                              expected_md=tree_reference.expected_metadata(node))
    return problems


@contextlib.contextmanager
def etc_hosts(names: dict[str, str]):
    """/etc/hosts with a line `ADDRESS NAME` for each of `names` (name -> address) for the
    block; the file is then written back exactly as it was (in place: it may be a mount)."""
    path = Path("/etc/hosts")
    before = path.read_bytes()
    lines = "".join(f"{addr} {name}\n" for name, addr in names.items())
    try:
        with open(path, "r+b") as f:
            f.seek(0, os.SEEK_END)
            if before and not before.endswith(b"\n"):
                f.write(b"\n")
            f.write(f"# soma-mount test_s3_security (pid {os.getpid()})\n{lines}".encode())
        yield
    finally:
        with open(path, "r+b") as f:
            f.write(before)
            f.truncate(len(before))
        assert path.read_bytes() == before


def raw_request(port: int, head: str, timeout: float = 10.0, body: bytes = b"") -> tuple[int, bytes]:
    """Send `head` (the request line and headers, without the blank line) to 127.0.0.1:port
    on a new connection; (status, the answer's body as far as it came)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head.encode() + b"\r\n\r\n" + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        status_line, _, rest = data.partition(b"\r\n")
        headers, _, got = rest.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length:\s*(\d+)", headers)
        s.settimeout(2)
        with contextlib.suppress(OSError):
            while length and len(got) < int(length.group(1)):
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
    parts = status_line.split()
    assert len(parts) >= 2 and parts[1].isdigit(), f"no HTTP answer: {data[:300]!r}"
    return int(parts[1]), got


def amz_date() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def signed_headers(method: str, url: str, access_key: str, secret_key: str) -> dict[str, str]:
    """The headers of a request signed (SigV4, botocore) with the given keys."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    req = AWSRequest(method=method, url=url)
    S3SigV4Auth(Credentials(access_key, secret_key), "s3", REGION).add_auth(req)
    return dict(req.headers.items())


# --------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(autouse=True)
def no_aws_of_the_users(monkeypatch, tmp_path):
    isolate_aws(monkeypatch, tmp_path / "home")


@pytest.fixture(scope="module")
def store_server(fixtures_dir, tmp_path_factory):
    """s3s-fs holding the fixture store at s3://somabucket/pbmc and again under the odd
    prefix, checked to be served key for key."""
    require_s3s_fs()
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")  # this process's libtiledb
    server = S3sFsServer(tmp_path_factory.mktemp("s3s-fs-root"))
    try:
        server.start()
        want = local_files(fixtures_dir / STORE)
        for prefix in (STORE, f"{ODD_PREFIX}/{STORE}"):
            server.put_tree(fixtures_dir / STORE, BUCKET, prefix)
            served = server.keys(BUCKET, prefix + "/")
            assert sorted(k[len(prefix) + 1:] for k in served) == want, f"s3s-fs does not serve {prefix} as copied"
        yield server
    finally:
        server.close()


# --------------------------------------------------------------------------------------
# 1. content through the front, every request's signature verified


@pytest.mark.timeout(300)
def test_every_object_of_a_store_reads_as_tiledbsoma_reads_it(store_server, fixtures_dir):
    """pbmc through the front: every directory lists exactly its members (test_tree's
    check), and for every object of the store (35 groups and arrays) metadata.json,
    schema.json, data.csv and data.parquet are what tiledbsoma reads from
    s3://somabucket/pbmc on the same server."""
    with front_mount(store_server, STORE) as mp:
        front_port(mp)
        assert front_credentials_source(mp) == "--config"
        tt.test_group_directories_list_exactly_their_members(STORE, fixtures_dir, lambda store: mp)
        every_object = ["/".join(n.relpath) for n in tree_reference.walk_store(fixtures_dir, STORE) if n.kind != "broken"]
        assert len(every_object) > 30 and "ms/RNA/X/data" in every_object, every_object
        problems = compare_arrays(mp, store_server, fixtures_dir, f"s3://{BUCKET}/{STORE}", every_object)
        assert mp.proc.poll() is None
    formats.fail_if(problems, f"differences from tiledbsoma reading s3://{BUCKET}/{STORE} through a verifying server")


@pytest.mark.timeout(180)
def test_keys_with_spaces_unicode_plus_percent_and_equals(store_server, fixtures_dir):
    """The store under a prefix with a space, '+', '%', '=' and 'é' in it: each request is
    signed over the key's exact encoding, and the files are tiledbsoma's."""
    uri = f"s3://{BUCKET}/{ODD_PREFIX}/{STORE}"
    with front_mount(store_server, f"{ODD_PREFIX}/{STORE}") as mp:
        front_port(mp)
        assert {"obs", "ms", "metadata.json"} <= set(os.listdir(mp))
        problems = compare_arrays(mp, store_server, fixtures_dir, uri, [""] + S3_DIRECT[STORE])
    formats.fail_if(problems, f"differences from tiledbsoma reading {uri!r}")


@pytest.mark.timeout(180)
def test_virtual_hosted_addressing(store_server, fixtures_dir):
    """vfs.s3.use_virtual_addressing=true with an endpoint named in /etc/hosts: the front
    sends every request to BUCKET.s3.test (which s3s-fs, given that domain, reads the bucket
    from). The bare s3.test names a listener that must see nothing, so no request went
    path-style."""
    with S3sFsServer(store_server.root, domain="s3.test") as vhost, ConnectionTrap("127.0.0.2", vhost.port) as trap, \
            etc_hosts({f"{BUCKET}.s3.test": "127.0.0.1", "s3.test": "127.0.0.2"}):
        assert vhost.keys(BUCKET, f"{STORE}/obs/"), "the virtual-hosted server lists nothing"
        cfg = vhost.tiledb_config()
        assert cfg["vfs.s3.use_virtual_addressing"] == "true" and cfg["vfs.s3.endpoint_override"].startswith("s3.test:")
        with front_mount(vhost, STORE) as mp:
            front_port(mp)
            problems = compare_arrays(mp, vhost, fixtures_dir, f"s3://{BUCKET}/{STORE}", S3_DIRECT[STORE])
        assert not trap.connections, f"requests went path-style to s3.test: {trap.connections[:3]}"
    formats.fail_if(problems, "differences from tiledbsoma over virtual-hosted addressing")


@pytest.mark.timeout(180)
def test_path_style_with_a_scheme_in_the_endpoint(store_server, fixtures_dir):
    """vfs.s3.endpoint_override may carry its scheme (http://127.0.0.1:PORT)."""
    with front_mount(store_server, STORE, tiledb={"vfs.s3.endpoint_override": store_server.url}) as mp:
        front_port(mp)
        problems = compare_arrays(mp, store_server, fixtures_dir, f"s3://{BUCKET}/{STORE}", ["obs"])
    formats.fail_if(problems, f"differences with vfs.s3.endpoint_override={store_server.url}")


PAGED_BUCKET = "pagedbucket"
FRAGMENTS = 1050  # five objects each: __commits/ alone holds more than a page of 1,000 keys
PAGED_SCHEMA = pa.schema([("soma_joinid", pa.int64()), ("value", pa.int32())])


@pytest.mark.timeout(300)
def test_listings_longer_than_a_page(store_server, tmp_path):
    """A data frame written in 1,050 fragments, then consolidated into one (the old ones
    kept, as until a vacuum): 5,000 keys under the array, and libtiledb's own listings of
    its __commits/ and __fragments/ more than 1,000 entries each. Every listing spans pages
    of 1,000 keys and the front follows them (continuation tokens reach the server):
    data.csv holds every row, as tiledbsoma reads it, and schema.json counts every cell."""
    import tiledb

    local = tmp_path / "paged"
    with tiledbsoma.Collection.create(str(local)) as coll:
        coll.add_new_dataframe("df", schema=PAGED_SCHEMA, index_column_names=["soma_joinid"], domain=[[0, 99_999]])
    with tiledb.open(str(local / "df"), "w") as array:  # tiledb-py writes a fragment faster
        for i in range(FRAGMENTS):
            rows = np.array([2 * i, 2 * i + 1], dtype=np.int64)
            array[rows] = {"value": (rows * 7).astype(np.int32)}
    tiledb.consolidate(str(local / "df"), config=tiledb.Config({"sm.consolidation.mode": "fragments"}))
    n = store_server.put_tree(local, PAGED_BUCKET, "paged")
    assert n > 5 * FRAGMENTS and len(store_server.keys(PAGED_BUCKET, "paged/df/__commits/")) > FRAGMENTS
    uri = f"s3://{PAGED_BUCKET}/paged"
    with FaultProxy(store_server.port) as proxy:
        with front_mount(store_server, "paged", bucket=PAGED_BUCKET,
                         tiledb={"vfs.s3.endpoint_override": proxy.endpoint}) as mp:
            front_port(mp)
            text = (Path(mp) / "df" / "data.csv").read_text()
            schema = tt.read_json(Path(mp) / "df" / "schema.json")
        continued = [s.target for s in proxy.seen() if "continuation-token" in s.target]
    with tiledbsoma.open(f"{uri}/df", context=soma_context(store_server.tiledb_config())) as df:
        want = df.read().concat().to_pydict()
    assert len(want["soma_joinid"]) == 2 * FRAGMENTS
    lines = text.splitlines()
    assert lines[0].split(",")[:2] == ["soma_joinid", "value"], lines[0]
    got = [tuple(int(x) for x in line.split(",")[:2]) for line in lines[1:]]
    assert got == list(zip(want["soma_joinid"], want["value"])), (
        f"data.csv has {len(got)} rows, tiledbsoma reads {len(want['soma_joinid'])}")
    assert schema["cell_count"] == 2 * FRAGMENTS, schema.get("cell_count")
    assert continued, "no listing through the front asked the server for its next page"


# --------------------------------------------------------------------------------------
# 2. faults between the front and the store


def _tile_read_in(store_prefix: str):
    """Matches a ranged GET of a fragment's data file (a0.tdb, d0.tdb, ...; not its
    __fragment_metadata.tdb) under s3://somabucket/<store_prefix>/: tiles libtiledb asks for
    when a data file is generated, which the front passes on."""
    def match(request: Seen) -> bool:
        path = urllib.parse.unquote(urllib.parse.urlsplit(request.target).path)
        return (request.method == "GET" and request.ranged and path.startswith(f"/{BUCKET}/{store_prefix}/")
                and "/__fragments/" in path and not path.endswith("/__fragment_metadata.tdb"))
    return match


@pytest.mark.timeout(180)
def test_503_and_slowdown_are_retried(store_server, fixtures_dir):
    """The store answers 503 ServiceUnavailable twice, then 503 SlowDown twice, to the reads
    of tiles (passed on from libtiledb): each refused request is sent again and answered,
    and every file is tiledbsoma's."""
    with FaultProxy(store_server.port) as proxy:
        with front_mount(store_server, STORE, tiledb={"vfs.s3.endpoint_override": proxy.endpoint}) as mp:
            front_port(mp)
            unavailable = proxy.fail_next(2, "ServiceUnavailable", _tile_read_in(STORE))
            slow_down = proxy.fail_next(2, "SlowDown", _tile_read_in(STORE))
            problems = compare_arrays(mp, store_server, fixtures_dir, f"s3://{BUCKET}/{STORE}", S3_DIRECT[STORE])
            seen = proxy.seen()
    assert len(unavailable) == 2 and len(slow_down) == 2, (
        f"the faults did not all fire ({len(unavailable)} 503, {len(slow_down)} SlowDown): too few tile reads")
    at = {id(s): i for i, s in enumerate(seen)}
    answered = [s for s in seen if s.fault is None and s.status in (200, 206)]
    not_again = [f"{f.target} {f.headers.get('Range')}" for f in unavailable + slow_down
                 if not any(a.target == f.target and at[id(a)] > at[id(f)] for a in answered)]
    assert not not_again, f"requests refused with 503 never sent again: {not_again}"
    formats.fail_if(problems, "differences from tiledbsoma after 503s and SlowDowns")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", ["dropped", "shorter"])
def test_a_range_cut_short_is_read_again(how, store_server, fixtures_dir):
    """The answer to a read of tiles is cut short once ("dropped": the connection closes
    after half the bytes; "shorter": a well-formed 206 covering half the range asked): the
    files are whole, never short, and byte for byte tiledbsoma's."""
    with FaultProxy(store_server.port) as proxy:
        with front_mount(store_server, STORE, tiledb={"vfs.s3.endpoint_override": proxy.endpoint}) as mp:
            front_port(mp)
            os.listdir(mp)
            cut = proxy.cut_next_range(how, _tile_read_in(STORE))
            problems = compare_arrays(mp, store_server, fixtures_dir, f"s3://{BUCKET}/{STORE}", S3_DIRECT[STORE])
            assert mp.proc.poll() is None
    assert cut, "no read of tiles passed the proxy: nothing was cut"
    formats.fail_if(problems, f"differences from tiledbsoma after a range was cut short ({how})")


# --------------------------------------------------------------------------------------
# 3. the front as another local process sees it


@pytest.mark.timeout(180)
def test_front_refuses_what_its_own_key_did_not_sign(store_server, fixtures_dir):
    """Requests to the front's port that libtiledb did not sign with the daemon's own key:
    none (no Authorization), a made-up key id with a signature of 64 zeros, the user's real
    keys (the front's key is its own), a presigned-style query signature: 403 AccessDenied.
    A DELETE and a POST are refused the same way (the signature is checked before the
    method); a PUT with a body is refused (for its signature or for declaring a body) and
    writes nothing, and one declaring a 1 GB body is refused without the body being sent.
    The front listens on 127.0.0.1 only. The mount keeps serving."""
    key = f"{STORE}/obs/__schema"
    with front_mount(store_server, STORE) as mp:
        port = front_port(mp)
        host = f"127.0.0.1:{port}"
        date = amz_date()
        zeros = "0" * 64
        scope = f"{date[:8]}/{REGION}/s3/aws4_request"
        fake_auth = (f"AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/{scope}, "
                     f"SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={zeros}")
        empty_sha = hashlib.sha256(b"").hexdigest()
        base = f"Host: {host}\r\nx-amz-date: {date}\r\nx-amz-content-sha256: {empty_sha}"
        listing = f"/{BUCKET}?list-type=2&prefix={urllib.parse.quote(key, safe='')}"
        user_signed = signed_headers("GET", f"http://{host}{listing}", ACCESS_KEY, SECRET_KEY)
        attempts = {
            "no signature": f"GET {listing} HTTP/1.1\r\n{base}",
            "no signature, an object": f"GET /{BUCKET}/{STORE}/__tiledb_group.tdb HTTP/1.1\r\n{base}",
            "a made-up key, 64 zeros": f"GET {listing} HTTP/1.1\r\n{base}\r\nAuthorization: {fake_auth}",
            "the user's own keys": f"GET {listing} HTTP/1.1\r\nHost: {host}\r\n"
                                   + "\r\n".join(f"{k}: {v}" for k, v in user_signed.items() if k.lower() != "host"),
            "a query signature of zeros": (
                f"GET /{BUCKET}/{STORE}/__tiledb_group.tdb?X-Amz-Algorithm=AWS4-HMAC-SHA256"
                f"&X-Amz-Credential={urllib.parse.quote('AKIAIOSFODNN7EXAMPLE/' + scope, safe='')}"
                f"&X-Amz-Date={date}&X-Amz-Expires=600&X-Amz-SignedHeaders=host&X-Amz-Signature={zeros} HTTP/1.1\r\n"
                f"Host: {host}"),
            "a PUT, unsigned": f"PUT /{BUCKET}/{STORE}/planted HTTP/1.1\r\n{base}\r\nContent-Length: 5",
            "a PUT, 64 zeros": f"PUT /{BUCKET}/{STORE}/planted HTTP/1.1\r\n{base}\r\nAuthorization: {fake_auth}\r\nContent-Length: 5",
            "a DELETE, unsigned": f"DELETE /{BUCKET}/{STORE}/__tiledb_group.tdb HTTP/1.1\r\n{base}",
            "a POST, 64 zeros": f"POST /{BUCKET}?delete HTTP/1.1\r\n{base}\r\nAuthorization: {fake_auth}\r\nContent-Length: 0",
        }
        problems = []
        for what, head in attempts.items():
            if "Content-Length: 5" in head:
                # A request declaring a body is refused, whether for its signature or its body.
                status, answer = raw_request(port, head, body=b"12345")
                if status not in (400, 403, 405, 411, 413):
                    problems.append(f"{what}: {status} {answer[:200]!r} (expected it refused)")
                continue
            status, answer = raw_request(port, head)
            if status != 403 or b"AccessDenied" not in answer:
                problems.append(f"{what}: {status} {answer[:200]!r} (expected 403 AccessDenied)")
        # A declared body is not read: the answer comes with the body never sent.
        with socket.create_connection(("127.0.0.1", port), timeout=within(2) + 1) as s:
            s.sendall(f"PUT /{BUCKET}/{STORE}/planted HTTP/1.1\r\n{base}\r\nContent-Length: 1000000000\r\n\r\n".encode())
            t0 = time.monotonic()
            try:
                first = s.recv(4096)
            except TimeoutError:
                first = b"<no answer: waiting for the body?>"
            secs = time.monotonic() - t0
        if not re.match(rb"HTTP/1\.[01] 4\d\d ", first) or secs > within(2):
            problems.append(f"a PUT declaring 1 GB: {first[:100]!r} after {secs:.1f} s (expected it refused at once)")
        # Listening on 127.0.0.1 alone, not on every address (127.0.0.2 stands for the others).
        with socket.socket() as s:
            s.settimeout(2)
            if s.connect_ex(("127.0.0.2", port)) == 0:
                problems.append(f"the front also listens on 127.0.0.2:{port} (all addresses?)")
        planted = [p for p in store_server.root.rglob("planted*")]
        if planted:
            problems.append(f"objects were written to the store: {planted}")
        if not (store_server.root / BUCKET / STORE / "__tiledb_group.tdb").is_file():
            problems.append("__tiledb_group.tdb was deleted from the store")
        assert mp.proc.poll() is None, "the daemon exited"
        problems += compare_arrays(mp, store_server, fixtures_dir, f"s3://{BUCKET}/{STORE}", ["obs"])
    formats.fail_if(problems, "the front answered requests it did not sign")


ESCAPE_SCHEMA = pa.schema([("soma_joinid", pa.int64()), ("label", pa.large_string())])


def _escape_store(local: Path, members: dict[str, str]) -> None:
    """A collection with a data frame member "good" (relative) and, for each of `members`
    (name -> absolute URI), a member recorded as an array at that URI."""
    import tiledb

    with tiledbsoma.Collection.create(str(local)) as coll:
        with coll.add_new_dataframe("good", schema=ESCAPE_SCHEMA, domain=[[0, 9]]) as df:
            df.write(pa.table({"soma_joinid": np.arange(3, dtype=np.int64), "label": ["a", "b", "c"]},
                              schema=ESCAPE_SCHEMA))
    # Recorded with their type, libtiledb does not look at them; were it to, this context
    # sends S3 requests to a closed port on 127.0.0.1.
    nowhere = tiledb.Ctx({"vfs.s3.endpoint_override": "127.0.0.1:9", "vfs.s3.scheme": "http",
                          "vfs.s3.region": REGION, "vfs.s3.connect_max_tries": "1"})
    with tiledb.Group(str(local), "w", ctx=nowhere) as g:
        for name, uri in members.items():
            g.add(uri, name=name, relative=False, type=tiledb.Array)


def _member_shows_an_error(path: Path) -> str | None:
    """None if the member at path is an error (a directory of just error.txt, saying why,
    or EIO), else what it shows."""
    def look():
        names = os.listdir(path)
        if names != ["error.txt"]:
            return f"lists {names}"
        return None if (path / "error.txt").read_text().strip() else "error.txt is empty"
    value, error, secs = run_bounded(look, within(20))
    if value == "HUNG":
        return "hung"
    if error is not None:
        return None if isinstance(error, OSError) and error.errno == errno.EIO else f"{type(error).__name__}: {error}"
    return value


@pytest.mark.timeout(240)
@pytest.mark.parametrize("addressing", ["path", "virtual"])
def test_members_naming_another_bucket_or_host_send_nothing_there(addressing, store_server, tmp_path):
    """A group in the mounted bucket records members at absolute URIs elsewhere: another
    bucket of the same server (holding a real data frame), and bucket names crafted to make
    a host of their own in a URL (`evil%2Etest#`, `evil.test#`, `127.0.0.2:PORT#`). Each shows
    as an error; no request for another bucket reaches the server (path-style, counted by a
    proxy before it), and no connection reaches the hosts those names would make
    (virtual-hosted: the names resolve, through /etc/hosts, to listeners standing for them).
    The relative member reads."""
    other = tmp_path / "other"
    with tiledbsoma.DataFrame.create(str(other), schema=ESCAPE_SCHEMA, domain=[[0, 9]]) as df:
        df.write(pa.table({"soma_joinid": np.arange(2, dtype=np.int64), "label": ["secret", "data"]},
                          schema=ESCAPE_SCHEMA))
    store_server.put_tree(other, "otherbucket", "x")
    assert store_server.keys("otherbucket", "x/")
    with contextlib.ExitStack() as stack:
        if addressing == "virtual":
            server = stack.enter_context(S3sFsServer(store_server.root, domain="s3.test"))
            traps = [stack.enter_context(ConnectionTrap("127.0.0.2", server.port)),
                     stack.enter_context(ConnectionTrap("127.0.0.2", 80))]
            stack.enter_context(etc_hosts({f"{BUCKET}.s3.test": "127.0.0.1", "s3.test": "127.0.0.2",
                                           "otherbucket.s3.test": "127.0.0.2", "evil.test": "127.0.0.2"}))
            endpoint = server.endpoint
            proxy = None
        else:
            server = store_server
            traps = [stack.enter_context(ConnectionTrap("127.0.0.2", server.port)),
                     stack.enter_context(ConnectionTrap("127.0.0.2", 80))]
            proxy = stack.enter_context(FaultProxy(server.port))
            endpoint = proxy.endpoint
        members = {
            "other_bucket": "s3://otherbucket/x",
            "escaped_dot_host": "s3://evil%2Etest#/x",
            "dotted_host": "s3://evil.test#/x",
            "address_host": f"s3://127.0.0.2:{server.port}#/x",
        }
        local = tmp_path / "escape"
        _escape_store(local, members)
        store = f"escape-{addressing}"
        store_server.put_tree(local, BUCKET, store)
        problems = []
        with front_mount(server, store, tiledb={"vfs.s3.endpoint_override": endpoint}) as mp:
            front_port(mp)
            names = set(os.listdir(mp))
            if not set(members) | {"good"} <= names:
                problems.append(f"the root lists {sorted(names)}")
            for name in members:
                shown = _member_shows_an_error(Path(mp) / name)
                if shown is not None:
                    problems.append(f"{name} ({members[name]}) is not an error: {shown}")
            good = (Path(mp) / "good" / "data.csv").read_text().splitlines()
            if good[1:] != ["0,a", "1,b", "2,c"]:
                problems.append(f"good/data.csv is {good}")
            assert mp.proc.poll() is None, "the daemon exited"
        for trap in traps:
            if trap.connections:
                problems.append(f"{len(trap.connections)} connection(s) to {trap.host}:{trap.port}: "
                                f"{trap.connections[0][1][:200]!r}")
        if proxy is not None:
            elsewhere = [s.target for s in proxy.seen()
                         if urllib.parse.unquote(urllib.parse.urlsplit(s.target).path).split("/")[1] != BUCKET]
            if elsewhere:
                problems.append(f"requests for other buckets reached the server: {elsewhere[:5]}")
    formats.fail_if(problems, f"members naming another bucket or host ({addressing}-style)")


IDLE_CONNECTIONS = 1500
HALF_SENT_REQUESTS = 200
HEAD_TIMEOUT = 10.0  # the contract: a request head must arrive within 10 s
MAX_THREADS = 200


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@pytest.mark.timeout(240)
def test_a_flood_of_connections_leaves_the_front_serving(store_server, fixtures_dir):
    """1,500 idle connections and 200 requests whose head never ends, held at once against
    the front: a file never read before reads within seconds and is tiledbsoma's, the
    daemon's threads stay under 200, and the half-sent requests are dropped once the 10 s
    head timeout has passed."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = IDLE_CONNECTIONS + HALF_SENT_REQUESTS + 512
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    held: list[socket.socket] = []
    half_sent: list[socket.socket] = []
    try:
        with front_mount(store_server, STORE) as mp:
            port = front_port(mp)
            pid = mp.proc.pid
            os.listdir(mp)
            before = _threads(pid)
            most = [before]
            sampling = threading.Event()

            def sample():
                while not sampling.is_set():
                    with contextlib.suppress(OSError):
                        most.append(_threads(pid))
                    time.sleep(0.05)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            try:
                for _ in range(IDLE_CONNECTIONS):
                    held.append(socket.create_connection(("127.0.0.1", port), timeout=10))
                head = (f"GET /{BUCKET}/{STORE}/obs/__schema/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                        f"x-amz-date: {amz_date()}\r\nx-amz-content-sha256: ")
                for _ in range(HALF_SENT_REQUESTS):
                    s = socket.create_connection(("127.0.0.1", port), timeout=10)
                    s.sendall(head.encode())
                    half_sent.append(s)
                sent_at = time.monotonic()
                data = Path(mp) / "ms" / "RNA" / "var" / "data.csv"
                value, error, secs = run_bounded(lambda: len(data.read_bytes()), within(10) + 5)
                assert value != "HUNG" and error is None, f"reading var/data.csv under the flood: {value} {error}"
                assert secs < within(5), f"var/data.csv took {secs:.1f} s to read under the flood"
                problems = compare_arrays(mp, store_server, fixtures_dir, f"s3://{BUCKET}/{STORE}", ["ms/RNA/var"])

                def all_dropped():  # an answer (a 408?) may come first; the close must follow
                    return sum(not _closed(s) for s in half_sent) == 0

                dropped = wait_until(all_dropped, max(0.0, sent_at + HEAD_TIMEOUT + within(2) - time.monotonic()), 0.5)
                still_open = sum(not _closed(s) for s in half_sent)
            finally:
                sampling.set()
                sampler.join(5)
            assert mp.proc.poll() is None, "the daemon exited under the flood"
            print(f"\nthreads: {before} before the flood, at most {max(most)} during it; "
                  f"read var/data.csv in {secs:.2f} s")
            assert max(most) < MAX_THREADS, f"the daemon ran {max(most)} threads under the flood ({before} before)"
            assert dropped, (f"{still_open} of {HALF_SENT_REQUESTS} half-sent requests still open "
                             f"{HEAD_TIMEOUT + within(2):.0f} s after they were sent")
    finally:
        for s in held + half_sent:
            s.close()
    formats.fail_if(problems, "differences from tiledbsoma under the flood")


CONNECTION_CAP = 4096  # the contract: at most 4096 connections held, the oldest idle dropped
BEYOND_THE_CAP = 300


@pytest.mark.timeout(180)
def test_connections_beyond_the_cap_drop_the_oldest_idle_ones(store_server, fixtures_dir):
    """4,396 idle connections opened one after another: the front holds at most 4,096, so
    it drops the oldest idle ones (the first 100 opened are closed by it, the last 100 are
    not), and a file never read before still reads, as tiledbsoma reads it."""
    import resource

    total = CONNECTION_CAP + BEYOND_THE_CAP
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < total + 512:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(total + 512, hard), hard))
    held: list[socket.socket] = []
    try:
        with front_mount(store_server, STORE) as mp:
            port = front_port(mp)
            os.listdir(mp)
            for _ in range(total):
                held.append(socket.create_connection(("127.0.0.1", port), timeout=10))
            oldest, newest = held[:100], held[-100:]
            wait_until(lambda: all(_closed(s) for s in oldest), within(2))
            oldest_closed = sum(_closed(s) for s in oldest)
            newest_closed = sum(_closed(s) for s in newest)
            value, error, secs = run_bounded(lambda: len((Path(mp) / "obs" / "data.csv").read_bytes()), within(10) + 5)
            assert value != "HUNG" and error is None, f"reading obs/data.csv with {total} connections open: {value} {error}"
            problems = compare_arrays(mp, store_server, fixtures_dir, f"s3://{BUCKET}/{STORE}", ["obs"])
            assert mp.proc.poll() is None, "the daemon exited"
    finally:
        for s in held:
            s.close()
    assert oldest_closed == 100, f"{oldest_closed} of the 100 oldest of {total} idle connections were dropped"
    assert newest_closed == 0, f"{newest_closed} of the 100 newest of {total} idle connections were dropped"
    assert secs < within(5), f"obs/data.csv took {secs:.1f} s with {total} connections open"
    formats.fail_if(problems, f"differences from tiledbsoma with {total} connections open")


def _closed(s: socket.socket) -> bool:
    """Whether the peer closed s (what it sent before is read and dropped)."""
    s.setblocking(False)
    try:
        while True:
            got = s.recv(4096)
            if not got:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


@pytest.fixture
def usual_umask():
    """The daemon started with the user's usual umask, 022 (restored afterwards): what is
    private is then the daemon's doing."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("keys_in", ["--config", "environment"])
def test_debug_logs_hold_no_key_and_what_the_daemon_writes_is_private(keys_in, store_server, fixtures_dir, tmp_path,
                                                                       monkeypatch, usual_umask):
    """--config vfs.s3.logging_level=debug, the daemon started in a directory of its own
    with its --log-file there, the user's keys in --config or in AWS_ACCESS_KEY_ID and
    AWS_SECRET_ACCESS_KEY: libtiledb's AWS log (tiledb_s3_*.log) is written there; no file
    under that directory or the cache directory, nor the daemon's own output, holds the
    user's key id or secret (libtiledb only knows the front's key), and everything the
    daemon wrote there is private (mode 0600 files, 0700 directories: the daemon runs with
    umask 077)."""
    tiledb = {}
    if keys_in == "environment":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        tiledb = {"vfs.s3.aws_access_key_id": None, "vfs.s3.aws_secret_access_key": None}
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    secrets_ = {"the access key id": ACCESS_KEY.encode(), "the secret": SECRET_KEY.encode(),
                "the secret, URL-encoded": urllib.parse.quote(SECRET_KEY, safe="").encode()}
    problems = []

    def scan(root: Path, what: str):
        for p in sorted(root.rglob("*")):
            if p.is_symlink():
                continue
            mode = stat.S_IMODE(p.lstat().st_mode)
            if mode & 0o077:
                problems.append(f"{what}: {p.relative_to(root)} has mode {mode:04o}")
            if p.is_file():
                data = p.read_bytes()
                for name, secret in secrets_.items():
                    if secret in data:
                        problems.append(f"{what}: {p.relative_to(root)} holds {name}")

    log_file = cwd / "soma-mount.log"
    with front_mount(store_server, STORE, "--config", "vfs.s3.logging_level=debug", "--log-file", log_file,
                     tiledb=tiledb) as mp:
        front_port(mp, log_file)
        assert front_credentials_source(mp, log_file) == keys_in
        problems += compare_arrays(mp, store_server, fixtures_dir, f"s3://{BUCKET}/{STORE}", ["obs"])
        scan(Path(mp.cache_dir), "the cache directory")
    aws_logs = sorted(cwd.glob("tiledb_s3_*.log"))
    assert aws_logs, f"libtiledb wrote no tiledb_s3_*.log in the daemon's directory: {os.listdir(cwd)}"
    assert any(p.stat().st_size > 0 for p in aws_logs), "libtiledb's AWS logs are empty"
    scan(cwd, "the daemon's directory")
    output = Path(mp.log).read_bytes()
    for name, secret in secrets_.items():
        if secret in output:
            problems.append(f"the daemon's output holds {name}")
    formats.fail_if(problems, "secrets or readable files left by a daemon logging at debug level")
