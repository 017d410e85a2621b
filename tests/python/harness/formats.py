"""Reading the files the daemon serves and checking them against the reference, problem by
problem: a data file read as a tool reads it (with the sizes stat reports on the way), CSV
and TSV, JSON Lines and Parquet checked value for value, in order, against a
`data_reference.Ref`; and `Problems`, a capped list of what is wrong with one array, which
`fail_if` turns into one failure listing them all.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from harness import data_reference
from harness.data_reference import Ref, RefCol

# Arrays with more rows than this get every row checked with vectorised numeric
# comparisons, and the text rules checked on a sample of rows (the big store).
FULL_CHECK_ROWS = 600_000
SAMPLE_ROWS = 20_000
# Files smaller than this must have their exact size after open (the daemon's default
# --materialize-limit is 64M; an estimate 16x too large would be a bug of its own).
SMALL_FILE = 4 << 20
MAX_PROBLEMS_PER_ARRAY = 25


def node_dir(mp, node) -> Path:
    return Path(mp).joinpath(*node.relpath)


def fail_if(problems: list[str], what: str):
    if problems:
        shown = "\n".join(f"  - {p}" for p in problems[:300])
        more = f"\n  ... and {len(problems) - 300} more" if len(problems) > 300 else ""
        pytest.fail(f"{len(problems)} {what}:\n{shown}{more}", pytrace=False)


class Problems(list):
    """Problems of one array, capped."""

    def __init__(self, where: str):
        super().__init__()
        self.where = where
        self.dropped = 0

    def add(self, msg: str):
        if len(self) < MAX_PROBLEMS_PER_ARRAY:
            self.append(f"{self.where}: {msg}")
        else:
            self.dropped += 1

    def done(self) -> list[str]:
        out = list(self)
        if self.dropped:
            out.append(f"{self.where}: ... and {self.dropped} more problems")
        return out


def read_data_file(path: Path, probs: Problems) -> bytes | None:
    """Read a generated data file as a tool would, and check the sizes it reports:
    before the first read 0 (not generated yet) or exact; after open 0 or exact (exact
    for .parquet, and for any file smaller than SMALL_FILE); after the read exact."""
    try:
        st0 = os.stat(path).st_size
        with open(path, "rb") as f:
            fst = os.fstat(f.fileno()).st_size
            data = f.read()
        st1 = os.stat(path).st_size
    except OSError as e:
        probs.add(f"{path.name}: {e}")
        return None
    n = len(data)
    if st0 not in (0, n):
        probs.add(f"{path.name}: stat before reading says {st0} bytes, content is {n}")
    if fst not in (0, n):
        probs.add(f"{path.name}: fstat after open says {fst} bytes, content is {n}")
    elif fst != n and (path.suffix == ".parquet" or n < SMALL_FILE):
        probs.add(f"{path.name}: fstat after open says {fst}, content is {n} (must be generated whole on open)")
    if st1 != n:
        probs.add(f"{path.name}: stat after a full read says {st1} bytes, content is {n}")
    return data


def decode_utf8(data: bytes, name: str, probs: Problems) -> str | None:
    if data.startswith(b"\xef\xbb\xbf"):
        probs.add(f"{name} starts with a byte order mark")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        probs.add(f"{name} is not UTF-8: {e}")
        return None


def sample_rows(n: int) -> list[int]:
    if n <= FULL_CHECK_ROWS:
        return range(n)
    rng = np.random.default_rng(n)
    head = range(min(n, 2000))
    tail = range(max(0, n - 2000), n)
    mid = rng.choice(n, size=SAMPLE_ROWS, replace=False)
    return sorted(set(head) | set(tail) | set(int(i) for i in mid))


def numeric_equal(got: np.ndarray, col: RefCol) -> str | None:
    """Vectorised comparison of a whole numeric column (no nulls) with the reference."""
    want = col.numpy()
    if len(got) != len(want):
        return f"{col.name}: {len(got)} values, expected {len(want)}"
    if col.kind in ("f32", "f64"):
        dt = np.float32 if col.kind == "f32" else np.float64
        got = np.asarray(got, dtype=np.float64).astype(dt)
        want = np.asarray(want, dtype=dt)
        nan_g, nan_w = np.isnan(got), np.isnan(want)
        bad = (nan_g != nan_w) | (~nan_w & ((got != want) | (np.signbit(got) != np.signbit(want))))
    else:
        bad = np.asarray(got) != np.asarray(want)
    if bad.any():
        i = int(np.argmax(bad))
        return f"{col.name}: {int(bad.sum())} values differ, first at row {i}: got {got[i]!r}, expected {want[i]!r}"
    return None


def check_delimited(ref: Ref, text: str, fmt: str, probs: Problems):
    delim = data_reference.DELIMS[fmt]
    name = f"data.{fmt}"
    big = ref.nrows > FULL_CHECK_ROWS
    if big:
        # Numeric ND arrays only (no quoting can occur): lines and fields by splitting.
        assert ref.all_numeric, f"fixture too large for the full check: {ref.display}"
        if '"' in text or "\r" in text:
            probs.add(f"{name}: quotes or CR in an all-numeric table")
            return
        if not text.endswith("\n"):
            probs.add(f"{name}: does not end with \\n")
            return
        lines = text[:-1].split("\n")
        rows = [[(f, False) for f in lines[0].split(delim)]]
        idx = sample_rows(ref.nrows)
        if len(lines) - 1 != ref.nrows:
            probs.add(f"{name}: {len(lines) - 1} data rows, expected {ref.nrows}")
            return
        rows += [[(f, False) for f in lines[i + 1].split(delim)] for i in idx]
    else:
        try:
            rows = data_reference.split_delimited(text, delim)
        except data_reference.ParseError as e:
            probs.add(f"{name}: {e}")
            return
        try:
            by_csv = data_reference.csv_module_rows(text, delim)
        except Exception as e:  # noqa: BLE001
            probs.add(f"{name}: Python's csv module (strict) fails: {e}")
            by_csv = None
        if by_csv is not None and by_csv != [[t for t, _ in r] for r in rows]:
            probs.add(f"{name}: Python's csv module reads different fields than a strict RFC 4180 parse")
        idx = range(ref.nrows)
    header = rows[0]
    if [t for t, _ in header] != ref.names:
        probs.add(f"{name}: header {[t for t, _ in header]} != columns {ref.names}")
        return
    for t, q in header:
        if q != data_reference.needs_quotes(t, delim):
            probs.add(f"{name}: header field {t!r} quoted={q}")
    body = rows[1:]
    if not big and len(body) != ref.nrows:
        probs.add(f"{name}: {len(body)} data rows, expected {ref.nrows}")
        if not body:
            return
    ncol = len(ref.cols)
    for r, i in zip(body, idx):
        if len(r) != ncol:
            probs.add(f"{name} row {i}: {len(r)} fields, expected {ncol}: {r[:ncol + 2]}")
            continue
        for col, (t, q) in zip(ref.cols, r):
            msg = data_reference.check_text_field(col, col.values[i], t, q, delim)
            if msg:
                probs.add(f"{name} row {i} column {col.name}: {msg}")
    if big:
        frame = pl.read_csv(
            io.BytesIO(text.encode()),
            separator=delim,
            schema_overrides={c.name: pl.Utf8 for c in ref.cols if c.kind in ("f32", "f64")},
        )
        for col in ref.cols:
            s = frame[col.name]
            if col.kind in ("f32", "f64"):
                s = s.str.replace("^inf$", "Infinity").str.replace("^-inf$", "-Infinity").cast(pl.Float64)
            msg = numeric_equal(s.to_numpy(), col)
            if msg:
                probs.add(f"{name} (all rows): {msg}")


def check_jsonl(ref: Ref, text: str, probs: Problems):
    if ref.nrows == 0:
        if text != "":
            probs.add(f"data.jsonl of an empty array is {text[:200]!r}, expected empty")
        return
    if not text.endswith("\n"):
        probs.add("data.jsonl does not end with \\n")
        return
    lines = text[:-1].split("\n")
    if len(lines) != ref.nrows:
        probs.add(f"data.jsonl: {len(lines)} lines, expected {ref.nrows}")
        return
    names = ref.names
    for i in sample_rows(ref.nrows):
        try:
            pairs = data_reference.load_json_line(lines[i])
        except ValueError as e:
            probs.add(f"data.jsonl line {i + 1}: invalid JSON ({e}): {lines[i][:300]!r}")
            continue
        if [k for k, _ in pairs] != names:
            probs.add(f"data.jsonl line {i + 1}: keys {[k for k, _ in pairs]} != columns {names}")
            continue
        for col, (_, jv) in zip(ref.cols, pairs):
            msg = data_reference.check_json_value(col, col.values[i], jv)
            if msg:
                probs.add(f"data.jsonl line {i + 1} {col.name}: {msg}")
    if ref.nrows > FULL_CHECK_ROWS:
        frame = pl.read_ndjson(io.BytesIO(text.encode()))
        for col in ref.cols:
            msg = numeric_equal(frame[col.name].to_numpy(), col)
            if msg:
                probs.add(f"data.jsonl (all rows): {msg}")


def check_parquet(ref: Ref, t: pa.Table, probs: Problems):
    if t.column_names != ref.names:
        probs.add(f"data.parquet: columns {t.column_names} != {ref.names}")
        return
    if t.num_rows != ref.nrows:
        probs.add(f"data.parquet: {t.num_rows} rows, expected {ref.nrows}")
        return
    rt = data_reference.pyarrow_roundtrip_schema(ref.schema)
    for col in ref.cols:
        f = t.schema.field(col.name)
        if not data_reference.parquet_type_ok(f.type, col.type, rt.field(col.name).type):
            probs.add(
                f"data.parquet column {col.name}: type {f.type}, expected {col.type}"
                f" (or {rt.field(col.name).type} as pyarrow round-trips it)"
            )
        if f.nullable != col.nullable:
            probs.add(f"data.parquet column {col.name}: nullable={f.nullable}, expected {col.nullable}")
        if ref.nrows > FULL_CHECK_ROWS and col.kind in ("int", "uint", "f32", "f64", "bool"):
            msg = numeric_equal(t.column(col.name).to_numpy(), col)
            if msg:
                probs.add(f"data.parquet: {msg}")
            continue
        got = data_reference.canonical_values(t.column(col.name), col.type)
        want = col.values
        for i, (g, w) in enumerate(zip(got, want)):
            if col.kind in ("f32", "f64") and g is not None and w is not None:
                ok = data_reference.same_float(g, w, col.kind)
            else:
                ok = g == w and type(g) is type(w)
            if not ok:
                probs.add(f"data.parquet row {i} column {col.name}: {g!r}, expected {w!r}")


def arrays_equal(got: np.ndarray, want: np.ndarray) -> bool:
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if got.dtype.kind == "f":
        return bool(np.array_equal(got, want, equal_nan=True) and np.array_equal(np.signbit(got), np.signbit(want)))
    return bool(np.array_equal(got, want))
