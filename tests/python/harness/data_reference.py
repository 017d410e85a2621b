"""Reference model for soma-mount's data files (data.csv, data.tsv, data.jsonl,
data.parquet, data.npy; docs/REFERENCE.md "Files in an array directory", "Value formatting").

The expected rows come from tiledbsoma (tiledb-py for plain TileDB arrays); the
expected text of each value comes from a small formatter written here from the
contract's rules; `arrays_of` and `ref_of` read each fixture store's arrays and their
references once. Nothing here touches a mount; see test_data.py and test_tools.py.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from harness import tree_reference  # (also quiets tiledbsoma's warnings before the import below)
import tiledb
import tiledbsoma

TEXT_FORMATS = ("csv", "tsv")
DATA_FILES = ("data.csv", "data.tsv", "data.parquet", "data.jsonl")
DELIMS = {"csv": ",", "tsv": "\t"}
TS_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}


# --------------------------------------------------------------------------------------
# the reference table


def kind_of(t: pa.DataType) -> str:
    """The formatting kind of an Arrow type (a dictionary formats as its values)."""
    if pa.types.is_dictionary(t):
        return kind_of(t.value_type)
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_signed_integer(t):
        return "int"
    if pa.types.is_unsigned_integer(t):
        return "uint"
    if t == pa.float32():
        return "f32"
    if t == pa.float64():
        return "f64"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bin"
    if pa.types.is_timestamp(t):
        return "ts"
    raise TypeError(f"no formatting rule for Arrow type {t}")


def ts_unit(t: pa.DataType) -> str | None:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return t.unit if pa.types.is_timestamp(t) else None


def canonical_values(arr, ref_type: pa.DataType | None = None) -> list:
    """Python values of an Arrow (chunked) array, as the formats must show them:
    dictionaries decoded to their labels, timestamps as integers of ref_type's unit
    (or of their own), everything else as to_pylist()."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks else pa.array([], arr.type)
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if pa.types.is_timestamp(arr.type):
        unit = ts_unit(ref_type) if ref_type is not None and ts_unit(ref_type) else arr.type.unit
        if arr.type.unit != unit:
            arr = arr.cast(pa.timestamp(unit))
        arr = arr.cast(pa.int64())
    return arr.to_pylist()


@dataclass
class RefCol:
    name: str
    type: pa.DataType
    nullable: bool
    kind: str
    unit: str | None
    _table: pa.Table = field(repr=False)
    _values: list | None = field(default=None, repr=False)

    @property
    def values(self) -> list:
        if self._values is None:
            self._values = canonical_values(self._table.column(self.name), self.type)
        return self._values

    def numpy(self) -> np.ndarray:
        """The column as a numpy array (ND arrays' numeric columns only)."""
        return self._table.column(self.name).to_numpy()


@dataclass
class Ref:
    display: str
    soma_type: str  # SOMADataFrame ... or "plain_array"
    table: pa.Table  # columns in schema order, rows in the contract's order
    schema: pa.Schema  # the object's Arrow schema (types, nullability)
    cols: list[RefCol]
    dense: np.ndarray | None = None  # SOMADenseNDArray: the full current domain
    npy: bool = False  # whether the directory must have data.npy

    @property
    def nrows(self) -> int:
        return self.table.num_rows

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.cols]

    @property
    def all_numeric(self) -> bool:
        return all(c.kind in ("int", "uint", "f32", "f64", "bool") for c in self.cols)


def _numpy_dtype(t: pa.DataType) -> np.dtype:
    return np.dtype(np.bool_) if pa.types.is_boolean(t) else np.dtype(t.to_pandas_dtype())


def _dense_table(shape, values: np.ndarray, dim_type=pa.int64(), dim_names=None, value_type=None):
    """Coordinates + values of every cell of `shape`, in C order."""
    ndim = len(shape)
    dim_names = dim_names or [f"soma_dim_{i}" for i in range(ndim)]
    idx = np.indices(shape).reshape(ndim, -1) if ndim else np.zeros((0, 1), np.int64)
    cols = {n: pa.array(idx[i].astype(np.int64), dim_type) for i, n in enumerate(dim_names)}
    cols["soma_data"] = pa.array(values.reshape(-1), value_type)
    return pa.table(cols)


def soma_reference(node) -> Ref:
    with tiledbsoma.open(node.uri) as obj:
        st = obj.soma_type
        schema = obj.schema
        dense = None
        if st == "SOMADenseNDArray":
            shape = tuple(int(s) for s in obj.shape)
            vtype = schema.field("soma_data").type
            tensor = obj.read().to_numpy()
            assert tensor.shape == shape, f"{node.display}: read() gave {tensor.shape}, shape is {shape}"
            # tiledbsoma 2.3.0 returns bool DenseNDArrays as a uint8 tensor.
            dense = np.ascontiguousarray(tensor.astype(_numpy_dtype(vtype), copy=False))
            idx = np.indices(shape).reshape(len(shape), -1)
            cols = {f"soma_dim_{i}": pa.array(idx[i].astype(np.int64)) for i in range(len(shape))}
            cols["soma_data"] = pa.array(dense.reshape(-1), vtype)
            table = pa.table(cols)
        elif st == "SOMASparseNDArray":
            table = obj.read(result_order="row-major").tables().concat()
        else:
            table = obj.read(result_order="row-major").concat()
        names = schema.names
        assert table.column_names == names, f"{node.display}: read columns {table.column_names} != schema {names}"
        table = table.select(names)
    cols = [
        RefCol(f.name, f.type, f.nullable, kind_of(f.type), ts_unit(f.type), table) for f in schema
    ]
    npy = st == "SOMADenseNDArray" and kind_of(schema.field("soma_data").type) in ("int", "uint", "f32", "f64", "bool")
    return Ref(node.display, st, table, schema, cols, dense, npy)


def plain_reference(node) -> Ref:
    """A plain TileDB array: dimensions then attributes; a dense one has every cell of
    its domain in C order, a sparse one its cells in row-major order."""
    with tiledb.open(node.uri) as A:
        s = A.schema
        dims = [s.domain.dim(i) for i in range(s.domain.ndim)]
        attrs = [s.attr(i) for i in range(s.nattr)]

        def arrow_type(dtype, var):
            if np.dtype(dtype).kind in ("S", "U") or var:
                return pa.large_string()
            return pa.from_numpy_dtype(dtype)

        fields = [pa.field(d.name, arrow_type(d.dtype, d.isvar), nullable=False) for d in dims]
        fields += [pa.field(a.name, arrow_type(a.dtype, a.isvar), nullable=a.isnullable) for a in attrs]
        schema = pa.schema(fields)
        if s.sparse:
            data = A.query(order="C")[:]
            coords = {d.name: data[d.name] for d in dims}
        else:
            data = A[:]
            ranges = [np.arange(d.domain[0], d.domain[1] + 1, dtype=d.dtype) for d in dims]
            mesh = np.meshgrid(*ranges, indexing="ij")
            coords = {d.name: m.reshape(-1) for d, m in zip(dims, mesh)}
        cols = {}
        for f in fields:
            v = coords[f.name] if f.name in coords else data[f.name]
            if isinstance(v, np.ma.MaskedArray):
                mask = np.ma.getmaskarray(v).reshape(-1)
                v = pa.array(np.asarray(v.data).reshape(-1), f.type, mask=mask)
            else:
                v = np.asarray(v).reshape(-1)
                if pa.types.is_large_string(f.type):
                    v = [x.decode() if isinstance(x, bytes) else str(x) for x in v]
                v = pa.array(v, f.type)
            cols[f.name] = v
        table = pa.table(cols, schema=schema)
    ref_cols = [RefCol(f.name, f.type, f.nullable, kind_of(f.type), ts_unit(f.type), table) for f in schema]
    return Ref(node.display, "plain_array", table, schema, ref_cols, None, False)


def reference(node) -> Ref:
    return plain_reference(node) if node.kind == "plain_array" else soma_reference(node)


# --------------------------------------------------------------------------------------
# value text


def iso_utc(v: int, unit: str) -> str:
    """ISO 8601 UTC of v units since the epoch, with the unit's number of fraction
    digits (none for seconds)."""
    k = TS_DIGITS[unit]
    secs, frac = divmod(v, 10**k)
    dt = datetime(1970, 1, 1) + timedelta(seconds=secs)
    out = f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"
    if k:
        out += f".{frac:0{k}d}"
    return out + "Z"


_NUM = re.compile(r"-?(\d+)(?:\.(\d+))?(?:[eE][-+]?\d+)?")
# No redundant zeros: no leading zeros, no trailing zeros in the fraction (a lone ".0"
# is allowed, as in "1.0"). The exponent may be spelled "16", "+16" or "07".
_CANONICAL_NUM = re.compile(r"-?(?:0|[1-9]\d*)(?:\.(?:0|\d*[1-9]))?(?:[eE][-+]?\d+)?")


def _sig_digits(text: str) -> int | None:
    m = _NUM.fullmatch(text)
    if not m:
        return None
    d = (m.group(1) + (m.group(2) or "")).strip("0")
    return max(len(d), 1)


_SHORTEST_CACHE: dict = {}


def shortest_digits(v: float, kind: str) -> int:
    """Significant digits of the shortest text that round-trips v in its dtype."""
    key = (v, kind)
    r = _SHORTEST_CACHE.get(key)
    if r is None:
        x = np.float32(v) if kind == "f32" else np.float64(v)
        r = _sig_digits(np.format_float_scientific(x, unique=True, trim="-"))
        if len(_SHORTEST_CACHE) < 2_000_000:
            _SHORTEST_CACHE[key] = r
    return r


def same_float(a: float, b: float, kind: str) -> bool:
    """a (parsed) equals b (reference) in the column's precision, NaN and the sign of
    zero included."""
    if kind == "f32":
        a = float(np.float32(a))
    if math.isnan(b):
        return math.isnan(a)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def check_float_text(text: str, v: float, kind: str) -> str | None:
    """None if text is the contract's text for float v: NaN / inf / -inf, or a plain
    decimal number that parses back to v in the column's precision with no more
    significant digits than the shortest such text."""
    if math.isnan(v):
        return None if text == "NaN" else f"expected NaN, got {text!r}"
    if math.isinf(v):
        want = "inf" if v > 0 else "-inf"
        return None if text == want else f"expected {want}, got {text!r}"
    digits = _sig_digits(text)
    if digits is None:
        return f"{text!r} is not a decimal number (value {v!r})"
    if not same_float(float(text), v, kind):
        return f"{text!r} does not parse back to {v!r} ({kind})"
    best = shortest_digits(v, kind)
    if digits > best:
        return f"{text!r} is not the shortest text for {v!r} ({kind}; {best} significant digits suffice)"
    if not _CANONICAL_NUM.fullmatch(text):
        return f"{text!r} has redundant zeros (value {v!r})"
    return None


def expected_text(v, kind: str, unit: str | None) -> str:
    """The text of a non-null, non-float value in CSV/TSV."""
    if kind in ("int", "uint"):
        return str(int(v))
    if kind == "bool":
        return "true" if v else "false"
    if kind == "str":
        return v
    if kind == "bin":
        return bytes(v).hex()
    if kind == "ts":
        return iso_utc(v, unit)
    raise TypeError(kind)


def needs_quotes(text: str, delim: str) -> bool:
    return text == "" or delim in text or '"' in text or "\r" in text or "\n" in text


def check_text_field(col: RefCol, v, text: str, quoted: bool, delim: str) -> str | None:
    if v is None:
        if text != "" or quoted:
            return f"null must be an empty unquoted field, got {'quoted ' if quoted else ''}{text!r}"
        return None
    if col.kind in ("f32", "f64"):
        if quoted:
            return f"float {text!r} must not be quoted"
        return check_float_text(text, v, col.kind)
    want = expected_text(v, col.kind, col.unit)
    if text != want:
        return f"expected {want!r}, got {text!r}"
    if quoted != needs_quotes(want, delim):
        return f"{want!r} must {'' if needs_quotes(want, delim) else 'not '}be quoted"
    return None


# --------------------------------------------------------------------------------------
# CSV / TSV parsing


class ParseError(AssertionError):
    pass


_TOKENIZERS: dict = {}


def split_delimited(text: str, delim: str) -> list[list[tuple[str, bool]]]:
    """Strict RFC 4180 parse of text: records end with "\\n" (the last one too), a
    quoted field starts and ends with '"' (doubled inside) and is followed by the
    delimiter or "\\n"; an unquoted field has no '"', CR or LF. Returns rows of
    (field text, was quoted)."""
    pat = _TOKENIZERS.get(delim)
    if pat is None:
        d = re.escape(delim)
        pat = _TOKENIZERS[delim] = re.compile(r'(?:"((?:[^"]|"")*)"|([^"\r\n' + d + r"]*))(" + d + r"|\n)")
    rows, row, pos, n = [], [], 0, len(text)
    match = pat.match
    while pos < n:
        m = match(text, pos)
        if m is None:
            line = text.count("\n", 0, pos) + 1
            raise ParseError(f"not strict RFC 4180 at line {line}, offset {pos}: {text[pos:pos + 80]!r}")
        q = m.group(1)
        row.append((q.replace('""', '"'), True) if q is not None else (m.group(2), False))
        pos = m.end()
        if m.group(3) == "\n":
            rows.append(row)
            row = []
    if row or (n and text[-1] != "\n"):
        raise ParseError(f"the last record does not end with \\n: {text[-80:]!r}")
    return rows


def csv_module_rows(text: str, delim: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline=""), delimiter=delim, quotechar='"', strict=True))


# --------------------------------------------------------------------------------------
# JSON Lines


class FText(float):
    """A float parsed from JSON that remembers its text."""

    text: str

    def __new__(cls, s):
        f = super().__new__(cls, s)
        f.text = s
        return f


class IText(int):
    text: str

    def __new__(cls, s):
        i = super().__new__(cls, s)
        i.text = s
        return i


def _reject_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def load_json_line(line: str) -> list[tuple[str, object]]:
    """One JSON Lines record as (key, value) pairs in file order; floats keep their
    text; NaN/Infinity tokens are rejected."""
    obj = json.loads(line, object_pairs_hook=list, parse_float=FText, parse_int=IText, parse_constant=_reject_constant)
    if not isinstance(obj, list):
        raise ValueError(f"not a JSON object: {line[:200]!r}")
    return obj


def check_json_value(col: RefCol, v, jv) -> str | None:
    if v is None:
        return None if jv is None else f"expected null, got {jv!r}"
    k = col.kind
    if k in ("f32", "f64"):
        if math.isnan(v) or math.isinf(v):
            return None if jv is None else f"expected null for {v!r}, got {jv!r}"
        if isinstance(jv, bool) or not isinstance(jv, (int, float)):
            return f"expected a number for {v!r}, got {jv!r}"
        text = jv.text
        if not same_float(float(jv), v, k):
            return f"{text} does not equal {v!r} ({k})"
        if isinstance(jv, FText):
            return check_float_text(text, v, k)
        return None
    if k in ("int", "uint"):
        if isinstance(jv, bool) or not isinstance(jv, IText):
            return f"expected the JSON integer {v}, got {jv!r}"
        return None if int(jv) == v else f"expected {v}, got {int(jv)}"
    if k == "bool":
        return None if jv is v else f"expected {str(v).lower()}, got {jv!r}"
    want = expected_text(v, k, col.unit)
    if not isinstance(jv, str) or jv != want:
        return f"expected {want!r}, got {jv!r}"
    return None


# --------------------------------------------------------------------------------------
# Parquet


_STR_NORMAL = {pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}


def _norm_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(t):
        return pa.dictionary(t.index_type, _STR_NORMAL.get(t.value_type, t.value_type), t.ordered)
    return _STR_NORMAL.get(t, t)


def pyarrow_roundtrip_schema(schema: pa.Schema) -> pa.Schema:
    """The schema pyarrow itself gets back when it writes a table of `schema` to
    Parquet and reads it (e.g. dictionaries of non-string values come back decoded,
    timestamp[s] comes back as timestamp[ms])."""
    buf = io.BytesIO()
    pq.write_table(schema.empty_table(), buf)
    buf.seek(0)
    return pq.read_table(buf).schema


def parquet_type_ok(got: pa.DataType, want: pa.DataType, roundtrip: pa.DataType) -> bool:
    """got is the object's Arrow type, or what pyarrow's own Parquet round trip gives
    for it, up to large/non-large string and binary variations."""
    return _norm_type(got) in (_norm_type(want), _norm_type(roundtrip))


def read_parquet_bytes(data: bytes) -> pa.Table:
    return pq.read_table(io.BytesIO(data))


# The arrays of each fixture store and their references, read once per session.
_ARRAYS: dict = {}
_REFS: dict = {}


def arrays_of(fixtures_dir, store: str) -> list[tree_reference.Node]:
    """The array nodes of the fixture store `store`, in walk order."""
    key = (str(fixtures_dir), store)
    if key not in _ARRAYS:
        _ARRAYS[key] = [n for n in tree_reference.walk(str(Path(fixtures_dir) / store)) if n.is_array]
    return _ARRAYS[key]


def ref_of(node: tree_reference.Node) -> Ref:
    """The reference of an array node (`reference`), read once."""
    if node.uri not in _REFS:
        _REFS[node.uri] = reference(node)
    return _REFS[node.uri]
