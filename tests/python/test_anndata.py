"""Integration tests for the AnnData views (docs/REFERENCE.md "AnnData views"; REFERENCE.md "AnnData:
`anndata/`"):

- <experiment>/anndata/<measurement>.h5ad of every experiment fixture (pbmc's RNA and
  raw, hand's experiment with every column type, the encoding-1.0.0 store v1, legacy/noids)
  read with anndata.read_h5ad, with warnings as errors, equals tiledbsoma's to_anndata
  (X from `data`, every other layer under layers): obs and var (index, column order, values,
  dtypes, categories and their order), X and every layer (same entries, same dtype), obsm,
  varm, obsp, varp and uns. Where anndata cannot hold what to_anndata holds (object
  columns with nulls, bytes, timestamps), the file holds what docs/REFERENCE.md says.
- anndata/by/<column>/<label>/<measurement>.h5ad equals to_anndata's AnnData restricted to
  the label's cells (obs rows; rows of X, layers and obsm; rows and columns of obsp).
- h5py finds encoding-type and encoding-version on every group and dataset.
- scanpy's normalize_total, log1p, highly_variable_genes and pca run on a mounted file.
- R reads X through hdf5r (skipped only when the R package is missing).
- under a --max-memory below one reader's share (readers take turns) an h5ad is whole.
- sizes: 0 until generated, exact after; --exact-sizes answers stat exactly; the cache is
  reused; a member named `anndata` wins; an experiment without obs and ms has no
  `anndata/`; a file that cannot be made is EIO, leaves nothing in the cache, and the daemon
  keeps serving.

Run: .venv/bin/python -m pytest tests/python/test_anndata.py -q
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import anndata
import h5py
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import scipy.sparse as sp

import tiledbsoma
import tiledbsoma.io
from harness.mount import mount_guard

pytestmark = pytest.mark.timeout(300)

# (store, experiment inside the store, measurement)
WHOLE = [
    ("pbmc", "", "RNA"),
    ("pbmc", "", "raw"),
    ("hand", "", "RNA"),
    ("v1", "", "RNA"),
    ("legacy", "noids", "RNA"),
]
# (store, experiment, measurement, obs column, label directory, label; None is a null)
CATEGORIES = [
    ("pbmc", "", "RNA", "louvain", "3", "3"),
    ("hand", "", "RNA", "cell_type", "%00", ""),
    ("hand", "", "RNA", "lane", "-4", -4),
    ("v1", "", "RNA", "phase", "__null__", None),
]


def read_quietly(path) -> anndata.AnnData:
    """anndata.read_h5ad with every warning an error: the file follows the spec."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return anndata.read_h5ad(path)


def reference(uri: Path, measurement: str) -> anndata.AnnData:
    """tiledbsoma's to_anndata with X from `data` (else the first layer by name) and every
    other layer, as docs/REFERENCE.md says."""
    with tiledbsoma.Experiment.open(str(uri)) as exp:
        layers = sorted(exp.ms[measurement].X.keys())
        x = "data" if "data" in layers else layers[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Transforming to str index" for frames without ids
            return tiledbsoma.io.to_anndata(
                exp, measurement_name=measurement, X_layer_name=x, extra_X_layer_names=layers
            )


# --------------------------------------------------------------------------------------
# what the file holds for what anndata cannot (REFERENCE.md "AnnData: `anndata/`")


def iso8601(values: pd.Series) -> list:
    """Timestamps as data.csv spells them: ISO 8601 UTC with the unit's precision."""
    unit = np.datetime_data(values.dtype)[0]
    return [None if pd.isna(v) else np.datetime_as_string(v, unit=unit) + "Z" for v in values.to_numpy()]


def as_written(column: pd.Series) -> pd.Series:
    """A to_anndata column as the h5ad holds it: timestamps and bytes as text (ISO 8601,
    hex), booleans with nulls as a nullable boolean, text with nulls as a nullable string."""
    if pd.api.types.is_datetime64_any_dtype(column):
        values = iso8601(column)
    elif column.dtype == object and any(isinstance(v, bytes) for v in column):
        values = [None if v is None else v.hex() for v in column]
    elif column.dtype == object:
        values = list(column)
    else:
        return column
    has_null = any(v is None or (isinstance(v, float) and np.isnan(v)) for v in values)
    if not has_null:
        return pd.Series(values, index=column.index, name=column.name, dtype=object)
    if all(v is None or isinstance(v, (bool, np.bool_)) for v in values):
        return pd.Series(pd.array(values, dtype="boolean"), index=column.index, name=column.name)
    return pd.Series(pd.array(values, dtype="string"), index=column.index, name=column.name)


def assert_frame_as_written(got: pd.DataFrame, expected: pd.DataFrame, what: str) -> None:
    assert list(got.index) == list(expected.index), f"{what}: index"
    assert got.index.name == expected.index.name, f"{what}: index name"
    assert list(got.columns) == list(expected.columns), f"{what}: columns"
    for name in expected.columns:
        want = as_written(expected[name])
        have = got[name]
        if isinstance(want.dtype, pd.CategoricalDtype):
            assert isinstance(have.dtype, pd.CategoricalDtype), f"{what}.{name}: not categorical"
            assert list(have.cat.categories) == list(want.cat.categories), f"{what}.{name}: categories"
            assert have.cat.categories.dtype == want.cat.categories.dtype, f"{what}.{name}: category dtype"
            assert have.cat.ordered == want.cat.ordered, f"{what}.{name}: ordered"
            assert list(have.cat.codes) == list(want.cat.codes), f"{what}.{name}: codes"
        else:
            pd.testing.assert_series_equal(
                have.reset_index(drop=True), want.reset_index(drop=True), check_names=False, obj=f"{what}.{name}"
            )


def assert_matrix_equal(got, expected, what: str) -> None:
    assert got.shape == expected.shape, f"{what}: shape"
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype} != {expected.dtype}"
    if sp.issparse(expected):
        assert sp.issparse(got) and got.format == "csr", f"{what}: not CSR"
        got, expected = got.tocsr(), sp.csr_matrix(expected)
        got.sort_indices()
        expected.sort_indices()
        assert np.array_equal(got.indptr, expected.indptr), f"{what}: rows"
        assert np.array_equal(got.indices, expected.indices), f"{what}: columns"
        assert np.array_equal(got.data, expected.data, equal_nan=got.dtype.kind == "f"), f"{what}: values"
    else:
        assert isinstance(got, np.ndarray), f"{what}: not dense"
        assert np.array_equal(got, expected, equal_nan=got.dtype.kind == "f"), f"{what}: values"


def assert_uns_equal(got, expected, what: str) -> None:
    if isinstance(expected, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(expected), f"{what}: keys"
        for key in expected:
            assert_uns_equal(got[key], expected[key], f"{what}/{key}")
    elif isinstance(expected, pd.DataFrame):
        assert_frame_as_written(got, expected, what)
    elif isinstance(expected, np.ndarray):
        assert isinstance(got, np.ndarray) and got.shape == expected.shape, f"{what}: shape"
        if expected.dtype.kind in "UO":
            assert got.astype(str).tolist() == expected.astype(str).tolist(), f"{what}: text"
        else:
            assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype} != {expected.dtype}"
            assert np.array_equal(got, expected, equal_nan=got.dtype.kind == "f"), f"{what}: values"
    else:
        assert got == expected, f"{what}: {got!r} != {expected!r}"


def assert_anndata_equal(got: anndata.AnnData, expected: anndata.AnnData, what: str) -> None:
    assert got.shape == expected.shape, f"{what}: shape"
    assert_frame_as_written(got.obs, expected.obs, f"{what} obs")
    assert_frame_as_written(got.var, expected.var, f"{what} var")
    assert_matrix_equal(got.X, expected.X, f"{what} X")
    assert sorted(got.layers) == sorted(expected.layers), f"{what}: layers"
    for part in ("layers", "obsm", "varm", "obsp", "varp"):
        have, want = getattr(got, part), getattr(expected, part)
        assert sorted(have) == sorted(want), f"{what}: {part} keys"
        for key in want:
            assert_matrix_equal(have[key], want[key], f"{what} {part}/{key}")
    assert_uns_equal(dict(got.uns), dict(expected.uns), f"{what} uns")


def restricted(adata: anndata.AnnData, column: str, label) -> anndata.AnnData:
    """The AnnData of the cells whose obs column holds `label` (None: a null), categories
    kept whole as in the whole file (an AnnData view would drop the unused ones)."""
    labels = adata.obs[column]
    mask = (labels.isna() if label is None else (labels == label)).to_numpy()
    return anndata.AnnData(
        X=adata.X[mask],
        obs=adata.obs[mask],
        var=adata.var,
        layers={k: v[mask] for k, v in adata.layers.items()},
        obsm={k: v[mask] for k, v in adata.obsm.items()},
        varm=dict(adata.varm),
        obsp={k: v[mask][:, mask] for k, v in adata.obsp.items()},
        varp=dict(adata.varp),
        uns=dict(adata.uns),
    )


# --------------------------------------------------------------------------------------
# equality with to_anndata


@pytest.mark.parametrize("store,experiment,measurement", WHOLE, ids=lambda v: v or "-")
def test_h5ad_equals_to_anndata(mounts, fixtures_dir, store, experiment, measurement):
    path = Path(mounts(store), experiment, "anndata", f"{measurement}.h5ad")
    got = read_quietly(path)
    expected = reference(fixtures_dir / store / experiment, measurement)
    assert_anndata_equal(got, expected, f"{store}/{experiment} {measurement}")


@pytest.mark.parametrize("store,experiment,measurement,column,directory,label", CATEGORIES, ids=str)
def test_category_h5ad_equals_to_anndata_of_its_cells(
    mounts, fixtures_dir, store, experiment, measurement, column, directory, label
):
    base = Path(mounts(store), experiment, "anndata", "by", column)
    assert directory in os.listdir(base)
    got = read_quietly(base / directory / f"{measurement}.h5ad")
    whole = reference(fixtures_dir / store / experiment, measurement)
    expected = restricted(whole, column, label)
    assert 0 < expected.n_obs < whole.n_obs, "the test wants a proper subset"
    assert_anndata_equal(got, expected, f"{store} {column}={label!r}")


def test_an_h5ad_is_whole_when_its_readers_must_take_turns(fixtures_dir):
    """--max-memory far below one reader's share: every reader takes the whole budget, so
    the h5ad's reads (X's, and those of its small elements read early, at once) run one at
    a time; the file is still whole and equal to to_anndata, and nothing waits forever."""
    with mount_guard(fixtures_dir / "pbmc", "--max-memory", "8M", label="h5ad 8M") as mp:
        got = read_quietly(Path(mp, "anndata", "RNA.h5ad"))
    expected = reference(fixtures_dir / "pbmc", "RNA")
    assert_anndata_equal(got, expected, "pbmc RNA under --max-memory 8M")


def test_anndata_lists_measurements_and_categories(mounts):
    root = Path(mounts("pbmc"))
    assert "anndata" in os.listdir(root)
    assert sorted(os.listdir(root / "anndata")) == ["RNA.h5ad", "RNA.zarr", "by", "raw.h5ad", "raw.zarr"]
    assert sorted(os.listdir(root / "anndata" / "by")) == ["bulk_labels", "louvain", "phase"]
    phases = sorted(os.listdir(root / "anndata" / "by" / "phase"))
    assert phases == ["G1", "G2M", "S", "__null__"]
    assert sorted(os.listdir(root / "anndata" / "by" / "phase" / "S")) == ["RNA.h5ad", "raw.h5ad"]


# --------------------------------------------------------------------------------------
# the file itself


def test_h5py_finds_encoding_attributes_everywhere(mounts):
    path = Path(mounts("pbmc"), "anndata", "RNA.h5ad")
    with h5py.File(path, "r") as f:
        assert dict(f.attrs) == {"encoding-type": "anndata", "encoding-version": "0.1.0"}
        unmarked = []

        def check(name, obj):
            if "encoding-type" not in obj.attrs or "encoding-version" not in obj.attrs:
                unmarked.append(name)

        f.visititems(check)
        assert unmarked == []
        assert f["obs"].attrs["encoding-type"] == "dataframe"
        assert f["obs"].attrs["encoding-version"] == "0.2.0"
        assert f["obs"].attrs["_index"] == "_index"
        assert list(f["obs"].attrs["column-order"])[:2] == ["bulk_labels", "n_genes"]
        assert f["obs/louvain"].attrs["encoding-type"] == "categorical"
        assert f["X"].attrs["encoding-type"] == "csr_matrix"
        assert list(f["X"].attrs["shape"]) == [700, 765]
        assert f["X/indptr"].dtype == np.int64 and f["X/indptr"].shape == (701,)
        assert f["obsm/X_pca"].attrs["encoding-type"] == "array"
        assert f["uns/neighbors/params/method"].attrs["encoding-type"] == "string"


def test_scanpy_workflow_runs_on_the_mounted_file(mounts):
    import scanpy as sc

    adata = read_quietly(Path(mounts("pbmc"), "anndata", "raw.h5ad"))
    sc.pp.normalize_total(adata, target_sum=1e4)
    sc.pp.log1p(adata)
    sc.pp.highly_variable_genes(adata, n_top_genes=200)
    sc.tl.pca(adata, n_comps=10)
    assert adata.obsm["X_pca"].shape == (700, 10)
    assert adata.var["highly_variable"].sum() == 200


R_READ_X = r"""
suppressMessages(library(hdf5r))
args <- commandArgs(trailingOnly = TRUE)
f <- H5File$new(args[1], mode = "r")
x <- f[["X"]]
shape <- h5attr(x, "shape")
data <- x[["data"]]$read()
indices <- x[["indices"]]$read()
indptr <- x[["indptr"]]$read()
rows <- rep(seq_len(shape[1]), diff(indptr))
m <- Matrix::sparseMatrix(i = rows, j = indices + 1, x = data, dims = shape)
cat(h5attr(f, "encoding-type"), h5attr(x, "encoding-type"), shape, length(data),
    sprintf("%.6f", sum(m)), sprintf("%.6f", m[2, 3]), "\n")
f$close_all()
"""


@pytest.mark.skipif(shutil.which("Rscript") is None, reason="Rscript is not installed (scripts/setup installs it)")
def test_r_reads_x_through_hdf5r(mounts, tmp_path):
    has = subprocess.run(
        ["Rscript", "-e", 'quit(status = !requireNamespace("hdf5r", quietly = TRUE))'], capture_output=True
    )
    if has.returncode != 0:
        pytest.skip("R's hdf5r package is not installed (scripts/setup installs r-cran-hdf5r)")
    path = Path(mounts("pbmc"), "anndata", "RNA.h5ad")
    script = tmp_path / "read_x.R"
    script.write_text(R_READ_X)
    r = subprocess.run(["Rscript", str(script), str(path)], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"Rscript failed:\n{r.stderr[-3000:]}"
    x = read_quietly(path).X
    words = r.stdout.split()
    assert words[:4] == ["anndata", "csr_matrix", "700", "765"]
    assert int(words[4]) == x.nnz
    assert float(words[5]) == pytest.approx(float(x.sum(dtype=np.float64)), rel=1e-6)
    assert float(words[6]) == pytest.approx(float(x[1, 2]), abs=1e-6)


def test_a_small_file_is_exact_at_its_first_stat(fixtures_dir):
    """docs/REFERENCE.md: a listed file estimated below --materialize-limit is generated by its first
    stat, so fread-like readers that size from stat get every byte."""
    with mount_guard(fixtures_dir / "v1") as mp:
        path = Path(mp, "anndata", "RNA.h5ad")
        size = os.stat(path).st_size
        content = path.read_bytes()
        assert size == len(content) > 0
        assert content[:8] == b"\x89HDF\r\n\x1a\n"


def test_size_is_zero_until_generated_then_exact_and_cached(fixtures_dir):
    """Above --materialize-limit, a stat does not generate an h5ad (ls -l must not build
    gigabytes): size 0 until an open generates it whole."""
    with mount_guard(fixtures_dir / "v1", "--materialize-limit", "1K") as mp:
        path = Path(mp, "anndata", "RNA.h5ad")
        assert os.stat(path).st_size == 0
        with open(path, "rb") as f:
            assert os.fstat(f.fileno()).st_size > 0, "open generates it whole"
            content = f.read()
        assert os.stat(path).st_size == len(content)
        assert content[:8] == b"\x89HDF\r\n\x1a\n"
        cached = [p for p in os.listdir(mp.cache_dir) if p.endswith(".data")]
        assert any(os.path.getsize(os.path.join(mp.cache_dir, p)) == len(content) for p in cached)
        assert Path(path).read_bytes() == content


def test_exact_sizes_answers_stat_with_the_size(fixtures_dir):
    with mount_guard(fixtures_dir / "v1", "--exact-sizes") as mp:
        path = Path(mp, "anndata", "by", "phase", "G1", "RNA.h5ad")
        size = os.stat(path).st_size
        assert size > 0
        assert len(path.read_bytes()) == size


def test_member_named_anndata_wins_and_experiments_without_measurements_have_none(tmp_path, soma_mount_bin):
    store = tmp_path / "store"
    with tiledbsoma.Collection.create(str(store)) as root:
        # An experiment whose member "anndata" is a collection of its own.
        adata = anndata.AnnData(
            X=sp.csr_matrix(np.arange(12, dtype=np.float32).reshape(4, 3)),
            obs=pd.DataFrame(index=[f"c{i}" for i in range(4)]),
            var=pd.DataFrame(index=[f"g{i}" for i in range(3)]),
        )
        tiledbsoma.io.from_anndata(str(store / "clash"), adata, measurement_name="RNA")
        with tiledbsoma.open(str(store / "clash"), "w") as exp:
            exp.add_new_collection("anndata").metadata["mine"] = "yes"
        root.set("clash", tiledbsoma.open(str(store / "clash")), use_relative_uri=True)
        tiledbsoma.Experiment.create(str(store / "bare")).close()
        root.set("bare", tiledbsoma.open(str(store / "bare")), use_relative_uri=True)
        tiledbsoma.io.from_anndata(str(store / "plain"), adata, measurement_name="RNA")
        root.set("plain", tiledbsoma.open(str(store / "plain")), use_relative_uri=True)
    with mount_guard(store) as mp:
        clash = Path(mp, "clash", "anndata")
        assert "metadata.json" in os.listdir(clash)
        assert "RNA.h5ad" not in os.listdir(clash)
        assert "anndata" not in os.listdir(Path(mp, "bare"))
        got = read_quietly(Path(mp, "plain", "anndata", "RNA.h5ad"))
        assert_anndata_equal(got, reference(store / "plain", "RNA"), "plain")


def unordered_store(tmp_path: Path) -> Path:
    """An experiment whose obs is indexed by a name first: its rows do not come in
    soma_joinid order."""
    store = tmp_path / "unordered"
    obs_schema = pa.schema([("name", pa.large_string()), ("soma_joinid", pa.int64())])
    var_schema = pa.schema([("soma_joinid", pa.int64()), ("var_id", pa.large_string())])
    with tiledbsoma.Experiment.create(str(store)) as exp:
        obs = exp.add_new_dataframe(
            "obs", schema=obs_schema, index_column_names=["name", "soma_joinid"], domain=[None, (0, 3)]
        )
        obs.write(pa.table({"name": ["d", "c", "b", "a"], "soma_joinid": [0, 1, 2, 3]}, schema=obs_schema))
        rna = exp.add_new_collection("ms").add_new_collection("RNA", tiledbsoma.Measurement)
        var = rna.add_new_dataframe("var", schema=var_schema, domain=[(0, 1)])
        var.write(pa.table({"soma_joinid": [0, 1], "var_id": ["g0", "g1"]}, schema=var_schema))
        x = rna.add_new_collection("X").add_new_sparse_ndarray("data", type=pa.float32(), shape=(4, 2))
        cells = {"soma_dim_0": [0, 3], "soma_dim_1": [1, 0], "soma_data": pa.array([1.0, 2.0], pa.float32())}
        x.write(pa.table(cells))
    return store


def test_a_file_that_cannot_be_made_is_eio_and_leaves_nothing(tmp_path):
    """obs indexed by a name first: its rows do not come in soma_joinid order, which the
    matrices are laid out by."""
    store = unordered_store(tmp_path)
    with mount_guard(store) as mp:
        path = Path(mp, "anndata", "RNA.h5ad")
        with pytest.raises(OSError) as failed:
            path.read_bytes()
        assert failed.value.errno == errno.EIO
        assert not [p for p in os.listdir(mp.cache_dir) if p.endswith((".data", ".tmp"))]
        # A stat tries to generate the small file again, and fails the same way.
        with pytest.raises(OSError) as failed:
            os.stat(path)
        assert failed.value.errno == errno.EIO
        assert not [p for p in os.listdir(mp.cache_dir) if p.endswith((".data", ".tmp"))]
        assert "soma_joinid order" in mp.log.read_text()
        assert Path(mp, "obs", "data.csv").read_text().count("\n") == 5
