"""Random SOMA stores for the differential test (test_differential.py).

`build_store(uri, seed)` writes, with tiledbsoma alone, a SOMACollection holding two
to four random arrays and returns a `Store` that describes each of them in one line
(enough to rebuild the case by hand). The same seed always builds the same store.

What the arrays cover:

- DataFrames with 1 to 3 index columns of every index type (int64, int32, float64,
  float32, string, soma_joinid), domains that start negative, just off zero or far from
  zero (around 1e12), tile extents small, large and not powers of two, every capacity,
  cell order (row-major, col-major, hilbert) and tile order; value columns of every
  type, nullable or not, with NaN, infinities, -0.0, strings that need quoting or
  escaping (commas, quotes, tabs, line breaks, unicode, empty), and enumerated columns
  (Arrow dictionaries, as pandas categoricals are written: string, int and float
  labels, ordered or not, some entirely null);
- SparseNDArrays of 1 to 3 dimensions, and DenseNDArrays written in part;
- up to 20,000 cells, in one to six fragments: overwrites of cells already written
  (the later write wins), deleted cells, and domains resized between writes;
- member names that cannot be file names (`a/b`, `..`, the empty name) or that look
  like their encodings (`a%2Fb`).

Every write, delete and resize happens at its own TileDB timestamp, later than the one
before it, so the order of fragments is part of the seed; `build_store` returns once
the clock has passed the last of them, so a reader at "now" sees them all.

Write one store by hand (it prints what it holds):

    (cd tests/python && ../../.venv/bin/python -m harness.random_store SEED DIR)
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pyarrow as pa

from harness import tree_reference  # noqa: F401  (quiets tiledbsoma's warnings before the import below)
import tiledbsoma

# --------------------------------------------------------------------------------------
# value pools

FLOAT_SPECIALS = [
    math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324, 1e-7, 0.1, 2.5e-5, 1e16, 1e22,
    123456.789, 1.7976931348623157e308, -1e300, 9007199254740993.0, 0.30000000000000004,
]
TEXT = [
    "plain", "", "comma, inside", 'quote " inside', '"starts with a quote', "tab\tinside",
    "line\nfeed", "crlf\r\nline", "lone\rcr", "  spaces  ", "unicode: é ß 細胞 🧬", "NaN", "null",
    "-inf", "\u2028 separators \u2029", 'all: ,"\t\n', "a/b", "%2F", "*", ",", '""',
]
# String index values are ASCII (libtiledb refuses others outside the current domain):
# every character the slice grammar escapes or might trip on.
KEYS = [
    "", "*", ",", "a,b", "%", "50%", "%2F", "%25", "%00", "%2A", "a/b", "/", "-", "1-2",
    "-5--1", 'q"x', "tab\tkey", "sp ace", "~", ".", "..", "x.csv", "nl\nkey", "A", "a", "b", "zz",
]
LABELS = ["B cell", "", "comma, label", 'quote "label"', "new\nline", "細胞", "a/b", "%", ".", "-1", "tab\tl"]
ODD_COLUMN_NAMES = ["v,comma", 'v"quote', "v\ttab", "ü", "sp ace"]
MEMBER_NAMES = ["a/b", "a%2Fb", "..", ".", "", "50%", "sp ace", "ü/ß", "x%25y"]

INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
FLOAT_TYPES = [pa.float32(), pa.float64()]
ND_TYPES = INT_TYPES + FLOAT_TYPES + [pa.bool_()]
VALUE_TYPES = INT_TYPES + FLOAT_TYPES + [
    pa.bool_(), pa.string(), pa.large_string(), pa.binary(), pa.large_binary(),
    pa.timestamp("s"), pa.timestamp("ms"), pa.timestamp("us"), pa.timestamp("ns"),
]

# Index column kinds, weighted: integer columns (several in a row, off the tile grid)
# are where sorting goes wrong most easily.
INDEX_KINDS = {"int64": 6, "soma_joinid": 3, "int32": 3, "float64": 3, "float32": 1, "string": 4}
TILES = [1, 2, 3, 5, 7, 10, 37, 100, 1000, 4, 16, 64, 2048, 100_000]
# A dense tile is allocated whole when written: every dimension gets a small extent.
DENSE_TILES = [1, 2, 3, 5, 7, 10, 37, 100, 4, 16, 64]
# Rows written to a DataFrame or SparseNDArray (before duplicates are dropped); the
# big ones span many tiles and several of soma-mount's read batches.
ROWS = [0, 1, 3, 10, 40, 40, 150, 150, 400, 400, 5000, 20_000]
CAPACITIES = [1, 2, 3, 7, 64, 1000, 100_000]
# Data tiles per fragment at most: libtiledb reads a tile at a time, and 20,000 cells
# at capacity 2 take 13 s to read, in tiledbsoma and soma-mount alike.
MAX_TILES = 500
ORDERS = [(None, None), ("row-major", "row-major"), ("col-major", "col-major"),
          ("row-major", "col-major"), ("col-major", "row-major"), ("hilbert", None)]


class Clock:
    """TileDB timestamps (ms) that strictly increase and are never before now."""

    def __init__(self):
        self.last = 0

    def __call__(self) -> int:
        self.last = max(self.last + 1, int(time.time() * 1000))
        return self.last

    def wait_past_last(self):
        """Return once the wall clock is past every timestamp handed out (a reader at
        "now" then sees everything written)."""
        while int(time.time() * 1000) <= self.last:
            time.sleep((self.last + 1 - time.time() * 1000) / 1000)


# --------------------------------------------------------------------------------------
# random values


def float_values(rng: random.Random, n: int, t: pa.DataType) -> list:
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.3:
            v = rng.choice(FLOAT_SPECIALS)
        elif r < 0.6:
            v = rng.uniform(-1, 1) * 10 ** rng.randint(-12, 12)
        else:
            v = round(rng.uniform(-1000, 1000), rng.randint(0, 4))
        with np.errstate(over="ignore"):  # beyond float32's range: infinity
            out.append(float(np.float32(v)) if t == pa.float32() else v)
    return out


def int_values(rng: random.Random, n: int, t: pa.DataType) -> list:
    info = np.iinfo(t.to_pandas_dtype())
    edges = [int(info.min), int(info.max), 0, 1, int(info.max) - 1, int(info.min) + 1]
    return [rng.choice(edges) if rng.random() < 0.3 else rng.randint(int(info.min), int(info.max)) for _ in range(n)]


def plain_values(rng: random.Random, n: int, t: pa.DataType) -> list:
    if t in FLOAT_TYPES:
        return float_values(rng, n, t)
    if pa.types.is_integer(t):
        return int_values(rng, n, t)
    if pa.types.is_boolean(t):
        return [rng.random() < 0.5 for _ in range(n)]
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return [rng.choice(TEXT) if rng.random() < 0.7 else rand_word(rng) for _ in range(n)]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return [bytes(rng.randrange(256) for _ in range(rng.randint(0, 6))) for _ in range(n)]
    if pa.types.is_timestamp(t):
        span = {"s": 10**10, "ms": 10**13, "us": 10**16, "ns": 9 * 10**18}[t.unit]
        return [rng.randint(-span, span) for _ in range(n)]
    raise TypeError(t)


def rand_word(rng: random.Random) -> str:
    return "".join(rng.choice("abcxyz-_.%, ") for _ in range(rng.randint(1, 6)))


def with_nulls(rng: random.Random, values: list, nullable: bool) -> list:
    if not nullable:
        return values
    p = rng.choice([0.0, 0.1, 0.5, 1.0])
    return [None if rng.random() < p else v for v in values]


# --------------------------------------------------------------------------------------
# DataFrame columns


@dataclass
class IndexCol:
    name: str
    kind: str  # one of INDEX_KINDS
    domain: tuple | None  # (lo, hi) of the final domain; None for strings
    start: tuple | None  # (lo, hi) of the domain at creation (smaller when resized)
    tile: int | None
    pool: list  # the values rows take

    @property
    def type(self) -> pa.DataType:
        return {"int64": pa.int64(), "soma_joinid": pa.int64(), "int32": pa.int32(), "float64": pa.float64(),
                "float32": pa.float32(), "string": pa.large_string()}[self.kind]

    def describe(self) -> str:
        dom = "" if self.domain is None else f" {list(self.domain)}"
        grown = f" from {list(self.start)}" if self.start != self.domain else ""
        tile = f" tile={self.tile}" if self.tile else ""
        return f"{self.name}:{self.kind}{dom}{grown}{tile}"


def numeric_domain(rng: random.Random, kind: str) -> tuple:
    """(lo, hi): starting negative, just off zero, at zero or far from zero."""
    width = rng.choice([0, 1, 2, 5, 9, 30, 100, 1000, 10**6])
    if kind == "soma_joinid":
        lo = rng.choice([0, 0, rng.randint(1, 9), 10**12 + rng.randint(0, 999)])
    elif kind == "int32":
        # near the type's ends (tiledbsoma keeps the top 2**17 or so for tile expansion)
        lo = rng.choice([-rng.randint(1, 500), rng.randint(1, 9), 0, 2**31 - 2**18 - width - rng.randint(0, 1000),
                         -(2**31) + rng.randint(0, 1000)])
    elif kind == "float32":  # dyadic bounds, exact in float32
        return float(np.float32(-rng.randint(1, 500) - 0.5)), float(np.float32(rng.randint(0, 500) + 0.25))
    elif kind == "float64":
        lo = rng.choice([-rng.randint(1, 500), rng.randint(1, 9), 0, 10**12 + rng.randint(0, 999),
                         -(10**12) - rng.randint(0, 999)])
    else:
        lo = rng.choice([-rng.randint(1, 500), rng.randint(1, 9), 0, 10**12 + rng.randint(0, 999),
                         -(10**12) - rng.randint(0, 999), -(2**63) + rng.randint(0, 1000),
                         2**63 - 2**18 - width - rng.randint(0, 1000)])
    if kind == "float64":
        return lo - 0.5, lo + width + 0.75
    return lo, lo + width


def index_pool(rng: random.Random, kind: str, domain) -> list:
    """The values an index column takes: a few dozen, or a few thousand (big arrays
    span many tiles)."""
    size = rng.choice([60, 60, 2000])
    if kind == "string":
        keys = rng.sample(KEYS, rng.randint(1, len(KEYS)))
        return keys + [rand_word(rng) for _ in range(rng.randint(0, 5))]
    lo, hi = domain
    if kind in ("float64", "float32"):
        step = rng.choice([0.25, 0.1, 1 / 3, 0.001, 7.5, 100.5])
        vals = {lo + step * rng.randint(0, int((hi - lo) / step)) for _ in range(size)} | {lo, hi}
        if kind == "float32":
            vals = {float(np.float32(v)) for v in vals}
        return sorted(v for v in vals if lo <= v <= hi)
    if hi - lo < size:
        return list(range(lo, hi + 1))
    return sorted({lo, hi} | {rng.randint(lo, hi) for _ in range(size)})


def make_index_cols(rng: random.Random) -> list[IndexCol]:
    kinds = rng.choices(list(INDEX_KINDS), weights=list(INDEX_KINDS.values()), k=rng.randint(1, 3))
    if kinds.count("soma_joinid") > 1:
        kinds = [k for i, k in enumerate(kinds) if k != "soma_joinid" or i == kinds.index("soma_joinid")]
    cols = []
    for i, kind in enumerate(kinds):
        name = "soma_joinid" if kind == "soma_joinid" else f"{'ifsk'[i % 4]}{i}_{kind}"
        domain = None if kind == "string" else numeric_domain(rng, kind)
        tile = rng.choice(TILES) if kind != "string" and rng.random() < 0.8 else None
        cols.append(IndexCol(name, kind, domain, domain, tile, index_pool(rng, kind, domain)))
    return cols


@dataclass
class ValueCol:
    name: str
    type: pa.DataType
    nullable: bool
    make: Callable[[random.Random, int], pa.Array]
    note: str = ""

    def describe(self) -> str:
        return f"{self.name}:{self.type}{'?' if self.nullable else ''}{self.note}"


def enum_col(rng: random.Random, name: str) -> ValueCol:
    """An enumerated column: string, int or float labels, maybe ordered, maybe all null."""
    kind = rng.choice(["str", "int", "float"])
    if kind == "str":
        labels, vtype = rng.sample(LABELS, rng.randint(1, len(LABELS))), pa.string()
    elif kind == "int":
        vtype = rng.choice([pa.int64(), pa.int32(), pa.int8()])
        labels = sorted(set(int_values(rng, rng.randint(1, 8), vtype)))
    else:
        # finite and distinct (0.0 and -0.0 are one label in a query condition)
        vtype = rng.choice(FLOAT_TYPES)
        labels = list({v: v for v in float_values(rng, rng.randint(1, 8), vtype) if math.isfinite(v)}.values()) or [0.5]
    itype = rng.choice([pa.int8(), pa.int16(), pa.int32()])
    ordered = rng.random() < 0.3
    all_null = rng.random() < 0.2
    nullable = all_null or rng.random() < 0.7

    def make(r: random.Random, n: int) -> pa.Array:
        idx = [None if all_null else r.randrange(len(labels)) for _ in range(n)]
        idx = with_nulls(r, idx, nullable)
        return pa.DictionaryArray.from_arrays(pa.array(idx, itype), pa.array(labels, vtype), ordered=ordered)

    note = f" labels={labels!r}" + (" ordered" if ordered else "") + (" all-null" if all_null else "")
    return ValueCol(name, pa.dictionary(itype, vtype, ordered), nullable, make, note)


def plain_col(rng: random.Random, name: str) -> ValueCol:
    t = rng.choice(VALUE_TYPES)
    nullable = rng.random() < 0.6

    def make(r: random.Random, n: int) -> pa.Array:
        return pa.array(with_nulls(r, plain_values(r, n, t), nullable), t)

    return ValueCol(name, t, nullable, make)


def make_value_cols(rng: random.Random, index: list[IndexCol]) -> list[ValueCol]:
    cols = []
    if not any(c.kind == "soma_joinid" for c in index):
        cols.append(ValueCol("soma_joinid", pa.int64(), False,
                             lambda r, n: pa.array([r.randint(0, 2**62) for _ in range(n)], pa.int64())))
    for i in range(rng.randint(0, 5)):
        name = rng.choice(ODD_COLUMN_NAMES) if rng.random() < 0.15 else f"v{i}"
        if any(c.name == name for c in cols):
            name = f"v{i}"
        cols.append(enum_col(rng, name) if rng.random() < 0.35 else plain_col(rng, name))
    return cols


# --------------------------------------------------------------------------------------
# stores


@dataclass
class Store:
    uri: str
    seed: int
    arrays: dict = field(default_factory=dict)  # member name -> one-line description

    def summary(self) -> str:
        return "\n".join(f"  {name!r}: {desc}" for name, desc in self.arrays.items())


def platform_config(rng: random.Random, tiles: dict, sparse: bool, cells: int = 0) -> tuple[dict, str]:
    """A random TileDB create config: tile extents, cell and tile order, and for sparse
    arrays the capacity, enough for `cells` (hilbert order is for sparse arrays only)."""
    cell, tile_order = rng.choice(ORDERS if sparse else [o for o in ORDERS if o[0] != "hilbert"])
    create = {"dims": {k: {"tile": v} for k, v in tiles.items() if v}}
    desc = f"cell={cell or 'default'} tile_order={tile_order or 'default'}"
    if cell:
        create["cell_order"] = cell
    if tile_order:
        create["tile_order"] = tile_order
    if sparse:
        create["capacity"] = rng.choice([c for c in CAPACITIES if c * MAX_TILES >= cells])
        desc = f"cap={create['capacity']} {desc}"
    return {"tiledb": {"create": create}}, desc


def split(rng: random.Random, items: list, k: int) -> list[list]:
    """items cut into k consecutive runs (some may be empty)."""
    cuts = sorted(rng.randint(0, len(items)) for _ in range(k - 1))
    return [items[a:b] for a, b in zip([0] + cuts, cuts + [len(items)])]


def build_dataframe(uri: str, rng: random.Random, clock: Clock) -> str:
    index = make_index_cols(rng)
    values = make_value_cols(rng, index)
    resize = rng.random() < 0.3 and any(c.domain for c in index)
    if resize:
        for c in index:
            if c.domain and c.kind != "float32":
                lo, hi = c.domain
                c.start = (lo, lo + (hi - lo) // 2) if c.kind != "float64" else (lo, lo + (hi - lo) / 2)
    schema = pa.schema([pa.field(c.name, c.type, nullable=False) for c in index]
                       + [pa.field(c.name, c.type, nullable=c.nullable) for c in values])
    n = rng.choice(ROWS)
    config, config_desc = platform_config(rng, {c.name: c.tile for c in index}, sparse=True, cells=n)
    tiledbsoma.DataFrame.create(
        uri, schema=schema, index_column_names=[c.name for c in index], domain=[c.start for c in index],
        platform_config=config, tiledb_timestamp=clock(),
    ).close()

    keys = list(dict.fromkeys(tuple(rng.choice(c.pool) for c in index) for _ in range(n)))
    ops = []

    def write(rows: list[tuple], what: str):
        if not rows:
            return
        cols = {c.name: pa.array([r[i] for r in rows], c.type) for i, c in enumerate(index)}
        cols.update({c.name: c.make(rng, len(rows)) for c in values})
        with tiledbsoma.open(uri, "w", tiledb_timestamp=clock()) as df:
            df.write(pa.table(cols, schema=schema))
        ops.append(f"{what} {len(rows)}")

    def inside_start(row) -> bool:
        return all(c.start is None or c.start[0] <= v <= c.start[1] for c, v in zip(index, row))

    rng.shuffle(keys)
    written, later = [], keys
    if resize:
        written = [k for k in keys if inside_start(k)]
        later = [k for k in keys if not inside_start(k)]
        write(written, "write")
        with tiledbsoma.open(uri, "w", tiledb_timestamp=clock()) as df:
            df.change_domain([c.domain for c in index])
        ops.append("change_domain")
    for run in split(rng, later, rng.randint(1, 4)):
        write(run, "write")
        written += run
        if written and rng.random() < 0.3:
            delete_rows(uri, rng, index, written, clock, ops)
    if written and rng.random() < 0.4:
        write(rng.sample(written, rng.randint(1, len(written))), "overwrite")
    cols = ", ".join(c.describe() for c in index)
    vals = ", ".join(c.describe() for c in values)
    return f"DataFrame index=[{cols}] values=[{vals}] {config_desc} ops=[{', '.join(ops)}]"


def delete_rows(uri: str, rng: random.Random, index: list[IndexCol], written: list, clock: Clock, ops: list):
    """delete_cells on a range (or a key) of one or two index columns, around a
    written row. Never on the key "": libtiledb 2.30 then fails every later read of
    the array ("ASTNodeVal set membership data size must be greater than zero")."""
    rows = [r for r in written if "" not in r]
    if not rows:
        return
    row = rng.choice(rows)
    coords, what = [], []
    for i, c in enumerate(index):
        if i > 0 and rng.random() < 0.6:
            coords.append(slice(None))
        elif c.kind == "string":
            coords.append([row[i]])
            what.append(f"{c.name}={row[i]!r}")
        else:
            lo = max(c.domain[0], row[i] - rng.choice([0, 1, 3]))
            hi = min(c.domain[1], row[i] + rng.choice([0, 1, 10]))
            coords.append(slice(lo, hi))
            what.append(f"{c.name} in [{lo}, {hi}]")
    with tiledbsoma.open(uri, "d", tiledb_timestamp=clock()) as df:
        df.delete_cells(tuple(coords))
    ops.append(f"delete {' and '.join(what)}")


def sparse_config(rng: random.Random, ndim: int, cells: int) -> tuple[dict, str]:
    tiles = {f"soma_dim_{d}": rng.choice(TILES) for d in range(ndim) if rng.random() < 0.7}
    config, desc = platform_config(rng, tiles, sparse=True, cells=cells)
    return config, f"tiles={tiles} {desc}"


def dense_config(rng: random.Random, shape: list[int]) -> tuple[dict, str]:
    """Tile extents that cut the array into at most about MAX_TILES tiles."""
    per_dim = MAX_TILES ** (1 / len(shape))
    tiles = {f"soma_dim_{d}": rng.choice([t for t in DENSE_TILES if s / t <= per_dim]) for d, s in enumerate(shape)}
    config, desc = platform_config(rng, tiles, sparse=False)
    return config, f"tiles={tiles} {desc}"


def build_sparse(uri: str, rng: random.Random, clock: Clock) -> str:
    ndim = rng.randint(1, 3)
    shape = [rng.choice([1, 2, 3, 7, 50, 100, 1000, 100_000]) for _ in range(ndim)]
    start = [max(1, s // 2) for s in shape] if rng.random() < 0.3 else shape
    vtype = rng.choice(ND_TYPES)
    n = rng.choice(ROWS)
    config, config_desc = sparse_config(rng, ndim, n)
    tiledbsoma.SparseNDArray.create(
        uri, type=vtype, shape=start, platform_config=config, tiledb_timestamp=clock()
    ).close()
    cells = list(dict.fromkeys(tuple(rng.randrange(s) for s in shape) for _ in range(n)))
    rng.shuffle(cells)
    ops = []

    def write(run: list[tuple], what: str):
        if not run:
            return
        cols = {f"soma_dim_{d}": pa.array([c[d] for c in run], pa.int64()) for d in range(ndim)}
        cols["soma_data"] = pa.array(plain_values(rng, len(run), vtype), vtype)
        with tiledbsoma.open(uri, "w", tiledb_timestamp=clock()) as a:
            a.write(pa.table(cols))
        ops.append(f"{what} {len(run)}")

    written, later = [], cells
    if start != shape:
        written = [c for c in cells if all(v < s for v, s in zip(c, start))]
        later = [c for c in cells if not all(v < s for v, s in zip(c, start))]
        write(written, "write")
        with tiledbsoma.open(uri, "w", tiledb_timestamp=clock()) as a:
            a.resize(shape)
        ops.append("resize")
    for run in split(rng, later, rng.randint(1, 4)):
        write(run, "write")
        written += run
        if written and rng.random() < 0.3:
            c = rng.choice(written)
            lo, hi = c[0], min(shape[0] - 1, c[0] + rng.choice([0, 2, 20]))
            with tiledbsoma.open(uri, "d", tiledb_timestamp=clock()) as a:
                a.delete_cells((slice(lo, hi),))
            ops.append(f"delete soma_dim_0 in [{lo}, {hi}]")
    if written and rng.random() < 0.4:
        write(rng.sample(written, rng.randint(1, len(written))), "overwrite")
    grown = f" from {start}" if start != shape else ""
    return f"SparseNDArray {vtype} shape={shape}{grown} {config_desc} ops=[{', '.join(ops)}]"


def build_dense(uri: str, rng: random.Random, clock: Clock) -> str:
    ndim = rng.randint(1, 3)
    shape = [rng.choice([1, 2, 3, 5, 7, 12, 40, 100]) for _ in range(ndim)]
    most = rng.choice([3000, 3000, 20_000])
    while math.prod(shape) > most:
        shape[rng.randrange(ndim)] //= 2
    shape = [max(1, s) for s in shape]
    start = [max(1, s // 2) for s in shape] if rng.random() < 0.3 else shape
    vtype = rng.choice(ND_TYPES)
    config, config_desc = dense_config(rng, shape)
    tiledbsoma.DenseNDArray.create(
        uri, type=vtype, shape=start, platform_config=config, tiledb_timestamp=clock()
    ).close()
    ops = []

    def write(bound: list[int]):
        box = []
        for s in bound:
            a = rng.randrange(s)
            box.append((a, rng.randint(a, s - 1)))
        dims = [b - a + 1 for a, b in box]
        vals = np.array(plain_values(rng, math.prod(dims), vtype), dtype=vtype.to_pandas_dtype()).reshape(dims)
        with tiledbsoma.open(uri, "w", tiledb_timestamp=clock()) as arr:
            arr.write(tuple(slice(a, b) for a, b in box), pa.Tensor.from_numpy(vals))
        ops.append("write " + "x".join(f"{a}..{b}" for a, b in box))

    for _ in range(rng.randint(0, 2)):
        write(start)
    if start != shape:
        with tiledbsoma.open(uri, "w", tiledb_timestamp=clock()) as arr:
            arr.resize(shape)
        ops.append("resize")
    for _ in range(rng.randint(0, 3)):
        write(shape)
    grown = f" from {start}" if start != shape else ""
    return f"DenseNDArray {vtype} shape={shape}{grown} {config_desc} ops=[{', '.join(ops)}]"


BUILDERS = {"df": build_dataframe, "sparse": build_sparse, "dense": build_dense}


def member_names(rng: random.Random, k: int) -> list[str]:
    names = []
    while len(names) < k:
        name = rng.choice(MEMBER_NAMES) if rng.random() < 0.25 else f"arr{len(names)}"
        if name not in names:
            names.append(name)
    return names


def build_store(uri: str, seed: int) -> Store:
    """A SOMACollection at uri with 2 to 4 random arrays (at least one DataFrame)."""
    rng = random.Random(seed)
    clock = Clock()
    store = Store(uri, seed)
    kinds = ["df"] + [rng.choice(["df", "df", "sparse", "dense"]) for _ in range(rng.randint(1, 3))]
    tiledbsoma.Collection.create(uri).close()
    for i, (kind, name) in enumerate(zip(kinds, member_names(rng, len(kinds)))):
        sub = os.path.join(uri, f"m{i}")
        store.arrays[name] = BUILDERS[kind](sub, rng, clock)
        with tiledbsoma.open(uri, "w") as coll, tiledbsoma.open(sub) as arr:
            coll.set(name, arr, use_relative_uri=True)
    clock.wait_past_last()
    return store


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m harness.random_store SEED DIR")
    built = build_store(os.path.abspath(sys.argv[2]), int(sys.argv[1]))
    print(f"seed {built.seed}: {built.uri}\n{built.summary()}")
