"""Integration tests for the AnnData Zarr stores (README "AnnData as Zarr: `<measurement>.zarr/`";
docs/SEMANTICS.md "AnnData Zarr stores"):

- <experiment>/anndata/<measurement>.zarr of every experiment fixture, read with
  anndata.read_zarr, equals tiledbsoma's to_anndata, as the h5ad does (test_anndata.py's
  comparison, the same README exceptions);
- anndata.experimental.read_lazy opens it, and a slice of 100 rows of a 100,000-cell
  experiment, to memory, equals the same rows of to_anndata;
- zarr's own reader opens every array, and finds what the consolidated metadata says;
- `stat` of every chunk of numbers is exact before it is read; text chunks are 0 until read,
  then exact;
- what a lazy slice costs: the chunk files of X it opens are no more than twice the chunks
  that hold its rows' entries (counted with an audit hook on `open`), and the entries per
  row it has counted are those of the fragments that hold its indptr chunks' rows;
- a store that cannot be made lists only error.txt, says why in the log, and the daemon
  keeps serving;
- a single null in one data tile of many, over two fragments, decides a column's encoding
  as in to_anndata (soma-mount counts nulls from fragment metadata).

Run: .venv/bin/python -m pytest tests/python/test_zarr.py -q
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
import warnings
from pathlib import Path

import anndata
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import zarr

import tiledbsoma
import tiledbsoma.io
from harness.mount import mount_guard
from test_anndata import WHOLE, assert_anndata_equal, reference, unordered_store

pytestmark = pytest.mark.timeout(600)

# The 100,000-cell experiment: cells x genes, entries per cell.
N_OBS, N_VAR, PER_CELL = 100_000, 5_000, 40


def read_zarr_quietly(path) -> anndata.AnnData:
    """anndata.read_zarr with every warning an error: the store follows the spec."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return anndata.read_zarr(path)


def object_strings(value):
    """uns as read from an h5ad: anndata reads a Zarr array of strings as NumPy's
    StringDType, an h5ad's as objects; the strings are the same."""
    if isinstance(value, dict):
        return {k: object_strings(v) for k, v in value.items()}
    if isinstance(value, np.ndarray) and value.dtype.kind == "T":
        return value.astype(object)
    return value


@pytest.fixture(scope="module")
def atlas(tmp_path_factory) -> Path:
    """An experiment of 100,000 cells x 5,000 genes, 40 entries a cell (4 million in X):
    obs with an id, a categorical and numbers; var with an id."""
    uri = tmp_path_factory.mktemp("atlas") / "experiment"
    rng = np.random.default_rng(7)
    types = pa.array(["B", "T", "NK", "Mono"], pa.large_string())
    obs = pa.table(
        {
            "soma_joinid": pa.array(np.arange(N_OBS, dtype=np.int64)),
            "obs_id": pa.array([f"cell_{i:06d}" for i in range(N_OBS)], pa.large_string()),
            "cell_type": pa.DictionaryArray.from_arrays(
                pa.array(rng.integers(0, len(types), N_OBS).astype(np.int8)), types
            ),
            "n_counts": pa.array(rng.random(N_OBS).astype(np.float32)),
        }
    )
    var = pa.table(
        {
            "soma_joinid": pa.array(np.arange(N_VAR, dtype=np.int64)),
            "var_id": pa.array([f"gene_{i:05d}" for i in range(N_VAR)], pa.large_string()),
        }
    )
    with tiledbsoma.Experiment.create(str(uri)) as exp:
        exp.add_new_dataframe("obs", schema=obs.schema, domain=[(0, N_OBS - 1)])
        rna = exp.add_new_collection("ms").add_new_collection("RNA", tiledbsoma.Measurement)
        rna.add_new_dataframe("var", schema=var.schema, domain=[(0, N_VAR - 1)])
        rna.add_new_collection("X").add_new_sparse_ndarray("data", type=pa.float32(), shape=(N_OBS, N_VAR))
    with tiledbsoma.open(str(uri / "obs"), "w") as df:
        df.write(obs)
    with tiledbsoma.open(str(uri / "ms" / "RNA" / "var"), "w") as df:
        df.write(var)
    step = N_VAR // PER_CELL
    with tiledbsoma.open(str(uri / "ms" / "RNA" / "X" / "data"), "w") as x:
        for start in range(0, N_OBS, 25_000):
            n = 25_000
            rows = np.repeat(np.arange(start, start + n, dtype=np.int64), PER_CELL)
            cols = rng.integers(0, step, n)[:, None] + np.arange(PER_CELL, dtype=np.int64)[None, :] * step
            vals = rng.random(rows.size, dtype=np.float32)
            x.write(pa.table({"soma_dim_0": rows, "soma_dim_1": cols.ravel(), "soma_data": vals}))
    return uri


# --------------------------------------------------------------------------------------
# equality with to_anndata


@pytest.mark.parametrize("store,experiment,measurement", WHOLE, ids=lambda v: v or "-")
def test_zarr_equals_to_anndata(mounts, fixtures_dir, store, experiment, measurement):
    path = Path(mounts(store), experiment, "anndata", f"{measurement}.zarr")
    got = read_zarr_quietly(path)
    got.uns = object_strings(dict(got.uns))
    expected = reference(fixtures_dir / store / experiment, measurement)
    assert_anndata_equal(got, expected, f"{store}/{experiment} {measurement} zarr")


def test_anndata_lists_a_zarr_store_per_measurement(mounts):
    root = Path(mounts("pbmc"), "anndata")
    assert sorted(os.listdir(root)) == ["RNA.h5ad", "RNA.zarr", "by", "raw.h5ad", "raw.zarr"]
    assert "RNA.zarr" not in os.listdir(root / "by" / "phase" / "S")
    store = root / "RNA.zarr"
    assert sorted(os.listdir(store)) == sorted(
        [".zattrs", ".zgroup", ".zmetadata", "X", "layers", "obs", "obsm", "obsp", "uns", "var", "varm", "varp"]
    )


def test_read_lazy_slice_equals_the_same_rows_of_to_anndata(atlas, soma_mount_bin):
    with mount_guard(atlas, label="zarr atlas") as mp:
        lazy = anndata.experimental.read_lazy(Path(mp, "anndata", "RNA.zarr"))
        assert lazy.shape == (N_OBS, N_VAR)
        got = lazy[1000:1100].to_memory()
    expected = reference(atlas, "RNA")[1000:1100].copy()
    assert got.shape == (100, N_VAR)
    assert list(got.obs_names) == list(expected.obs_names)
    assert list(got.var_names) == list(expected.var_names)
    for name in expected.obs.columns:
        have, want = got.obs[name], expected.obs[name]
        if isinstance(want.dtype, pd.CategoricalDtype):
            assert list(have.astype(str)) == list(want.astype(str)), name
            assert list(have.cat.categories) == list(want.cat.categories), name
        else:
            assert np.array_equal(have.to_numpy(), want.to_numpy()), name
    assert got.X.dtype == expected.X.dtype
    assert (got.X != expected.X).nnz == 0
    assert got.X.nnz == expected.X.nnz == 100 * PER_CELL


def test_read_zarr_of_a_store_of_many_chunks_equals_to_anndata(atlas, soma_mount_bin):
    """X in 16 chunks of data and of indices, rows straddling their edges."""
    with mount_guard(atlas, label="zarr atlas whole") as mp:
        got = read_zarr_quietly(Path(mp, "anndata", "RNA.zarr"))
    assert_anndata_equal(got, reference(atlas, "RNA"), "atlas zarr")


@pytest.mark.parametrize("fragments", [1, 2])
def test_nulls_in_one_tile_of_many_decide_the_encoding_as_in_to_anndata(tmp_path, soma_mount_bin, fragments):
    """obs of 230,000 rows in one or two fragments, several data tiles each: a column with a
    single null in one tile is encoded as to_anndata reads it (integers as float64, booleans
    with their mask), one with none as plain integers and booleans. soma-mount counts the
    nulls from the fragments' metadata, tile by tile, never reading the values (nor, in one
    fragment that holds every join id of its range, the join ids)."""
    n = 230_000
    first = 150_000 if fragments == 2 else n
    uri = tmp_path / "experiment"
    ids = np.arange(n, dtype=np.int64)
    counts = pa.array(ids.astype(np.int32), mask=ids == 140_000)
    flags = pa.array((ids % 3 == 0), mask=ids == 229_000)
    obs = pa.table(
        {
            "soma_joinid": pa.array(ids),
            "obs_id": pa.array([f"c{i}" for i in range(n)], pa.large_string()),
            "count_one_null": counts,
            "count_no_null": pa.array(ids),
            "flag_one_null": flags,
            "flag_no_null": pa.array(ids % 2 == 0),
        }
    )
    var = pa.table(
        {
            "soma_joinid": pa.array(np.arange(3, dtype=np.int64)),
            "var_id": pa.array(["a", "b", "c"], pa.large_string()),
        }
    )
    with tiledbsoma.Experiment.create(str(uri)) as exp:
        exp.add_new_dataframe("obs", schema=obs.schema, domain=[(0, n - 1)])
        rna = exp.add_new_collection("ms").add_new_collection("RNA", tiledbsoma.Measurement)
        rna.add_new_dataframe("var", schema=var.schema, domain=[(0, 2)])
        rna.add_new_collection("X").add_new_sparse_ndarray("data", type=pa.float32(), shape=(n, 3))
    for part in (obs.slice(0, first), obs.slice(first)):
        if part.num_rows:
            with tiledbsoma.open(str(uri / "obs"), "w") as df:
                df.write(part)
    with tiledbsoma.open(str(uri / "ms" / "RNA" / "var"), "w") as df:
        df.write(var)
    with tiledbsoma.open(str(uri / "ms" / "RNA" / "X" / "data"), "w") as x:
        rows = np.array([0, 140_000, 229_999], dtype=np.int64)
        cols = np.array([0, 1, 2], dtype=np.int64)
        x.write(pa.table({"soma_dim_0": rows, "soma_dim_1": cols, "soma_data": np.ones(3, np.float32)}))
    expected = reference(uri, "RNA")
    assert str(expected.obs["count_one_null"].dtype) == "float64", expected.obs.dtypes
    with mount_guard(uri, label=f"zarr nulls in one tile, {fragments} fragments") as mp:
        store = Path(mp, "anndata", "RNA.zarr")
        assert (store / "obs" / "flag_one_null" / "mask").is_dir(), sorted(os.listdir(store / "obs"))
        assert not (store / "obs" / "flag_no_null" / "mask").exists()
        got = read_zarr_quietly(store)
    assert_anndata_equal(got, expected, "obs with a null in one tile of many")


# --------------------------------------------------------------------------------------
# the store itself


def test_zarr_opens_every_array_as_the_metadata_says(mounts):
    path = Path(mounts("pbmc"), "anndata", "RNA.zarr")
    consolidated = json.loads((path / ".zmetadata").read_text())["metadata"]
    root = zarr.open_group(str(path), mode="r", zarr_format=2, use_consolidated=False)
    assert dict(root.attrs) == {"encoding-type": "anndata", "encoding-version": "0.1.0"}
    arrays = []

    def visit(group, prefix):
        for name, member in group.members():
            at = f"{prefix}{name}"
            assert json.loads((path / at / (".zarray" if isinstance(member, zarr.Array) else ".zgroup")).read_text())
            assert dict(member.attrs) == consolidated[f"{at}/.zattrs"], at
            if isinstance(member, zarr.Array):
                arrays.append(at)
                meta = consolidated[f"{at}/.zarray"]
                assert list(member.shape) == meta["shape"], at
                assert member.metadata.compressor is None, at
                values = np.asarray(member[...])
                assert values.shape == tuple(meta["shape"]), at
            else:
                visit(member, f"{at}/")

    visit(root, "")
    for must in ("X/data", "X/indices", "X/indptr", "obs/_index", "obsm/X_pca", "obs/louvain/codes"):
        assert must in arrays
    x = root["X"]
    assert x.attrs["encoding-type"] == "csr_matrix" and list(x.attrs["shape"]) == [700, 765]
    assert x["indptr"].dtype == np.int64 and x["indptr"].shape == (701,)
    assert x["indptr"][-1] == x["data"].shape[0] == x["indices"].shape[0]


def test_stat_of_every_chunk_equals_the_bytes_read(mounts):
    path = Path(mounts("pbmc"), "anndata", "raw.zarr")
    checked = {"numbers": 0, "text": 0}
    for dirpath, _, files in os.walk(path):
        if ".zarray" not in files:
            continue
        meta = json.loads(Path(dirpath, ".zarray").read_text())
        for name in files:
            if name.startswith("."):
                continue
            chunk = Path(dirpath, name)
            before = os.stat(chunk).st_size
            content = chunk.read_bytes()
            if meta["dtype"] == "|O":
                assert before in (0, len(content)), chunk
                checked["text"] += 1
            else:
                itemsize = int(meta["dtype"][2:])
                assert before == len(content) == int(np.prod(meta["chunks"])) * itemsize, chunk
                checked["numbers"] += 1
            assert os.stat(chunk).st_size == len(content), chunk
    assert checked["numbers"] > 10 and checked["text"] > 2


# --------------------------------------------------------------------------------------
# what a lazy slice costs


class OpenedFiles:
    """The files under `root` this process opens (an audit hook; hooks cannot be removed,
    so this one only records while `active`)."""

    def __init__(self, root: Path):
        self.root = str(root)
        self.active = False
        self.paths: list[str] = []
        sys.addaudithook(self.hook)

    def hook(self, event, args):
        if self.active and event == "open" and isinstance(args[0], (str, os.PathLike)):
            path = os.fspath(args[0])
            if path.startswith(self.root):
                self.paths.append(os.path.relpath(path, self.root))

    def chunks_of(self, array: str) -> set[str]:
        return {p for p in self.paths if os.path.dirname(p) == array and not os.path.basename(p).startswith(".")}


def test_a_lazy_slice_opens_only_the_chunks_that_hold_its_rows(atlas, soma_mount_bin):
    with mount_guard(atlas, label="zarr atlas cost") as mp:
        store = Path(mp, "anndata", "RNA.zarr")
        meta = json.loads((store / ".zmetadata").read_text())["metadata"]
        data_chunk = meta["X/data/.zarray"]["chunks"][0]
        total_chunks = -(-meta["X/data/.zarray"]["shape"][0] // data_chunk)
        assert total_chunks >= 4, "the test wants X cut into several chunks"
        opened = OpenedFiles(store)
        lazy = anndata.experimental.read_lazy(store)
        opened.active = True
        got = lazy[50_000:50_100].to_memory()
        opened.active = False
        indptr = zarr.open_array(str(store / "X" / "indptr"), mode="r", zarr_format=2)[...]
    first, end = int(indptr[50_000]), int(indptr[50_100])
    needed = len(range(first // data_chunk, (end - 1) // data_chunk + 1))
    assert got.X.nnz == end - first
    for part in ("X/data", "X/indices"):
        chunks = opened.chunks_of(part)
        assert 0 < len(chunks) <= 2 * needed, f"{part}: opened {sorted(chunks)}, {needed} hold the rows"
        assert len(chunks) < total_chunks


def test_a_lazy_slice_counts_only_the_fragments_that_hold_its_rows(atlas, soma_mount_bin):
    """X is written in fragments that share no row: a lazy slice of 100 rows has the
    entries per row counted (the daemon's log at -vv names the rows of each count) of
    exactly the fragments that hold the rows of the indptr chunks it reads, as tiledb's
    fragment list and the store's .zmetadata tell, not of the whole matrix."""
    import tiledb

    x_uri = str(atlas / "ms" / "RNA" / "X" / "data")
    fragments = sorted(tuple(int(v) for v in f.nonempty_domain[0]) for f in tiledb.array_fragments(x_uri))
    assert len(fragments) >= 3, "the test wants X in several fragments"
    with mount_guard(atlas, "-vv", label="zarr lazy counts") as mp:
        store = Path(mp, "anndata", "RNA.zarr")
        chunk = json.loads((store / ".zmetadata").read_text())["metadata"]["X/indptr/.zarray"]["chunks"][0]
        lazy = anndata.experimental.read_lazy(store)
        got = lazy[50_000:50_100].to_memory()
        log = mp.log.read_text()
    assert got.n_obs == 100
    # indptr[50_000:50_101] lies in these chunks; each needs the fragments its rows are in.
    chunk_rows = [(k * chunk, (k + 1) * chunk - 1) for k in range(50_000 // chunk, 50_100 // chunk + 1)]
    want = {f for f in fragments if any(f[0] <= hi and lo <= f[1] for lo, hi in chunk_rows)}
    counted = {(int(lo), int(hi)) for lo, hi in re.findall(r"entries per row counted in .*\(rows (\d+)-(\d+)\)", log)}
    assert "(every row)" not in log
    assert counted == want, f"counted rows {sorted(counted)}; the chunks {chunk_rows} need {sorted(want)}"
    assert len(want) < len(fragments)


def test_a_store_that_cannot_be_made_lists_only_its_error(tmp_path, soma_mount_bin):
    """obs indexed by a name first: its rows do not come in soma_joinid order, which the
    matrices are laid out by (as for the h5ad)."""
    store = unordered_store(tmp_path)
    with mount_guard(store) as mp:
        path = Path(mp, "anndata", "RNA.zarr")
        assert os.listdir(path) == ["error.txt"]
        assert "soma_joinid order" in (path / "error.txt").read_text()
        with pytest.raises(OSError) as missing:
            os.stat(path / ".zmetadata")
        assert missing.value.errno == errno.ENOENT
        assert "soma_joinid order" in mp.log.read_text()
        assert Path(mp, "obs", "data.csv").read_text().count("\n") == 5


def test_entries_per_row_are_counted_once_for_daemons_that_share_a_cache(atlas, tmp_path, soma_mount_bin):
    """The first daemon counts X's entries per row (its log says so at -vv) and keeps them
    in the cache; one started again on the same cache reads them from there, and serves
    the same X."""
    cache = tmp_path / "cache"
    xs = []
    counted = []
    for _ in range(2):
        with mount_guard(atlas, "--cache-dir", cache, "-vv", label="zarr counts") as mp:
            store = Path(mp, "anndata", "RNA.zarr")
            xs.append(zarr.open_array(str(store / "X" / "indptr"), mode="r", zarr_format=2)[...])
            counted.append("entries per row counted" in mp.log.read_text())
    assert counted == [True, False]
    assert np.array_equal(xs[0], xs[1])
    assert np.array_equal(np.diff(xs[0]), np.full(N_OBS, PER_CELL))


def overwritten_store(tmp_path: Path) -> Path:
    """An experiment whose X is written in fragments that share rows: columns 0-1 of every
    row, then columns 2-3, then two cells again with new values (a read shows each once,
    the later value); and a cell in a row that obs does not hold (to_anndata leaves it
    out). The fragments' cell counts add up to 16, the array holds 14 cells, and
    to_anndata reads 12 on obs's rows."""
    store = tmp_path / "overwritten"
    obs_schema = pa.schema([("soma_joinid", pa.int64()), ("obs_id", pa.large_string())])
    var_schema = pa.schema([("soma_joinid", pa.int64()), ("var_id", pa.large_string())])
    with tiledbsoma.Experiment.create(str(store)) as exp:
        obs = exp.add_new_dataframe("obs", schema=obs_schema, domain=[(0, 3)])
        obs.write(pa.table({"soma_joinid": [0, 1, 2], "obs_id": ["c0", "c1", "c2"]}, schema=obs_schema))
        rna = exp.add_new_collection("ms").add_new_collection("RNA", tiledbsoma.Measurement)
        var = rna.add_new_dataframe("var", schema=var_schema, domain=[(0, 3)])
        var.write(pa.table({"soma_joinid": [0, 1, 2, 3], "var_id": ["g0", "g1", "g2", "g3"]}, schema=var_schema))
        rna.add_new_collection("X").add_new_sparse_ndarray("data", type=pa.float32(), shape=(4, 4))
    x_uri = str(store / "ms" / "RNA" / "X" / "data")
    for rows, cols in [([0, 1, 2], [0, 1]), ([0, 1, 2, 3], [2, 3]), ([0, 2], [1])]:
        i, j = (a.ravel() for a in np.meshgrid(np.array(rows), np.array(cols), indexing="ij"))
        with tiledbsoma.open(x_uri, "w") as x:
            x.write(pa.table({"soma_dim_0": i, "soma_dim_1": j, "soma_data": (10 * i + j + 0.5).astype(np.float32)}))
    return store


def test_a_matrix_whose_fragments_share_rows_is_counted(tmp_path, soma_mount_bin):
    """The number of entries of X comes from its fragments only when they cannot hold a
    cell twice and every cell is on obs and var; here neither holds, so the entries are
    counted, and the store equals to_anndata."""
    store = overwritten_store(tmp_path)
    expected = reference(store, "RNA")
    assert expected.X.nnz == 12
    with mount_guard(store, label="zarr overwritten") as mp:
        path = Path(mp, "anndata", "RNA.zarr")
        meta = json.loads((path / "X" / "data" / ".zarray").read_text())
        assert meta["shape"] == [12]
        got = read_zarr_quietly(path)
    assert_anndata_equal(got, expected, "overwritten zarr")


def gapped_store(tmp_path: Path) -> Path:
    """An experiment of 100 cells whose X fragments hold rows 10-19 (two entries each),
    40-59 (the even rows only) and 80-89: rows before, between and after them hold no
    entry, as do the odd rows inside the second."""
    store = tmp_path / "gapped"
    obs_schema = pa.schema([("soma_joinid", pa.int64()), ("obs_id", pa.large_string())])
    var_schema = pa.schema([("soma_joinid", pa.int64()), ("var_id", pa.large_string())])
    with tiledbsoma.Experiment.create(str(store)) as exp:
        obs = exp.add_new_dataframe("obs", schema=obs_schema, domain=[(0, 99)])
        obs.write(pa.table({"soma_joinid": np.arange(100), "obs_id": [f"c{i}" for i in range(100)]}, schema=obs_schema))
        rna = exp.add_new_collection("ms").add_new_collection("RNA", tiledbsoma.Measurement)
        var = rna.add_new_dataframe("var", schema=var_schema, domain=[(0, 9)])
        var.write(pa.table({"soma_joinid": np.arange(10), "var_id": [f"g{j}" for j in range(10)]}, schema=var_schema))
        rna.add_new_collection("X").add_new_sparse_ndarray("data", type=pa.float32(), shape=(100, 10))
    x_uri = str(store / "ms" / "RNA" / "X" / "data")
    for rows in [np.arange(10, 20), np.arange(40, 60, 2), np.arange(80, 90)]:
        i = np.repeat(rows, 2)
        j = np.tile(np.array([1, 7]), len(rows)) + (i % 2)
        with tiledbsoma.open(x_uri, "w") as x:
            x.write(pa.table({"soma_dim_0": i, "soma_dim_1": j, "soma_data": (10 * i + j + 0.5).astype(np.float32)}))
    return store


def test_rows_between_and_around_fragments_hold_no_entry(tmp_path, soma_mount_bin):
    """X's fragments leave rows out before, between and after them (and inside one): the
    store read whole equals to_anndata, and a lazy slice across the gaps equals the same
    rows of to_anndata."""
    store = gapped_store(tmp_path)
    expected = reference(store, "RNA")
    assert expected.X.nnz == 60
    with mount_guard(store, label="zarr gapped") as mp:
        path = Path(mp, "anndata", "RNA.zarr")
        assert_anndata_equal(read_zarr_quietly(path), expected, "gapped zarr")
        lazy = anndata.experimental.read_lazy(path)
        got = lazy[35:85].to_memory()
    assert_anndata_equal(got, expected[35:85].copy(), "gapped zarr rows 35-84")
