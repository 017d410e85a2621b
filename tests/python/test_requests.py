"""Requests to the object store (fewer round trips over S3).

The pbmc fixture is served by a local S3 server (harness/moto_server.py) through a counting proxy
(harness/latency_proxy.py). A fresh mount lists `obs/`, or reads `obs/data.csv`; every request the daemon
sends, from its start until it has been idle for a while (so what it opens ahead of the
look is counted too), is counted against what tiledbsoma sends for the same thing, from a
fresh context: the experiment and obs opened, their metadata read (a listing), or
`obs.read()` (the file). What is served is also compared with tiledbsoma.

The bounds are ratios with a margin of about 2 requests over today's counts (15 vs 23 for
the listing, 35 vs 44 for the file, with libtiledb 2.30 behind the daemon's S3 front, which
lists what an open lists in one request and fetches the files it names whole; the root is opened without asking
libtiledb what it is, 3 requests fewer than tiledbsoma): one more array opened, a second
open of one, or its fragment list loaded goes past them. They are not exact counts of
libtiledb's requests.

Listing a measurement's AnnData Zarr store (`ls -R anndata/RNA.zarr`, which opens the
experiment's every member: `anndata/` lists each measurement) is counted against tiledbsoma
opening every member and reading their metadata (145 vs 285 today). The store's layout
reads a little more than that walk: each sparse array's R-trees (its cell count) and, for
obs and var, the count of the nulls that decide how their columns are encoded (libtiledb
reads their join-id tiles for it); the front saves more: an array's five listings are one,
a group's three are one, and each fragment's metadata is one request instead of three. The
bound (0.55) fails a listing that opens the objects again, or reads whole data frames or uns
arrays (about 55 more).

`ls -l X/data/slices/parquet/` sizes every chunk without reading a value: no request of the
listing reads a fragment's attribute file (sized Parquet counts its rows from coordinates).

An array grown by appends holds many fragments, and libtiledb reads each one's
metadata in three requests one after the other (then a fourth for its R-tree), as many
fragments at a time as its compute pool has threads. Through the daemon's S3 front each
fragment's metadata is one request, sent for all fragments at once as soon as the listing
of `__fragments/` names them. `head -n 5` of such an array on a fresh mount, with the proxy
holding each request 20 ms, takes at most half the rounds tiledbsoma takes to read its first
row (10 against 28 today), in fewer requests (46 against 49: the runs read ahead fetch the
next bands' tiles, in every fragment). The bounds fail a fragment's metadata read in pieces
again (10 requests more), or fetched one fragment after another.

A second mount of a store on the same cache sends no request for what the opens read
(schemas, metadata, member lists, fragment metadata): only listings, and tiles.

A query's h5ad (`where/louvain in ['1', '2']/anndata/RNA.h5ad`) holds every element of the
AnnData, uns's nine arrays in five nested groups among them, where tiledbsoma's
`axis_query(...).to_anndata` reads obs, var and X: it sends more requests (210 against 105
today), but in fewer rounds (24-25 against 55, at 20 ms a request), as its small elements are
read at once while obs, var and X are written, and a group's members open beside its
metadata. Read one after another they took 67 rounds: the bound (fewer rounds than
tiledbsoma) fails that.

Run: .venv/bin/python -m pytest tests/python/test_requests.py -q
"""

from __future__ import annotations

import collections
import io
import json
import os
import re
import time
from pathlib import Path

import anndata
import h5py
import pytest

import test_remote as tr
from harness.latency_proxy import LatencyProxy, key_of, kind_of
from harness.moto_server import S3Server, config_args, soma_context
from harness import tree_reference
from harness.tree_reference import json_equal
from harness import formats

import tiledbsoma

BUCKET = "requestbucket"
STORE = "pbmc"
# The daemon is idle once no request has passed for this long.
QUIET = 1.5
SETTLE_TIMEOUT = 60.0
LISTING_RATIO = 0.75
# The appended array: FRAGMENTS writes of ROWS_EACH rows of a COLUMNS-wide matrix.
FRAGMENTS = 10
ROWS_EACH = 20
COLUMNS = 400
APPENDED_DELAY_MS = 20
APPENDED_REQUEST_RATIO = 1.1
FILE_RATIO = 0.85
ZARR_LISTING_RATIO = 0.55


@pytest.fixture(scope="module")
def counted(fixtures_dir):
    """(server, proxy, libtiledb configuration through the proxy) for the pbmc fixture."""
    server = S3Server()
    try:
        server.start()
        server.create_bucket(BUCKET)
        server.upload_tree(fixtures_dir / STORE, BUCKET, STORE)
        with LatencyProxy(server.port) as proxy:
            yield server, proxy, server.tiledb_config(vfs__s3__endpoint_override=proxy.endpoint)
    finally:
        server.close()


def settled_count(proxy: LatencyProxy) -> int:
    """The proxy's count once no request has passed for QUIET seconds."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    last, since = proxy.count(), time.monotonic()
    while time.monotonic() - since < QUIET:
        assert time.monotonic() < deadline, f"requests still coming after {SETTLE_TIMEOUT}s"
        time.sleep(0.1)
        n = proxy.count()
        if n != last:
            last, since = n, time.monotonic()
    return last


def tiledbsoma_count(proxy: LatencyProxy, cfg: dict, fn):
    """(requests, result) of fn(experiment), the experiment opened from a fresh context."""
    proxy.reset()
    with tiledbsoma.open(f"s3://{BUCKET}/{STORE}", context=soma_context(cfg)) as exp:
        result = fn(exp)
    return settled_count(proxy), result


def report(what: str, mount: int, kinds: dict, reference: int) -> str:
    return f"{what}: soma-mount {mount} requests ({kinds}), tiledbsoma {reference}"


@pytest.mark.timeout(300)
def test_a_listing_costs_at_most_a_margin_over_tiledbsoma(counted, mount):
    _server, proxy, cfg = counted
    proxy.reset()
    with mount(f"s3://{BUCKET}/{STORE}", *config_args(cfg)) as mountpoint:
        mp = Path(mountpoint)
        names = sorted(os.listdir(mp / "obs"))
        with open(mp / "obs" / "metadata.json", "rb") as f:
            shown = json.loads(f.read())
        requests = settled_count(proxy)
        kinds = proxy.summary()

    def look(exp):
        return {k: tree_reference.norm_value(v) for k, v in exp.obs.metadata.items()}

    reference, metadata = tiledbsoma_count(proxy, cfg, look)
    summary = report("ls obs/ and its metadata.json", requests, kinds, reference)
    print(summary)
    assert "data.csv" in names and "metadata.json" in names, names
    assert json_equal(shown, metadata), f"obs/metadata.json is {shown}, tiledbsoma reads {metadata}"
    assert requests <= LISTING_RATIO * reference, summary


@pytest.mark.timeout(300)
def test_a_file_costs_at_most_a_margin_over_tiledbsoma(counted, mount):
    _server, proxy, cfg = counted
    proxy.reset()
    probs = formats.Problems("obs")
    with mount(f"s3://{BUCKET}/{STORE}", *config_args(cfg)) as mountpoint:
        data = formats.read_data_file(Path(mountpoint) / "obs" / "data.csv", probs)
        requests = settled_count(proxy)
        kinds = proxy.summary()

    def read(exp):
        return tr.soma_ref("obs", exp.obs)

    reference, ref = tiledbsoma_count(proxy, cfg, read)
    summary = report("cat obs/data.csv", requests, kinds, reference)
    print(summary)
    if data is not None:
        text = formats.decode_utf8(data, "data.csv", probs)
        if text is not None:
            formats.check_delimited(ref, text, "csv", probs)
    problems = probs.done()
    assert not problems, "\n".join(problems)
    assert requests <= FILE_RATIO * reference, summary


def walk(obj) -> int:
    """Opens every member under a SOMA object and reads its metadata; how many keys."""
    n = len(dict(obj.metadata))
    if obj.soma_type in ("SOMACollection", "SOMAExperiment", "SOMAMeasurement"):
        for key in obj:
            with obj[key] as member:
                n += walk(member)
    return n


@pytest.mark.timeout(300)
def test_listing_the_anndata_zarr_store_reads_only_what_lays_it_out(counted, mount):
    _server, proxy, cfg = counted
    proxy.reset()
    with mount(f"s3://{BUCKET}/{STORE}", *config_args(cfg)) as mountpoint:
        store = Path(mountpoint) / "anndata" / "RNA.zarr"
        listed = sorted(str(p.relative_to(store)) for p in store.rglob("*"))
        requests = settled_count(proxy)
        kinds = proxy.summary()

    def look(exp):
        columns = [f.name for f in exp.obs.schema]
        walk(exp)
        return columns

    reference, obs_columns = tiledbsoma_count(proxy, cfg, look)
    summary = report("ls -R anndata/RNA.zarr", requests, kinds, reference)
    print(summary)
    for column in obs_columns:
        if column not in ("soma_joinid", "obs_id"):
            assert f"obs/{column}" in listed, (column, listed[:40])
    assert "uns/bulk_labels_colors/.zarray" in listed, listed
    assert requests <= ZARR_LISTING_RATIO * reference, summary


# A fragment's attribute files (values, their offsets and validity): reading one reads values.
ATTRIBUTE_FILE = re.compile(r"/__fragments/[^/]+/a\d+(_var|_validity)?\.tdb$")


@pytest.mark.timeout(300)
def test_ls_l_of_slices_parquet_reads_no_cell_value(counted, mount):
    """`ls -l X/data/slices/parquet/` answers the exact size of every chunk (docs/REFERENCE.md, "Sizes
    and reads": sized Parquet) from the cells' coordinates alone: no request reads a
    fragment's attribute file (soma_data's values), and each listed size is the bytes then
    read."""
    _server, proxy, cfg = counted
    x = "ms/RNA/X/data"
    with mount(f"s3://{BUCKET}/{STORE}", "--chunk-cells", "50000", *config_args(cfg)) as mountpoint:
        d = Path(mountpoint) / x / "slices" / "parquet"
        os.listdir(d)
        settled_count(proxy)
        proxy.reset()
        sizes = {name: os.stat(d / name).st_size for name in sorted(os.listdir(d))}
        settled_count(proxy)
        listing = proxy.requests()
        read = {name: len((d / name).read_bytes()) for name in sizes}
        reads = proxy.requests()[len(listing):]
    values = lambda requests: [t for m, t in requests if m == "GET" and x in t and ATTRIBUTE_FILE.search(t.split("?")[0])]
    assert len(sizes) >= 5, f"{len(sizes)} chunks of about 50000 cells: {sorted(sizes)}"
    assert sizes == read, f"sizes at the first stat {sizes}, bytes read {read}"
    assert not values(listing), f"ls -l of slices/parquet/ read values: {values(listing)[:5]}"
    assert values(reads), "reading the chunks read no values: the check above would not see them"


@pytest.fixture(scope="module")
def appended(counted, tmp_path_factory) -> str:
    """The URI of a collection in the bucket holding `X`, a sparse matrix written by
    tiledbsoma in FRAGMENTS appends of ROWS_EACH rows each."""
    import numpy as np
    import pyarrow as pa

    server, _proxy, _cfg = counted
    path = tmp_path_factory.mktemp("appended") / "appended"
    with tiledbsoma.Collection.create(str(path)) as collection:
        collection.add_new_sparse_ndarray("X", type=pa.float32(), shape=(FRAGMENTS * ROWS_EACH, COLUMNS)).close()
    rng = np.random.default_rng(37)
    for k in range(FRAGMENTS):
        cells = rng.random((ROWS_EACH, COLUMNS)) < 0.1
        rows, cols = np.nonzero(cells)
        table = pa.table({
            "soma_dim_0": pa.array(rows + k * ROWS_EACH, pa.int64()),
            "soma_dim_1": pa.array(cols, pa.int64()),
            "soma_data": pa.array(rng.random(len(rows)), pa.float32()),
        })
        with tiledbsoma.open(str(path / "X"), "w") as x:
            x.write(table)
    import tiledb

    assert len(tiledb.array_fragments(str(path / "X"))) == FRAGMENTS
    server.upload_tree(path, BUCKET, "appended")
    return f"s3://{BUCKET}/appended"


@pytest.mark.timeout(300)
def test_an_array_of_many_fragments_opens_in_half_the_rounds_of_tiledbsoma(counted, appended, mount):
    _server, proxy, cfg = counted
    probs = formats.Problems("X")
    try:
        proxy.set_delay(APPENDED_DELAY_MS)
        proxy.reset()
        with mount(appended, *config_args(cfg)) as mountpoint:
            data = Path(mountpoint) / "X" / "data.csv"
            with open(data, "rb") as f:
                head = [f.readline() for _ in range(5)]
            requests = settled_count(proxy)
            rounds, kinds = proxy.rounds(), proxy.summary()
            proxy.set_delay(0)
            whole = formats.read_data_file(data, probs)

        proxy.set_delay(APPENDED_DELAY_MS)
        proxy.reset()
        with tiledbsoma.open(appended, context=soma_context(cfg)) as collection:
            collection["X"].read(coords=(0,)).tables().concat()
        reference = settled_count(proxy)
        reference_rounds = proxy.rounds()
    finally:
        proxy.set_delay(0)
    with tiledbsoma.open(appended, context=soma_context(cfg)) as collection:
        ref = tr.soma_ref("X", collection["X"])

    summary = (f"head -n 5 X/data.csv: soma-mount {requests} requests in {rounds} rounds ({kinds}), "
               f"tiledbsoma {reference} in {reference_rounds}")
    print(summary)
    if whole is not None:
        text = formats.decode_utf8(whole, "data.csv", probs)
        if text is not None:
            formats.check_delimited(ref, text, "csv", probs)
            lines = text.splitlines(keepends=True)[:5]
            if [line.decode() for line in head] != lines:
                probs.add(f"head -n 5 read {head}, the whole file starts {lines}")
    problems = probs.done()
    assert not problems, "\n".join(problems)
    assert 2 * rounds <= reference_rounds, summary
    assert requests <= APPENDED_REQUEST_RATIO * reference, summary


H5AD_QUERY = "louvain in ['1', '2']"


@pytest.mark.timeout(300)
def test_a_querys_h5ad_takes_fewer_rounds_than_tiledbsomas_to_anndata(counted, mount):
    _server, proxy, cfg = counted
    uri = f"s3://{BUCKET}/{STORE}"
    try:
        proxy.set_delay(APPENDED_DELAY_MS)
        proxy.reset()
        with mount(uri, *config_args(cfg)) as mountpoint:
            content = (Path(mountpoint) / "where" / H5AD_QUERY / "anndata" / "RNA.h5ad").read_bytes()
            requests = settled_count(proxy)
            rounds = proxy.rounds()

        proxy.reset()
        with tiledbsoma.open(uri, context=soma_context(cfg)) as exp:
            obs_query = tiledbsoma.AxisQuery(value_filter=H5AD_QUERY)
            with exp.axis_query("RNA", obs_query=obs_query) as query:
                expected = query.to_anndata(X_name="data")
        reference = settled_count(proxy)
        reference_rounds = proxy.rounds()
    finally:
        proxy.set_delay(0)

    summary = (f"where/{H5AD_QUERY}/anndata/RNA.h5ad: soma-mount {requests} requests in {rounds} "
               f"rounds, tiledbsoma's to_anndata {reference} in {reference_rounds}")
    print(summary)
    with h5py.File(io.BytesIO(content), "r") as f:
        got = anndata.io.read_elem(f)
    assert 0 < got.n_obs == expected.n_obs < 700, summary
    assert list(got.obs_names) == list(expected.obs.index), summary
    assert got.X.nnz == expected.X.nnz, summary
    assert rounds < reference_rounds, summary


# What libtiledb reads when it opens an array or a group, besides listings: its schemas,
# metadata, member lists and each fragment's metadata (TileDB's format: every such file
# is named by its timestamps and a UUID and never written again).
OPENED_DIRS = ("__schema", "__meta", "__group", "__fragment_meta")


def read_on_open(method: str, target: str) -> bool:
    key = key_of(target)
    if kind_of(method, target) == "LIST":
        return False
    parts = key.split("/")
    return key.endswith("/__fragment_metadata.tdb") or any(d in parts[:-1] for d in OPENED_DIRS)


def fragment_metadata(requests) -> list[str]:
    return [key_of(t) for m, t in requests if key_of(t).endswith("/__fragment_metadata.tdb")]


@pytest.mark.timeout(300)
def test_each_fragments_metadata_is_fetched_once_and_a_second_mount_fetches_none(
    counted, appended, mount, tmp_path
):
    """Issue 37: libtiledb reads each fragment's metadata in pieces (its size, its last
    bytes, its footer, later its R-tree), each a request of its own; each is fetched whole,
    once. A second mount of the store on the same cache (`--cache-dir`) sends no request
    for a fragment's metadata, nor for a schema, metadata or member list it has seen: only
    listings, and the tiles of what it reads."""
    _server, proxy, cfg = counted
    cache = tmp_path / "cache"
    seen, heads = [], []
    for _ in range(2):
        proxy.reset()
        with mount(appended, *config_args(cfg), "--cache-dir", str(cache)) as mountpoint:
            with open(Path(mountpoint) / "X" / "data.csv", "rb") as f:
                heads.append([f.readline() for _ in range(5)])
            settled_count(proxy)
            seen.append(proxy.requests())
    first, second = seen
    print(f"first mount: {len(first)} requests, second: {len(second)}: "
          f"{collections.Counter(kind_of(m, t) for m, t in second)}")
    fetched = fragment_metadata(first)
    assert len(fetched) == FRAGMENTS == len(set(fetched)), fetched
    again = [(m, key_of(t)) for m, t in second if read_on_open(m, t)]
    assert not again, f"the second mount read again: {again}"
    assert heads[0] == heads[1]
    with tiledbsoma.open(appended, context=soma_context(cfg)) as collection:
        table = collection["X"].read(coords=(slice(0, 0),)).tables().concat()
    assert table.num_rows > 0
    first_line = heads[0][1].decode().strip().split(",")
    assert int(first_line[0]) == 0, heads[0]


@pytest.mark.timeout(300)
def test_a_group_opened_on_a_second_mount_reads_only_listings_and_tiles(counted, mount, tmp_path):
    """pbmc (groups down to obs): `cat obs/data.csv` on a second mount on the same cache
    sends no request for what the opens of the root, obs and their members read, and
    serves what tiledbsoma reads."""
    _server, proxy, cfg = counted
    cache = tmp_path / "cache"
    seen = []
    texts = []
    for _ in range(2):
        proxy.reset()
        with mount(f"s3://{BUCKET}/{STORE}", *config_args(cfg), "--cache-dir", str(cache)) as mountpoint:
            texts.append((Path(mountpoint) / "obs" / "data.csv").read_bytes())
            settled_count(proxy)
            seen.append(proxy.requests())
    again = [(m, key_of(t)) for m, t in seen[1] if read_on_open(m, t)]
    assert not again, f"the second mount read again: {again}"
    assert texts[0] == texts[1]
    probs = formats.Problems("obs")
    with tiledbsoma.open(f"s3://{BUCKET}/{STORE}", context=soma_context(cfg)) as exp:
        ref = tr.soma_ref("obs", exp.obs)
    formats.check_delimited(ref, formats.decode_utf8(texts[1], "data.csv", probs), "csv", probs)
    problems = probs.done()
    assert not problems, "\n".join(problems)
