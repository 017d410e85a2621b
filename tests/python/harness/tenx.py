"""The legacy single-cell layout's reference and parsing (docs/REFERENCE.md "Legacy
single-cell layout"): the 10x layers of a fixture store (`tenx_layers`), what their
directories must hold, read with tiledbsoma (`tenx_reference`: X as a matrix, barcodes and
features by docs/REFERENCE.md's id columns), matrix.mtx parsed strictly (`parse_mtx`), and
every file of one 10x directory checked against the reference (`check_tenx_dir`).
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import scipy.sparse as sp
import tiledbsoma

from harness import tree_reference
from harness.tree_reference import encode_name

TENX_FILES = {"matrix.mtx", "genes.tsv", "features.tsv", "barcodes.tsv"}
# docs/REFERENCE.md's id columns, in order of preference.
OBS_ID_COLS = ("obs_id", "barcode", "barcodes", "cell_id")
VAR_ID_COLS = ("feature_id", "gene_ids", "gene_id", "var_id", "ensembl_id")
VAR_NAME_COLS = ("feature_name", "gene_symbols", "gene_name", "gene_names", "symbol", "var_name")


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
    nodes = tree_reference.walk_store(fixtures_dir, store)
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
