"""Integration tests for the legacy layouts (docs/REFERENCE.md "Legacy single-cell layout", "Extra files for
spatial objects", data.npy, and stores of encoding 1.0.0):

- <measurement>/10x/<layer>/ of every 2-D SparseNDArray X layer of every experiment in
  the fixtures (pbmc, hand, v1, legacy/noncontig, legacy/noids): matrix.mtx, genes.tsv,
  features.tsv, barcodes.tsv parsed strictly and compared with tiledbsoma's X, obs and
  var; scanpy.read_10x_mtx (Cell Ranger v2 layout as mounted, and v3 layout from gzipped
  copies) and R's Matrix::readMM read the same matrix; by/<obs column>/<label>/ holds the
  cells of tiledbsoma's obs.read(value_filter=...). legacy/noncontig has sparse join ids
  (checked against the fixture's own lists).
- data.npy of every numeric DenseNDArray, on a fresh mount: exact size at stat before
  any read, independent byte ranges (pread) and numpy memory-map slices.
- coordinate_space.json, transforms.json, image.json and level_<n>.png of the scene
  store against tiledbsoma's decoded objects and pixels.
- the v1 store (encoding "1", written by tiledbsoma 1.14.5): listings, metadata.json,
  schema.json and data files by the same checks as test_tree / test_data.
- malformed spatial metadata (legacy/bad_space, legacy/bad_transforms): EIO plus a log
  line, and the daemon keeps serving.

Run: .venv/bin/python -m pytest tests/python/test_legacy.py -q
"""

from __future__ import annotations

import errno
import gzip
import importlib.util
import io
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import scipy.sparse as sp
from numpy.lib import format as npformat

from harness import tree_reference
import test_data
import test_slices
import test_tree
import tiledb
import tiledbsoma
from harness.tree_reference import encode_name, json_equal, load_json_strict
from harness import formats
from harness import data_reference

REPO = Path(__file__).resolve().parents[2]
TENX_STORES = ["pbmc", "hand", "v1", "legacy"]
TENX_FILES = {"matrix.mtx", "genes.tsv", "features.tsv", "barcodes.tsv"}
# Cell Ranger's HDF5 matrix beside them (its contents: test_tenx_h5.py).
TENX_LISTED = TENX_FILES | {"matrix.h5"}
# docs/REFERENCE.md's id columns, in order of preference.
OBS_ID_COLS = ("obs_id", "barcode", "barcodes", "cell_id")
VAR_ID_COLS = ("feature_id", "gene_ids", "gene_id", "var_id", "ensembl_id")
VAR_NAME_COLS = ("feature_name", "gene_symbols", "gene_name", "gene_names", "symbol", "var_name")
# by/ label directories checked in full when the layer has at most this many cells;
# above it, the largest label and __null__ of each column.
ALL_LABELS_MAX_NNZ = 50_000
NPY_STORES = ["hand", "pbmc", "scene", "v1"]

pytestmark = pytest.mark.timeout(300)


def _make_fixtures_module():
    mod = sys.modules.get("make_fixtures")
    if mod is None:
        spec = importlib.util.spec_from_file_location("make_fixtures", REPO / "scripts" / "make-fixtures.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules["make_fixtures"] = mod
    return mod


_WALK: dict = {}


def walk(fixtures_dir: Path, store: str) -> list[tree_reference.Node]:
    key = (str(fixtures_dir), store)
    if key not in _WALK:
        _WALK[key] = tree_reference.walk(str(fixtures_dir / store))
    return _WALK[key]


fail_if = formats.fail_if


def read_sized(path: Path, exact_on_open: bool = True) -> bytes:
    """Read a generated file; stat before open 0 or exact, fstat after open exact (the
    10x files are generated whole on open), stat after the read exact."""
    st0 = os.stat(path).st_size
    with open(path, "rb") as f:
        fst = os.fstat(f.fileno()).st_size
        data = f.read()
    st1 = os.stat(path).st_size
    n = len(data)
    assert st0 in (0, n), f"{path}: stat before open says {st0}, content is {n} bytes"
    if exact_on_open:
        assert fst == n, f"{path}: fstat after open says {fst}, content is {n} bytes (must be generated on open)"
    assert st1 == n, f"{path}: stat after reading says {st1}, content is {n} bytes"
    return data


# --------------------------------------------------------------------------------------
# 10x reference


@dataclass
class Layer:
    store: str
    display: str  # relpath of the layer's 10x directory, "/"-joined
    relpath: tuple  # of the 10x/<layer> directory, from the mount root
    obs_node: tree_reference.Node
    x_uri: str
    var_uri: str
    value_type: pa.DataType

    @property
    def integer(self) -> bool:
        return pa.types.is_integer(self.value_type)

    @property
    def np_dtype(self):
        return np.dtype(self.value_type.to_pandas_dtype())


def tenx_layers(fixtures_dir: Path, store: str) -> list[Layer]:
    """Every 2-D SparseNDArray in X of every measurement under an experiment's ms."""
    nodes = walk(fixtures_dir, store)
    by_rel = {n.relpath: n for n in nodes}
    out = []
    for m in nodes:
        if m.soma_type != "SOMAMeasurement" or len(m.relpath) < 2 or m.relpath[-2] != "ms":
            continue
        exp = by_rel.get(m.relpath[:-2])
        if exp is None or exp.soma_type != "SOMAExperiment" or "obs" not in exp.members:
            continue
        obs = by_rel[exp.relpath + ("obs",)]
        if "X" not in m.members or "var" not in m.members:
            continue
        X = by_rel[m.relpath + ("X",)]
        for name in sorted(X.members):
            a = by_rel[X.relpath + (encode_name(name),)]
            if a.soma_type != "SOMASparseNDArray":
                continue
            with tiledbsoma.open(a.uri) as arr:
                if len(arr.shape) != 2:
                    continue
                vt = arr.schema.field("soma_data").type
            rel = m.relpath + ("10x", encode_name(name))
            out.append(Layer(store, "/".join(rel), rel, obs, a.uri, m.members["var"], vt))
    return out


def _string_col(schema: pa.Schema, candidates) -> str | None:
    for c in candidates:
        if c in schema.names:
            t = schema.field(c).type
            if pa.types.is_string(t) or pa.types.is_large_string(t):
                return c
    return None


def ids_of(uri: str, id_cands, name_cands=None, joinids=None):
    """(sorted soma_joinids, ids, names) of a DataFrame; ids from the first string
    column among id_cands (else the join ids), names from name_cands (else the ids)."""
    with tiledbsoma.open(uri) as df:
        schema = df.schema
        idc = _string_col(schema, id_cands)
        namec = _string_col(schema, name_cands) if name_cands else None
        cols = ["soma_joinid"] + [c for c in (idc, namec) if c]
        coords = (pa.array(joinids, pa.int64()),) if joinids is not None else ()
        t = df.read(coords=coords, column_names=cols).concat().sort_by("soma_joinid")
    j = t.column("soma_joinid").to_numpy()
    ids = t.column(idc).to_pylist() if idc else [str(int(x)) for x in j]
    names = t.column(namec).to_pylist() if namec else list(ids)
    return j, ids, names


@dataclass
class TenX:
    """What a 10x directory must hold."""

    obs_j: np.ndarray
    barcodes: list
    var_j: np.ndarray
    feature_ids: list
    feature_names: list
    X: sp.csr_matrix  # cells x features, in the layer's value type

    @property
    def barcodes_tsv(self) -> bytes:
        return "".join(f"{b}\n" for b in self.barcodes).encode()

    @property
    def features_tsv(self) -> bytes:
        return "".join(f"{i}\t{n}\tGene Expression\n" for i, n in zip(self.feature_ids, self.feature_names)).encode()


_TENX: dict = {}


def tenx_reference(layer: Layer, obs_joinids=None, key=None) -> TenX:
    """tiledbsoma's view: obs (all, or the given join ids), var, and the X rows of those
    cells, with join ids mapped to 1-based ranks among the listed ones."""
    ck = (layer.x_uri, key)
    if ck in _TENX:
        return _TENX[ck]
    obs_j, barcodes, _ = ids_of(layer.obs_node.uri, OBS_ID_COLS, joinids=obs_joinids)
    var_j, fids, fnames = ids_of(layer.var_uri, VAR_ID_COLS, VAR_NAME_COLS)
    with tiledbsoma.open(layer.x_uri) as X:
        if obs_joinids is None:
            t = X.read().tables().concat()
        elif len(obs_j) == 0:
            t = None
        else:
            t = X.read(coords=(pa.array(obs_j, pa.int64()),)).tables().concat()
    if t is None or t.num_rows == 0:
        r = c = np.zeros(0, np.int64)
        v = np.zeros(0, layer.np_dtype)
    else:
        r = t.column("soma_dim_0").to_numpy()
        c = t.column("soma_dim_1").to_numpy()
        v = t.column("soma_data").to_numpy()
    ri = np.searchsorted(obs_j, r)
    ci = np.searchsorted(var_j, c)
    assert np.all(ri < len(obs_j)) and np.array_equal(obs_j[ri], r), f"fixture: {layer.x_uri} has rows outside obs"
    assert np.all(ci < len(var_j)) and np.array_equal(var_j[ci], c), f"fixture: {layer.x_uri} has columns outside var"
    m = sp.csr_matrix((v, (ri, ci)), shape=(len(obs_j), len(var_j)), dtype=layer.np_dtype)
    m.sum_duplicates()
    m.sort_indices()
    ref = TenX(obs_j, barcodes, var_j, fids, fnames, m)
    _TENX[ck] = ref
    return ref


# --------------------------------------------------------------------------------------
# matrix.mtx, parsed strictly


def parse_mtx(data: bytes, layer: Layer, where: str) -> tuple[tuple, np.ndarray, np.ndarray, np.ndarray, list]:
    """((n_features, n_barcodes, nnz), feature index, barcode index, values, problems):
    the header must be Cell Ranger's, entries 1-based, in range, sorted by barcode then
    feature, without duplicates; values parsed in the layer's type."""
    probs = []
    text = data.decode("ascii")
    if not text.endswith("\n"):
        probs.append(f"{where}: matrix.mtx does not end with a newline")
    lines = text.split("\n")
    field = "integer" if layer.integer else "real"
    want_header = f"%%MatrixMarket matrix coordinate {field} general"
    if lines[0] != want_header:
        probs.append(f"{where}: header {lines[0]!r}, expected {want_header!r}")
    k = 1
    while k < len(lines) and lines[k].startswith("%"):
        k += 1
    size = lines[k].split()
    if len(size) != 3 or not all(s.isdigit() for s in size):
        return (0, 0, 0), None, None, None, probs + [f"{where}: bad size line {lines[k]!r}"]
    nf, nb, nnz = map(int, size)
    body = lines[k + 1 : len(lines) - 1 if text.endswith("\n") else len(lines)]
    if len(body) != nnz:
        return (nf, nb, nnz), None, None, None, probs + [f"{where}: {len(body)} entry lines, size line says {nnz}"]
    if nnz == 0:
        z = np.zeros(0, np.int64)
        return (nf, nb, nnz), z, z, np.zeros(0, layer.np_dtype), probs
    df = pd.read_csv(
        io.StringIO("\n".join(body)), sep=" ", header=None, names=["i", "j", "v"],
        dtype={"i": np.int64, "j": np.int64, "v": str}, keep_default_na=False, engine="c",
    )
    i = df["i"].to_numpy()
    j = df["j"].to_numpy()
    vs = df["v"]
    if layer.integer:
        if not vs.str.fullmatch(r"-?\d+").all():
            probs.append(f"{where}: non-integer values in an integer matrix: {vs[~vs.str.fullmatch(r'-?[0-9]+')].head(3).tolist()}")
            return (nf, nb, nnz), None, None, None, probs
        v = np.array([int(x) for x in vs], dtype=object).astype(layer.np_dtype)
    else:
        v = pd.to_numeric(vs).to_numpy(np.float64).astype(layer.np_dtype)
    if (i < 1).any() or (i > nf).any() or (j < 1).any() or (j > nb).any():
        probs.append(f"{where}: entries out of range (features 1..{nf}, barcodes 1..{nb})")
    key = j * (nf + 1) + i
    if not np.all(np.diff(key) > 0):
        bad = int(np.argmax(np.diff(key) <= 0))
        probs.append(
            f"{where}: entries not sorted by barcode then feature (or duplicated) at entries {bad + 1}-{bad + 2}:"
            f" {body[bad]!r} then {body[bad + 1]!r}"
        )
    return (nf, nb, nnz), i - 1, j - 1, v, probs


def check_tenx_dir(d: Path, ref: TenX, layer: Layer, where: str) -> list[str]:
    """Every file of one 10x directory against the reference; returns problems."""
    probs = []
    try:
        listing = set(os.listdir(d))
    except OSError as e:
        return [f"{where}: ls: {e}"]
    if not TENX_FILES <= listing:
        probs.append(f"{where}: lists {sorted(listing)}, missing {sorted(TENX_FILES - listing)}")
    files = {}
    for name in sorted(TENX_FILES):
        try:
            files[name] = read_sized(d / name)
        except (OSError, AssertionError) as e:
            probs.append(f"{where}/{name}: {e}")
    if "barcodes.tsv" in files and files["barcodes.tsv"] != ref.barcodes_tsv:
        probs.append(f"{where}/barcodes.tsv: {files['barcodes.tsv'][:300]!r}..., expected {ref.barcodes_tsv[:300]!r}...")
    for name in ("features.tsv", "genes.tsv"):
        if name in files and files[name] != ref.features_tsv:
            probs.append(f"{where}/{name}: {files[name][:300]!r}..., expected {ref.features_tsv[:300]!r}...")
    if "matrix.mtx" in files:
        (nf, nb, nnz), fi, bi, v, p = parse_mtx(files["matrix.mtx"], layer, where)
        probs += p
        if (nf, nb, nnz) != (len(ref.var_j), len(ref.obs_j), ref.X.nnz):
            probs.append(
                f"{where}/matrix.mtx: size line {nf} {nb} {nnz}, expected"
                f" {len(ref.var_j)} {len(ref.obs_j)} {ref.X.nnz} (features barcodes entries)"
            )
        elif fi is not None and not p:
            got = sp.csr_matrix((v, (bi, fi)), shape=ref.X.shape, dtype=ref.X.dtype)
            got.sort_indices()
            if not (np.array_equal(got.indptr, ref.X.indptr) and np.array_equal(got.indices, ref.X.indices)):
                probs.append(f"{where}/matrix.mtx: the stored cells differ from tiledbsoma's")
            elif not np.array_equal(got.data, ref.X.data):
                bad = int(np.argmax(got.data != ref.X.data))
                probs.append(f"{where}/matrix.mtx: values differ, e.g. {got.data[bad]!r} vs {ref.X.data[bad]!r}")
    return probs


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
# 1. 10x: whole layers


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
    mf = _make_fixtures_module()
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
# 2. R: Matrix::readMM

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


# --------------------------------------------------------------------------------------
# 3. data.npy on a fresh mount


def dense_nodes(fixtures_dir, store):
    out = []
    for n in walk(fixtures_dir, store):
        if n.kind == "soma_array" and n.soma_type == "SOMADenseNDArray":
            out.append(n)
    return out


def _npy_header(f) -> tuple[tuple, bool, np.dtype, int]:
    version = npformat.read_magic(f)
    shape, fortran, dtype = (
        npformat.read_array_header_1_0(f) if version == (1, 0) else npformat.read_array_header_2_0(f)
    )
    return shape, fortran, dtype, f.tell()


def random_slices(shape, rng, n):
    out = []
    for k in range(n):
        sl = []
        for s in shape:
            kind = (k + len(sl)) % 4
            if kind == 0:  # a range
                a, b = sorted(int(x) for x in rng.integers(0, s + 1, size=2))
                sl.append(slice(a, max(b, a + 1)))
            elif kind == 1:  # one index
                sl.append(int(rng.integers(0, s)))
            elif kind == 2:  # strided
                sl.append(slice(int(rng.integers(0, s)), None, int(rng.integers(1, 4))))
            else:  # reversed
                sl.append(slice(None, None, -1))
        out.append(tuple(sl))
    return out


@pytest.mark.parametrize("store", NPY_STORES)
def test_npy_fresh_mount(store, fixtures_dir, mount):
    """On a fresh mount: stat of data.npy says header + cells x itemsize before any
    read; random byte ranges read on their own (pread, first the far end) equal those of
    tiledbsoma's values; numpy.load(mmap_mode="r") slices equal tiledbsoma's read."""
    nodes = [n for n in dense_nodes(fixtures_dir, store) if data_reference.ref_of(n).npy]
    assert nodes, f"no numeric dense arrays in {store}"
    problems = []
    with mount(fixtures_dir / store) as mp:
        for node in nodes:
            want = data_reference.ref_of(node).dense
            path = Path(mp).joinpath(*node.relpath) / "data.npy"
            where = node.display
            try:
                st0 = os.stat(path).st_size
                with open(path, "rb") as f:
                    shape, fortran, dtype, off = _npy_header(f)
            except Exception as e:  # noqa: BLE001
                problems.append(f"{where}: data.npy: {type(e).__name__}: {e}")
                continue
            if tuple(shape) != want.shape or fortran or dtype != want.dtype:
                problems.append(f"{where}: header shape={shape} fortran={fortran} dtype={dtype}, expected {want.shape} C {want.dtype}")
                continue
            if off % 64:
                problems.append(f"{where}: data starts at byte {off}, not a multiple of 64")
            expect = off + want.size * want.dtype.itemsize
            if st0 != expect:
                problems.append(f"{where}: stat before any read says {st0}, header {off} + {want.size} cells x {want.dtype.itemsize} = {expect}")
            body = want.tobytes(order="C")
            rng = np.random.default_rng(want.size + off)
            with open(path, "rb") as f:
                ranges = [(max(0, len(body) - 17), 17), (0, 1)]
                ranges += [(int(rng.integers(0, max(1, len(body)))), int(rng.integers(1, 5000))) for _ in range(20)]
                for start, n in ranges:
                    got = os.pread(f.fileno(), n, off + start)
                    if got != body[start:start + n]:
                        problems.append(f"{where}: pread({n}, {off + start}) differs from tiledbsoma's values")
                        break
                if os.pread(f.fileno(), 10, expect) != b"":
                    problems.append(f"{where}: bytes past the reported size")
            try:
                mm = np.load(path, mmap_mode="r")
            except Exception as e:  # noqa: BLE001
                problems.append(f"{where}: numpy.load(mmap_mode='r') fails: {type(e).__name__}: {e}")
                continue
            for sl in random_slices(want.shape, rng, 30):
                if not formats.arrays_equal(np.asarray(mm[sl]), np.asarray(want[sl])):
                    problems.append(f"{where}: mmap slice {sl} differs from tiledbsoma")
                    break
            if not formats.arrays_equal(np.array(mm), want):
                problems.append(f"{where}: the whole memory map differs from tiledbsoma")
            del mm
    fail_if(problems, f"data.npy problems in {store} ({len(nodes)} arrays)")


# --------------------------------------------------------------------------------------
# 4. spatial JSON


def space_json(cs) -> list:
    return [{"name": a.name, "unit": a.unit} for a in cs.axes]


def _read_json(path: Path):
    return test_tree.read_json(path)


def scene_objects(fixtures_dir):
    """(relpath, kind, tiledbsoma-open URI) of the scene store's spatial objects."""
    return [(n.relpath, n.soma_type, n.uri) for n in walk(fixtures_dir, "scene")
            if n.soma_type in ("SOMAScene", "SOMAPointCloudDataFrame", "SOMAMultiscaleImage")]


def test_coordinate_space_json(fixtures_dir, mounts):
    """coordinate_space.json of the scene, the point cloud and every image equals
    tiledbsoma's coordinate_space, axis by axis."""
    mp = Path(mounts("scene"))
    problems = []
    objs = scene_objects(fixtures_dir)
    assert {k for _, k, _ in objs} == {"SOMAScene", "SOMAPointCloudDataFrame", "SOMAMultiscaleImage"}
    for rel, kind, uri in objs:
        with tiledbsoma.open(uri) as o:
            want = space_json(o.coordinate_space)
        got = _read_json(mp.joinpath(*rel) / "coordinate_space.json")
        if not json_equal(got, want):
            problems.append(f"{'/'.join(rel) or '<root>'} ({kind}): {got!r}, expected {want!r}")
    fail_if(problems, "coordinate_space.json problems")


TRANSFORM_KEYS = {"transform_type", "input_axes", "output_axes", "matrix", "scale_factors", "scale"}


def check_transform(got, t, where) -> list[str]:
    p = []
    if not isinstance(got, dict):
        return [f"{where}: not a JSON object: {got!r}"]
    if set(got) - TRANSFORM_KEYS:
        p.append(f"{where}: unexpected keys {sorted(set(got) - TRANSFORM_KEYS)}")
    name = type(t).__name__
    if got.get("transform_type") != name:
        p.append(f"{where}: transform_type {got.get('transform_type')!r}, expected {name!r}")
    for k in ("input_axes", "output_axes"):
        if got.get(k) != list(getattr(t, k)):
            p.append(f"{where}: {k} {got.get(k)!r}, expected {list(getattr(t, k))!r}")
    if name == "AffineTransform":
        m = np.asarray(t.augmented_matrix, dtype=np.float64)
        g = got.get("matrix")
        try:
            g = np.asarray(g, dtype=np.float64)
        except (TypeError, ValueError):
            g = None
        # the augmented matrix, or its affine rows without the last [0 ... 0 1]
        if g is None or g.ndim != 2 or g.shape[1] != m.shape[1] or g.shape[0] not in (m.shape[0], m.shape[0] - 1) \
                or not np.array_equal(g, m[: g.shape[0]]):
            p.append(f"{where}: matrix {got.get('matrix')!r}, expected rows of {m.tolist()!r}")
    elif name == "ScaleTransform":
        if got.get("scale_factors") != [float(x) for x in t.scale_factors]:
            p.append(f"{where}: scale_factors {got.get('scale_factors')!r}, expected {list(t.scale_factors)!r}")
    elif name == "UniformScaleTransform":
        if not json_equal(got.get("scale"), float(t.scale)):
            p.append(f"{where}: scale {got.get('scale')!r}, expected {t.scale!r}")
    elif name == "IdentityTransform":
        extra = {"matrix", "scale_factors", "scale"} & set(got)
        if extra:
            p.append(f"{where}: an IdentityTransform with {sorted(extra)}")
    return p


def registered(uri) -> set:
    """Names registered in a collection's metadata (both key spellings)."""
    out = set()
    for k in tree_reference.raw_metadata(uri, True):
        for pre in ("soma_scene_registry_", "somascene_registry"):
            if k.startswith(pre):
                out.add(k[len(pre):])
    return out


def test_transforms_json(fixtures_dir, mounts):
    """obsl/transforms.json and img/transforms.json have exactly the registered members,
    each equal to scene.get_transform_to_point_cloud_dataframe / _multiscale_image."""
    mp = Path(mounts("scene"))
    root = str(fixtures_dir / "scene")
    problems = []
    with tiledbsoma.open(root) as scene:
        for coll, getter in (("obsl", scene.get_transform_to_point_cloud_dataframe),
                             ("img", scene.get_transform_to_multiscale_image)):
            names = registered(scene[coll].uri)
            assert names, f"fixture: nothing registered in {coll}"
            got = _read_json(mp / coll / "transforms.json")
            if set(got) != names:
                problems.append(f"{coll}/transforms.json: keys {sorted(got)}, registered {sorted(names)}")
            for name in sorted(names & set(got)):
                problems += check_transform(got[name], getter(name), f"{coll}/transforms.json[{name!r}]")
        assert not (mp / "varl" / "transforms.json").exists(), "varl has no registry: no transforms.json"
    fail_if(problems, "transforms.json problems")


def image_nodes(fixtures_dir):
    return [n for n in walk(fixtures_dir, "scene") if n.soma_type == "SOMAMultiscaleImage"]


def test_image_json(fixtures_dir, mounts):
    """image.json: the decoded soma_multiscale_image_schema (every field) plus "levels",
    [{name, shape}] largest first, equal to tiledbsoma's levels(), level_count and
    level_shape; its has_channel_axis agrees with tiledbsoma."""
    mp = Path(mounts("scene"))
    problems = []
    imgs = image_nodes(fixtures_dir)
    assert len(imgs) == 4
    for node in imgs:
        where = node.display
        got = _read_json(mp.joinpath(*node.relpath) / "image.json")
        with tiledbsoma.open(node.uri) as img:
            schema = load_json_strict(img.metadata["soma_multiscale_image_schema"])
            levels = [{"name": k, "shape": list(v[1])} for k, v in img.levels().items()]
            assert len(levels) == img.level_count
            for i, lv in enumerate(levels):
                assert tuple(lv["shape"]) == tuple(img.level_shape(i))
            has_channel = img.has_channel_axis
            perm = list(img._data_axis_permutation)
        want = dict(schema, levels=levels)
        if not isinstance(got, dict):
            problems.append(f"{where}: image.json is not an object")
            continue
        if set(got) != set(want):
            problems.append(f"{where}: keys {sorted(got)}, expected {sorted(want)}")
        for k in want:
            if k in got and not json_equal(got[k], want[k]):
                problems.append(f"{where}: {k} is {got[k]!r}, expected {want[k]!r}")
        if got.get("has_channel_axis") is not has_channel:
            problems.append(f"{where}: has_channel_axis {got.get('has_channel_axis')!r}, tiledbsoma says {has_channel}")
        if got.get("data_axis_permutation") != perm:
            problems.append(f"{where}: data_axis_permutation {got.get('data_axis_permutation')!r}, tiledbsoma {perm}")
        shapes = [lv["shape"] for lv in got.get("levels", [])]
        if shapes != sorted(shapes, key=lambda s: -int(np.prod(s))):
            problems.append(f"{where}: levels are not largest first: {shapes}")
    fail_if(problems, "image.json problems")


# --------------------------------------------------------------------------------------
# 5. level_<n>.png


def level_pixels(img, i) -> np.ndarray:
    """Level i as (Y, X, C) (C = 1 without a channel axis), from tiledbsoma."""
    name = list(img.levels())[i]
    data = img[name].read().to_numpy()
    order = list(img.data_axis_order)
    axes = [order.index("y"), order.index("x")]
    if "soma_channel" in order:
        axes.append(order.index("soma_channel"))
        return np.transpose(data, axes)
    return np.transpose(data, axes)[:, :, None]


def expected_png_pixels(px: np.ndarray) -> list[np.ndarray]:
    """The pixel arrays a PNG of px may hold: uint8 and uint16 as they are; any other
    type scaled min..max to 8 bits (over the whole level, or channel by channel)."""
    if px.dtype in (np.uint8, np.uint16):
        return [px]
    f = px.astype(np.float64)

    def scale(a, lo, hi):
        return np.zeros(a.shape) if hi == lo else (a - lo) * 255.0 / (hi - lo)

    whole = scale(f, f.min(), f.max())
    per = np.stack([scale(f[..., c], f[..., c].min(), f[..., c].max()) for c in range(f.shape[2])], axis=2)
    return [whole, per]


PNG_MODES = {(1, 8): "L", (2, 8): "LA", (3, 8): "RGB", (4, 8): "RGBA", (1, 16): ("I;16", "I;16B", "I")}


def test_level_pngs(fixtures_dir, mount):
    """On a fresh mount: level_<n>.png's stat size equals its length before any read;
    `file` says PNG; Pillow decodes it to the level's pixels, transposed to (y, x,
    channel) as data_axis_order says: 1-4 channels as L/LA/RGB/RGBA, uint8 and uint16 as
    stored, float scaled min..max to 8 bits (within 1)."""
    from PIL import Image

    problems = []
    n_png = 0
    with mount(fixtures_dir / "scene") as mp:
        for node in image_nodes(fixtures_dir):
            d = Path(mp).joinpath(*node.relpath)
            with tiledbsoma.open(node.uri) as img:
                count = img.level_count
                pixels = [level_pixels(img, i) for i in range(count)]
            listed = sorted(n for n in os.listdir(d) if n.startswith("level_"))
            if listed != sorted(f"level_{i}.png" for i in range(count)):
                problems.append(f"{node.display}: lists {listed}, expected level_0..{count - 1}.png")
            for i, px in enumerate(pixels):
                n_png += 1
                where = f"{node.display}/level_{i}.png"
                path = d / f"level_{i}.png"
                st0 = os.stat(path).st_size
                data = path.read_bytes()
                if st0 != len(data):
                    problems.append(f"{where}: stat before any read says {st0}, content is {len(data)} bytes")
                if not data.startswith(b"\x89PNG\r\n\x1a\n"):
                    problems.append(f"{where}: no PNG signature")
                    continue
                if shutil.which("file"):
                    out = subprocess.run(["file", "-b", str(path)], capture_output=True, text=True, timeout=30).stdout
                    if "PNG image data" not in out:
                        problems.append(f"{where}: file(1) says {out.strip()!r}")
                try:
                    im = Image.open(io.BytesIO(data))
                    im.load()
                except Exception as e:  # noqa: BLE001
                    problems.append(f"{where}: Pillow cannot decode it: {type(e).__name__}: {e}")
                    continue
                h, w, c = px.shape
                bits = 16 if px.dtype == np.uint16 else 8
                mode = PNG_MODES.get((c, bits))
                if im.size != (w, h):
                    problems.append(f"{where}: {im.size[0]}x{im.size[1]} pixels, expected {w}x{h}")
                    continue
                if im.mode not in (mode if isinstance(mode, tuple) else (mode,)):
                    problems.append(f"{where}: mode {im.mode}, expected {mode} ({c} channels, {px.dtype})")
                    continue
                got = np.asarray(im)
                if got.ndim == 2:
                    got = got[:, :, None]
                if px.dtype in (np.uint8, np.uint16):
                    if not np.array_equal(got.astype(px.dtype), px):
                        problems.append(f"{where}: pixels differ from the level's ({int((got != px).sum())} values)")
                else:
                    cands = expected_png_pixels(px)
                    ok = any(
                        np.abs(got.astype(np.float64) - cand).max() <= 1.0
                        and got.min() == 0 and got.max() == 255
                        for cand in cands
                    )
                    if not ok:
                        err = min(np.abs(got.astype(np.float64) - cand).max() for cand in cands)
                        problems.append(f"{where}: {px.dtype} pixels not scaled min..max to 8 bits (max error {err:.2f})")
    assert n_png >= 6
    fail_if(problems, f"level PNG problems ({n_png} files)")


# --------------------------------------------------------------------------------------
# 6. the v1 store (encoding 1.0.0), by test_tree's and test_data's checks


def test_v1_fixture_is_encoding_1(fixtures_dir):
    """Every object of fixtures/v1 says soma_encoding_version "1" and its arrays have
    no current domain (what the old tiledbsoma writes), and tiledbsoma 2.3.0 reads it."""
    nodes = walk(fixtures_dir, "v1")
    assert len(nodes) == 10, [n.display for n in nodes]
    for n in nodes:
        md = tree_reference.raw_metadata(n.uri, n.is_group)
        assert md["soma_encoding_version"][1] == "1", (n.display, md["soma_encoding_version"])
        if n.is_array:
            with tiledb.open(n.uri) as A:
                assert all(A.schema.domain.dim(i).domain is not None for i in range(A.schema.domain.ndim))
            with tiledbsoma.open(n.uri) as a:
                if n.soma_type == "SOMADataFrame":
                    assert a.tiledbsoma_has_upgraded_domain is False, n.display
                else:
                    assert a.tiledbsoma_has_upgraded_shape is False, n.display


@pytest.mark.parametrize("store", ["v1", "legacy"])
def test_listings_like_test_tree(store, fixtures_dir, mounted):
    test_tree.test_group_directories_list_exactly_their_members(store, fixtures_dir, mounted)


@pytest.mark.parametrize("store", ["v1", "legacy"])
def test_metadata_json_like_test_tree(store, fixtures_dir, mounted):
    test_tree.test_metadata_json_matches_tiledbsoma(store, fixtures_dir, mounted)


@pytest.mark.parametrize("store", ["v1", "legacy"])
def test_schema_json_like_test_tree(store, fixtures_dir, mounted):
    test_tree.test_schema_json_matches_tiledbsoma(store, fixtures_dir, mounted)


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
@pytest.mark.parametrize("store", ["v1", "legacy"])
def test_data_csv_like_test_data(store, fmt, fixtures_dir, mounted):
    test_data.test_csv_tsv_match_tiledbsoma(store, fmt, fixtures_dir, mounted)


@pytest.mark.parametrize("store", ["v1", "legacy"])
def test_data_files_like_test_data(store, fixtures_dir, mounted):
    """data.jsonl, data.parquet, data.npy and the data-file listing."""
    test_data.test_array_directories_have_data_files(store, fixtures_dir, mounted)
    test_data.test_jsonl_matches_tiledbsoma(store, fixtures_dir, mounted)
    test_data.test_parquet_matches_tiledbsoma(store, fixtures_dir, mounted)
    if store == "v1":
        test_data.test_npy_matches_tiledbsoma(store, fixtures_dir, mounted)


@pytest.mark.parametrize("store", ["v1", "legacy"])
def test_obs_by_matches_value_filter(store, fixtures_dir, mounted):
    """by/<column>/<label>/data.csv of every DataFrame with enumerated columns (obs of
    the encoding-1 store, and of legacy's experiments) equals tiledbsoma's
    read(value_filter=...), as test_slices checks it for the other stores."""
    mp = Path(mounted(store))
    problems = []
    n = 0
    for node in test_slices.dataframes_of(fixtures_dir, store):
        d = mp.joinpath(*node.relpath)
        for f, labels in test_slices.enum_columns(node):
            cd = d / "by" / encode_name(f.name)
            lp = formats.Problems(f"{node.display}/by/{encode_name(f.name)}")
            shown = test_slices.match_listing(set(os.listdir(cd)), labels, test_slices.label_kind(f), f.nullable, "ls", lp)
            problems += lp.done()
            targets = [(labels[i], False, name) for i, name in shown.items()]
            if f.nullable:
                targets.append((None, True, "__null__"))
            for label, is_null, name in targets:
                n += 1
                want = test_slices.expected_by(node, f, label, is_null)
                probs = formats.Problems(f"{node.display}/by/{encode_name(f.name)}/{name}")
                test_slices.check_file_against(cd / name / "data.csv", want, probs)
                problems += probs.done()
    assert n > 0
    fail_if(problems, f"by/ problems in {store} ({n} label directories)")


def test_v1_shapes_are_core_domains(fixtures_dir, mounted):
    """Spelled out: an encoding-1 ND array's shape is its core domain (hi + 1), and its
    DataFrames' soma_joinid domain is the core domain."""
    mp = Path(mounted("v1"))
    x = test_tree.read_json(mp / "ms" / "RNA" / "X" / "data" / "schema.json")
    assert x["shape"] == [24, 10] and x["non_empty_domain"] == [[0, 23], [0, 9]]
    d = test_tree.read_json(mp / "ms" / "RNA" / "obsm" / "X_pca" / "schema.json")
    assert d["shape"] == [24, 4]
    with tiledb.open(str(fixtures_dir / "v1" / "obs")) as A:
        lo, hi = A.schema.domain.dim(0).domain
    obs = test_tree.read_json(mp / "obs" / "schema.json")
    col = next(c for c in obs["columns"] if c["name"] == "soma_joinid")
    assert col["domain"] == [int(lo), int(hi)]


# --------------------------------------------------------------------------------------
# 7. malformed spatial metadata


def _errno_of(fn):
    try:
        r = fn()
    except OSError as e:
        return e.errno
    if hasattr(r, "close"):
        r.close()
    return None


def test_malformed_spatial_json_is_eio(fixtures_dir, mount):
    """coordinate_space.json of a collection whose soma_coordinate_space is not JSON,
    and transforms.json of one whose registry entry is not JSON: stat, open and read
    give EIO, each with a log line naming the key; everything else keeps working (the
    same directories' metadata.json, other members' files), and the daemon lives."""
    with mount(fixtures_dir / "legacy") as mp:
        root = Path(mp)
        cases = [
            (root / "bad_space" / "coordinate_space.json", "soma_coordinate_space"),
            (root / "bad_transforms" / "transforms.json", "soma_scene_registry_points"),
        ]
        problems = []
        for path, key in cases:
            rel = path.relative_to(root)
            if path.name not in os.listdir(path.parent):
                problems.append(f"{rel}: not listed")
            for what, fn in (
                ("stat", lambda: os.stat(path)),
                ("open+read", lambda: open(path, "rb").read()),
                ("stat again", lambda: os.stat(path)),
            ):
                e = _errno_of(fn)
                if e != errno.EIO:
                    problems.append(f"{rel}: {what} gives {errno.errorcode.get(e, e) if e else 'success'}, expected EIO")
            md = test_tree.read_json(path.parent / "metadata.json")
            if key not in md:
                problems.append(f"{rel.parent}/metadata.json lacks {key!r}")
        # The rest of the mount still serves.
        assert mp.proc.poll() is None, "the daemon exited"
        assert (root / "noncontig" / "ms" / "RNA" / "10x" / "data" / "barcodes.tsv").read_bytes()
        assert test_tree.read_json(root / "metadata.json")["soma_object_type"] == "SOMACollection"
        log = Path(mp.log).read_text(errors="replace")
        for _, key in cases:
            if not any(key in line for line in log.splitlines()):
                problems.append(f"no log line names {key!r}:\n{log[-2000:]}")
        fail_if(problems, "malformed spatial metadata problems")
