"""Integration tests for slices/ and by/ (docs/REFERENCE.md, "Slices").

- slices/ lists chunks `A-B.<ext>` cut along the first index column (one `*.<ext>`
  chunk when that column is not an integer, none for an empty array); the chunks are
  disjoint, ascending and cover every stored cell, and their data rows concatenated
  in order equal data.<ext>'s, in every format.
- Named slices `slices/<R0>[,<R1>...].<ext>` equal tiledbsoma's read(coords=...) with
  the same ranges, clipped to the current domain; string index values are
  percent-encoded (%25 %2C %2F %2A, %00 for ""); malformed names are ENOENT at once.
- by/<column>/<label>/ holds the rows whose enumerated column holds the label (or is
  null: __null__), equal to tiledbsoma's read(value_filter=...), with its own slices/.

Every file read goes through formats.read_data_file, which checks the size rules
(stat before reading 0 or exact, fstat after open 0 or exact -- exact for .parquet and
small files --, stat after reading exact). Each test mounts its stores with a small
--chunk-cells through harness.mount's mount_guard.

Run: .venv/bin/python -m pytest tests/python/test_slices.py -q
"""

from __future__ import annotations

import errno
import math
import os
import re
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from harness import data_reference
from harness import tree_reference
import tiledb
import tiledbsoma
from harness.mount import lazy_mounts
from harness.settings import within
from harness.data_reference import Ref, RefCol, arrays_of, ref_of
from harness.tree_reference import encode_name
from harness.formats import check_delimited, check_jsonl, check_parquet, decode_utf8, fail_if, Problems, read_data_file

FORMATS = ("csv", "tsv", "parquet", "jsonl")
# --chunk-cells per store: small enough for several chunks in most arrays.
CHUNK_CELLS = {"hand": 50, "pbmc": 20000, "scene": 500, "big": 400000}
ENOENT_SECONDS = 1.0

CHUNK_RE = re.compile(r"(-?\d+)-(-?\d+)")
NL = b"\n"

_INFO: dict = {}


# --------------------------------------------------------------------------------------
# mounts


@pytest.fixture(scope="module")
def chunked(fixtures_dir, soma_mount_bin):
    """chunked(store) -> mountpoint of `store` mounted with --chunk-cells CHUNK_CELLS[store]
    (one daemon per store for the whole module, through mount_guard)."""
    with lazy_mounts(
        fixtures_dir,
        lambda store: f"{store} with --chunk-cells {CHUNK_CELLS[store]}",
        lambda store: ("--chunk-cells", CHUNK_CELLS[store]),
    ) as get:
        yield get


# --------------------------------------------------------------------------------------
# reference helpers


def node_named(fixtures_dir: Path, store: str, display: str):
    for n in arrays_of(fixtures_dir, store):
        if n.display == display:
            return n
    raise AssertionError(f"fixture bug: no array {display!r} in {store}")


class Info:
    """What the slice grammar needs to know about an array."""

    def __init__(self, soma_type, index_cols, domain, schema):
        self.soma_type = soma_type
        self.index_cols = index_cols  # names, in order
        self.domain = domain  # (lo, hi) per index column (None where unbounded)
        self.schema = schema

    def kind(self, i: int) -> str:
        return data_reference.kind_of(self.schema.field(self.index_cols[i]).type)

    @property
    def first_is_int(self) -> bool:
        return self.kind(0) in ("int", "uint")


def info_of(node) -> Info:
    if node.uri in _INFO:
        return _INFO[node.uri]
    if node.kind == "plain_array":
        ref = ref_of(node)
        with tiledb.open(node.uri) as A:
            dims = [A.schema.domain.dim(i) for i in range(A.schema.domain.ndim)]
            info = Info(
                "plain_array",
                [d.name for d in dims],
                [None if d.isvar else tuple(d.domain) for d in dims],
                ref.schema,
            )
    else:
        with tiledbsoma.open(node.uri) as obj:
            st = obj.soma_type
            if st in tree_reference.ND_TYPES:
                idx = [f"soma_dim_{i}" for i in range(len(obj.shape))]
                dom = [(0, int(s) - 1) for s in obj.shape]
            else:
                idx = list(obj.index_column_names)
                dom = []
                for c, d in zip(idx, obj.domain):
                    t = obj.schema.field(c).type
                    k = data_reference.kind_of(t)
                    dom.append(None if k in ("str", "bin", "ts") else (d[0], d[1]))
            info = Info(st, idx, dom, obj.schema)
    _INFO[node.uri] = info
    return info


def make_ref(display: str, soma_type: str, table: pa.Table, schema: pa.Schema) -> Ref:
    table = table.select(schema.names)
    cols = [RefCol(f.name, f.type, f.nullable, data_reference.kind_of(f.type), data_reference.ts_unit(f.type), table) for f in schema]
    return Ref(display, soma_type, table, schema, cols)


def table_values(t: pa.Table, schema: pa.Schema) -> dict:
    return {f.name: data_reference.canonical_values(t.column(f.name), f.type) for f in schema}


def values_equal(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        if len(a[k]) != len(b[k]):
            return False
        for x, y in zip(a[k], b[k]):
            if isinstance(x, float) and isinstance(y, float):
                if not (x == y or (math.isnan(x) and math.isnan(y))):
                    return False
            elif x != y:
                return False
    return True


# --------------------------------------------------------------------------------------
# slice names


def fmt_number(v, kind: str) -> str:
    """A slice bound as the grammar writes it: integers in decimal, floats as the
    shortest text that round-trips in the column's precision (test cases avoid
    integral floats, whose spelling -- "1" or "1.0" -- the contract leaves open)."""
    if kind in ("int", "uint"):
        return str(int(v))
    x = np.float32(v) if kind == "f32" else np.float64(v)
    s = np.format_float_positional(x, unique=True, trim="-")
    assert float(s) == float(x) and not float(x).is_integer(), f"test bug: bound {v!r}"
    return s


def encode_key(s: str) -> str:
    """A string index value in a slice name."""
    if s == "":
        return "%00"
    if s == "*":
        return "%2A"
    return s.replace("%", "%25").replace(",", "%2C").replace("/", "%2F")


def slice_name(info: Info, specs: list, ext: str) -> str:
    """specs[i] for index column i: None ('*'), a scalar (a point) or (a, b) (a range)."""
    parts = []
    for i, sp in enumerate(specs):
        k = info.kind(i)
        if sp is None:
            parts.append("*")
        elif k == "str":
            parts.append(encode_key(sp))
        elif isinstance(sp, tuple):
            parts.append(f"{fmt_number(sp[0], k)}-{fmt_number(sp[1], k)}")
        else:
            parts.append(fmt_number(sp, k))
    return ",".join(parts) + "." + ext


def _in_spec(values: list, sp, kind: str) -> np.ndarray:
    if sp is None:
        return np.ones(len(values), bool)
    if kind == "str":
        return np.array([v == sp for v in values], bool)
    a, b = sp if isinstance(sp, tuple) else (sp, sp)
    if kind == "f32":
        a, b = float(np.float32(a)), float(np.float32(b))
    return np.array([a <= v <= b for v in values], bool)


def expected_slice(node, specs: list) -> Ref:
    """The rows of slice `specs`: tiledbsoma's read(coords=...) with the ranges clipped
    to the current domain, cross-checked against a filter of the whole reference."""
    info = info_of(node)
    ref = ref_of(node)
    specs = list(specs) + [None] * (len(info.index_cols) - len(specs))
    coords, empty = [], False
    for i, sp in enumerate(specs):
        k = info.kind(i)
        if sp is None:
            coords.append(slice(None))
        elif k == "str":
            coords.append([sp])
        else:
            a, b = sp if isinstance(sp, tuple) else (sp, sp)
            lo, hi = info.domain[i]
            a, b = max(a, lo), min(b, hi)
            if a > b:
                empty = True
            coords.append(slice(a, b))
    # The whole reference, filtered.
    mask = np.ones(ref.nrows, bool)
    for i, sp in enumerate(specs):
        name = info.index_cols[i]
        col = next(c for c in ref.cols if c.name == name)
        mask &= _in_spec(col.values, sp, info.kind(i))
    filtered = ref.table.filter(pa.array(mask))

    if info.soma_type == "plain_array":
        got = filtered  # no tiledbsoma for plain TileDB arrays: tiledb-py's whole read, filtered
    elif info.soma_type == "SOMADenseNDArray":
        shape = tuple(hi - lo + 1 for lo, hi in info.domain)
        if empty:
            got = ref.table.schema.empty_table()
        else:
            box = tuple(slice(c.start or 0, (c.stop if c.stop is not None else shape[d] - 1)) for d, c in enumerate(coords))
            with tiledbsoma.open(node.uri) as obj:
                tensor = obj.read(coords=box).to_numpy()
            vtype = ref.schema.field("soma_data").type
            sub = ref.dense[tuple(slice(b.start, b.stop + 1) for b in box)]
            tensor = tensor.astype(sub.dtype, copy=False)
            assert dataref_arrays_equal(tensor, sub), f"reference disagreement on {node.display} {box}"
            idx = np.indices(sub.shape).reshape(len(shape), -1)
            cols = {f"soma_dim_{d}": pa.array((idx[d] + box[d].start).astype(np.int64)) for d in range(len(shape))}
            cols["soma_data"] = pa.array(sub.reshape(-1), vtype)
            got = pa.table(cols)
    elif empty:
        got = ref.table.schema.empty_table()
    else:
        with tiledbsoma.open(node.uri) as obj:
            r = obj.read(coords=tuple(coords), result_order="row-major")
            got = r.tables().concat() if info.soma_type == "SOMASparseNDArray" else r.concat()
    got = got.select(ref.schema.names)
    assert values_equal(table_values(got, ref.schema), table_values(filtered, ref.schema)), (
        f"reference disagreement on {node.display} {specs}: tiledbsoma read(coords) gives {got.num_rows} rows,"
        f" filtering the whole array {filtered.num_rows}"
    )
    return make_ref(f"{node.display}/slices", info.soma_type, got, ref.schema)


def dataref_arrays_equal(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype.kind == "f":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def check_file_against(path: Path, ref: Ref, probs: Problems):
    """Read one generated data file (size rules included) and compare it with ref."""
    fmt = path.suffix[1:]
    data = read_data_file(path, probs)  # its messages name the file
    p = Problems(path.name)
    if data is not None:
        if fmt == "parquet":
            try:
                t = data_reference.read_parquet_bytes(data)
            except Exception as e:  # noqa: BLE001
                p.add(f"pyarrow cannot read it: {type(e).__name__}: {e}")
            else:
                check_parquet(ref, t, p)
        else:
            text = decode_utf8(data, path.name, p)
            if text is not None:
                if fmt == "jsonl":
                    check_jsonl(ref, text, p)
                else:
                    check_delimited(ref, text, fmt, p)
    for m in p.done():
        probs.add(m)


# --------------------------------------------------------------------------------------
# chunks


def list_slices(d: Path) -> list[str]:
    """The chunk files of an array directory's slices/, as one listing of names `A-B.<ext>`.
    slices/ lists one directory per format (docs/REFERENCE.md, "Slices and datasets"), each holding
    the chunks in its own format only, the same chunks in each."""
    top = sorted(os.listdir(d / "slices"))
    assert top == sorted(FORMATS), f"{d}/slices lists {top}, expected a directory per format"
    names, stems = [], {}
    for fmt in FORMATS:
        assert (d / "slices" / fmt).is_dir(), f"{d}/slices/{fmt} is not a directory"
        listed = os.listdir(d / "slices" / fmt)
        other = [n for n in listed if not n.endswith(f".{fmt}")]
        assert not other, f"{d}/slices/{fmt} lists files of another format: {other[:10]}"
        stems[fmt] = sorted(n[: -len(fmt) - 1] for n in listed)
        names += listed
    differ = {fmt: s[:10] for fmt, s in stems.items() if s != stems[FORMATS[0]]}
    assert not differ, f"{d}/slices: the format directories list other chunks: {differ} vs {stems[FORMATS[0]][:10]}"
    return names


def parse_listing(names: list[str]) -> tuple[dict, list[str]]:
    """{stem: set(exts)} of a slices/ listing, and the names that are no chunk file."""
    stems: dict = {}
    bad = []
    for n in names:
        stem, dot, ext = n.rpartition(".")
        if not dot or ext not in FORMATS:
            bad.append(n)
            continue
        stems.setdefault(stem, set()).add(ext)
    return stems, bad


def check_chunk_listing(names: list[str], first_values, first_is_int: bool, array_empty: bool, where: str, probs: Problems):
    """The chunk names of one slices/ directory; first_values are the first index
    column's values of the rows the directory's data files hold (all must be in a
    chunk). An empty array lists no chunks (a by/ partition without rows of a
    non-empty array may list chunks: they hold no rows). Returns [(A, B, stem)]."""
    nrows = len(first_values)
    stems, bad = parse_listing(names)
    if bad:
        probs.add(f"{where}: unexpected names in slices/: {bad[:10]}")
    for stem, exts in stems.items():
        if exts != set(FORMATS):
            probs.add(f"{where}: chunk {stem!r} is listed in {sorted(exts)} only")
    if array_empty:
        if stems:
            probs.add(f"{where}: an empty array lists chunks {sorted(stems)[:10]}")
        return []
    if not first_is_int:
        if set(stems) != {"*"}:
            probs.add(f"{where}: first index column is not an integer: expected one chunk '*', got {sorted(stems)[:10]}")
        return [(None, None, "*")] if "*" in stems else []
    chunks = []
    for stem in stems:
        m = CHUNK_RE.fullmatch(stem)
        if not m:
            probs.add(f"{where}: chunk name {stem!r} is not A-B")
            continue
        a, b = int(m.group(1)), int(m.group(2))
        if f"{a}-{b}" != stem:
            probs.add(f"{where}: chunk name {stem!r} is not canonical")
        if a > b:
            probs.add(f"{where}: chunk {stem!r} is reversed")
        chunks.append((a, b, stem))
    chunks.sort()
    for (a0, b0, s0), (a1, b1, s1) in zip(chunks, chunks[1:]):
        if not b0 < a1:
            probs.add(f"{where}: chunks {s0} and {s1} overlap or are out of order")
    if nrows and not chunks:
        probs.add(f"{where}: {nrows} rows but no chunks")
    if chunks and len(first_values):
        A = np.array([c[0] for c in chunks])
        B = np.array([c[1] for c in chunks])
        v = np.asarray(first_values)
        i = np.searchsorted(A, v, side="right") - 1
        ok = (i >= 0) & (v <= B[np.maximum(i, 0)])
        if not ok.all():
            missing = np.unique(v[~ok])
            probs.add(
                f"{where}: {int((~ok).sum())} rows are in no chunk (first index values {missing[:10].tolist()}"
                f"{'...' if len(missing) > 10 else ''}; chunks {[c[2] for c in chunks][:20]})"
            )
    return chunks


def check_chunks_concatenate(d: Path, chunks, first_col: str, probs: Problems):
    """Every chunk in every format against d/data.<fmt>: data rows concatenated in
    chunk order equal data.<fmt>'s data rows, byte for byte (Parquet: as tables)."""
    where = "slices"
    for fmt in FORMATS:
        whole = read_data_file(d / f"data.{fmt}", probs)
        if whole is None:
            continue
        parts = []
        for a, b, stem in chunks:
            data = read_data_file(d / "slices" / fmt / f"{stem}.{fmt}", probs)
            if data is None:
                parts = None
                break
            parts.append((stem, a, b, data))
        if parts is None:
            continue
        if fmt in ("csv", "tsv"):
            nl = whole.find(b"\n")
            header, body = whole[: nl + 1], whole[nl + 1 :]
            got = []
            for stem, a, b, data in parts:
                if not data.startswith(header):
                    probs.add(f"slices/{stem}.{fmt} does not start with data.{fmt}'s header {header[:200]!r}: {data[:200]!r}")
                    break
                got.append(data[len(header) :])
            else:
                joined = b"".join(got)
                if joined != body:
                    probs.add(
                        f"slices/*.{fmt} data rows concatenated ({joined.count(NL)} lines, {len(joined)} bytes)"
                        f" differ from data.{fmt}'s ({body.count(NL)} lines, {len(body)} bytes)"
                        f"{first_difference(joined, body)}"
                    )
        elif fmt == "jsonl":
            joined = b"".join(p[3] for p in parts)
            if joined != whole:
                probs.add(
                    f"slices/*.jsonl concatenated ({joined.count(NL)} lines) differ from data.jsonl"
                    f" ({whole.count(NL)} lines){first_difference(joined, whole)}"
                )
        else:
            try:
                want = data_reference.read_parquet_bytes(whole)
                tables = [(stem, a, b, data_reference.read_parquet_bytes(data)) for stem, a, b, data in parts]
            except Exception as e:  # noqa: BLE001
                probs.add(f"{where}: parquet unreadable: {type(e).__name__}: {e}")
                continue
            for stem, a, b, t in tables:
                if not t.schema.equals(want.schema, check_metadata=False):
                    probs.add(f"slices/{stem}.parquet schema {t.schema} != data.parquet's {want.schema}")
                if a is not None and t.num_rows:
                    v = t.column(first_col).to_numpy()
                    if v.min() < a or v.max() > b:
                        probs.add(f"slices/{stem}.parquet holds {first_col} {v.min()}..{v.max()}, outside {a}..{b}")
            try:
                got = pa.concat_tables([t for *_, t in tables]) if tables else want.schema.empty_table()
            except pa.ArrowInvalid as e:
                probs.add(f"slices/*.parquet cannot be concatenated: {e}")
                continue
            if got.num_rows != want.num_rows:
                probs.add(f"slices/*.parquet concatenated: {got.num_rows} rows, data.parquet {want.num_rows}")
                continue
            for name in want.column_names:
                # NaN-aware, dictionaries decoded (each chunk may carry its own dictionary)
                g = data_reference.canonical_values(got.column(name))
                w = data_reference.canonical_values(want.column(name))
                if not values_equal({name: g}, {name: w}):
                    i = next(k for k in range(len(w)) if not values_equal({0: [g[k]]}, {0: [w[k]]}))
                    probs.add(f"slices/*.parquet concatenated: column {name} differs from data.parquet, first at row {i}: {g[i]!r} vs {w[i]!r}")


def first_difference(a: bytes, b: bytes) -> str:
    n = min(len(a), len(b))
    i = next((k for k in range(0, n, 4096) if a[k : k + 4096] != b[k : k + 4096]), None)
    if i is None:
        return f"; one is a prefix of the other (at byte {n})"
    while i < n and a[i] == b[i]:
        i += 1
    line = a.count(b"\n", 0, i) + 1
    ls = a.rfind(b"\n", 0, i) + 1
    lb = b.rfind(b"\n", 0, i) + 1
    return f"; first difference on line {line}: chunks {a[ls:a.find(NL, i)][:120]!r} vs data {b[lb:b.find(NL, i)][:120]!r}"


# --------------------------------------------------------------------------------------
# 1. every array has slices/; the chunks concatenate to data.<fmt>


@pytest.mark.timeout(900)
@pytest.mark.parametrize("store", ["hand", "pbmc", "scene", "big"])
def test_chunks_concatenate_to_data_files(store, fixtures_dir, chunked):
    mp = Path(chunked(store))
    problems = []
    n_chunks = 0
    for node in arrays_of(fixtures_dir, store):
        info = info_of(node)
        ref = ref_of(node)
        d = mp.joinpath(*node.relpath)
        probs = Problems(node.display)
        try:
            names = list_slices(d)
        except OSError as e:
            problems.append(f"{node.display}: ls slices/: {e}")
            continue
        first = info.index_cols[0]
        first_values = next(c for c in ref.cols if c.name == first).values if info.first_is_int else []
        chunks = check_chunk_listing(names, first_values, info.first_is_int, ref.nrows == 0, "slices", probs)
        n_chunks += len(chunks)
        if chunks or ref.nrows == 0:
            check_chunks_concatenate(d, chunks, first, probs)
        problems += probs.done()
    fail_if(problems, f"slices/ chunk problems in {store} (--chunk-cells {CHUNK_CELLS[store]}, {n_chunks} chunks)")


def test_chunking_does_something(fixtures_dir, chunked):
    """The fragmented fixtures are cut into several chunks with a small --chunk-cells."""
    mp = Path(chunked("hand"))
    for display, at_least in (("edge/frag_sparse", 10), ("ms/RNA/X/data", 5), ("obs", 2), ("edge/labels", 2), ("edge/frag_dense", 2)):
        stems, _ = parse_listing(list_slices(mp / display))
        assert len(stems) >= at_least, f"{display}: {len(stems)} chunks with --chunk-cells 50: {sorted(stems)}"
    big = Path(chunked("big"))
    stems, _ = parse_listing(list_slices(big / "X"))
    assert 3 <= len(stems) <= 50, f"big/X: {len(stems)} chunks of about 400000 of 3.2M cells: {sorted(stems)}"


@pytest.mark.timeout(120)
def test_default_chunk_cells_one_chunk(fixtures_dir, mount):
    """With the default --chunk-cells (1,000,000) a small array is one chunk that
    equals the whole data file."""
    with mount(fixtures_dir / "hand") as mp:
        d = Path(mp) / "edge" / "labels"
        stems, bad = parse_listing(list_slices(d))
        assert not bad and set(stems) == {"-30-29"}, sorted(stems)
        for fmt in FORMATS:
            assert (d / "slices" / f"-30-29.{fmt}").read_bytes() == (d / f"data.{fmt}").read_bytes(), fmt


# --------------------------------------------------------------------------------------
# 2. named slices against tiledbsoma's read(coords=...)

# (store, array, [specs...]); each spec lists one entry per index column given
# (None = '*', scalar = point, tuple = inclusive range); missing trailing ranges mean all.
SLICE_CASES = [
    ("hand", "ms/RNA/X/data", [
        [(0, 9)], [17], [None], [(5, 20), (3, 10)], [(5, 20), None], [None, 7], [(-5, 3)],
        [(290, 400), (45, 100)], [(300, 400)], [(-10, -1)], [(0, 299), (0, 49)], [12, 30], [(3, 3), (-100, 2)],
    ]),
    ("hand", "edge/frag_sparse", [
        [(495, 605), (30, 39)], [(550, 560)], [999], [(0, 1000000)], [(240, 260), 39], [None, 39], [(-1000000, 2)],
    ]),
    ("hand", "ms/RNA/obsm/X_pca", [[(0, 2)], [7, 3], [(298, 1000), (-2, 1)], [None, 4], [(400, 500)], [299]]),
    ("hand", "edge/frag_dense", [[(5, 15), (1, 4)], [(100, 200)], [(-3, 2), 6], [(55, 75), (2, 3)], [119, (7, 9)]]),
    ("hand", "edge/dense_3d_f32", [
        [1, 2, 3], [(0, 1), None, 5], [(3, 9), (4, 4), (-3, 0)], [None, None, None], [2], [(4, 9)], [None, (1, 3), (-1, -1)],
    ]),
    ("hand", "edge/dense_bool", [[(1, 2), (2, 5)], [0]]),
    ("hand", "nested/level2/dense_1d_i64", [[(3, 6)], [(-1, 0)], [(9, 12)], [5]]),
    ("hand", "nested/level2/level3/partial_dense_u8", [[(0, 2), (0, 2)], [None], [(4, 7), 3]]),
    ("hand", "nested/level2/level3/level4/deep_sparse_3d", [[(1, 2), (0, 4), 2], [3], [None, None, (4, 5)]]),
    ("hand", "edge/sparse_u64", [[(1, 3)], [(7, 100)], [2]]),
    ("hand", "edge/sparse_f64", [[0], [(1, 4), (0, 2)]]),
    ("hand", "edge/empty_sparse", [[None], [(0, 5)], [3, 4]]),
    ("hand", "edge/empty_df", [[None], [(0, 5)]]),
    ("hand", "obs", [[(10, 19)], [(299, 310)], [(-5, 2)], [150], [(300, 1000)]]),
    ("hand", "edge/labels", [[(-5, -1)], [(-200, -25)], [(25, 500)], [(50, 60)], [-30], [0], [(-101, -100)], [(-12, 12)]]),
    ("hand", "ms/RNA/var", [[(45, 59)], [(55, 59)], [(40, 1000)], [49]]),
    ("hand", "edge/all_types", [[(3, 7)], [39], [(38, 45)]]),
    ("hand", "multi_index", [
        ["n1"], ["n1", None, (-4, -1)], ["n1", (-1.5, 0.25)], ["n3", None, None, None, (3, 30)], ["zz"],
        [None, (0.5, 2.5)], ["n0", (-1.5, 1000.25), (0, 50), None, (0, 99)], [None, (-100.5, -1.25)],
    ]),
    ("hand", "edge/string_index", [
        ["a"], ["a,c"], [""], ["a", -1.375], ["a", None], ["a", (-2.5, 0.5)], ["z z"], ['q"x'], ["a\tb"], ["A", (0.125, 9.5)],
        ["nope"], [None, (-0.5, 0.5)],
    ]),
    ("hand", "edge/str_keys", [[k] for k in ["*", "a/b", "50%", "x,y", "", "-", "1-2", "%2F", "plain", "sp ace", "%", "~tilde", "absent"]] + [[None]]),
    ("hand", "f32_index", [
        [(-1.5, -1.25)], [-0.375], [(0.125, 100.5)], [(-2.5, -1.875), (81, 101)], [None, (100, 200), (10, 15)],
        [(-1000.5, -2.25)], [-2.5, 1, 0],
    ]),
    ("scene", "obsl/points", [[(10.5, 20.25)], [None, (-5.5, 5.5)], [(0.5, 99.5), None, (10, 20)], [(-10.5, -0.5)]]),
    ("hand", "plain/plain_dense", [[(2, 3), 1], [(8, 20)], [None, (3, 5)], [(-4, -1)]]),
    ("hand", "plain/plain_sparse", [["beta"], ["nope"], [None]]),
    ("pbmc", "obs", [[(0, 9)], [(695, 800)]]),
    ("pbmc", "ms/RNA/X/data", [[(10, 12), (0, 99)], [699, (760, 800)]]),
    ("big", "X", [[(199990, 250000)], [(1000, 1002), (100, 1500)]]),
]


def _case_id(case):
    return f"{case[0]}:{case[1]}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", SLICE_CASES, ids=_case_id)
def test_named_slices_match_tiledbsoma(case, fixtures_dir, chunked):
    store, display, specs_list = case
    node = node_named(fixtures_dir, store, display)
    info = info_of(node)
    d = Path(chunked(store)).joinpath(*node.relpath) / "slices"
    problems = []
    for specs in specs_list:
        assert len(specs) <= len(info.index_cols), f"test bug: {display} {specs}"
        want = expected_slice(node, specs)
        for fmt in FORMATS:
            name = slice_name(info, specs, fmt)
            probs = Problems(f"{display}/slices")
            if not os.path.exists(d / name):
                problems.append(f"{display}/slices/{name!r}: does not exist (expected {want.nrows} rows)")
                continue
            check_file_against(d / name, want, probs)
            problems += probs.done()
    fail_if(problems, f"named slice problems in {store}/{display}")


def test_empty_slice_forms(fixtures_dir, chunked):
    """A slice with no rows: header only (CSV/TSV), empty (JSONL), zero-row Parquet
    with the schema."""
    mp = Path(chunked("hand"))
    for display, name in (("ms/RNA/X/data", "300-400"), ("edge/labels", "50-60"), ("edge/str_keys", "absent"), ("edge/empty_df", "*")):
        node = node_named(fixtures_dir, "hand", display)
        ref = ref_of(node)
        d = mp / display / "slices"
        assert (d / f"{name}.csv").read_bytes() == (",".join(ref.names) + "\n").encode(), display
        assert (d / f"{name}.tsv").read_bytes() == ("\t".join(ref.names) + "\n").encode(), display
        assert (d / f"{name}.jsonl").read_bytes() == b"", display
        t = data_reference.read_parquet_bytes((d / f"{name}.parquet").read_bytes())
        assert t.num_rows == 0 and t.column_names == ref.names, display
        for ext in FORMATS:
            assert os.stat(d / f"{name}.{ext}").st_size == len((d / f"{name}.{ext}").read_bytes()), (display, ext)


def test_float_bound_spelling(fixtures_dir, chunked):
    """An integral float bound: the contract says "shortest repr" without fixing "-1"
    or "-1.0" (data.csv writes "-1.0"). At least one spelling must open, with the rows
    of the range; both, if both open, must agree."""
    mp = Path(chunked("hand"))
    node = node_named(fixtures_dir, "hand", "f32_index")
    want = expected_slice(node, [(-1.0, 0.0)])
    d = mp / "f32_index" / "slices"
    opened = {}
    for name in ("-1-0.csv", "-1.0-0.0.csv"):
        try:
            opened[name] = (d / name).read_bytes()
        except FileNotFoundError:
            pass
    assert opened, "neither -1-0.csv nor -1.0-0.0.csv opens on a float index column"
    probs = Problems("f32_index/slices")
    check_delimited(want, next(iter(opened.values())).decode(), "csv", probs)
    assert len(set(opened.values())) == 1, "the two spellings give different content"
    fail_if(probs.done(), "float bound problems")


# --------------------------------------------------------------------------------------
# 3. by/


def enum_columns(node) -> list[tuple[pa.Field, list]]:
    """(field, labels in enumeration order) of every enumerated column."""
    out = []
    with tiledbsoma.open(node.uri) as obj:
        for f in obj.schema:
            if pa.types.is_dictionary(f.type):
                out.append((f, tree_reference._enumeration_values(obj, f.name).to_pylist()))
    return out


def label_kind(f: pa.Field) -> str:
    return data_reference.kind_of(f.type.value_type)


def expected_label_name(label, kind: str) -> str | None:
    """The directory name of a label (None for floats: checked by parsing)."""
    if kind == "str":
        return encode_name(label)
    if kind == "bool":
        return "true" if label else "false"
    if kind in ("int", "uint"):
        return str(int(label))
    return None


def match_listing(names: set, labels: list, kind: str, nullable: bool, where: str, probs: Problems) -> dict:
    """Checks `ls by/<column>` and returns label index -> shown name."""
    names = set(names)
    out = {}
    if nullable:
        if "__null__" not in names:
            probs.add(f"{where}: nullable column, but no __null__ listed")
        names.discard("__null__")
    elif "__null__" in names:
        probs.add(f"{where}: non-nullable column lists __null__")
        names.discard("__null__")
    if kind in ("f32", "f64"):
        for name in sorted(names):
            hits = [i for i, v in enumerate(labels) if data_reference.check_float_text(name, v, kind) is None]
            if len(hits) != 1:
                reasons = [data_reference.check_float_text(name, v, kind) for v in labels]
                probs.add(f"{where}: listed name {name!r} is no label's shortest text ({labels}): {reasons}")
            else:
                out[hits[0]] = name
        for i, v in enumerate(labels):
            if i not in out:
                probs.add(f"{where}: label {v!r} is not listed")
        return out
    want = {}
    for i, v in enumerate(labels):
        want[expected_label_name(v, kind)] = i
    for name in sorted(names - set(want)):
        probs.add(f"{where}: unexpected name {name!r} listed")
    for name, i in want.items():
        if name not in names:
            probs.add(f"{where}: label {labels[i]!r} is not listed as {name!r}")
        else:
            out[i] = name
    return out


def filter_literal(label, kind: str) -> str:
    if kind in ("f32", "f64"):
        return repr(float(label))
    return repr(label)


def expected_by(node, f: pa.Field, label, is_null: bool) -> Ref:
    """The rows of by/<column>/<label>: tiledbsoma's read(value_filter=...) (rows where
    the column is null for __null__), cross-checked against filtering the reference."""
    ref = ref_of(node)
    kind = label_kind(f)
    col = next(c for c in ref.cols if c.name == f.name)
    if is_null:
        mask = [v is None for v in col.values]
        vf = f"attr({f.name!r}) == None"
    else:
        if kind in ("f32", "f64"):
            mask = [v is not None and data_reference.same_float(v, label, kind) for v in col.values]
        else:
            mask = [v is not None and v == label and type(v) is type(label) for v in col.values]
        vf = f"attr({f.name!r}) == {filter_literal(label, kind)}"
    filtered = ref.table.filter(pa.array(mask, pa.bool_()))
    with tiledbsoma.open(node.uri) as obj:
        got = obj.read(value_filter=vf, result_order="row-major").concat().select(ref.schema.names)
    assert values_equal(table_values(got, ref.schema), table_values(filtered, ref.schema)), (
        f"reference disagreement on {node.display} {vf}: tiledbsoma gives {got.num_rows} rows, the filter {filtered.num_rows}"
    )
    return make_ref(f"{node.display}/by/{f.name}", ref.soma_type, got, ref.schema)


def dataframes_of(fixtures_dir, store):
    return [
        n for n in arrays_of(fixtures_dir, store)
        if n.kind == "soma_array" and n.soma_type in ("SOMADataFrame", "SOMAPointCloudDataFrame")
    ]


@pytest.mark.parametrize("store", ["hand", "pbmc", "scene"])
def test_by_directory_listings(store, fixtures_dir, chunked):
    """by/ exists exactly in DataFrame directories with an enumerated column; it lists
    the columns (encoded like member names); by/<column> lists every label, encoded,
    plus __null__ for a nullable column; each label directory holds the data files and
    slices/."""
    mp = Path(chunked(store))
    problems = []
    for node in arrays_of(fixtures_dir, store):
        d = mp.joinpath(*node.relpath)
        listing = set(os.listdir(d))
        if "slices" not in listing or not (d / "slices").is_dir():
            problems.append(f"{node.display}: no slices/ directory")
        is_df = node.kind == "soma_array" and node.soma_type in ("SOMADataFrame", "SOMAPointCloudDataFrame")
        cols = enum_columns(node) if is_df else []
        if not cols:
            if "by" in listing:
                problems.append(f"{node.display} ({node.soma_type or node.kind}): has by/ but no enumerated column")
            continue
        if "by" not in listing:
            problems.append(f"{node.display}: no by/ (enumerated columns {[f.name for f, _ in cols]})")
            continue
        shown = set(os.listdir(d / "by"))
        want = {encode_name(f.name) for f, _ in cols}
        if shown != want:
            problems.append(f"{node.display}: ls by/ gives {sorted(shown)}, expected {sorted(want)}")
        for f, labels in cols:
            cd = d / "by" / encode_name(f.name)
            probs = Problems(f"{node.display}/by/{encode_name(f.name)}")
            try:
                names = os.listdir(cd)
            except OSError as e:
                probs.add(f"ls: {e}")
                problems += probs.done()
                continue
            if len(names) != len(set(names)):
                probs.add(f"duplicate names listed: {sorted(names)}")
            got = match_listing(set(names), labels, label_kind(f), f.nullable, "ls", probs)
            for name in list(got.values()) + (["__null__"] if f.nullable else []):
                ld = cd / name
                try:
                    inside = set(os.listdir(ld))
                except OSError as e:
                    probs.add(f"{name!r}: {e}")
                    continue
                want_inside = set(data_reference.DATA_FILES) | {"slices"}
                if inside != want_inside:
                    probs.add(f"{name!r} lists {sorted(inside)}, expected {sorted(want_inside)}")
                if not (ld / "slices").is_dir():
                    probs.add(f"{name!r}/slices is not a directory")
            problems += probs.done()
    fail_if(problems, f"by/ listing problems in {store}")


def test_label_names_spelled_out(fixtures_dir, chunked):
    """The label encoding on edge/labels, written out (test_by_directory_listings
    covers it in general)."""
    mp = Path(chunked("hand"))
    by = mp / "edge" / "labels" / "by"
    assert set(os.listdir(by)) == {"label", "grp%2Fsub", "num"}
    assert set(os.listdir(by / "label")) == {
        "a%2Fb", "50%", "x%25%2Fy", "with space", " padded ", "%2E", "%2E%2E", "%00", "*", "%252F", "comma, here",
        "ü%2Fß %25", "-1", "tab\there", "unused", "__null__",
    }
    assert set(os.listdir(by / "grp%2Fsub")) == {"p q", "r%s", "t%2Fu"}
    assert set(os.listdir(by / "num")) == {"-1", "0", "1000", "__null__"}
    assert set(os.listdir(mp / "obs" / "by" / "lane")) == {"1", "2", "3", "-4"}
    assert set(os.listdir(mp / "obs" / "by" / "qc_pass")) == {"true", "false"}
    assert set(os.listdir(mp / "obs" / "by" / "cell_type")) == {"B cell", "T cell", "NK%2Fγδ", "%00", "monocyte, classical", "__null__"}
    assert set(os.listdir(mp / "edge" / "all_types" / "by" / "e_bool")) == {"true", "false", "__null__"}
    assert set(os.listdir(mp / "edge" / "all_types" / "by" / "e_int")) == {
        "-9223372036854775808", "9223372036854775807", "0", "7", "__null__"}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("store", ["hand", "pbmc", "scene"])
def test_by_files_match_value_filter(store, fixtures_dir, chunked):
    """by/<column>/<label>/data.<fmt> for every label of every enumerated column equal
    tiledbsoma's read(value_filter=...); their slices/ chunks concatenate to them and
    cover their rows."""
    mp = Path(chunked(store))
    problems = []
    n_labels = 0
    for node in dataframes_of(fixtures_dir, store):
        info = info_of(node)
        d = mp.joinpath(*node.relpath)
        for f, labels in enum_columns(node):
            cd = d / "by" / encode_name(f.name)
            kind = label_kind(f)
            lp = Problems(f"{node.display}/by/{encode_name(f.name)}")
            try:
                shown = match_listing(set(os.listdir(cd)), labels, kind, f.nullable, "ls", lp)
            except OSError as e:
                problems.append(f"{node.display}/by/{f.name}: {e}")
                continue
            problems += lp.done()
            targets = [(labels[i], False, name) for i, name in shown.items()]
            if f.nullable:
                targets.append((None, True, "__null__"))
            for label, is_null, name in targets:
                n_labels += 1
                want = expected_by(node, f, label, is_null)
                ld = cd / name
                probs = Problems(f"{node.display}/by/{encode_name(f.name)}/{name}")
                for fmt in FORMATS:
                    check_file_against(ld / f"data.{fmt}", want, probs)
                # its slices/: chunks cover its rows and concatenate to its data files
                try:
                    names = list_slices(ld)
                except OSError as e:
                    probs.add(f"ls slices/: {e}")
                else:
                    first = info.index_cols[0]
                    fv = next(c for c in want.cols if c.name == first).values if info.first_is_int else []
                    chunks = check_chunk_listing(names, fv, info.first_is_int, ref_of(node).nrows == 0, "slices/", probs)
                    if chunks or want.nrows == 0:
                        check_chunks_concatenate(ld, chunks, first, probs)
                problems += probs.done()
    fail_if(problems, f"by/ content problems in {store} ({n_labels} label directories)")


BY_SLICE_CASES = [
    ("edge/labels", [(-10, 10)]),
    ("edge/labels", [(-100, -20)]),
    ("edge/labels", [(30, 40)]),
    ("obs", [(0, 99)]),
    ("obs", [(250, 1000)]),
    ("f32_index", [(-2.5, -1.875)]),
    ("edge/all_types", [(10, 29)]),
]


@pytest.mark.timeout(300)
def test_named_slices_inside_by(fixtures_dir, chunked):
    """by/<column>/<label>/slices/<ranges>.<fmt>: the label's rows within the ranges."""
    mp = Path(chunked("hand"))
    problems = []
    for display, specs in BY_SLICE_CASES:
        node = node_named(fixtures_dir, "hand", display)
        info = info_of(node)
        sliced = expected_slice(node, specs)
        for f, labels in enum_columns(node):
            kind = label_kind(f)
            targets = [(v, False, expected_label_name(v, kind)) for v in labels if expected_label_name(v, kind) is not None]
            if f.nullable:
                targets.append((None, True, "__null__"))
            for label, is_null, name in targets:
                want_all = expected_by(node, f, label, is_null)
                # the label's rows that are also in the slice (both in index order)
                keys = set(map(tuple, zip(*[sliced.table.column(c).to_pylist() for c in info.index_cols]))) if sliced.nrows else set()
                mask = [k in keys for k in zip(*[want_all.table.column(c).to_pylist() for c in info.index_cols])]
                want = make_ref(want_all.display, want_all.soma_type, want_all.table.filter(pa.array(mask, pa.bool_())), want_all.schema)
                sd = mp / display / "by" / encode_name(f.name) / name / "slices"
                for fmt in FORMATS:
                    fname = slice_name(info, specs, fmt)
                    probs = Problems(f"{display}/by/{encode_name(f.name)}/{name}/slices")
                    if not os.path.exists(sd / fname):
                        problems.append(f"{probs.where}/{fname}: does not exist")
                        continue
                    check_file_against(sd / fname, want, probs)
                    problems += probs.done()
    fail_if(problems, "slices inside by/ problems")


# --------------------------------------------------------------------------------------
# 4. malformed names: ENOENT at once, and the daemon keeps serving

BAD_INT_2D = [
    "9-3.csv", "3-2,1.csv", "1,9-3.csv", "1,2,3.csv", "*,*,*.csv", "+1.csv", "01.csv", "1-02.csv", "-0.csv", "00.csv",
    "1.5.csv", "1e3.csv", "0x10.csv", " 1.csv", "1 .csv", "1-.csv", "-.csv", "--1.csv", "1--.csv", ".csv", ",.csv",
    "1,.csv", ",1.csv", "1,,2.csv", "**.csv", "*-3.csv", "3-*.csv", "a.csv", "1.txt", "1.csv.gz", "1.CSV", "1", "1.",
    "%31.csv", "1-2-3.csv", "1--1.csv", "5-4.parquet", "5-4.jsonl", "5-4.tsv", "1,*-*.csv", "1;2.csv", "1 - 2.csv",
    "1-2 .csv", "1-2,3-1.jsonl", "CSV", "xml", "1..csv",
]
BAD_STR_1D = [
    "%41.csv", "%2c.csv", "x%2cy.csv", "a%2.csv", "a%.csv", "%.csv", "%2A%2A.csv", "%2Ax.csv", "%00x.csv", "a%00.csv",
    "x,y.csv", "a,b,c.csv", "%2a.csv", "%25%.csv", "%zz.csv", "%2F%2f.csv", "plain,*.csv",
]
# Float bounds accept any finite spelling ("0.50", "1e0", ".5" are numbers, and CSV cells
# such as "-1.0" must work as bounds), so only non-numbers and reversed ranges are bad.
BAD_FLOAT = [
    "0.5-.csv", "-1.25--1.5.csv", "-1.5-abc.csv", "+0.5.csv", "-1.5-0.5,81-101,1,2.csv",
    "-1.5-0.5,101-81.csv", "0.5-0.25.csv", "inf.csv", "nan.csv", "0.5-inf.csv",
]
BAD_NAMES = [
    ("ms/RNA/X/data", BAD_INT_2D),
    ("edge/frag_dense", ["120-119.csv", "1,2,3.csv", "+0.csv", "0,+0.csv"]),
    ("edge/dense_3d_f32", ["1,2,3,4.csv", "3-1.csv", "1,2,3,*.csv"]),
    ("edge/labels", ["-5--10.csv", "-05.csv", "--5.csv", "-5---1.csv", "1,2.csv", "+5.csv", "-0.csv", "5-4.csv"]),
    ("edge/str_keys", BAD_STR_1D),
    ("edge/string_index", ["a,b.csv", "a,1,2.csv", "%61.csv", "a,-0.5--1.5.csv"]),
    ("f32_index", BAD_FLOAT),
    ("obs/by/cell_type/B cell", ["9-3.csv", "+1.csv", "1,2.csv"]),
    ("edge/labels/by/label/a%2Fb", ["5-4.csv", "01.csv", "a.csv"]),
]
# Names that are not slices/ names at all: also ENOENT.
BAD_BY = [
    "edge/labels/by/nosuchcolumn",
    "edge/labels/by/label/nosuchlabel",
    "edge/labels/by/label/50%25",  # "50%" is shown verbatim; "50%25" is another label
    "edge/labels/by/label/a%2fb",
    "edge/labels/by/grp%2Fsub/__null__",  # not nullable
    "edge/labels/by/grp/sub",
    "edge/labels/by/label/unused/data.npy",
    "edge/labels/by/label/unused/slices/5-4.csv",
    "ms/RNA/X/data/by",  # SparseNDArray: no by/
    "ms/RNA/var/by",  # no enumerated column
    "edge/labels/slices/data.csv",
    # slices/<format>/ opens slices of its own format only
    "ms/RNA/X/data/slices/csv/1.tsv",
    "ms/RNA/X/data/slices/parquet/0-9,*.csv",
    "ms/RNA/X/data/slices/jsonl/9-3.jsonl",
    "ms/RNA/X/data/slices/tsv/csv",
]


def _enoent_fast(path: Path) -> str | None:
    t0 = time.monotonic()
    try:
        os.stat(path)
    except FileNotFoundError:
        res = None
    except OSError as e:
        res = f"stat gives {errno.errorcode.get(e.errno, e.errno)} ({e}), expected ENOENT"
    else:
        res = "stat succeeds, expected ENOENT"
    dt = time.monotonic() - t0
    if res is None and dt > ENOENT_SECONDS:
        res = f"ENOENT after {dt:.2f}s (more than {ENOENT_SECONDS}s)"
    if res is None:
        try:
            with open(path, "rb"):
                res = "open succeeds, expected ENOENT"
        except FileNotFoundError:
            pass
        except OSError as e:
            res = f"open gives {errno.errorcode.get(e.errno, e.errno)}, expected ENOENT"
    return res


@pytest.mark.timeout(180)
def test_malformed_names_are_enoent(fixtures_dir, chunked):
    mp = Path(chunked("hand"))
    problems = []
    for display, names in BAD_NAMES:
        d = mp / display / "slices"
        assert d.is_dir(), f"{display}/slices is not a directory"
        for n in names:
            msg = _enoent_fast(d / n)
            if msg:
                problems.append(f"{display}/slices/{n!r}: {msg}")
    for rel in BAD_BY:
        msg = _enoent_fast(mp / rel)
        if msg:
            problems.append(f"{rel!r}: {msg}")
    fail_if(problems, "malformed names that are not ENOENT at once")


def _burst_names(k: int) -> list[str]:
    forms = [
        lambda i: f"{i + 10}-{i}.csv",
        lambda i: f"+{i}.csv",
        lambda i: f"0{i}.jsonl",
        lambda i: f"{i},{i},{i}.tsv",
        lambda i: f"{i}-{i}-{i}.parquet",
        lambda i: f"{i}x.csv",
        lambda i: f"{i}.{i}.csv",
        lambda i: f"{i}-.csv",
    ]
    return [forms[i % len(forms)](i // len(forms) + 1) for i in range(k)]


@pytest.mark.timeout(180)
def test_daemon_keeps_serving_after_bad_names(fixtures_dir, mount):
    """200 malformed names in a burst, each ENOENT within a second; then the daemon
    still serves: a slice and a data file read back unchanged."""
    with mount(fixtures_dir / "hand", "--chunk-cells", 50) as mp:
        mp_ = Path(mp)
        good = mp_ / "ms" / "RNA" / "X" / "data" / "slices" / "10-20,*.csv"
        before_slice = good.read_bytes()
        before_data = (mp_ / "edge" / "labels" / "data.csv").read_bytes()
        problems = []
        t0 = time.monotonic()
        for n in _burst_names(200):
            for display in ("ms/RNA/X/data", "edge/labels/by/label/%2E%2E"):
                msg = _enoent_fast(mp_ / display / "slices" / n)
                if msg:
                    problems.append(f"{display}/slices/{n!r}: {msg}")
        total = time.monotonic() - t0
        assert mp.proc.poll() is None, f"the daemon exited ({mp.proc.returncode}) during the burst"
        assert good.read_bytes() == before_slice
        assert (mp_ / "edge" / "labels" / "data.csv").read_bytes() == before_data
        assert (mp_ / "edge" / "labels" / "slices" / "-3-3.jsonl").read_bytes().count(b"\n") == 7
        fail_if(problems, f"burst problems (400 lookups in {total:.1f}s)")


# --------------------------------------------------------------------------------------
# 5. sizes


@pytest.mark.timeout(300)
def test_sizes_on_a_fresh_mount(fixtures_dir, mount):
    """On a fresh mount (nothing generated): stat of slice and by/ files is 0 or exact
    before any read; exact after a full read; and with --exact-sizes, exact right
    after open."""
    rels = []
    for fmt in FORMATS:
        rels += [
            f"edge/labels/slices/-10-10.{fmt}",
            f"edge/labels/slices/-30--11.{fmt}",
            f"edge/labels/by/label/x%25%2Fy/data.{fmt}",
            f"edge/labels/by/label/__null__/data.{fmt}",
            f"edge/labels/by/label/unused/data.{fmt}",
            f"edge/labels/by/num/-1/slices/-10-10.{fmt}",
            f"ms/RNA/X/data/slices/0-99,10-20.{fmt}",
            f"edge/frag_dense/slices/*,3.{fmt}",
            f"edge/str_keys/slices/%2A.{fmt}",
            f"obs/by/cell_type/NK%2Fγδ/data.{fmt}",
        ]
    for opts in ((), ("--exact-sizes",)):
        with mount(fixtures_dir / "hand", "--chunk-cells", 50, *opts) as mp:
            mp_ = Path(mp)
            probs = Problems(f"hand {' '.join(opts) or '(default options)'}")
            before = {}
            for rel in rels:
                try:
                    before[rel] = os.stat(mp_ / rel).st_size
                except OSError as e:
                    probs.add(f"{rel}: stat: {e}")
            for rel in rels:
                path = mp_ / rel
                try:
                    with open(path, "rb") as f:
                        fst = os.fstat(f.fileno()).st_size
                        data = f.read()
                    after = os.stat(path).st_size
                except OSError as e:
                    probs.add(f"{rel}: {e}")
                    continue
                n = len(data)
                if before.get(rel) not in (0, n):
                    probs.add(f"{rel}: stat before any read says {before.get(rel)}, content is {n}")
                if fst not in (0, n):
                    probs.add(f"{rel}: fstat after open says {fst}, content is {n}")
                if fst != n and (opts or rel.endswith(".parquet")):
                    probs.add(f"{rel}: fstat after open says {fst}, content is {n} (must be generated whole on open)")
                if after != n:
                    probs.add(f"{rel}: stat after reading says {after}, content is {n}")
                # a second read, through a size-trusting reader, gets the same bytes
                if path.read_bytes() != data:
                    probs.add(f"{rel}: a second read differs")
            fail_if(probs.done(), "size problems")


@pytest.mark.timeout(180)
def test_big_slices_list_stat_and_head_fast(fixtures_dir, mount):
    """On a fresh mount of big (3.2M cells): `ls slices/`, `stat` of a large slice and
    `head -n 10` of it each answer within a second (docs/REFERENCE.md: ls and stat never read
    array data; head on any CSV/TSV/JSON Lines file answers within a second), and the
    10 lines are the slice's first rows."""
    with tiledbsoma.open(str(fixtures_dir / "big" / "X")) as X:
        t = X.read(coords=(slice(150000, 199999),), result_order="row-major").tables().concat()
    rows = t.column("soma_dim_0").to_numpy()[:10]
    cols = t.column("soma_dim_1").to_numpy()[:10]
    with mount(fixtures_dir / "big", "--chunk-cells", 400000) as mp:
        d = Path(mp) / "X" / "slices"
        t0 = time.monotonic()
        names = os.listdir(d)
        assert time.monotonic() - t0 < within(1.0), f"ls slices/ took {time.monotonic() - t0:.2f}s"
        assert names
        for ext in ("csv", "tsv", "jsonl"):
            path = d / f"150000-250000,*.{ext}"
            t0 = time.monotonic()
            st = os.stat(path).st_size
            assert time.monotonic() - t0 < within(1.0), f"stat {path.name} took {time.monotonic() - t0:.2f}s"
            assert st == 0, f"{path.name}: {st} bytes before it was ever read (must be 0: not generated)"
            t0 = time.monotonic()
            with open(path, "rb") as f:
                head = b""
                while head.count(b"\n") < 11:
                    chunk = f.read(4096)
                    if not chunk:
                        break
                    head += chunk
            elapsed = time.monotonic() - t0
            assert elapsed < within(1.0), f"the first 11 lines of {path.name} took {elapsed:.2f}s on a fresh mount"
            lines = head.split(b"\n")
            body = lines[1:11] if ext != "jsonl" else lines[:10]
            for i, line in enumerate(body):
                if ext == "jsonl":
                    pairs = data_reference.load_json_line(line.decode())
                    r, c = int(pairs[0][1]), int(pairs[1][1])
                else:
                    r, c = map(int, line.split(b"," if ext == "csv" else b"\t")[:2])
                assert (r, c) == (rows[i], cols[i]), f"{path.name} line {i}: {line!r}"
        assert mp.proc.poll() is None
