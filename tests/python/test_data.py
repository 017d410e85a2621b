"""Integration tests for the data files of every array directory:
data.csv, data.tsv, data.jsonl, data.parquet and data.npy, parsed back and compared
value for value, in order, with what tiledbsoma reads (tiledb-py for plain TileDB
arrays). See data_reference.py for the reference rows and the expected text of each value.

Run: .venv/bin/python -m pytest tests/python/test_data.py -q
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from numpy.lib import format as npformat

from harness import data_reference
from harness.data_reference import arrays_of, ref_of
from harness.formats import (
    FULL_CHECK_ROWS,
    Problems,
    arrays_equal,
    check_delimited,
    check_jsonl,
    check_parquet,
    decode_utf8,
    fail_if,
    node_dir,
    read_data_file,
)

STORES = ["hand", "pbmc", "scene", "big"]


# --------------------------------------------------------------------------------------
# listing


@pytest.mark.parametrize("store", STORES)
def test_array_directories_have_data_files(store, fixtures_dir, mounted):
    mp = mounted(store)
    problems = []
    for node in arrays_of(fixtures_dir, store):
        ref = ref_of(node)
        listing = set(os.listdir(node_dir(mp, node)))
        want = set(data_reference.DATA_FILES) | ({"data.npy"} if ref.npy else set())
        missing = want - listing
        if missing:
            problems.append(f"{node.display} ({ref.soma_type}): missing {sorted(missing)}")
        if not ref.npy and "data.npy" in listing:
            problems.append(f"{node.display} ({ref.soma_type}): has data.npy, but it is not a numeric DenseNDArray")
        for name in want & listing:
            if not (node_dir(mp, node) / name).is_file():
                problems.append(f"{node.display}/{name} is not a regular file")
    fail_if(problems, f"data-file listing problems in {store}")


# --------------------------------------------------------------------------------------
# CSV / TSV


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fmt", data_reference.TEXT_FORMATS)
@pytest.mark.parametrize("store", STORES)
def test_csv_tsv_match_tiledbsoma(store, fmt, fixtures_dir, mounted):
    mp = mounted(store)
    problems = []
    for node in arrays_of(fixtures_dir, store):
        ref = ref_of(node)
        probs = Problems(node.display)
        data = read_data_file(node_dir(mp, node) / f"data.{fmt}", probs)
        if data is not None:
            text = decode_utf8(data, f"data.{fmt}", probs)
            if text is not None:
                check_delimited(ref, text, fmt, probs)
        problems += probs.done()
    fail_if(problems, f"data.{fmt} problems in {store}")


_PD_INT = {
    pa.int8(): "Int8", pa.int16(): "Int16", pa.int32(): "Int32", pa.int64(): "Int64",
    pa.uint8(): "UInt8", pa.uint16(): "UInt16", pa.uint32(): "UInt32", pa.uint64(): "UInt64",
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fmt", data_reference.TEXT_FORMATS)
@pytest.mark.parametrize("store", STORES)
def test_pandas_reads_numeric_columns(store, fmt, fixtures_dir, mounted):
    """pandas.read_csv of data.csv / data.tsv gives the reference's integer and float
    columns (nulls as <NA> / NaN)."""
    mp = mounted(store)
    problems = []
    for node in arrays_of(fixtures_dir, store):
        ref = ref_of(node)
        path = node_dir(mp, node) / f"data.{fmt}"
        numeric = [c for c in ref.cols if c.kind in ("int", "uint", "f32", "f64") and not pa.types.is_dictionary(c.type)]
        if not numeric:
            continue
        dtypes = {c.name: _PD_INT.get(c.type, "float64") for c in numeric}
        others = {c.name: str for c in ref.cols if c not in numeric}
        try:
            df = pd.read_csv(
                path, sep=data_reference.DELIMS[fmt], dtype={**dtypes, **others}, keep_default_na=False,
                na_values={c.name: ["", "NaN"] if c.kind in ("f32", "f64") else [""] for c in numeric},
                float_precision="round_trip",
            )
        except Exception as e:  # noqa: BLE001
            problems.append(f"{node.display}: pandas.read_csv fails: {type(e).__name__}: {e}")
            continue
        if list(df.columns) != ref.names or len(df) != ref.nrows:
            problems.append(f"{node.display}: pandas sees columns {list(df.columns)} x {len(df)} rows")
            continue
        for c in numeric:
            s = df[c.name]
            if c.kind in ("f32", "f64"):
                # A null reads as NaN: compare against the reference with nulls as NaN.
                want = c._table.column(c.name).to_pandas().to_numpy(dtype=np.float64, na_value=np.nan)
                got = s.to_numpy(dtype=np.float64)
                if c.kind == "f32":
                    got, want = got.astype(np.float32), want.astype(np.float32)
                bad = (np.isnan(got) != np.isnan(want)) | (~np.isnan(want) & (got != want))
                if bad.any():
                    i = int(np.argmax(bad))
                    problems.append(f"{node.display} {c.name}: {int(bad.sum())} differ, row {i}: {got[i]!r} vs {want[i]!r}")
            else:
                got = s.tolist()
                want = c.values
                if len(got) > FULL_CHECK_ROWS:
                    ok = np.array_equal(s.to_numpy(dtype=np.int64 if c.kind == "int" else np.uint64), c.numpy())
                else:
                    got = [None if v is pd.NA else int(v) for v in got]
                    ok = got == want
                if not ok:
                    problems.append(f"{node.display} {c.name}: pandas reads different integers")
    fail_if(problems, f"pandas.read_csv problems ({fmt}) in {store}")


# --------------------------------------------------------------------------------------
# JSON Lines


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", STORES)
def test_jsonl_matches_tiledbsoma(store, fixtures_dir, mounted):
    mp = mounted(store)
    problems = []
    for node in arrays_of(fixtures_dir, store):
        ref = ref_of(node)
        probs = Problems(node.display)
        data = read_data_file(node_dir(mp, node) / "data.jsonl", probs)
        if data is not None:
            text = decode_utf8(data, "data.jsonl", probs)
            if text is not None:
                check_jsonl(ref, text, probs)
        problems += probs.done()
    fail_if(problems, f"data.jsonl problems in {store}")


# --------------------------------------------------------------------------------------
# Parquet


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", STORES)
def test_parquet_matches_tiledbsoma(store, fixtures_dir, mounted):
    mp = mounted(store)
    problems = []
    for node in arrays_of(fixtures_dir, store):
        ref = ref_of(node)
        probs = Problems(node.display)
        path = node_dir(mp, node) / "data.parquet"
        # First access: pyarrow opens the path, trusts its size and seeks to the footer.
        try:
            by_path = pq.read_table(path)
        except Exception as e:  # noqa: BLE001
            probs.add(f"pyarrow.parquet.read_table(path) fails: {type(e).__name__}: {e}")
            by_path = None
        data = read_data_file(path, probs)
        if data is not None:
            try:
                by_bytes = data_reference.read_parquet_bytes(data)
            except Exception as e:  # noqa: BLE001
                probs.add(f"pyarrow cannot read the file's bytes: {type(e).__name__}: {e}")
            else:
                check_parquet(ref, by_bytes, probs)
        if by_path is not None:
            p2 = Problems(node.display)
            check_parquet(ref, by_path, p2)
            for m in p2:
                if m not in probs:  # only what reading by path adds
                    probs.add(f"read_table(path): {m}")
        problems += probs.done()
    fail_if(problems, f"data.parquet problems in {store}")


# --------------------------------------------------------------------------------------
# NPY


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", STORES)
def test_npy_matches_tiledbsoma(store, fixtures_dir, mounted):
    mp = mounted(store)
    problems = []
    n_npy = 0
    for node in arrays_of(fixtures_dir, store):
        ref = ref_of(node)
        if not ref.npy:
            continue
        n_npy += 1
        where = node.display
        path = node_dir(mp, node) / "data.npy"
        want = ref.dense
        try:
            st0 = os.stat(path).st_size  # exact from the start, before any read
            with open(path, "rb") as f:
                fst = os.fstat(f.fileno()).st_size
                raw = f.read()
        except OSError as e:
            problems.append(f"{where}: data.npy: {e}")
            continue
        if st0 != len(raw) or fst != len(raw):
            problems.append(f"{where}: data.npy reports {st0} bytes (fstat {fst}), content is {len(raw)}")
        try:
            fp = io.BytesIO(raw)
            version = npformat.read_magic(fp)
            if version == (1, 0):
                hdr = npformat.read_array_header_1_0(fp)
            else:
                hdr = npformat.read_array_header_2_0(fp)
        except Exception as e:  # noqa: BLE001
            problems.append(f"{where}: data.npy header unreadable: {e}")
            continue
        shape, fortran, dtype = hdr
        if fortran or tuple(shape) != want.shape or dtype != want.dtype:
            problems.append(
                f"{where}: data.npy header shape={shape} fortran_order={fortran} dtype={dtype},"
                f" expected shape={want.shape} C order dtype={want.dtype}"
            )
        try:
            got = np.load(io.BytesIO(raw))
            got_file = np.load(path)
            mm = np.load(path, mmap_mode="r")
        except Exception as e:  # noqa: BLE001
            problems.append(f"{where}: numpy.load fails: {type(e).__name__}: {e}")
            continue
        for label, arr in (("content", got), ("numpy.load(path)", got_file), ("mmap_mode='r'", mm)):
            if not arrays_equal(np.asarray(arr), want):
                problems.append(
                    f"{where}: {label} ({arr.dtype}, {arr.shape}) differs from tiledbsoma ({want.dtype}, {want.shape})"
                )
        # Random slices of the memory map, and random byte ranges read with pread.
        rng = np.random.default_rng(len(raw))
        for _ in range(25):
            sl = []
            for s in want.shape:
                a, b = sorted(rng.integers(0, s + 1, size=2))
                sl.append(slice(int(a), int(b) + (1 if a == b and b < s else 0)))
            sl = tuple(sl)
            if not arrays_equal(np.array(mm[sl]), want[sl]):
                problems.append(f"{where}: mmap slice {sl} differs")
                break
        with open(path, "rb") as f:
            for _ in range(25):
                off = int(rng.integers(0, len(raw)))
                n = int(rng.integers(1, 4097))
                chunk = os.pread(f.fileno(), n, off)
                if chunk != raw[off:off + n]:
                    problems.append(f"{where}: pread({n}, {off}) differs from the whole file's bytes")
                    break
        del mm
    fail_if(problems, f"data.npy problems in {store} ({n_npy} dense arrays)")


# --------------------------------------------------------------------------------------
# empty arrays, spelled out


@pytest.mark.parametrize("array", ["edge/empty_df", "edge/empty_sparse"])
def test_empty_arrays(array, fixtures_dir, mounted):
    mp = Path(mounted("hand"))
    node = next(n for n in arrays_of(fixtures_dir, "hand") if n.display == array)
    ref = ref_of(node)
    assert ref.nrows == 0
    d = mp / array
    assert (d / "data.csv").read_bytes() == (",".join(ref.names) + "\n").encode()
    assert (d / "data.tsv").read_bytes() == ("\t".join(ref.names) + "\n").encode()
    assert (d / "data.jsonl").read_bytes() == b""
    t = data_reference.read_parquet_bytes((d / "data.parquet").read_bytes())
    assert t.num_rows == 0
    assert t.column_names == ref.names
    rt = data_reference.pyarrow_roundtrip_schema(ref.schema)
    for col in ref.cols:
        f = t.schema.field(col.name)
        assert data_reference.parquet_type_ok(f.type, col.type, rt.field(col.name).type), (col.name, f.type, col.type)
        assert f.nullable == col.nullable, col.name
    for name in ("data.csv", "data.tsv", "data.jsonl", "data.parquet"):
        assert os.stat(d / name).st_size == len((d / name).read_bytes()), name


def test_edge_strings_round_trip_through_csv_module(mounted):
    """The hardest strings (quotes, CR, CRLF, LF, tabs, unicode, empty vs null) read
    back exactly with Python's csv module and with pandas (strings kept as text)."""
    mp = Path(mounted("hand"))
    d = mp / "edge" / "all_types"
    import csv

    for fmt, delim in data_reference.DELIMS.items():
        with open(d / f"data.{fmt}", newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f, delimiter=delim, strict=True))
        header = rows[0]
        s_col = header.index("s_nn")
        got = [r[s_col] for r in rows[1:]]
        exp = _edge_strings_expected(len(got))
        assert got == exp, fmt
        df = pd.read_csv(d / f"data.{fmt}", sep=delim, dtype=str, keep_default_na=False)
        assert df["s_nn"].tolist() == exp, fmt


def _edge_strings_expected(n: int) -> list[str]:
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("make_fixtures", Path(__file__).resolve().parents[2] / "scripts" / "make-fixtures.py")
    mod = sys.modules.get("make_fixtures")
    if mod is None:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules["make_fixtures"] = mod
    strings = mod.EDGE_STRINGS
    return [strings[(i * 7) % len(strings)] for i in range(n)]


def test_jsonl_is_json_per_line(mounted):
    """Every line of a JSON Lines file is a complete JSON object (no raw newlines
    inside strings)."""
    mp = Path(mounted("hand"))
    text = (mp / "edge" / "all_types" / "data.jsonl").read_text(encoding="utf-8")
    # split on "\n" only: U+2028 / U+2029 may appear raw inside JSON strings.
    assert text.endswith("\n")
    for i, line in enumerate(text[:-1].split("\n")):
        obj = json.loads(line)
        assert isinstance(obj, dict), i
