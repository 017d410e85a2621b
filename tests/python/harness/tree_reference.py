"""Reference model for soma-mount's tests: what the mounted tree must contain, computed
from the store with tiledbsoma (the reference implementation) and, for plain TileDB
objects and raw metadata types, tiledb-py.

Nothing here touches a mount; see test_tree.py for the comparisons.
"""

from __future__ import annotations

import re
import base64
import json
import math
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

warnings.filterwarnings("ignore")  # spatial "experimental" disclaimers

import tiledbsoma  # noqa: E402

import tiledb  # noqa: E402

GENERATED_IN_EVERY_DIR = ("metadata.json",)
GENERATED_IN_ARRAY_DIR = ("metadata.json", "schema.json")


# --------------------------------------------------------------------------------------
# names


def encode_name(name: str) -> str:
    """The file name soma-mount shows for a member name, by docs/REFERENCE.md's rule ("The tree"):
    a valid file name with no percent escape in it (`%` and two hex digits) is shown as it
    is; any other name is percent-encoded ('%' -> %25, '/' -> %2F, NUL -> %00; "" -> %00,
    "." -> %2E, ".." -> %2E%2E), so that every shown name stands for one member alone."""
    special = {"": "%00", ".": "%2E", "..": "%2E%2E"}
    if name in special:
        return special[name]
    if "/" in name or "\0" in name or re.search("%[0-9A-Fa-f]{2}", name):
        return name.replace("%", "%25").replace("/", "%2F").replace("\0", "%00")
    return name


# --------------------------------------------------------------------------------------
# walking a store


@dataclass
class Node:
    """One object reachable from a store's root, as the reference implementation sees it."""

    uri: str
    relpath: tuple  # encoded names from the mount root
    member_name: str | None  # the TileDB member name in the parent (None for the root)
    kind: str  # "soma_group" | "soma_array" | "plain_group" | "plain_array" | "broken"
    soma_type: str | None = None  # e.g. "SOMAExperiment"
    members: dict = field(default_factory=dict)  # member name -> uri (groups)
    error: str | None = None  # why it could not be opened (broken)

    @property
    def is_group(self) -> bool:
        return self.kind in ("soma_group", "plain_group")

    @property
    def is_array(self) -> bool:
        return self.kind in ("soma_array", "plain_array")

    @property
    def display(self) -> str:
        return "/".join(self.relpath) or "<root>"


def _soma_members(obj) -> dict:
    """Member name -> URI of a tiledbsoma group (Collection, Experiment, Measurement,
    Scene, MultiscaleImage...)."""
    if hasattr(obj, "members"):
        out = {k: v[0] for k, v in obj.members().items()}
    else:  # MultiscaleImage has no members(); its _contents are the same data.
        out = {k: v.uri for k, v in obj._contents.items()}
    return out


def _plain_group_members(uri: str) -> dict:
    g = tiledb.Group(uri)
    try:
        return {g[i].name: g[i].uri for i in range(len(g))}
    finally:
        g.close()


def classify(uri: str) -> tuple[str, Any]:
    """(kind, detail) of the object at uri."""
    try:
        obj = tiledbsoma.open(uri)
    except Exception as soma_err:  # not SOMA (or broken)
        try:
            t = tiledb.object_type(uri)
        except Exception as e:  # noqa: BLE001
            return "broken", f"{type(e).__name__}: {e}"
        if t == "group":
            return "plain_group", None
        if t == "array":
            return "plain_array", None
        return "broken", f"{type(soma_err).__name__}: {soma_err}"
    try:
        if isinstance(obj, tiledbsoma._soma_group.SOMAGroup):
            return "soma_group", (obj.soma_type, _soma_members(obj))
        return "soma_array", (obj.soma_type, None)
    finally:
        obj.close()


def walk(root_uri: str, max_depth: int = 32) -> list[Node]:
    """Every object reachable from root_uri, parents before children."""
    out: list[Node] = []

    def visit(uri, relpath, member_name, depth):
        kind, detail = classify(uri)
        node = Node(uri=uri, relpath=relpath, member_name=member_name, kind=kind)
        if kind == "soma_group":
            node.soma_type, node.members = detail
        elif kind == "soma_array":
            node.soma_type = detail[0]
        elif kind == "plain_group":
            node.members = _plain_group_members(uri)
        elif kind == "broken":
            node.error = detail
        out.append(node)
        if node.is_group and depth < max_depth:
            # Cross-check tiledbsoma's member list against libtiledb's (tiledb-py).
            if kind == "soma_group":
                raw = _plain_group_members(uri)
                assert set(raw) == set(node.members), (uri, sorted(raw), sorted(node.members))
            for name in sorted(node.members):
                visit(node.members[name], relpath + (encode_name(name),), name, depth + 1)

    visit(root_uri, (), None, 0)
    return out


# --------------------------------------------------------------------------------------
# metadata


class F32(float):
    """A float that came from a float32 value: compare after rounding to float32."""


def norm_value(v: Any) -> Any:
    """Normalise a metadata value as tiledbsoma/tiledb-py return it into the JSON value
    soma-mount must show (docs/REFERENCE.md, metadata.json)."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return "NaN"
        if math.isinf(f):
            return "Infinity" if f > 0 else "-Infinity"
        return F32(f) if isinstance(v, (np.float32, F32)) else f
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, complex):
        # tiledbsoma 2.3.0 quirk: a metadata value of exactly two floats is returned
        # as a Python complex (re, im) instead of a tuple.
        return [norm_value(v.real), norm_value(v.imag)]
    if isinstance(v, (tuple, list, np.ndarray)):
        return [norm_value(x) for x in v]
    raise TypeError(f"unexpected metadata value {v!r} ({type(v)})")


_STRING_TYPES = ("STRING_UTF8", "STRING_ASCII", "CHAR", "STRING_UTF16", "STRING_UTF32", "STRING_UCS2", "STRING_UCS4")


def raw_metadata(uri: str, is_group: bool) -> dict:
    """key -> (tiledb datatype name, value) read with tiledb-py's low-level API (raw
    keys, no '__np_flat_' stripping). The value is None when tiledb-py cannot read
    the type (TILEDB_BOOL). Numbers come back as an object ndarray of Python
    numbers (any count, including 0)."""
    o = tiledb.Group(uri) if is_group else tiledb.open(uri)
    try:
        h = o.meta._array_or_group
        out = {}
        for i in range(h._metadata_num()):
            k = h._get_key_from_index(i)
            try:
                data, t = h._get_metadata(k, False)
            except tiledb.TileDBError:
                out[k] = ("UNREADABLE", None)
                continue
            tname = t.name
            if tname in _STRING_TYPES:
                out[k] = (tname, data.decode("utf-8") if isinstance(data, bytes) else data)
            elif tname == "BLOB":
                out[k] = (tname, bytes(data))
            else:
                # (k, False) gives a scalar for one value, a tuple for any other count.
                # (Not (k, True): its numpy view can outlive the buffer it points to.)
                vals = list(data) if isinstance(data, tuple) else [data]
                out[k] = (tname, np.array(vals, dtype=object))
        return out
    finally:
        o.close()


def _raw_to_expected(tname: str, v: Any) -> Any:
    if isinstance(v, np.ndarray):
        vals = [norm_value(x) for x in v]
        if tname == "FLOAT32":
            vals = [F32(x) if isinstance(x, float) else x for x in vals]
        return vals[0] if len(vals) == 1 else vals
    return norm_value(v)


def _mark_f32(v: Any) -> Any:
    if isinstance(v, float) and not isinstance(v, F32):
        return F32(v)
    if isinstance(v, list):
        return [_mark_f32(x) for x in v]
    return v


def expected_metadata(node: Node) -> dict:
    """key -> expected JSON value of node's metadata.json.

    SOMA objects: tiledbsoma's `.metadata`, normalised; cross-checked against the raw
    values tiledb-py reads (for float32 typing and tiledbsoma's known misreads).
    Plain TileDB objects: tiledb-py's raw values."""
    raw = raw_metadata(node.uri, node.is_group)
    if node.kind.startswith("plain"):
        exp = {}
        for k, (tname, v) in raw.items():
            assert v is not None, f"fixture bug: plain object {node.uri} has unreadable metadata {k!r}"
            exp[k] = _raw_to_expected(tname, v)
        return exp

    with tiledbsoma.open(node.uri) as obj:
        soma_md = dict(obj.metadata)
    assert set(soma_md) == set(raw), (node.uri, sorted(set(soma_md) ^ set(raw)))
    exp = {}
    for k, sv in soma_md.items():
        e = norm_value(sv)
        tname, rv = raw[k]
        if rv is not None:
            r = _raw_to_expected(tname, rv)
            if isinstance(rv, np.ndarray) and len(rv) == 0:
                # tiledbsoma 2.3.0 misreads a numeric value with value_num 0 (it
                # returns an uninitialised int). Zero values are an empty JSON array.
                e = []
            if tname == "FLOAT32":
                e = _mark_f32(e)
            assert json_equal(r, e), f"reference disagreement on {node.uri} {k!r}: tiledbsoma {sv!r} vs tiledb-py {rv!r}"
        exp[k] = e
    return exp


# --------------------------------------------------------------------------------------
# JSON comparison


class DuplicateKey(ValueError):
    pass


def _no_dupes(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise DuplicateKey(f"duplicate JSON key {k!r}")
        d[k] = v
    return d


def _reject_constant(name):
    raise ValueError(f"non-standard JSON constant {name} (NaN/Infinity must be strings)")


def load_json_strict(text: str):
    """json.loads that keeps integers exact (Python's default), rejects bare NaN /
    Infinity tokens and duplicate keys; objects keep their key order."""
    return json.loads(text, object_pairs_hook=_no_dupes, parse_constant=_reject_constant)


def json_equal(actual: Any, expected: Any) -> bool:
    """actual (parsed JSON) equals expected (normalised reference value).

    Integers must be JSON integers (no 5.0 for 5); bools must be JSON booleans; floats
    may be written as integers (1 for 1.0); F32 values compare after rounding to
    float32, so both the shortest float32 and the widened float64 text pass."""
    if isinstance(expected, bool):
        return isinstance(actual, bool) and actual == expected
    if isinstance(expected, int):
        return isinstance(actual, int) and not isinstance(actual, bool) and actual == expected
    if isinstance(expected, float):
        if isinstance(actual, bool) or not isinstance(actual, (int, float)):
            return False
        if isinstance(expected, F32):
            return np.float32(actual) == np.float32(expected)
        return float(actual) == expected
    if isinstance(expected, str):
        return isinstance(actual, str) and actual == expected
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(json_equal(a, e) for a, e in zip(actual, expected))
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and set(actual) == set(expected)
            and all(json_equal(actual[k], expected[k]) for k in expected)
        )
    if expected is None:
        return actual is None
    raise TypeError(f"unexpected expected value {expected!r}")


# --------------------------------------------------------------------------------------
# schema


ND_TYPES = ("SOMASparseNDArray", "SOMADenseNDArray")


def _domain_value(v, arrow_type):
    if isinstance(v, pa.TimestampScalar):
        return v  # compared specially, see domain_value_equal
    if pa.types.is_floating(arrow_type):
        return F32(v) if arrow_type == pa.float32() else float(v)
    if isinstance(v, (bytes, bytearray)):
        return v.decode("utf-8")
    return norm_value(v)


def domain_value_equal(actual, expected) -> bool:
    """Index-column domain bounds: as json_equal, except timestamps, whose JSON form
    docs/REFERENCE.md does not fix: accept the integer count of the column's unit since the
    epoch, or an ISO 8601 / RFC 3339 string of the same instant."""
    if isinstance(expected, pa.TimestampScalar):
        if isinstance(actual, int) and not isinstance(actual, bool):
            return actual == expected.value
        if isinstance(actual, str):
            try:
                got = np.datetime64(actual.rstrip("Z").replace("+00:00", ""), expected.type.unit)
            except ValueError:
                return False
            return int(got.astype(np.int64)) == expected.value
        return False
    return json_equal(actual, expected)


def _enumeration_values(obj, name: str) -> pa.Array:
    """All labels of an enumerated column, in stored order."""
    if hasattr(obj, "get_enumeration_values"):  # DataFrame
        return obj.get_enumeration_values([name])[name]
    # PointCloudDataFrame has no get_enumeration_values in tiledbsoma 2.3.0; its reads
    # return the whole enumeration as the dictionary.
    col = obj.read(column_names=[name]).concat().column(name)
    assert len(col) > 0, f"fixture bug: cannot get the enumeration of empty {obj.uri}"
    return col.combine_chunks().dictionary


def expected_schema(uri: str) -> dict:
    """The schema.json soma-mount must show for the SOMA array at uri, from tiledbsoma."""
    with tiledbsoma.open(uri) as obj:
        nothing_written = False
        if obj.soma_type in ND_TYPES:
            with tiledb.open(uri) as raw:
                nothing_written = raw.nonempty_domain() is None
        return expected_schema_of(obj, nothing_written)


def expected_schema_of(obj, nothing_written: bool) -> dict:
    """The schema.json soma-mount must show for an open SOMA array (opened at whatever
    timestamp and through whatever context); nothing_written: an ND array with no cells."""
    soma_type = obj.soma_type
    is_nd = soma_type in ND_TYPES
    schema = obj.schema
    if is_nd:
        shape = [int(s) for s in obj.shape]
        index_cols = [f"soma_dim_{i}" for i in range(len(shape))]
        domains = {c: [0, s - 1] for c, s in zip(index_cols, shape)}
    else:
        index_cols = list(obj.index_column_names)
        domains = {}
        for c, (lo, hi) in zip(index_cols, obj.domain):
            t = schema.field(c).type
            domains[c] = [_domain_value(lo, t), _domain_value(hi, t)]
    columns = []
    for f in schema:
        col = {"name": f.name, "type": str(f.type), "nullable": bool(f.nullable), "index": f.name in index_cols}
        if f.name in index_cols:
            col["domain"] = domains[f.name]
        if pa.types.is_dictionary(f.type):
            vals = _enumeration_values(obj, f.name)
            col["enumeration"] = [
                _domain_value(x, f.type.value_type) if isinstance(x, float) else norm_value(x)
                for x in vals.to_pylist()
            ]
        columns.append(col)
    exp = {"soma_object_type": soma_type, "index_column_names": index_cols, "columns": columns}
    if is_nd:
        exp["shape"] = shape
        if nothing_written:
            # tiledbsoma 2.3.0 says ((0, 0), ...) for an array with nothing written, as if
            # cell 0 held data; libtiledb says empty. Expected: one null per dimension.
            exp["non_empty_domain"] = [None] * len(shape)
        else:
            exp["non_empty_domain"] = [[int(lo), int(hi)] for lo, hi in obj.non_empty_domain()]
    if soma_type == "SOMASparseNDArray":
        exp["cell_count"] = int(obj.nnz)
    elif soma_type == "SOMADenseNDArray":
        exp["cell_count"] = None  # any int >= 0
    else:
        exp["cell_count"] = int(obj.count)
    return exp


def plain_array_columns(uri: str) -> tuple[list, list]:
    """(dimension names, attribute names) of a plain TileDB array, in schema order."""
    with tiledb.open(uri) as A:
        dims = [A.schema.domain.dim(i).name for i in range(A.schema.domain.ndim)]
        attrs = [A.schema.attr(i).name for i in range(A.schema.nattr)]
    return dims, attrs


_WALKS: dict = {}


def walk_store(fixtures_dir, store: str) -> list[Node]:
    """`walk` of the fixture store `store`, read once."""
    key = (str(fixtures_dir), store)
    if key not in _WALKS:
        _WALKS[key] = walk(os.path.join(str(fixtures_dir), store))
    return _WALKS[key]
