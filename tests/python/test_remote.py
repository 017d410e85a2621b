"""soma-mount over S3 and through time (docs/REFERENCE.md "Command line", "Errors"; docs/REFERENCE.md
"Stores in object storage", "Time travel").

1. Content over S3: the fixture stores are uploaded to a local S3-compatible server
   (moto's server mode, see harness/moto_server.py) and mounted as s3://bucket/<store> with
   --config; the listings, metadata.json, schema.json and data files must be what the
   local tests expect (the same checks as test_tree.py / test_data.py, against the
   local copy), and what tiledbsoma reads from the s3:// URI itself.
2. Faults: a dedicated server is killed (connections refused) or frozen (SIGSTOP:
   nothing answers) while a large data file streams. The read fails with EIO within
   the configured timeouts, the daemon keeps serving, paths looked at during the
   outage fail or show error.txt (never hang), and once the server is back the same
   mount serves again.
3. Time travel: a store written at T1 < T2 < T3 (rows, an overwrite, metadata changes,
   a member added) mounted with --timestamp (milliseconds and RFC 3339) equals
   tiledbsoma opened with tiledb_timestamp; a store appended to while mounted shows the
   change after --metadata-ttl and never serves a data file generated before it; arrays
   consolidated step by step (fragments, commits, fragment metadata, then vacuumed) show
   what tiledbsoma reads at every step.
4. Latencies over S3 (first look and cached), printed (run with -s to see them).

Run: .venv/bin/python -m pytest tests/python/test_remote.py -q
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from harness import data_reference
from harness import tree_reference
import test_data as td
import test_tree as tt
from harness.mount import is_mounted, mount_guard, wait_until
from harness.settings import within
from harness.data_reference import Ref, RefCol
from harness.latency_proxy import LatencyProxy, kind_of, tls_server_context
from harness.moto_server import S3Server, config_args, soma_context
from harness.tree_reference import json_equal, load_json_strict
from harness import formats

import tiledbsoma

BUCKET = "somabucket"
CONTENT_STORES = ["hand", "pbmc", "scene"]

# Low libtiledb S3 timeouts for the fault tests, and the bound every failing call
# must return within.
FAULT_CONFIG = {
    "vfs__s3__connect_timeout_ms": 1000,
    "vfs__s3__request_timeout_ms": 1000,
    "vfs__s3__connect_max_tries": 2,
}
FAIL_WITHIN = 30.0
RECOVER_WITHIN = 30.0


# --------------------------------------------------------------------------------------
# helpers


def run_bounded(fn, timeout: float):
    """Run fn() in a daemon thread: (value, exception, seconds); ("HUNG", None, timeout)
    if it did not return in time (the thread is left blocked in the kernel; the mount
    guard's cleanup kills the daemon, which releases it)."""
    box: dict = {}

    def target():
        t0 = time.monotonic()
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001
            box["error"] = e
        box["secs"] = time.monotonic() - t0

    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(timeout)
    if th.is_alive():
        return "HUNG", None, timeout
    return box.get("value"), box.get("error"), box["secs"]


def describe(value, error) -> str:
    if error is not None:
        if isinstance(error, OSError) and error.errno is not None:
            return f"{errno.errorcode.get(error.errno, error.errno)}"
        return f"{type(error).__name__}: {error}"
    return f"ok {value!r}"[:300]


def read_all(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def read_json_file(path):
    return load_json_strict(Path(path).read_bytes().decode("utf-8"))


def normalized_metadata(obj) -> dict:
    return {k: tree_reference.norm_value(v) for k, v in obj.metadata.items()}


def soma_ref(display: str, obj) -> Ref:
    """data_reference.Ref of an open tiledbsoma DataFrame or SparseNDArray (at whatever
    timestamp and context it was opened with)."""
    st = obj.soma_type
    schema = obj.schema
    if st == "SOMASparseNDArray":
        table = obj.read(result_order="row-major").tables().concat()
    elif st == "SOMADataFrame":
        table = obj.read(result_order="row-major").concat()
    else:
        raise TypeError(f"soma_ref: {st} not handled")
    table = table.select(schema.names)
    cols = [RefCol(f.name, f.type, f.nullable, data_reference.kind_of(f.type), data_reference.ts_unit(f.type), table) for f in schema]
    return Ref(display, st, table, schema, cols, None, False)


def stored_cells(uri: str, T: int | None, cfg: dict | None = None) -> int:
    """Cells stored in the fragments of the array at uri visible at T (None: all),
    counting a cell overwritten by a later fragment once per fragment."""
    import tiledb

    ctx = tiledb.Ctx(tiledb.Config(cfg)) if cfg else None
    n = 0
    for frag in tiledb.array_fragments(uri, ctx=ctx):
        if T is None or frag.timestamp_range[1] <= T:
            n += int(frag.cell_num)
    return n


def check_csv_and_parquet(ref: Ref, d: Path, probs: formats.Problems):
    """data.csv and data.parquet of array directory d against ref (test_data's checks)."""
    data = formats.read_data_file(d / "data.csv", probs)
    if data is not None:
        text = formats.decode_utf8(data, "data.csv", probs)
        if text is not None:
            formats.check_delimited(ref, text, "csv", probs)
    data = formats.read_data_file(d / "data.parquet", probs)
    if data is not None:
        try:
            t = data_reference.read_parquet_bytes(data)
        except Exception as e:  # noqa: BLE001
            probs.add(f"data.parquet unreadable: {type(e).__name__}: {e}")
        else:
            formats.check_parquet(ref, t, probs)


def check_soma_object(
    mp_dir: Path, display: str, obj, problems: list, also_cell_count: int | None = None, expected_md: dict | None = None
):
    """metadata.json (and for arrays schema.json, data.csv, data.parquet) of the
    directory showing obj, against obj as tiledbsoma opened it. also_cell_count: a
    second cell_count accepted in schema.json (the stored cells, overwritten ones
    included: see test_cell_count_after_an_overwrite). expected_md: the expected
    metadata.json, if not tiledbsoma's view of obj's metadata."""
    try:
        md = read_json_file(mp_dir / "metadata.json")
    except (OSError, ValueError) as e:
        problems.append(f"{display}/metadata.json: {e}")
    else:
        exp = normalized_metadata(obj) if expected_md is None else expected_md
        if not json_equal(md, exp):
            problems.append(f"{display}/metadata.json is {md}, expected {exp}")
    if obj.soma_type not in ("SOMADataFrame", "SOMASparseNDArray"):
        return
    try:
        sch = read_json_file(mp_dir / "schema.json")
    except (OSError, ValueError) as e:
        problems.append(f"{display}/schema.json: {e}")
    else:
        exp = tree_reference.expected_schema_of(obj, obj.soma_type == "SOMASparseNDArray" and obj.nnz == 0)
        if also_cell_count is not None and isinstance(sch, dict) and sch.get("cell_count") == also_cell_count:
            exp["cell_count"] = also_cell_count
        problems += tt._compare_schema(display, sch, exp)
    probs = formats.Problems(display)
    check_csv_and_parquet(soma_ref(display, obj), mp_dir, probs)
    problems += probs.done()


def stop_how(server: S3Server, how: str):
    if how == "killed":
        server.stop()
    else:
        server.pause()


def bring_back(server: S3Server, how: str, uploads: dict):
    """Restart a killed server on the same port with the same objects (moto keeps
    nothing), or thaw a frozen one."""
    if how == "killed":
        server.start()
        server.create_bucket(BUCKET)
        for prefix, local in uploads.items():
            server.upload_tree(local, BUCKET, prefix)
    else:
        server.resume()


# --------------------------------------------------------------------------------------
# 1. content over S3


@pytest.fixture(scope="module")
def s3(fixtures_dir):
    """A moto S3 server holding the content stores at s3://somabucket/<store>."""
    server = S3Server()
    try:
        server.start()
        server.create_bucket(BUCKET)
        for store in CONTENT_STORES:
            server.upload_tree(fixtures_dir / store, BUCKET, store)
        yield server
    finally:
        server.close()


def s3_mount(server: S3Server, store: str, *extra: str, tiledb: dict | None = None, **guard):
    """A mount (mount_guard) of s3://somabucket/<store> served by `server`, with `tiledb`'s
    settings on top of the server's (tiledb_config); `guard` goes to mount_guard."""
    cfg = config_args(server.tiledb_config(**(tiledb or {})))
    return mount_guard(f"s3://{BUCKET}/{store}", *cfg, *extra, **guard)


@pytest.fixture(scope="module")
def s3_mounted(s3, soma_mount_bin):
    """s3_mounted(store) -> path of a module-wide mount of s3://somabucket/<store>."""
    stack = contextlib.ExitStack()
    cache: dict = {}

    def get(store: str):
        if store not in cache:
            cache[store] = stack.enter_context(s3_mount(s3, store, label=f"s3 mount of {store}", session=True))
        p = cache[store]
        if p.proc.poll() is not None:
            pytest.fail(f"the daemon for s3://{BUCKET}/{store} has exited ({p.proc.returncode})")
        return p

    with stack:
        yield get


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", CONTENT_STORES)
def test_s3_listings(store, fixtures_dir, s3_mounted):
    tt.test_group_directories_list_exactly_their_members(store, fixtures_dir, s3_mounted)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", CONTENT_STORES)
def test_s3_metadata_json(store, fixtures_dir, s3_mounted):
    tt.test_metadata_json_matches_tiledbsoma(store, fixtures_dir, s3_mounted)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", CONTENT_STORES)
def test_s3_schema_json(store, fixtures_dir, s3_mounted):
    tt.test_schema_json_matches_tiledbsoma(store, fixtures_dir, s3_mounted)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", CONTENT_STORES)
def test_s3_csv(store, fixtures_dir, s3_mounted):
    td.test_csv_tsv_match_tiledbsoma(store, "csv", fixtures_dir, s3_mounted)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", CONTENT_STORES)
def test_s3_parquet(store, fixtures_dir, s3_mounted):
    td.test_parquet_matches_tiledbsoma(store, fixtures_dir, s3_mounted)


@pytest.mark.timeout(300)
def test_s3_jsonl_and_npy(fixtures_dir, s3_mounted):
    td.test_jsonl_matches_tiledbsoma("pbmc", fixtures_dir, s3_mounted)
    td.test_npy_matches_tiledbsoma("scene", fixtures_dir, s3_mounted)


def test_s3_broken_member_shows_error_txt(fixtures_dir, s3_mounted):
    tt.test_broken_member_shows_error_txt(fixtures_dir, s3_mounted)


# Arrays compared with tiledbsoma reading the s3:// URI itself (not the local copy).
S3_DIRECT = {
    "pbmc": ["obs", "ms/RNA/var", "ms/RNA/X/data"],
    "hand": ["obs", "multi_index", "edge/all_types"],
    "scene": ["obsl/points"],
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", sorted(S3_DIRECT))
def test_s3_matches_tiledbsoma_reading_s3(store, s3, s3_mounted, fixtures_dir):
    """schema.json, data.csv and data.parquet equal what tiledbsoma reads from
    s3://somabucket/<store>/<array> with a SOMATileDBContext configured like the daemon
    (so the upload and the reference are checked too). metadata.json is compared with
    the local reference (tree_reference corrects tiledbsoma's misreads with tiledb-py's raw
    values), after checking that tiledbsoma reads the same metadata from S3."""
    mp = Path(s3_mounted(store))
    ctx = soma_context(s3.tiledb_config())
    nodes = {n.relpath: n for n in tree_reference.walk_store(fixtures_dir, store)}
    problems = []
    for rel in [""] + S3_DIRECT[store]:
        node = nodes[tuple(Path(rel).parts)]
        expected_md = tree_reference.expected_metadata(node)
        with tiledbsoma.open(f"s3://{BUCKET}/{store}/{rel}".rstrip("/"), context=ctx) as obj:
            via_s3 = normalized_metadata(obj)
            broken = {k for k, v in expected_md.items() if v == []}  # tiledbsoma misreads these
            for k in sorted((set(via_s3) | set(expected_md)) - broken):
                if not json_equal(via_s3.get(k), expected_md.get(k)):
                    problems.append(f"{store}/{rel}: tiledbsoma reads {k!r}={via_s3.get(k)!r} from S3, {expected_md.get(k)!r} locally")
            check_soma_object(mp / rel, f"{store}/{rel}", obj, problems, expected_md=expected_md)
    formats.fail_if(problems, f"differences from tiledbsoma reading s3://{BUCKET}/{store}")


@pytest.mark.timeout(300)
def test_s3_direct_matches_tiledbsoma_reading_s3(s3, fixtures_dir):
    """--s3-direct: libtiledb talks to the store itself, without the daemon's front; what is
    served is the same."""
    store = "pbmc"
    ctx = soma_context(s3.tiledb_config())
    nodes = {n.relpath: n for n in tree_reference.walk_store(fixtures_dir, store)}
    problems = []
    with s3_mount(s3, store, "--s3-direct", label="--s3-direct mount") as mp:
        for rel in S3_DIRECT[store]:
            node = nodes[tuple(Path(rel).parts)]
            with tiledbsoma.open(f"s3://{BUCKET}/{store}/{rel}", context=ctx) as obj:
                check_soma_object(Path(mp) / rel, f"{store}/{rel}", obj, problems,
                                  expected_md=tree_reference.expected_metadata(node))
    formats.fail_if(problems, "differences from tiledbsoma with --s3-direct")


@pytest.mark.timeout(300)
def test_s3_over_https_trusts_the_ca_file_libtiledb_is_given(s3, fixtures_dir, tmp_path):
    """A store behind HTTPS whose certificate a CA of the test's own signs, given as
    vfs.s3.ca_file: the front reaches it over TLS (its one listing of an array without a
    delimiter arrives there), and what it serves is what tiledbsoma reads. (tiledbsoma
    reads the server itself, over HTTP: the TLS proxy runs in this process, and a
    tiledbsoma read holding the interpreter would keep the proxy from answering it.)"""
    store = "pbmc"
    ca_file, context = tls_server_context(tmp_path)
    ctx = soma_context(s3.tiledb_config())
    with LatencyProxy(s3.port, tls=context) as proxy:
        tls = {"vfs__s3__endpoint_override": proxy.endpoint, "vfs__s3__scheme": "https",
               "vfs__s3__ca_file": ca_file}
        nodes = {n.relpath: n for n in tree_reference.walk_store(fixtures_dir, store)}
        problems = []
        with s3_mount(s3, store, tiledb=tls, label="mount over https") as mp:
            proxy.reset()
            for rel in S3_DIRECT[store]:
                node = nodes[tuple(Path(rel).parts)]
                with tiledbsoma.open(f"s3://{BUCKET}/{store}/{rel}", context=ctx) as obj:
                    check_soma_object(Path(mp) / rel, f"{store}/{rel}", obj, problems,
                                      expected_md=tree_reference.expected_metadata(node))
            whole_listings = [
                t for m, t in proxy.requests()
                if kind_of(m, t) == "LIST" and "delimiter" not in urllib.parse.parse_qs(urllib.parse.urlsplit(t).query)
            ]
        formats.fail_if(problems, "differences from tiledbsoma over https")
        assert whole_listings, "no listing of the front's reached the store: the front stood aside"


@pytest.mark.timeout(300)
def test_s3_over_https_with_an_untrusted_certificate_fails_clearly(s3, tmp_path, soma_mount_bin):
    """The same store, its CA not given: no file is served from it. The mount fails, or
    reads fail with EIO, and the log names the certificate."""
    _ca_file, context = tls_server_context(tmp_path)
    log = tmp_path / "daemon.log"
    with LatencyProxy(s3.port, tls=context) as proxy:
        cfg = s3.tiledb_config(vfs__s3__endpoint_override=proxy.endpoint, vfs__s3__scheme="https",
                               vfs__s3__connect_max_tries="1")
        mp = tmp_path / "mnt"
        mp.mkdir()
        proc = subprocess.run(
            [str(soma_mount_bin), f"s3://{BUCKET}/pbmc", str(mp), "--log-file", str(log), *config_args(cfg)],
            capture_output=True, text=True, timeout=240,
        )
        try:
            if proc.returncode == 0:
                with pytest.raises(OSError) as failed:
                    (mp / "metadata.json").read_bytes()
                assert failed.value.errno == errno.EIO, failed.value
        finally:
            if is_mounted(mp):
                subprocess.run(["umount", str(mp)], check=False)
    said = proc.stderr + (log.read_text() if log.exists() else "")
    assert re.search(r"certificate|UnknownIssuer", said, re.I), said[-2000:]


def test_s3_lone_array_mount(s3, fixtures_dir, mount):
    uri = f"s3://{BUCKET}/pbmc/obs"
    with mount(uri, *config_args(s3.tiledb_config())) as mp:
        assert {"metadata.json", "schema.json", "data.csv"} <= set(os.listdir(mp))
        ctx = soma_context(s3.tiledb_config())
        problems = []
        with tiledbsoma.open(uri, context=ctx) as obj:
            check_soma_object(Path(mp), "obs", obj, problems)
        formats.fail_if(problems, "lone S3 array mount problems")


def test_s3_credentials_from_environment(s3, fixtures_dir, soma_mount_bin):
    """The usual AWS_* variables reach libtiledb: no key in --config at all."""
    cfg = {k: v for k, v in s3.tiledb_config().items() if "aws_" not in k}
    env_keys = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    saved = {k: os.environ.get(k) for k in env_keys}
    os.environ.update(env_keys)
    try:
        with mount_guard(f"s3://{BUCKET}/pbmc", *config_args(cfg)) as mp:
            md = read_json_file(Path(mp) / "metadata.json")
            assert md.get("soma_object_type") == "SOMAExperiment"
            assert "obs" in os.listdir(mp)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# --------------------------------------------------------------------------------------
# 4. latencies over S3 (printed; run with -s)


def _timed_cmd(args) -> float:
    t0 = time.monotonic()
    r = subprocess.run(args, capture_output=True, timeout=120)
    secs = time.monotonic() - t0
    assert r.returncode == 0, f"{args}: {r.returncode} {r.stderr.decode(errors='replace')[:500]}"
    return secs


@pytest.mark.timeout(300)
def test_s3_latency_first_look_and_cached(s3, soma_mount_bin, capsys):
    """`ls -R` and `cat metadata.json`, first look and again within the TTL; a cached
    look makes no request to the server at all."""
    rows = []
    with s3_mount(s3, "pbmc", "--metadata-ttl", "300") as mp:
        target = os.path.join(mp, "ms", "RNA", "var", "metadata.json")
        n0 = s3.request_count()
        first = _timed_cmd(["cat", target])
        n1 = s3.request_count()
        cached = _timed_cmd(["cat", target])
        n2 = s3.request_count()
        rows.append(("cat ms/RNA/var/metadata.json", first, n1 - n0, cached, n2 - n1))
    with s3_mount(s3, "pbmc", "--metadata-ttl", "300") as mp:
        n0 = s3.request_count()
        first = _timed_cmd(["ls", "-R", mp])
        n1 = s3.request_count()
        cached = _timed_cmd(["ls", "-R", mp])
        n2 = s3.request_count()
        rows.append(("ls -R pbmc", first, n1 - n0, cached, n2 - n1))
        n0 = s3.request_count()
        first = _timed_cmd(["cat", os.path.join(mp, "ms", "RNA", "X", "data", "schema.json")])
        n1 = s3.request_count()
        rows.append(("cat schema.json after ls -R", first, n1 - n0, float("nan"), 0))
    with capsys.disabled():
        print("\nS3 (moto on 127.0.0.1) latencies:")
        for what, f, fr, c, cr in rows:
            print(f"  {what:32s} first {f * 1000:8.1f} ms ({fr:4d} requests)   cached {c * 1000:8.1f} ms ({cr} requests)")
    for what, f, fr, c, cr in rows[:2]:
        assert cr == 0, f"{what}: the cached look made {cr} requests to the server"
        assert c < within(1.0), f"{what}: cached look took {c:.2f} s"


@pytest.mark.timeout(180)
def test_s3_members_are_opened_as_recorded_and_once(s3, soma_mount_bin):
    """Members are opened as what their group records them as, as tiledbsoma does, and the
    mounted root as a group (an array when that fails): no request asks what a URI holds
    (a one-key listing, a HEAD of __array_schema.tdb). And an object is opened once per
    metadata TTL: `10x/` uses the snapshots of obs, var and X that their listings took,
    so listing it makes no request for them at all."""
    before = s3.request_count()
    with s3_mount(s3, "pbmc", "--metadata-ttl", "300") as mp:
        root = Path(mp)
        for rel in ["obs", "ms", "ms/RNA", "ms/RNA/var", "ms/RNA/X", "ms/RNA/X/data"]:
            os.listdir(root / rel)
        mark = s3.request_count()
        layers = os.listdir(root / "ms" / "RNA" / "10x")
        during_10x = s3.requests()[mark:]
    requests = s3.requests()[before:]
    assert "data" in layers, layers
    shown = ("pbmc/obs/", "pbmc/ms/RNA/var/", "pbmc/ms/RNA/X/")
    again = [r for r in during_10x if any(s in r for s in shown)]
    assert not again, f"listing 10x/ opened obs, var or X again ({len(again)} requests): {again[:6]}"
    # The root group's own files are listed (its `__group/`, or all its `__` entries at once
    # by the daemon's S3 front).
    root_group = [r for r in requests if "prefix=pbmc/__" in r]
    assert root_group, "no listing of the root's __group/: is the access log read right?"
    probes = [r for r in requests if "max-keys=1" in r or "__array_schema.tdb" in r]
    assert not probes, f"objects were probed for what they hold: {probes}"


@pytest.mark.timeout(180)
def test_s3_root_is_a_group_an_array_or_an_error(s3, soma_mount_bin, fixtures_dir):
    """The mounted root is opened as a group, and as an array when that fails: an array's
    URI mounts as that array's directory, its rows those tiledbsoma reads; a URI that holds
    neither fails before anything is mounted, with a message naming it."""
    with s3_mount(s3, "pbmc/obs") as mp:
        names = set(os.listdir(mp))
        assert {"data.csv", "schema.json", "metadata.json", "slices"} <= names, names
        with open(Path(mp) / "data.csv", newline="") as f:
            header, *rows = f.read().splitlines()
    with tiledbsoma.DataFrame.open(str(fixtures_dir / "pbmc" / "obs")) as obs:
        want = obs.read(column_names=["soma_joinid", "obs_id"]).concat().to_pydict()
    assert header.split(",")[:2] == ["soma_joinid", "obs_id"], header
    got = [row.split(",")[:2] for row in rows]
    assert got == [[str(j), o] for j, o in zip(want["soma_joinid"], want["obs_id"])]

    uri = f"s3://{BUCKET}/pbmc/no-such-object"
    with tempfile.TemporaryDirectory(prefix="soma-mount-missing-") as mp:
        args = [str(soma_mount_bin), "-f", uri, mp, *config_args(s3.tiledb_config())]
        done = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        assert done.returncode != 0, f"exit status 0 for {uri}"
        assert uri in done.stderr.decode("utf-8", "replace"), done.stderr
        assert not is_mounted(mp), f"{mp} was left mounted"


@pytest.mark.timeout(180)
def test_s3_ls_R_opens_each_object_once(s3, soma_mount_bin):
    """`ls -R` opens every object once, even where two looks want it at the same moment:
    listing ms/RNA starts opening var and X in the background, and `10x/`, which ls
    lists first, opens them too (and obs). The second open waits for the first and takes
    its snapshot. Counted from the server's log: before each open the daemon's S3 front
    lists, in one request without a delimiter, what the open lists (an array's whole
    directory, a group's `__` entries): every object must show one such listing."""
    with s3_mount(s3, "pbmc", "--metadata-ttl", "300") as mp:
        mark = s3.request_count()
        subprocess.run(["ls", "-R", mp], capture_output=True, timeout=120, check=True)
        requests = s3.requests()[mark:]
    listings = [
        dict(urllib.parse.parse_qsl(r.split("?", 1)[1]))
        for r in requests
        if r.startswith("GET /") and "?" in r and "list-type" in r
    ]
    whole = [q["prefix"] for q in listings if "delimiter" not in q and "prefix" in q]
    group_opens = collections.Counter(p[: -len("/__")] for p in whole if p.endswith("/__"))
    array_opens = collections.Counter(p.rstrip("/") for p in whole if p.endswith("/"))
    for kind, opens in [("group", group_opens), ("array", array_opens)]:
        assert len(opens) > 3, f"too few {kind}s seen opening: is the access log read right? {opens}"
        again = {uri: n for uri, n in opens.items() if n != 1}
        assert not again, f"{kind}s opened more than once by ls -R (times opened): {again}"


# --------------------------------------------------------------------------------------
# 2. faults


@pytest.fixture
def fault_server():
    server = S3Server()
    try:
        server.start()
        server.create_bucket(BUCKET)
        yield server
    finally:
        server.close()


def _fault_mount(server, store, *extra):
    return s3_mount(server, store, "--metadata-ttl", "1", *extra, tiledb=FAULT_CONFIG)


def _probe(path: Path, kind: str):
    if kind == "dir":
        listing = sorted(os.listdir(path))
        if listing == ["error.txt"]:
            try:
                return ("error.txt", (path / "error.txt").read_text(errors="replace"))
            except OSError as e:
                return ("error.txt", e)
        return listing
    return len(read_all(path))


def _root_error_during_outage(root: Path) -> str:
    """After the TTL, the root's refresh fails: the root keeps its last good listing (a
    store that is briefly unreachable must not look emptied; docs/SEMANTICS.md), or the
    listing fails with EIO. Returns the text of an error.txt if the root shows one (a root
    never listed before the outage), else ""."""
    time.sleep(1.2)
    value, error, secs = run_bounded(lambda: _probe(root, "dir"), FAIL_WITHIN + 15)
    assert value != "HUNG" and secs < FAIL_WITHIN, f"listing the root hung ({secs:.1f} s) during the outage"
    if error is not None:
        assert isinstance(error, OSError) and error.errno == errno.EIO, f"root listing: {describe(value, error)}"
        return ""
    if isinstance(value, tuple):
        text = value[1]
        assert isinstance(text, str) and ("S3" in text or "curl" in text), f"root error.txt: {text!r}"
        return text
    assert "metadata.json" in value, f"the root lists {value} during the outage"
    return ""


def _outage_problems(seen: dict, root_collapsed: bool) -> list[str]:
    """Each path looked at during an outage is served from what the daemon already
    had, fails with EIO, or is a directory showing error.txt. ENOENT is what the
    daemon gives below a directory whose refresh failed (it turns into an error
    directory): accepted only when the root itself showed error.txt afterwards."""
    problems = []
    for rel, (value, error, _secs) in seen.items():
        if error is None:
            if isinstance(value, tuple) and value[0] == "error.txt":
                text = value[1]
                if isinstance(text, OSError):
                    if not (root_collapsed and text.errno == errno.ENOENT):
                        problems.append(f"{rel}/error.txt listed but unreadable: {describe(None, text)}")
                elif not text.strip():
                    problems.append(f"{rel}/error.txt is empty")
            continue
        if isinstance(error, OSError) and error.errno == errno.EIO:
            continue
        if isinstance(error, OSError) and error.errno == errno.ENOENT:
            # Below a directory that shows error.txt there is nothing else: ENOENT.
            shown_error = [
                a for a, (v, e, _s) in seen.items()
                if isinstance(v, tuple) and v[0] == "error.txt" and rel.startswith(a.rstrip("/") + "/")
            ]
            if root_collapsed or shown_error:
                continue
        problems.append(f"{rel}: {describe(value, error)} (expected EIO, or error.txt)")
    return problems


@pytest.mark.timeout(120)
def test_daemon_ends_cleanly_while_members_are_still_opening(fault_server, fixtures_dir):
    """A group's listing answers before its members are opened: they are opened on threads
    of their own. The server freezes right after the first listing of pbmc's root, while
    those opens are under way; SIGTERM then ends the daemon within libtiledb's timeouts and
    cleanly (exit code 0, no mount left), not with a thread still inside libtiledb."""
    server = fault_server
    server.upload_tree(fixtures_dir / "pbmc", BUCKET, "pbmc")
    with _fault_mount(server, "pbmc") as mp:
        names = os.listdir(mp)
        server.pause()
        try:
            t0 = time.monotonic()
            mp.proc.send_signal(signal.SIGTERM)
            try:
                code = mp.proc.wait(60)
            except subprocess.TimeoutExpired:
                pytest.fail("the daemon still runs 60 s after SIGTERM")
            secs = time.monotonic() - t0
        finally:
            server.resume()
        log = Path(mp.log).read_text(errors="replace")
        assert code == 0, f"the daemon ended with {code} after {secs:.1f} s:\n{log[-3000:]}"
        assert "panicked" not in log, log[-3000:]
        assert wait_until(lambda: not is_mounted(mp), 5), f"{mp} is still mounted"
        assert {"ms", "obs"} <= set(names), names
        print(f"\nthe daemon ended {secs:.1f} s after SIGTERM with member opens hung on a frozen server")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_streaming_read_fails_with_eio_and_mount_recovers(how, fault_server, fixtures_dir):
    """big/X/data.csv (tens of MB) streams with --materialize-limit 0; the server dies
    (or freezes) after the first MB: the rest of the read fails with EIO within
    FAIL_WITHIN s, the daemon survives and logs libtiledb's message; what is looked at
    during the outage fails or shows error.txt within FAIL_WITHIN s; once the server is
    back the same mount serves the whole file again."""
    server = fault_server
    uploads = {"big": fixtures_dir / "big"}
    server.upload_tree(uploads["big"], BUCKET, "big")
    with _fault_mount(server, "big", "--materialize-limit", "0") as mp:
        root = Path(mp)
        data = root / "X" / "data.csv"
        schema = read_json_file(root / "X" / "schema.json")
        # os.open, not open(): Python's open() fstats the file, and an fstat waits for the
        # whole generation (SEMANTICS, "A stat waits for a file under way").
        fd = os.open(data, os.O_RDONLY)
        value = None
        try:
            head = b""
            while len(head) < (1 << 20):
                chunk = os.read(fd, 1 << 16)
                assert chunk, "data.csv ended before 1 MB"
                head += chunk
            stop_how(server, how)

            def rest():
                n = len(head)
                while True:
                    c = os.read(fd, 1 << 20)
                    if not c:
                        return n
                    n += len(c)

            value, error, secs = run_bounded(rest, FAIL_WITHIN + 15)
        finally:
            if value != "HUNG":
                os.close(fd)
        assert value != "HUNG", f"the read of data.csv hung for {FAIL_WITHIN + 15} s with the server {how}"
        assert error is not None, (
            f"the read of data.csv succeeded ({value} bytes) with the server {how} after the first MB: "
            "the fixture is too small to catch the outage"
        )
        assert isinstance(error, OSError) and error.errno == errno.EIO, f"expected EIO, got {describe(None, error)}"
        assert secs < FAIL_WITHIN, f"EIO came after {secs:.1f} s (configured timeouts: 1 s, 2 tries)"
        assert mp.proc.poll() is None, "the daemon exited"
        assert is_mounted(mp)
        log = Path(mp.log).read_text(errors="replace")
        assert "S3" in log and ("curlCode" in log or "Failed" in log), f"no libtiledb message in the log:\n{log[-3000:]}"

        # The outage, after the TTL: paths looked at before and never.
        time.sleep(1.2)
        seen = {}
        for rel, kind in [("", "dir"), ("metadata.json", "file"), ("X", "dir"), ("X/schema.json", "file"),
                          ("X/slices", "dir"), ("X/data.tsv", "file")]:
            value, error, secs = run_bounded(lambda: _probe(root / rel, kind), FAIL_WITHIN + 15)
            seen[rel or "."] = (value, error, secs)
            assert value != "HUNG", f"{rel or '.'} hung during the outage"
            assert secs < FAIL_WITHIN, f"{rel or '.'} took {secs:.1f} s during the outage"
        root_text = _root_error_during_outage(root)
        problems = _outage_problems(seen, bool(root_text))
        assert mp.proc.poll() is None, "the daemon exited during the outage"
        print(f"\noutage ({how}) on a mount of big:", {k: (describe(v, e), round(s, 2)) for k, (v, e, s) in seen.items()})
        assert not problems, problems

        # Back: the same mount serves the whole file again.
        bring_back(server, how, uploads)
        deadline = time.monotonic() + RECOVER_WITHIN
        last = None
        while time.monotonic() < deadline:
            try:
                if "X" in os.listdir(root) and (root / "X" / "schema.json").is_file():
                    break
            except OSError as e:
                last = e
            time.sleep(0.5)
        else:
            pytest.fail(f"the mount did not recover within {RECOVER_WITHIN} s: {os.listdir(root)} {last}")
        value, error, secs = run_bounded(lambda: read_all(data), 120)
        assert value != "HUNG" and error is None, f"reading data.csv after recovery: {describe(value, error)}"
        assert value[: len(head)] == head, "data.csv after recovery starts differently"
        nrows = value.count(b"\n") - 1
        assert nrows == schema["cell_count"], f"data.csv after recovery has {nrows} rows, cell_count {schema['cell_count']}"
        assert read_json_file(root / "X" / "schema.json") == schema
        assert mp.proc.poll() is None


@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_uncached_paths_during_outage(how, fault_server, fixtures_dir):
    """Mounted, only the root listed; the server goes away: listing members, reading
    metadata.json / schema.json / a data file never looked at fails with EIO or shows
    error.txt, within FAIL_WITHIN s each; the daemon survives; once the server is back
    the same paths are served and correct."""
    server = fault_server
    uploads = {"pbmc": fixtures_dir / "pbmc"}
    server.upload_tree(uploads["pbmc"], BUCKET, "pbmc")
    with _fault_mount(server, "pbmc") as mp:
        root = Path(mp)
        assert sorted(os.listdir(root)) == ["anndata", "metadata.json", "ms", "obs", "where"]
        stop_how(server, how)
        seen = {}
        probes = [("obs", "dir"), ("obs/schema.json", "file"), ("ms", "dir"), ("ms/RNA", "dir"),
                  ("ms/RNA/var/metadata.json", "file"), ("ms/RNA/X/data/data.csv", "file")]
        t0 = time.monotonic()
        for rel, kind in probes:
            value, error, secs = run_bounded(lambda: _probe(root / rel, kind), FAIL_WITHIN + 15)
            seen[rel] = (value, error, secs)
            assert value != "HUNG", f"{rel} hung during the outage"
            assert secs < FAIL_WITHIN, f"{rel} took {secs:.1f} s during the outage"
        print(f"\noutage ({how}) on a mount of pbmc:", {k: (describe(v, e), round(s, 2)) for k, (v, e, s) in seen.items()},
              f"total {time.monotonic() - t0:.1f} s")
        root_text = _root_error_during_outage(root)
        assert mp.proc.poll() is None, "the daemon exited during the outage"
        problems = _outage_problems(seen, bool(root_text))
        assert not problems, problems
        assert any(e is not None or isinstance(v, tuple) for v, e, _ in seen.values()), (
            f"everything was served with the server {how}: {seen}"
        )

        bring_back(server, how, uploads)
        nodes = {n.display: n for n in tree_reference.walk_store(fixtures_dir, "pbmc")}
        deadline = time.monotonic() + RECOVER_WITHIN
        while True:
            try:
                got = read_json_file(root / "obs" / "schema.json")
                break
            except (OSError, ValueError) as e:
                if time.monotonic() > deadline:
                    pytest.fail(f"obs/schema.json still fails {RECOVER_WITHIN} s after the server came back: {e}")
                time.sleep(0.5)
        recovered_after = RECOVER_WITHIN - (deadline - time.monotonic())
        print(f"recovered after {recovered_after:.1f} s")
        problems = tt._compare_schema("obs", got, tree_reference.expected_schema(nodes["obs"].uri))
        md = read_json_file(root / "ms" / "RNA" / "var" / "metadata.json")
        if not json_equal(md, tree_reference.expected_metadata(nodes["ms/RNA/var"])):
            problems.append(f"ms/RNA/var/metadata.json after recovery: {md}")
        probs = formats.Problems("ms/RNA/X/data")
        blob = formats.read_data_file(root / "ms" / "RNA" / "X" / "data" / "data.csv", probs)
        if blob is not None:
            formats.check_delimited(data_reference.ref_of(nodes["ms/RNA/X/data"]), blob.decode(), "csv", probs)
        problems += probs.done()
        listing = set(os.listdir(root / "ms" / "RNA"))
        if not {"X", "var", "metadata.json"} <= listing:
            problems.append(f"ms/RNA lists {sorted(listing)} after recovery")
        assert mp.proc.poll() is None
        formats.fail_if(problems, "problems after the server came back")


@pytest.mark.parametrize("mode", ["foreground", "daemon"])
def test_mount_with_server_down_fails_fast(mode, fault_server, soma_mount_bin):
    """No server on the port: soma-mount exits non-zero within FAIL_WITHIN s, names the
    URI, and leaves nothing mounted."""
    server = fault_server
    server.stop()
    uri = f"s3://{BUCKET}/pbmc"
    cfg = config_args(server.tiledb_config(**FAULT_CONFIG))
    with tt._scratch_dir() as mp:
        args = [str(soma_mount_bin)] + (["-f"] if mode == "foreground" else []) + cfg + [uri, mp]
        with tempfile.TemporaryFile() as err:
            t0 = time.monotonic()
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
            try:
                rc = proc.wait(FAIL_WITHIN + 15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                pytest.fail(f"soma-mount ({mode}) still running {FAIL_WITHIN + 15} s with no server")
            secs = time.monotonic() - t0
            err.seek(0)
            stderr = err.read().decode(errors="replace")
        assert rc != 0, "exit status 0 with no server"
        assert uri in stderr, f"stderr does not name {uri}:\n{stderr}"
        assert secs < FAIL_WITHIN, f"took {secs:.1f} s"
        assert not is_mounted(mp)


# --------------------------------------------------------------------------------------
# 3. time travel

T1 = 1_700_000_000_000  # 2023-11-14T22:13:20Z
T2 = T1 + 3_600_000  # 2023-11-14T23:13:20Z
T3 = T1 + 7_200_000  # 2023-11-15T00:13:20Z

TT_SCHEMA = pa.schema([("soma_joinid", pa.int64()), ("name", pa.large_string()), ("value", pa.float64())])


def _rows(lo: int, hi: int, tag: str) -> pa.Table:
    ids = np.arange(lo, hi, dtype=np.int64)
    return pa.table(
        {"soma_joinid": ids, "name": [f"{tag}-{i}" for i in ids], "value": ids * 0.5 + {"a": 0, "b": 0.25, "c": 0.125}[tag]},
        schema=TT_SCHEMA,
    )


def _cells(lo: int, hi: int, mod: int, scale: float) -> pa.Table:
    i = np.arange(lo, hi, dtype=np.int64)
    return pa.table({"soma_dim_0": i, "soma_dim_1": i % mod, "soma_data": (i * scale).astype(np.float32)})


def build_time_travel_store(uri: str, context=None):
    """A Collection written at three times:
    T1: created with df (DataFrame, rows 0-9 "a-*") and X (SparseNDArray 100x50, 20
        cells); metadata step=1 everywhere, df label="one".
    T2: df rows 10-24 "b-*" and row 3 overwritten ("b-3"), label="two", a new key
        added_at_t2=2.5; X 20 more cells, step=2; a new member "late" (DataFrame, 3
        rows); root step=2.
    T3: df rows 25-39 "c-*", step=3, added_at_t2 deleted; root step=3 (X unchanged)."""
    kw = {"context": context} if context is not None else {}
    with tiledbsoma.Collection.create(uri, tiledb_timestamp=T1, **kw) as c:
        c.metadata["step"] = 1
        with tiledbsoma.DataFrame.create(f"{uri}/df", schema=TT_SCHEMA, domain=[[0, 999]], tiledb_timestamp=T1, **kw) as df:
            df.write(_rows(0, 10, "a"))
            df.metadata["step"] = 1
            df.metadata["label"] = "one"
        with tiledbsoma.SparseNDArray.create(f"{uri}/X", type=pa.float32(), shape=(100, 50), tiledb_timestamp=T1, **kw) as X:
            X.write(_cells(0, 20, 7, 1.0))
            X.metadata["step"] = 1
        for name in ("df", "X"):
            c.set(name, tiledbsoma.open(f"{uri}/{name}", tiledb_timestamp=T1, **kw), use_relative_uri=True)
    with tiledbsoma.open(f"{uri}/df", "w", tiledb_timestamp=T2, **kw) as df:
        df.write(_rows(10, 25, "b"))
        df.write(_rows(3, 4, "b"))
        df.metadata["step"] = 2
        df.metadata["label"] = "two"
        df.metadata["added_at_t2"] = 2.5
    with tiledbsoma.open(f"{uri}/X", "w", tiledb_timestamp=T2, **kw) as X:
        X.write(_cells(20, 40, 11, 1 / 3))
        X.metadata["step"] = 2
    with tiledbsoma.DataFrame.create(f"{uri}/late", schema=TT_SCHEMA, domain=[[0, 99]], tiledb_timestamp=T2, **kw) as late:
        late.write(_rows(0, 3, "b"))
    with tiledbsoma.open(uri, "w", tiledb_timestamp=T2, **kw) as c:
        c.metadata["step"] = 2
        c.set("late", tiledbsoma.open(f"{uri}/late", tiledb_timestamp=T2, **kw), use_relative_uri=True)
    with tiledbsoma.open(f"{uri}/df", "w", tiledb_timestamp=T3, **kw) as df:
        df.write(_rows(25, 40, "c"))
        df.metadata["step"] = 3
        del df.metadata["added_at_t2"]
    with tiledbsoma.open(uri, "w", tiledb_timestamp=T3, **kw) as c:
        c.metadata["step"] = 3


@pytest.fixture(scope="module")
def tt_store(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("time-travel") / "tt")
    build_time_travel_store(uri)
    # the fixture does what it says (guards against a tiledbsoma behaving differently)
    with tiledbsoma.open(f"{uri}/df", tiledb_timestamp=T1) as df:
        assert df.count == 10 and df.metadata["label"] == "one"
    with tiledbsoma.open(f"{uri}/df", tiledb_timestamp=T2) as df:
        assert df.count == 25 and df.metadata["added_at_t2"] == 2.5
    with tiledbsoma.open(f"{uri}/df") as df:
        assert df.count == 40 and "added_at_t2" not in df.metadata
    return uri


def check_time_travel_mount(mp, uri: str, T: int | None, cfg: dict | None = None) -> list[str]:
    """Everything under a mount of the time-travel store against tiledbsoma opened at
    T (None: now). schema.json's cell_count may also be the count of stored cells
    (test_cell_count_after_an_overwrite checks which one)."""
    kw = {"context": soma_context(cfg)} if cfg is not None else {}
    problems = []
    root = Path(mp)
    with tiledbsoma.open(uri, tiledb_timestamp=T, **kw) as c:
        members = sorted(c.keys())
        listing = sorted(os.listdir(root))
        if listing != sorted(members + ["metadata.json"]):
            problems.append(f"root lists {listing}, expected {sorted(members + ['metadata.json'])}")
        check_soma_object(root, "<root>", c, problems)
    for name in members:
        with tiledbsoma.open(f"{uri}/{name}", tiledb_timestamp=T, **kw) as obj:
            check_soma_object(root / name, name, obj, problems, stored_cells(f"{uri}/{name}", T, cfg))
    return problems


TIMESTAMP_CASES = [
    ("T1-ms", str(T1), T1),
    ("T1-rfc3339", "2023-11-14T22:13:20Z", T1),
    ("just-before-T2-ms", str(T2 - 1), T2 - 1),
    ("T2-ms", str(T2), T2),
    ("T2-rfc3339-offset", "2023-11-15T00:13:20+01:00", T2),
    ("between-T2-T3-rfc3339-millis", "2023-11-14T23:43:20.500Z", T2 + 1_800_500),
    ("T3-ms", str(T3), T3),
    ("T3-rfc3339-fraction", "2023-11-15T00:13:20.000+00:00", T3),
    ("after-T3-rfc3339", "2030-01-01T00:00:00Z", 1_893_456_000_000),
]


@pytest.mark.parametrize("spec,T", [c[1:] for c in TIMESTAMP_CASES], ids=[c[0] for c in TIMESTAMP_CASES])
def test_timestamp_mount_matches_tiledbsoma(spec, T, tt_store, mount):
    with mount(tt_store, "--timestamp", spec) as mp:
        problems = check_time_travel_mount(mp, tt_store, T)
    formats.fail_if(problems, f"differences from tiledbsoma at tiledb_timestamp={T} (--timestamp {spec})")


def test_timestamp_mount_spelled_out(tt_store, mount):
    """The fixture's story, spelled out on the files (test above does the general check)."""
    with mount(tt_store, "--timestamp", str(T1)) as mp:
        root = Path(mp)
        assert sorted(os.listdir(root)) == ["X", "df", "metadata.json"]
        assert read_json_file(root / "df" / "metadata.json")["label"] == "one"
        assert read_json_file(root / "df" / "schema.json")["cell_count"] == 10
        text = (root / "df" / "data.csv").read_text()
        assert text.splitlines()[4] == "3,a-3,1.5" and len(text.splitlines()) == 11
    with mount(tt_store, "--timestamp", "2023-11-14T23:13:20Z") as mp:
        root = Path(mp)
        assert "late" in os.listdir(root)
        md = read_json_file(root / "df" / "metadata.json")
        assert md["label"] == "two" and md["added_at_t2"] == 2.5 and md["step"] == 2
        lines = (root / "df" / "data.csv").read_text().splitlines()
        assert lines[4] == "3,b-3,1.75" and len(lines) == 26
        assert read_json_file(root / "X" / "schema.json")["cell_count"] == 40
    with mount(tt_store) as mp:  # no --timestamp: now
        root = Path(mp)
        md = read_json_file(root / "df" / "metadata.json")
        assert md["step"] == 3 and "added_at_t2" not in md
        assert len((root / "df" / "data.csv").read_text().splitlines()) == 41


@pytest.mark.parametrize("spec,T", [(str(T2), T2), (None, None)], ids=["T2", "now"])
def test_cell_count_after_an_overwrite(spec, T, tt_store, mount):
    """df holds a row written at T1 and overwritten at T2 (same soma_joinid): data.csv has
    tiledbsoma's count of rows, and schema.json's cell_count is, as documented, the cells
    the fragments store (read from fragment metadata without reading data), which counts
    the overwritten cell twice until the array is consolidated."""
    with mount(tt_store, *(["--timestamp", spec] if spec else [])) as mp:
        d = Path(mp) / "df"
        got = read_json_file(d / "schema.json")["cell_count"]
        rows = (d / "data.csv").read_text().count("\n") - 1
    with tiledbsoma.open(f"{tt_store}/df", tiledb_timestamp=T) as df:
        want = int(df.count)
    stored = stored_cells(f"{tt_store}/df", T)
    assert stored == want + 1  # the fixture has exactly one overwritten cell
    assert rows == want, f"data.csv has {rows} rows, tiledbsoma counts {want}"
    assert got == stored, (
        f"schema.json cell_count is {got}; the fragments hold {stored} cells"
        f" (tiledbsoma's count and data.csv's rows are {want})"
    )


CONSOLIDATED_ROWS = 100  # per fragment; three fragments per array


def consolidation_steps(uri: str):
    """A collection of a data frame and a sparse matrix, each written in three fragments,
    then consolidated step by step; yields after each step its name."""
    import tiledb

    schema = pa.schema([("soma_joinid", pa.int64()), ("value", pa.float64())])
    n = CONSOLIDATED_ROWS
    with tiledbsoma.Collection.create(uri) as coll:
        coll.add_new_dataframe("df", schema=schema, index_column_names=["soma_joinid"], domain=[[0, 3 * n - 1]])
        coll.add_new_sparse_ndarray("X", type=pa.float32(), shape=(3 * n, 20))
    for k in range(3):
        rows = np.arange(k * n, (k + 1) * n, dtype=np.int64)
        with tiledbsoma.open(f"{uri}/df", "w") as df:
            df.write(pa.table({"soma_joinid": rows, "value": rows * 0.5}))
        with tiledbsoma.open(f"{uri}/X", "w") as X:
            dim0, dim1 = np.repeat(rows, 2), np.tile(np.array([k, 10 + k], dtype=np.int64), n)
            X.write(pa.table({"soma_dim_0": dim0, "soma_dim_1": dim1, "soma_data": (dim0 + dim1).astype(np.float32)}))
    yield "three fragments"
    for mode, step in [
        ("fragments", "fragments consolidated, the old ones kept"),
        ("commits", "commits consolidated"),
        ("fragment_meta", "fragment metadata consolidated"),
    ]:
        for name in ("df", "X"):
            tiledb.consolidate(f"{uri}/{name}", config=tiledb.Config({"sm.consolidation.mode": mode}))
        yield step
    for mode in ("fragments", "commits", "fragment_meta"):
        for name in ("df", "X"):
            tiledb.vacuum(f"{uri}/{name}", config=tiledb.Config({"sm.vacuum.mode": mode}))
    yield "vacuumed"


@pytest.mark.timeout(300)
def test_consolidated_arrays_show_what_tiledbsoma_reads(tmp_path, mount):
    """Arrays whose fragments, commits and fragment metadata are consolidated one step at
    a time, then vacuumed: on a fresh mount after each step data.csv is what tiledbsoma
    reads, and schema.json's cell_count the cells of the fragments libtiledb reads, not
    of those consolidated away and not vacuumed yet (each cell is written once, so that is
    tiledbsoma's count)."""
    import pandas as pd

    uri = str(tmp_path / "consolidated")
    problems = []
    for step in consolidation_steps(uri):
        with mount(uri) as mp:
            for name in ("df", "X"):
                with tiledbsoma.open(f"{uri}/{name}") as obj:
                    read = obj.read()
                    want = (read.concat() if name == "df" else read.tables().concat()).to_pandas()
                    count = int(obj.count if name == "df" else obj.nnz)
                index = list(want.columns[:1] if name == "df" else want.columns[:2])
                got = pd.read_csv(Path(mp) / name / "data.csv")
                want = want.sort_values(index).reset_index(drop=True)
                got = got.sort_values(index).reset_index(drop=True)
                if not (got.shape == want.shape and np.allclose(got.to_numpy(float), want.to_numpy(float))):
                    problems.append(f"{step}: {name}/data.csv has {len(got)} rows, tiledbsoma reads {len(want)}")
                cells = read_json_file(Path(mp) / name / "schema.json")["cell_count"]
                if not cells == count == 3 * CONSOLIDATED_ROWS * (1 if name == "df" else 2):
                    problems.append(f"{step}: {name}/schema.json cell_count is {cells}; tiledbsoma counts {count}")
    formats.fail_if(problems, "consolidated arrays")


def test_timestamp_mounts_sharing_a_cache_dir(tt_store, tmp_path):
    """Data files generated for one --timestamp are never served to a mount at
    another (the cache is shared through --cache-dir)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    order = [(str(T3), T3), (str(T1), T1), (None, None), ("2023-11-14T23:13:20Z", T2), (str(T1), T1)]
    problems = []
    for spec, T in order:
        args = ["--cache-dir", str(cache)] + (["--timestamp", spec] if spec else [])
        with mount_guard(tt_store, *args) as mp:
            problems += [f"--timestamp {spec}: {p}" for p in check_time_travel_mount(mp, tt_store, T)]
    formats.fail_if(problems, "stale data across timestamps with a shared cache dir")


@pytest.mark.timeout(180)
def test_timestamp_over_s3(s3, tmp_path, mount):
    """The time-travel store uploaded to S3 and mounted with --timestamp."""
    local = tmp_path / "tt"
    build_time_travel_store(str(local))
    s3.upload_tree(local, BUCKET, "tt")
    uri = f"s3://{BUCKET}/tt"
    problems = []
    for spec, T in [(str(T1), T1), ("2023-11-14T23:13:20Z", T2), (None, None)]:
        args = config_args(s3.tiledb_config()) + (["--timestamp", spec] if spec else [])
        with mount(uri, *args) as mp:
            problems += [f"--timestamp {spec}: {p}" for p in check_time_travel_mount(mp, uri, T, s3.tiledb_config())]
    formats.fail_if(problems, "time travel over S3")


@pytest.mark.timeout(180)
def test_a_store_as_of_a_past_time_is_listed_once_for_the_life_of_the_mount(s3, soma_mount_bin):
    """With --timestamp in the past nothing can change: listings and metadata are kept for
    the life of the mount, whatever --metadata-ttl says. Without it, --metadata-ttl 0 asks
    the store again at every look."""
    past = str(int(time.time() * 1000))
    for timestamp, again in [(["--timestamp", past], False), ([], True)]:
        with s3_mount(s3, "pbmc", "--metadata-ttl", "0", *timestamp) as mp:
            subprocess.run(["ls", "-R", mp], capture_output=True, timeout=120, check=True)
            mark = s3.request_count()
            subprocess.run(["ls", "-R", mp], capture_output=True, timeout=120, check=True)
            requests = s3.request_count() - mark
        assert (requests > 0) == again, f"{timestamp or 'no --timestamp'}: a second ls -R made {requests} requests"


LIVE_SCHEMA = pa.schema([("soma_joinid", pa.int64()), ("name", pa.large_string()), ("value", pa.float64())])


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["local", "s3"])
def test_appends_show_after_ttl_and_nothing_stale(backend, tmp_path, request, mount):
    """Mounted without --timestamp, --metadata-ttl 1: tiledbsoma appends rows and
    changes metadata; ~2 s later metadata.json, schema.json and data.csv show the
    change (data.csv was read before, so its generated content is cached); then an
    overwrite that keeps data.csv's length the same shows too."""
    if backend == "s3":
        s3 = request.getfixturevalue("s3")
        ctx = soma_context(s3.tiledb_config())
        uri = f"s3://{BUCKET}/live-{os.getpid()}-{time.monotonic_ns()}"
        kw = {"context": ctx}
        cfg = s3.tiledb_config()
        extra = config_args(cfg)
    else:
        uri = str(tmp_path / "live")
        kw = {}
        cfg = None
        extra = []
    with tiledbsoma.Collection.create(uri, **kw) as c:
        c.metadata["state"] = "initial"
        df = c.add_new_dataframe("df", schema=LIVE_SCHEMA, domain=[[0, 9999]])
        df.write(_rows(0, 20, "a"))
        df.metadata["state"] = "initial"
        df.close()
    WAIT = 2.5  # the TTL (1 s) and some slack
    with mount(uri, *extra, "--metadata-ttl", "1") as mp:
        root = Path(mp)
        problems = []
        with tiledbsoma.open(f"{uri}/df", **kw) as obj:
            check_soma_object(root / "df", "df (before)", obj, problems)
        before_csv = (root / "df" / "data.csv").read_bytes()
        before_parquet = (root / "df" / "data.parquet").read_bytes()
        assert before_csv.count(b"\n") == 21
        formats.fail_if(problems, "before the append")

        # append rows + metadata changes
        with tiledbsoma.open(f"{uri}/df", "w", **kw) as df:
            df.write(_rows(20, 35, "b"))
            df.metadata["state"] = "appended"
            df.metadata["rows"] = 35
        with tiledbsoma.open(uri, "w", **kw) as c:
            c.metadata["state"] = "appended"
        time.sleep(WAIT)
        problems = []
        with tiledbsoma.open(uri, **kw) as c:
            check_soma_object(root, "<root> (after append)", c, problems)
        with tiledbsoma.open(f"{uri}/df", **kw) as obj:
            assert obj.count == 35
            check_soma_object(root / "df", "df (after append)", obj, problems)
        after_csv = (root / "df" / "data.csv").read_bytes()
        if after_csv == before_csv:
            problems.append("data.csv after the append is byte for byte the one from before (stale)")
        if (root / "df" / "data.parquet").read_bytes() == before_parquet:
            problems.append("data.parquet after the append is the one from before (stale)")
        formats.fail_if(problems, f"{WAIT} s after appending rows")

        # overwrite: same number of rows, same text length
        with tiledbsoma.open(f"{uri}/df", "w", **kw) as df:
            t = _rows(0, 1, "a").set_column(1, "name", pa.array(["z-0"], pa.large_string()))
            df.write(t)
        time.sleep(WAIT)
        problems = []
        with tiledbsoma.open(f"{uri}/df", **kw) as obj:
            check_soma_object(root / "df", "df (after overwrite)", obj, problems, stored_cells(f"{uri}/df", None, cfg))
        st = os.stat(root / "df" / "data.csv").st_size
        text = (root / "df" / "data.csv").read_text()
        if len(text.encode()) != len(after_csv):
            problems.append(f"data.csv length changed from {len(after_csv)} to {len(text.encode())} (fixture bug?)")
        if text.splitlines()[1] != "0,z-0,0.0" and text.splitlines()[1] != "0,z-0,0":
            problems.append(f"data.csv row 0 after the overwrite is {text.splitlines()[1]!r}, expected 0,z-0,0.0")
        if st not in (0, len(text.encode())):
            problems.append(f"stat says {st} bytes, content is {len(text.encode())}")
        formats.fail_if(problems, f"{WAIT} s after overwriting a row")
