"""`10x/<layer>/matrix.h5`: Cell Ranger's HDF5 feature-barcode matrix (its v3 layout) beside
`matrix.mtx`, for the whole layer, a category (`by/<column>/<label>/`) and a query
(`where/<filter>/`) (docs/SEMANTICS.md, "Content and consistency").

Stores: pbmc (float32 X, 700 cells) and test_parts' store (int32 X, 24,000 cells of 24
cell types), each mounted fresh with test_parts' --materialize-limit (2 MiB; pbmc's whole
layer is far below it, the other's is above it).

1. h5py shows the exact layout: the root holds only `matrix`; `matrix` holds `barcodes`,
   `data`, `indices`, `indptr`, `shape` and `features/` with `id`, `name`, `feature_type`,
   `genome` and `_all_tag_keys` (== [b"genome"]); strings are fixed-length byte strings
   (`S<n>`), `data` int32 for an integer X and float32 for a float32 X, `indices` and
   `indptr` int64, `shape` int32 (features, barcodes); every feature_type is
   "Gene Expression"; the barcodes are tiledbsoma's obs_id and the features' ids and names
   are var's (var_id, and feature_name where var has it).
2. scanpy.read_10x_h5 reads tiledbsoma's X (the selected cells, in join id order, by
   genes) value for value, and the same matrix as scipy's mmread of `matrix.mtx`.
3. Seurat's Read10X_h5 reads tiledbsoma's X: dimensions, nonzeros per cell, the sum, and
   the cells' names.

Run: .venv/bin/python -m pytest tests/python/test_tenx_h5.py -q
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse

from harness import tree_reference  # noqa: F401  (quiets tiledbsoma's warnings)
import tiledbsoma
from harness.mount import mount_guard
from test_parts import LIMIT, build_store

TOOL_TIMEOUT = 180  # seconds for one R run


@dataclass(frozen=True)
class Case:
    """A matrix directory: its store, its path in the mount, and the obs filter that
    selects its cells for tiledbsoma (None: every cell)."""

    store: str  # "pbmc" or "ints"
    path: str
    cells: str | None


CASES = {
    "pbmc-whole": Case("pbmc", "ms/RNA/10x/data", None),
    "pbmc-category": Case("pbmc", "ms/RNA/10x/data/by/louvain/3", "louvain == '3'"),
    "pbmc-query": Case("pbmc", "where/n_genes > 1000 and louvain in ['1', '2']/ms/RNA/10x/data",
                       "n_genes > 1000 and louvain in ['1', '2']"),
    "ints-category": Case("ints", "ms/RNA/10x/data/by/cell_type/celltype_07", "cell_type == 'celltype_07'"),
    "ints-query": Case("ints", "where/cell_type in ['celltype_02', 'celltype_20']/ms/RNA/10x/data",
                       "cell_type in ['celltype_02', 'celltype_20']"),
}


@pytest.fixture(scope="module")
def stores(fixtures_dir, tmp_path_factory) -> dict[str, Path]:
    ints = tmp_path_factory.mktemp("tenx_h5") / "exp"
    build_store(ints)
    return {"pbmc": fixtures_dir / "pbmc", "ints": ints}


@dataclass
class Expected:
    barcodes: list[str]
    ids: list[str]
    names: list[str]
    x: scipy.sparse.csr_matrix  # cells x genes, tiledbsoma's values in their own type


def expected_of(store: Path, cells: str | None) -> Expected:
    """tiledbsoma's selected cells (join id order), var's genes and X's entries in them."""
    with tiledbsoma.open(str(store)) as exp:
        obs = exp.obs.read(value_filter=cells, column_names=["soma_joinid", "obs_id"]).concat()
        obs = obs.sort_by("soma_joinid")
        ms = exp.ms["RNA"]
        var_cols = [c for c in ("soma_joinid", "var_id", "feature_name") if c in ms.var.schema.names]
        var = ms.var.read(column_names=var_cols).concat().sort_by("soma_joinid")
        cell_ids = obs.column("soma_joinid").to_numpy()
        x = ms.X["data"].read((cell_ids,)).tables().concat()
    gene_ids = var.column("soma_joinid").to_numpy()
    rows = np.searchsorted(cell_ids, x.column("soma_dim_0").to_numpy())
    cols = np.searchsorted(gene_ids, x.column("soma_dim_1").to_numpy())
    values = x.column("soma_data").to_numpy()
    matrix = scipy.sparse.csr_matrix((values, (rows, cols)), shape=(len(cell_ids), len(gene_ids)))
    ids = var.column("var_id").to_pylist()
    names = var.column("feature_name").to_pylist() if "feature_name" in var_cols else ids
    return Expected(obs.column("obs_id").to_pylist(), ids, names, matrix)


def read_case(case: str, stores: dict[str, Path], tmp_path: Path) -> tuple[Expected, dict[str, Path]]:
    """tiledbsoma's matrix of the case, and its matrix.h5 and matrix.mtx copied out of a
    fresh mount."""
    c = CASES[case]
    want = expected_of(stores[c.store], c.cells)
    files = {}
    with mount_guard(stores[c.store], "--materialize-limit", str(LIMIT)) as mp:
        for name in ("matrix.h5", "matrix.mtx"):
            files[name] = tmp_path / name
            shutil.copyfile(Path(mp) / c.path / name, files[name])
    return want, files


DATASETS = {"matrix/barcodes", "matrix/data", "matrix/indices", "matrix/indptr", "matrix/shape",
            "matrix/features/id", "matrix/features/name", "matrix/features/feature_type",
            "matrix/features/genome", "matrix/features/_all_tag_keys"}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", CASES)
def test_h5py_shows_cell_rangers_layout(case, stores, tmp_path):
    want, files = read_case(case, stores, tmp_path)
    with h5py.File(files["matrix.h5"], "r") as f:
        assert list(f.keys()) == ["matrix"], f"root holds {list(f.keys())}"
        found = set()
        f.visititems(lambda name, obj: found.add(name) if isinstance(obj, h5py.Dataset) else None)
        assert found == DATASETS, f"datasets: {sorted(found ^ DATASETS)} differ"
        m = f["matrix"]
        for name in ("barcodes", "features/id", "features/name", "features/feature_type",
                     "features/genome", "features/_all_tag_keys"):
            assert m[name].dtype.kind == "S", f"matrix/{name} is {m[name].dtype}, not fixed-length bytes"
        integer = np.issubdtype(want.x.dtype, np.integer)
        assert m["data"].dtype == (np.int32 if integer else np.float32), f"data is {m['data'].dtype}; X is {want.x.dtype}"
        assert (m["indices"].dtype, m["indptr"].dtype, m["shape"].dtype) == (np.int64, np.int64, np.int32)
        n_cells, n_genes = want.x.shape
        assert m["shape"][()].tolist() == [n_genes, n_cells]
        assert m["features/_all_tag_keys"][()].tolist() == [b"genome"]
        assert set(m["features/feature_type"][()].tolist()) <= {b"Gene Expression"}
        assert len(m["features/genome"]) == n_genes
        assert [b.decode() for b in m["barcodes"][()]] == want.barcodes, "barcodes are not obs_id"
        assert [b.decode() for b in m["features/id"][()]] == want.ids, "feature ids are not var_id"
        assert [b.decode() for b in m["features/name"][()]] == want.names, "feature names are not var's"
        assert len(m["indptr"]) == n_cells + 1 and m["indptr"][-1] == want.x.nnz == len(m["data"])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", CASES)
def test_scanpy_reads_tiledbsomas_x(case, stores, tmp_path):
    import scanpy as sc

    want, files = read_case(case, stores, tmp_path)
    a = sc.read_10x_h5(files["matrix.h5"])
    assert list(a.obs_names) == want.barcodes
    assert list(a.var["gene_ids"]) == want.ids
    assert a.X.shape == want.x.shape
    assert (a.X != want.x.astype(a.X.dtype)).nnz == 0, f"{case}: read_10x_h5's X differs from tiledbsoma's"
    mtx = scipy.io.mmread(files["matrix.mtx"]).T.tocsr().astype(a.X.dtype)
    assert (a.X != mtx).nnz == 0, f"{case}: matrix.h5 and matrix.mtx differ"


# Line 1: features, cells, nonzero count, sum; line 2: nonzeros per cell; then the cell names.
R_READ10X_H5 = r"""
suppressPackageStartupMessages(library(Seurat))
m <- Seurat::Read10X_h5(commandArgs(trailingOnly = TRUE)[1])
cat(nrow(m), ncol(m), sum(m@x != 0), sprintf("%.17g", sum(m@x)), "\n")
cat(Matrix::colSums(m != 0), "\n")
writeLines(colnames(m))
"""


def r_loads(package: str) -> str | None:
    if shutil.which("Rscript") is None:
        return "Rscript is not installed"
    r = subprocess.run(["Rscript", "-e", f"suppressPackageStartupMessages(library({package}))"],
                       capture_output=True, text=True, timeout=TOOL_TIMEOUT)
    return None if r.returncode == 0 else f"library({package}) fails: {r.stderr.strip()[-500:]}"


@pytest.mark.timeout(400)
@pytest.mark.parametrize("case", CASES)
def test_seurat_read10x_h5_reads_tiledbsomas_x(case, stores, tmp_path):
    for package in ("Seurat", "hdf5r"):
        why = r_loads(package)
        if why:
            pytest.skip(f"{why} (scripts/setup installs it)")
    want, files = read_case(case, stores, tmp_path)
    r = subprocess.run(["Rscript", "-e", R_READ10X_H5, str(files["matrix.h5"])],
                       capture_output=True, text=True, timeout=TOOL_TIMEOUT)
    assert r.returncode == 0, f"Read10X_h5 failed: {r.stderr[-2000:]}"
    lines = r.stdout.splitlines()
    n_feat, n_cells, nnz, total = lines[0].split()
    x = want.x.astype(np.float64)
    nonzero = x.copy()
    nonzero.eliminate_zeros()
    assert (int(n_feat), int(n_cells), int(nnz)) == (x.shape[1], x.shape[0], nonzero.nnz), lines[0]
    assert abs(float(total) - x.sum()) <= 1e-9 * abs(x).sum(), f"sum {total}, tiledbsoma {x.sum()}"
    per_cell = np.diff(nonzero.indptr).tolist()
    assert [int(float(v)) for v in lines[1].split()] == per_cell, "nonzeros per cell differ"
    assert lines[2:] == want.barcodes, "cell names are not obs_id"
