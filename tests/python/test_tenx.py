"""Integration tests for the legacy single-cell layout (docs/REFERENCE.md "Legacy
single-cell layout"): <measurement>/10x/<layer>/ of every 2-D SparseNDArray X layer of every
experiment in the fixtures (pbmc, hand, v1, legacy/noncontig, legacy/noids): matrix.mtx,
genes.tsv, features.tsv, barcodes.tsv parsed strictly and compared with tiledbsoma's X, obs
and var; scanpy.read_10x_mtx (Cell Ranger v2 layout as mounted, and v3 layout from gzipped
copies) and R's Matrix::readMM read the same matrix; by/<obs column>/<label>/ holds the
cells of tiledbsoma's obs.read(value_filter=...). legacy/noncontig has sparse join ids
(checked against the fixture's own lists). The HDF5 matrix beside them: test_tenx_h5.py.

Run: .venv/bin/python -m pytest tests/python/test_tenx.py -q
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import scipy.sparse as sp
import tiledbsoma

import test_slices
from harness import data_reference, formats, tenx
from harness.fixtures import make_fixtures_module
from harness.formats import fail_if
from harness.tenx import Layer, TenX, check_tenx_dir, tenx_layers, tenx_reference
from harness.tree_reference import encode_name

TENX_STORES = ["pbmc", "hand", "v1", "legacy"]
# Cell Ranger's HDF5 matrix beside the 10x files (its contents: test_tenx_h5.py).
TENX_LISTED = tenx.TENX_FILES | {"matrix.h5"}
# by/ label directories checked in full when the layer has at most this many cells;
# above it, the largest label and __null__ of each column.
ALL_LABELS_MAX_NNZ = 50_000

pytestmark = pytest.mark.timeout(300)


def check_scanpy(d: Path, ref: TenX, where: str, tmp: Path) -> list[str]:
    """scanpy.read_10x_mtx on the mounted directory (Cell Ranger v2: genes.tsv), and on
    gzipped copies of matrix.mtx, features.tsv, barcodes.tsv (Cell Ranger v3,
    gex_only), give tiledbsoma's X, obs ids and var ids and names."""
    import scanpy

    probs = []
    v3 = tmp / "v3"
    v3.mkdir(parents=True, exist_ok=True)
    for name in ("matrix.mtx", "features.tsv", "barcodes.tsv"):
        with open(d / name, "rb") as src, gzip.open(v3 / f"{name}.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
    for label, path in (("v2 layout (mounted)", d), ("v3 layout (gzipped copy)", v3)):
        if ref.X.shape[0] == 0:
            continue  # an empty category: scanpy cannot read a matrix without cells
        try:
            ad = scanpy.read_10x_mtx(path, var_names="gene_ids", cache=False)
        except Exception as e:  # noqa: BLE001
            probs.append(f"{where}: scanpy.read_10x_mtx ({label}) fails: {type(e).__name__}: {e}")
            continue
        if [str(x) for x in ad.obs_names] != [str(b) for b in ref.barcodes]:
            probs.append(f"{where}: scanpy ({label}) obs names {list(ad.obs_names[:5])}..., expected {ref.barcodes[:5]}...")
        if [str(x) for x in ad.var_names] != [str(b) for b in ref.feature_ids]:
            probs.append(f"{where}: scanpy ({label}) var names {list(ad.var_names[:5])}..., expected {ref.feature_ids[:5]}...")
        if [str(x) for x in ad.var["gene_symbols"]] != [str(n) for n in ref.feature_names]:
            probs.append(f"{where}: scanpy ({label}) gene_symbols differ from the var names column")
        X = sp.csr_matrix(ad.X)
        X.sort_indices()
        want = ref.X.astype(np.float32)
        if X.shape != want.shape:
            probs.append(f"{where}: scanpy ({label}) X shape {X.shape}, expected {want.shape}")
        elif (X != want).nnz:
            probs.append(f"{where}: scanpy ({label}) X differs from tiledbsoma's in {(X != want).nnz} cells")
        elif not (np.array_equal(X.indptr, want.indptr) and np.array_equal(X.indices, want.indices)):
            probs.append(f"{where}: scanpy ({label}) X stores other cells than tiledbsoma (explicit zeros?)")
        if label.startswith("v3") and "feature_types" in ad.var and ad.n_vars != len(ref.feature_ids):
            probs.append(f"{where}: scanpy (v3, gex_only) kept {ad.n_vars} of {len(ref.feature_ids)} features")
    return probs


def _chosen_labels(layer: Layer, f: pa.Field, labels: list, shown: dict, ref_obs) -> list:
    """(label, is_null, dir name) of the label directories to check in content."""
    targets = [(labels[i], False, name) for i, name in shown.items()]
    if f.nullable:
        targets.append((None, True, "__null__"))
    with tiledbsoma.open(layer.x_uri) as X:
        small = int(X.nnz) <= ALL_LABELS_MAX_NNZ
    if small:
        return targets
    # The label with the most cells, and __null__.
    col = next(c for c in ref_obs.cols if c.name == f.name)
    counts = {}
    for v in col.values:
        counts[v] = counts.get(v, 0) + 1
    best = max((t for t in targets if not t[1]), key=lambda t: counts.get(t[0], 0))
    return [best] + [t for t in targets if t[1]]


# --------------------------------------------------------------------------------------
# 10x: whole layers


def test_tenx_layers_found(fixtures_dir):
    """The fixtures hold the layers this file is about (guards against a silently
    empty parametrization)."""
    found = {s: [l.display for l in tenx_layers(fixtures_dir, s)] for s in TENX_STORES}
    assert found["pbmc"] == ["ms/RNA/10x/data", "ms/raw/10x/data"], found
    assert found["hand"] == ["ms/RNA/10x/data"], found
    assert found["v1"] == ["ms/RNA/10x/counts", "ms/RNA/10x/data"], found
    assert sorted(found["legacy"]) == [
        "noids/ms/RNA/10x/data", "noncontig/ms/RNA/10x/counts", "noncontig/ms/RNA/10x/data"], found


@pytest.mark.parametrize("store", TENX_STORES)
def test_tenx_dir_listings(store, fixtures_dir, mounts):
    """10x/ lists exactly the 2-D sparse layers of X; each layer directory holds the
    four files and by/; by/ lists the enumerated obs columns."""
    mp = Path(mounts(store))
    problems = []
    layers = tenx_layers(fixtures_dir, store)
    by_meas: dict = {}
    for layer in layers:
        by_meas.setdefault(layer.relpath[:-1], []).append(layer.relpath[-1])
    for tenx, names in by_meas.items():
        got = set(os.listdir(mp.joinpath(*tenx)))
        if got != set(names):
            problems.append(f"{'/'.join(tenx)}: lists {sorted(got)}, expected {sorted(names)}")
    for layer in layers:
        d = mp.joinpath(*layer.relpath)
        got = set(os.listdir(d))
        enum = test_slices.enum_columns(layer.obs_node)
        want = TENX_LISTED | ({"by"} if enum else set())
        if got != want:
            problems.append(f"{layer.display}: lists {sorted(got)}, expected {sorted(want)}")
        if enum:
            cols = set(os.listdir(d / "by"))
            want_cols = {encode_name(f.name) for f, _ in enum}
            if cols != want_cols:
                problems.append(f"{layer.display}/by: lists {sorted(cols)}, expected {sorted(want_cols)}")
    fail_if(problems, f"10x listing problems in {store}")


@pytest.mark.parametrize("store", TENX_STORES)
def test_tenx_whole_layer_matches_tiledbsoma(store, fixtures_dir, mounts, tmp_path):
    """matrix.mtx, features.tsv, genes.tsv, barcodes.tsv of every layer, parsed
    strictly, and scanpy.read_10x_mtx of the directory, equal tiledbsoma's X (as a csr
    matrix, value for value), obs ids and var ids."""
    mp = Path(mounts(store))
    problems = []
    for k, layer in enumerate(tenx_layers(fixtures_dir, store)):
        ref = tenx_reference(layer)
        d = mp.joinpath(*layer.relpath)
        problems += check_tenx_dir(d, ref, layer, layer.display)
        problems += check_scanpy(d, ref, layer.display, tmp_path / str(k))
    fail_if(problems, f"10x problems in {store}")


@pytest.mark.parametrize("store", TENX_STORES)
def test_tenx_by_category_matches_value_filter(store, fixtures_dir, mounts, tmp_path):
    """10x/<layer>/by/<obs column>/<label>/ lists every label (encoded like by/ in data
    frames, __null__ for a nullable column) and holds the cells of obs.read(value_filter)
    -- barcodes in join-id order, every feature, the X rows of those cells."""
    mp = Path(mounts(store))
    problems = []
    n_dirs = 0
    for layer in tenx_layers(fixtures_dir, store):
        obs_ref = data_reference.ref_of(layer.obs_node)
        for f, labels in test_slices.enum_columns(layer.obs_node):
            cd = mp.joinpath(*layer.relpath, "by", encode_name(f.name))
            lp = formats.Problems(f"{layer.display}/by/{encode_name(f.name)}")
            try:
                shown = test_slices.match_listing(
                    set(os.listdir(cd)), labels, test_slices.label_kind(f), f.nullable, "ls", lp
                )
            except OSError as e:
                problems.append(f"{layer.display}/by/{f.name}: {e}")
                continue
            problems += lp.done()
            for label, is_null, name in _chosen_labels(layer, f, labels, shown, obs_ref):
                n_dirs += 1
                rows = test_slices.expected_by(layer.obs_node, f, label, is_null)
                j = np.sort(rows.table.column("soma_joinid").to_numpy())
                ref = tenx_reference(layer, obs_joinids=j, key=(f.name, name))
                where = f"{layer.display}/by/{encode_name(f.name)}/{name}"
                problems += check_tenx_dir(cd / name, ref, layer, where)
                problems += check_scanpy(cd / name, ref, where, tmp_path / f"by{n_dirs}")
    assert n_dirs > 0, f"no by/ directories checked in {store}"
    fail_if(problems, f"10x by/ problems in {store} ({n_dirs} label directories)")


def test_tenx_noncontiguous_join_ids(fixtures_dir, mounts):
    """legacy/noncontig, spelled out: obs and var join ids are sparse and do not start at
    0 (the fixture's lists); matrix.mtx row i / column j is the i-th var / j-th obs in
    join-id order; a cell without values and a feature without values are still listed;
    X/counts (int64) is `integer`, X/data (float32) is `real`."""
    mf = make_fixtures_module()
    obs_j = sorted(mf.NONCONTIG_OBS)
    var_j = sorted(mf.NONCONTIG_VAR)
    mp = Path(mounts("legacy"))
    base = mp / "noncontig" / "ms" / "RNA" / "10x"
    assert (base / "barcodes.tsv").exists() is False
    for layer, field in (("counts", "integer"), ("data", "real")):
        d = base / layer
        assert (d / "barcodes.tsv").read_text() == "".join(f"BC{j:06d}-1\n" for j in obs_j)
        assert (d / "features.tsv").read_text() == "".join(
            f"ENSG{j:011d}\tGene-{j}\tGene Expression\n" for j in var_j)
        text = (d / "matrix.mtx").read_text()
        lines = [ln for ln in text.split("\n") if ln and not ln.startswith("%")]
        assert text.startswith(f"%%MatrixMarket matrix coordinate {field} general\n"), text[:80]
        nf, nb, nnz = map(int, lines[0].split())
        assert (nf, nb) == (len(var_j), len(obs_j))
        entries = [ln.split() for ln in lines[1:]]
        assert len(entries) == nnz
        with tiledbsoma.open(str(Path(fixtures_dir) / "legacy" / "noncontig" / "ms" / "RNA" / "X" / layer)) as X:
            t = X.read().tables().concat()
        want = {
            (int(r), int(c)): v
            for r, c, v in zip(t.column("soma_dim_0").to_pylist(), t.column("soma_dim_1").to_pylist(),
                               t.column("soma_data").to_pylist())
        }
        got = {}
        for i, j, v in entries:
            key = (obs_j[int(j) - 1], var_j[int(i) - 1])  # back to join ids
            got[key] = int(v) if field == "integer" else float(np.float32(float(v)))
        assert got == {k: (float(np.float32(v)) if field == "real" else v) for k, v in want.items()}
        # obs join id 5 and var join id 301 hold no values (make-fixtures' _x_layers).
        assert all(r != 5 for r, _ in got) and all(c != 301 for _, c in got)
        assert 5 in obs_j and 301 in var_j
        order = [(int(j), int(i)) for i, j, _ in entries]
        assert order == sorted(order), "entries must be sorted by barcode, then feature"


def test_tenx_joinid_barcodes_and_gene_names(fixtures_dir, mounts):
    """legacy/noids: obs has no string id column, so barcodes are the join ids; var's
    ids come from gene_ids and names from gene_names."""
    mp = Path(mounts("legacy"))
    d = mp / "noids" / "ms" / "RNA" / "10x" / "data"
    assert (d / "barcodes.tsv").read_text() == "".join(f"{i}\n" for i in range(12))
    assert (d / "genes.tsv").read_text() == "".join(f"ID{i}\tN{i}\tGene Expression\n" for i in range(6))


@pytest.mark.parametrize("limit", [None, "0"])
def test_tenx_sizes_on_a_fresh_mount(fixtures_dir, mount, limit):
    """docs/REFERENCE.md, "Sizes and reads": the 10x files are small (below the default
    --materialize-limit), so their first stat (`ls -l`) generates them and reports their
    exact size. Above the limit (--materialize-limit 0) a stat generates nothing and
    reports 0; an open generates them whole, so fstat is exact at once."""
    args = () if limit is None else ("--materialize-limit", limit)
    with mount(fixtures_dir / "legacy", *args) as mp:
        d = Path(mp) / "noncontig" / "ms" / "RNA" / "10x" / "counts"
        bd = d / "by" / "cluster" / "alpha"
        problems = []
        paths = [d / n for n in sorted(TENX_LISTED)] + [bd / n for n in sorted(TENX_LISTED)]
        # ls -l and stat of everything first.
        subprocess.run(["ls", "-lR", str(d)], capture_output=True, timeout=30, check=True)
        stated = {p: os.stat(p).st_size for p in paths}
        for p in paths:
            with open(p, "rb") as f:
                fst = os.fstat(f.fileno()).st_size
                data = f.read()
            want_stated = len(data) if limit is None else 0
            if stated[p] != want_stated:
                problems.append(f"{p.relative_to(mp)}: stat before the first open says {stated[p]}, expected {want_stated}")
            if fst != len(data):
                problems.append(f"{p.relative_to(mp)}: fstat after open {fst}, content {len(data)}")
            if os.stat(p).st_size != len(data):
                problems.append(f"{p.relative_to(mp)}: stat after reading {os.stat(p).st_size}, content {len(data)}")
            if not data:
                problems.append(f"{p.relative_to(mp)}: empty")
        fail_if(problems, "10x size problems")


# --------------------------------------------------------------------------------------
# R: Matrix::readMM

R_SCRIPT = r"""
suppressMessages(library(Matrix))
args <- commandArgs(trailingOnly = TRUE)
out <- args[1]
dirs <- args[-1]
for (k in seq_along(dirs)) {
  d <- dirs[k]
  m <- as(readMM(file.path(d, "matrix.mtx")), "TsparseMatrix")
  barcodes <- readLines(file.path(d, "barcodes.tsv"))
  features <- read.delim(file.path(d, "features.tsv"), header = FALSE, stringsAsFactors = FALSE,
                         colClasses = "character", quote = "", comment.char = "")
  cat(sprintf("%d\t%d\t%d\t%d\t%d\t%d\n", nrow(m), ncol(m), length(m@x), length(barcodes),
              nrow(features), ncol(features)), file = file.path(out, paste0(k, ".dims")))
  write.table(data.frame(i = m@i + 1L, j = m@j + 1L, x = sprintf("%.17g", m@x)),
              file = file.path(out, paste0(k, ".tsv")), sep = "\t", quote = FALSE,
              row.names = FALSE, col.names = FALSE)
}
"""


@pytest.mark.skipif(shutil.which("Rscript") is None, reason="Rscript is not installed (scripts/setup installs r-base-core and r-cran-matrix)")
@pytest.mark.parametrize("store", TENX_STORES)
def test_r_readmm_matches_tiledbsoma(store, fixtures_dir, mounts, tmp_path):
    """R's Matrix::readMM(matrix.mtx) is tiledbsoma's X transposed (features x
    barcodes), value for value; readLines(barcodes.tsv) and read.delim(features.tsv)
    (as Seurat's Read10X reads them) have one line per barcode / feature, 3 columns."""
    r = subprocess.run(["Rscript", "-e", 'quit(status = !requireNamespace("Matrix", quietly = TRUE))'],
                       capture_output=True, timeout=60)
    if r.returncode != 0:
        pytest.skip("R's Matrix package is not installed")
    mp = Path(mounts(store))
    layers = tenx_layers(fixtures_dir, store)
    dirs = [str(mp.joinpath(*layer.relpath)) for layer in layers]
    script = tmp_path / "readmm.R"
    script.write_text(R_SCRIPT)
    r = subprocess.run(["Rscript", str(script), str(tmp_path), *dirs], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"Rscript failed:\n{r.stderr[-3000:]}"
    problems = []
    for k, layer in enumerate(layers, 1):
        ref = tenx_reference(layer)
        nr, nc, nnz, nbar, nfeat, ncolf = map(int, (tmp_path / f"{k}.dims").read_text().split())
        want = ref.X.T.tocsr()
        if (nr, nc) != want.shape or nnz != want.nnz:
            problems.append(f"{layer.display}: readMM gives {nr}x{nc} with {nnz} entries, expected {want.shape} with {want.nnz}")
            continue
        if (nbar, nfeat, ncolf) != (len(ref.barcodes), len(ref.feature_ids), 3):
            problems.append(f"{layer.display}: R reads {nbar} barcodes, {nfeat} features x {ncolf} columns")
        if nnz:
            t = pd.read_csv(tmp_path / f"{k}.tsv", sep="\t", header=None, names=["i", "j", "x"],
                            dtype={"i": np.int64, "j": np.int64, "x": np.float64})
            got = sp.csr_matrix((t["x"].to_numpy().astype(ref.X.dtype), (t["i"] - 1, t["j"] - 1)), shape=want.shape)
            got.sort_indices()
            if not (np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)):
                problems.append(f"{layer.display}: readMM's cells differ from tiledbsoma's X transposed")
            elif not np.array_equal(got.data, want.data):
                problems.append(f"{layer.display}: readMM's values differ from tiledbsoma's")
    fail_if(problems, f"R readMM problems in {store}")


