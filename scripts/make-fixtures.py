#!/usr/bin/env python3
"""Build the TileDB-SOMA fixture stores used by soma-mount's integration tests.

Usage: python scripts/make-fixtures.py [OUTDIR]      (default: fixtures/)

Removes OUTDIR and rewrites it with four stores, all written with tiledbsoma
(the reference implementation), plus tiledb-py where tiledbsoma refuses:

  OUTDIR/pbmc   scanpy's bundled pbmc68k_reduced, via tiledbsoma.io.from_anndata
  OUTDIR/hand   a hand-built SOMAExperiment full of edge cases (see build_hand)
  OUTDIR/scene  a spatial SOMAScene: PointCloudDataFrame in obsl, 2-level
                MultiscaleImage in img, with transforms registered; more images in img
                for the PNG pixel formats (see build_scene_images)
  OUTDIR/big    a SOMACollection with one SparseNDArray "X", 200000 x 2000 float32,
                ~3M stored cells (a data.csv of tens of MB) for the whole-file tool tests
  OUTDIR/v1     a small SOMAExperiment of encoding 1.0.0 (soma_encoding_version "1", no
                current domains) written by tiledbsoma 1.14.5: scripts/make-fixture-v1.py,
                run with .venv-old's Python (SOMA_OLD_PYTHON overrides; scripts/setup
                makes .venv-old from requirements-old.txt)
  OUTDIR/legacy a SOMACollection for the 10x and spatial-error tests (see build_legacy):
                noncontig (an Experiment whose obs and var soma_joinids are sparse and do
                not start at 0), noids (an Experiment whose obs has no string id column),
                bad_space / bad_transforms (collections whose spatial metadata is not JSON)

hand/edge holds the data-file edge cases (see build_edge): all_types (every column
type tiledbsoma supports, all nullable with nulls, NaN/+-inf in float32 and float64,
strings with commas, quotes, tabs, LF, CR LF, unicode and empty strings, enumerations
with nulls, extreme integers and timestamps), empty_df (zero rows), empty_sparse (zero
cells), string_index (string + float index columns), dense_3d_f32 (4x5x6 float32, fully
written), dense_bool, sparse_u64, sparse_f64.

hand/edge also holds the slices/ and by/ cases (issue 4): labels (a DataFrame indexed
by a negative-domain int64 column, written in 3 fragments, whose enumerated columns
have labels with "/", "%", spaces, ".", "..", "", "*", an unused label, and nulls;
one enumerated column is named "grp/sub"), str_keys (a DataFrame indexed by one string
column whose keys need slice-name escapes: "*", "a/b", "x,y", "", "%"...),
frag_sparse (1000 x 40 float32 SparseNDArray written in 4 fragments, rows 500-599
empty) and frag_dense (120 x 7 int32 DenseNDArray written in 5 fragments, one
overwriting part of the others).

Deterministic (seeded RNG, fixed values; only libtiledb's timestamps/UUIDs in
file names differ between runs) and fast (~10 s).

Odd member names in OUTDIR/hand (all added with tiledb-py, since tiledbsoma's
Collection API only takes "normal" keys):
  accepted by tiledb-py 0.36.1 / libtiledb 2.30: "a/b", "a%/b", ".", "..", "",
      "my data", "données-ß-細胞", "50%", "pct%41"
  refused / not representable: a name containing NUL ("x\\0y"): tiledb-py passes
      the name as a C string, so libtiledb silently stores "x" -- not written.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import time
import warnings

import numpy as np
import pyarrow as pa

warnings.filterwarnings("ignore")  # spatial "experimental" disclaimers, anndata chatter

import tiledbsoma  # noqa: E402
import tiledbsoma.io  # noqa: E402

import tiledb  # noqa: E402  (tiledb-py, same libtiledb 2.30 as tiledbsoma 2.3.0)

SEED = 20240611

# Member names of OUTDIR/hand that are not valid file names, with the URI (relative to
# hand/) of the collection each one points to.  The tests read them back from the store.
ODD_NAMES = {
    "a/b": "odd_slash",
    "a%/b": "odd_pct_slash",
    ".": "odd_dot",
    "..": "odd_dotdot",
    "": "odd_empty",
    # Valid as a file name, but it reads as the encoding of "a/b": shown encoded, so that
    # both members appear, each under a name of its own.
    "a%2Fb": "odd_looks_encoded",
}
# Member names that are valid file names and hold no percent escape: shown verbatim (but
# "pct%41" holds one, so it is shown encoded).
UNICODE_NAMES = {
    "my data": "my_data",
    "données-ß-細胞": "donnees",
    "50%": "pct50",
    "pct%41": "pct41",
}


# --------------------------------------------------------------------------------------
# metadata helpers


def put_raw(obj, key, values):
    """Write a (possibly multi-valued) numeric metadata entry under exactly `key`.

    tiledb-py's public `obj.meta[key] = ndarray` stores it under "__np_flat_<key>";
    the low-level call keeps the key as given."""
    obj.meta._array_or_group._put_metadata(key, np.ascontiguousarray(values))


def write_all_metadata(uri, *, is_group, with_bool=True, prefix=""):
    """Every metadata value type we can write, on the group or array at `uri`.

    Written with tiledb-py (tiledbsoma's metadata setter refuses numpy scalars,
    arrays and bytes)."""
    lt = tiledb.libtiledb
    o = tiledb.Group(uri, "w") if is_group else tiledb.open(uri, "w")
    try:
        m = o.meta
        p = prefix
        m[p + "int8"] = np.int8(-128)
        m[p + "int16"] = np.int16(-32768)
        m[p + "int32"] = np.int32(-2147483648)
        m[p + "int64_min"] = np.int64(-(2**63))
        m[p + "int64_max"] = np.int64(2**63 - 1)
        m[p + "int64_big"] = np.int64(2**62 + 1)  # not representable in a double
        m[p + "uint8"] = np.uint8(255)
        m[p + "uint16"] = np.uint16(65535)
        m[p + "uint32"] = np.uint32(2**32 - 1)
        m[p + "uint64_big"] = np.uint64(2**63 + 5)
        m[p + "uint64_62"] = np.uint64(2**62 + 1)
        m[p + "uint64_max"] = np.uint64(2**64 - 1)
        m[p + "float32"] = np.float32(3.14)  # not exact: 3.140000104904175 as a double
        m[p + "float32_exact"] = np.float32(-0.5)
        m[p + "float64"] = np.float64(0.1)
        m[p + "float64_big"] = np.float64(1e300)
        m[p + "float64_tiny"] = np.float64(5e-324)
        m[p + "float64_negzero"] = np.float64(-0.0)
        m[p + "nan"] = np.float64("nan")
        m[p + "inf"] = np.float64("inf")
        m[p + "neg_inf"] = np.float64("-inf")
        m[p + "float32_nan"] = np.float32("nan")
        m[p + "str"] = "héllo wörld — 細胞 ✓ \"quoted\" back\\slash\ttab\nnewline"
        m[p + "str_empty"] = ""
        m[p + "blob"] = b"\x00\x01\xfe\xffblob"
        m[p + "blob_empty_ish"] = b"\x00"
        # Multi-valued numbers (value_num > 1) under plain keys.
        put_raw(o, p + "multi_int8", np.array([1, -2, 3, -128], dtype=np.int8))
        put_raw(o, p + "multi_uint64", np.array([2**63 + 5, 0, 2**64 - 1], dtype=np.uint64))
        put_raw(o, p + "multi_int64", np.array([2**62 + 1, -(2**63)], dtype=np.int64))
        put_raw(o, p + "multi_float32", np.array([1.5, 2.25], dtype=np.float32))
        put_raw(o, p + "multi_float64", np.array([0.1, float("nan"), float("inf"), float("-inf")]))
        put_raw(o, p + "multi_float64_two", np.array([1.5, -2.5]))
        put_raw(o, p + "one_value_array", np.array([7], dtype=np.int16))  # value_num 1: a number
        put_raw(o, p + "empty_int64", np.array([], dtype=np.int64))  # value_num 0
        # Python tuples: tiledb-py packs them as int64 / float64 multi-values.
        m[p + "tuple_int"] = (1, 2, 3)
        # The public numpy path, as tiledb-py users produce it ("__np_flat_" prefix).
        m[p + "np_public"] = np.array([10, 20, 30], dtype=np.int32)
        # String-ish types other than UTF-8.
        o.meta._array_or_group._put_metadata(p + "ascii", lt.DataType.STRING_ASCII, 5, b"ascii")
        # Unicode / space in keys.
        m[p + "clé ß 細胞"] = "unicode key"
        m[p + "UPPER"] = "sorts before lower-case"
        if with_bool:
            # tiledb-py writes np.bool_ as TILEDB_BOOL (but cannot read it back);
            # tiledbsoma reads it as a Python bool.
            m[p + "bool_true"] = np.bool_(True)
            m[p + "bool_false"] = np.bool_(False)
    finally:
        o.close()


# --------------------------------------------------------------------------------------
# pbmc


def build_pbmc(uri):
    import scanpy

    adata = scanpy.datasets.pbmc68k_reduced()
    tiledbsoma.io.from_anndata(uri, adata, measurement_name="RNA")


# --------------------------------------------------------------------------------------
# hand


def build_obs(uri, n, rng):
    cats = ["B cell", "T cell", "NK/γδ", "", "monocyte, classical"]
    schema = pa.schema(
        [
            pa.field("soma_joinid", pa.int64(), nullable=False),
            pa.field("obs_id", pa.large_string(), nullable=False),
            pa.field("i8", pa.int8(), nullable=True),
            pa.field("i16", pa.int16(), nullable=False),
            pa.field("i32", pa.int32(), nullable=False),
            pa.field("i64", pa.int64(), nullable=False),
            pa.field("u8", pa.uint8(), nullable=False),
            pa.field("u16", pa.uint16(), nullable=False),
            pa.field("u32", pa.uint32(), nullable=False),
            pa.field("u64", pa.uint64(), nullable=False),
            pa.field("f32", pa.float32(), nullable=False),
            pa.field("f64", pa.float64(), nullable=True),
            pa.field("flag", pa.bool_(), nullable=True),
            pa.field("s", pa.string(), nullable=True),
            pa.field("blob", pa.binary(), nullable=False),
            pa.field("t_s", pa.timestamp("s"), nullable=False),
            pa.field("t_ms", pa.timestamp("ms"), nullable=False),
            pa.field("t_us", pa.timestamp("us"), nullable=False),
            pa.field("t_ns", pa.timestamp("ns"), nullable=True),
            pa.field("cell_type", pa.dictionary(pa.int8(), pa.string(), ordered=True), nullable=True),
            pa.field("batch", pa.dictionary(pa.int32(), pa.large_string()), nullable=False),
            pa.field("lane", pa.dictionary(pa.uint16(), pa.int32()), nullable=False),
            pa.field("dose", pa.dictionary(pa.int8(), pa.float64()), nullable=False),
            pa.field("qc_pass", pa.dictionary(pa.int8(), pa.bool_()), nullable=False),
        ]
    )
    j = np.arange(n, dtype=np.int64)
    null_every = lambda k: pa.array([i % k == 0 for i in range(n)])  # noqa: E731

    def with_nulls(arr, k):
        return pa.compute.if_else(null_every(k), pa.nulls(n, arr.type), arr)

    import pyarrow.compute  # noqa: F401

    base_t = 1_700_000_000
    cols = {
        "soma_joinid": pa.array(j),
        "obs_id": pa.array([f"cell_{i:04d}" for i in range(n)], pa.large_string()),
        "i8": with_nulls(pa.array(((j % 256) - 128).astype(np.int8)), 7),
        "i16": pa.array((j * 101 - 15000).astype(np.int16)),
        "i32": pa.array((j * 7_000_003 - 2**31 + 1).astype(np.int32)),
        "i64": pa.array(j * (2**53 + 1) - 2**62),
        "u8": pa.array((j % 256).astype(np.uint8)),
        "u16": pa.array((j * 211).astype(np.uint16)),
        "u32": pa.array((j * 14_000_000).astype(np.uint32)),
        "u64": pa.array(np.uint64(2**63) + j.astype(np.uint64) * np.uint64(3)),
        "f32": pa.array(rng.normal(size=n).astype(np.float32)),
        "f64": with_nulls(
            pa.array(np.where(j % 11 == 1, np.nan, rng.normal(size=n) * 1e6)), 13
        ),
        "flag": with_nulls(pa.array(j % 3 == 0), 17),
        "s": with_nulls(pa.array([f"s,\"{i}\"\tü" for i in range(n)], pa.string()), 5),
        "blob": pa.array([bytes([i % 256, 0, 255]) for i in range(n)], pa.binary()),
        "t_s": pa.array(base_t + j, pa.timestamp("s")),
        "t_ms": pa.array(base_t * 1000 + j * 1001, pa.timestamp("ms")),
        "t_us": pa.array(base_t * 10**6 + j * 999_999, pa.timestamp("us")),
        "t_ns": with_nulls(pa.array(base_t * 10**9 + j * 123_456_789, pa.timestamp("ns")), 19),
        "cell_type": with_nulls(
            pa.DictionaryArray.from_arrays(
                pa.array((j % len(cats)).astype(np.int8)), pa.array(cats, pa.string()), ordered=True
            ),
            23,
        ),
        "batch": pa.DictionaryArray.from_arrays(
            pa.array((j % 3).astype(np.int32)), pa.array(["batch-A", "batch-B", "batch-C"], pa.large_string())
        ),
        "lane": pa.DictionaryArray.from_arrays(
            pa.array((j % 4).astype(np.uint16)), pa.array([1, 2, 3, -4], pa.int32())
        ),
        "dose": pa.DictionaryArray.from_arrays(
            pa.array((j % 3).astype(np.int8)), pa.array([0.0, 0.5, 1e-3], pa.float64())
        ),
        "qc_pass": pa.DictionaryArray.from_arrays(
            pa.array((j % 2).astype(np.int8)), pa.array([False, True], pa.bool_())
        ),
    }
    tbl = pa.Table.from_pydict(cols, schema=schema)
    write_new_frame(tbl, uri, schema=schema, index_column_names=["soma_joinid"], domain=[[0, n - 1]])


def build_var(uri, nvar):
    schema = pa.schema(
        [
            pa.field("soma_joinid", pa.int64(), nullable=False),
            pa.field("var_id", pa.large_string(), nullable=False),
            pa.field("n_cells", pa.int32(), nullable=False),
        ]
    )
    j = np.arange(nvar, dtype=np.int64)
    tbl = pa.Table.from_pydict(
        {
            "soma_joinid": j,
            "var_id": pa.array([f"GENE{i:03d}" for i in range(nvar)], pa.large_string()),
            "n_cells": (j * 3).astype(np.int32),
        },
        schema=schema,
    )
    # Larger current domain than the data: domain != non-empty domain.
    write_new_frame(tbl, uri, schema=schema, index_column_names=["soma_joinid"], domain=[[0, nvar + 9]])


def build_sparse(uri, shape, dtype, rng, density=0.1):
    n = int(np.prod(shape) * density)
    flat = np.sort(rng.choice(int(np.prod(shape)), size=n, replace=False))
    coords = np.unravel_index(flat, shape)
    if np.issubdtype(dtype, np.floating):
        vals = rng.normal(size=n).astype(dtype)
    else:
        vals = rng.integers(-1000, 1000, size=n).astype(dtype)
    tbl = pa.Table.from_pydict(
        {**{f"soma_dim_{d}": pa.array(c.astype(np.int64)) for d, c in enumerate(coords)}, "soma_data": pa.array(vals)}
    )
    with tiledbsoma.SparseNDArray.create(uri, type=pa.from_numpy_dtype(dtype), shape=shape) as a:
        a.write(tbl)


def build_dense(uri, shape, dtype, rng, region=None):
    with tiledbsoma.DenseNDArray.create(uri, type=pa.from_numpy_dtype(dtype), shape=shape) as a:
        region = region or tuple(slice(0, s - 1) for s in shape)  # SOMA slices are inclusive
        rshape = tuple(r.stop - r.start + 1 for r in region)
        if np.issubdtype(dtype, np.floating):
            vals = rng.normal(size=rshape).astype(dtype)
        else:
            vals = rng.integers(0, 200, size=rshape).astype(dtype)
        a.write(region, pa.Tensor.from_numpy(vals))


def build_multi_index(uri):
    schema = pa.schema(
        [
            pa.field("name", pa.string(), nullable=False),
            pa.field("score", pa.float64(), nullable=False),
            pa.field("k", pa.int32(), nullable=False),
            pa.field("when", pa.timestamp("ms"), nullable=False),
            pa.field("soma_joinid", pa.int64(), nullable=False),
            pa.field("value", pa.float64(), nullable=True),
        ]
    )
    n = 40
    j = np.arange(n, dtype=np.int64)
    tbl = pa.Table.from_pydict(
        {
            "name": [f"n{i % 7}" for i in range(n)],
            "score": (j * 0.25 - 1.5),
            "k": (j % 9 - 4).astype(np.int32),
            "when": pa.array(1_600_000_000_000 + j * 60_000, pa.timestamp("ms")),
            "soma_joinid": j,
            "value": pa.array([None if i % 4 == 0 else i / 3 for i in range(n)], pa.float64()),
        },
        schema=schema,
    )
    write_new_frame(
        tbl,
        uri,
        schema=schema,
        index_column_names=["name", "score", "k", "when", "soma_joinid"],
        domain=[None, (-1.5, 1000.25), (-5, 50), (1_500_000_000_000, 1_700_000_000_000), (0, 99)],
    )


def build_f32_index(uri):
    schema = pa.schema(
        [
            pa.field("f32", pa.float32(), nullable=False),
            pa.field("u8", pa.uint8(), nullable=False),
            pa.field("soma_joinid", pa.int64(), nullable=False),
            pa.field("label", pa.dictionary(pa.int16(), pa.string()), nullable=True),
        ]
    )
    n = 20
    j = np.arange(n, dtype=np.int64)
    tbl = pa.Table.from_pydict(
        {
            "f32": (j * 0.125 - 2.5).astype(np.float32),
            "u8": (j * 10 + 1).astype(np.uint8),
            "soma_joinid": j,
            "label": pa.DictionaryArray.from_arrays(pa.array((j % 2).astype(np.int16)), pa.array(["even", "odd"])),
        },
        schema=schema,
    )
    write_new_frame(
        tbl, uri, schema=schema, index_column_names=["f32", "u8", "soma_joinid"], domain=[(-2.5, 3.75), (1, 200), (0, 19)]
    )


def build_small_df(uri, rows):
    schema = pa.schema([pa.field("soma_joinid", pa.int64(), nullable=False), pa.field("texte", pa.large_string())])
    tbl = pa.Table.from_pydict(
        {"soma_joinid": np.arange(len(rows), dtype=np.int64), "texte": pa.array(rows, pa.large_string())}, schema=schema
    )
    write_new_frame(tbl, uri, schema=schema, domain=[[0, len(rows) - 1]])


def build_plain(uri):
    """A plain TileDB group (no soma_object_type) with plain TileDB arrays."""
    tiledb.Group.create(uri)
    dense_uri = os.path.join(uri, "plain_dense")
    dom = tiledb.Domain(
        tiledb.Dim(name="row", domain=(0, 9), tile=5, dtype=np.int32),
        tiledb.Dim(name="col", domain=(0, 3), tile=4, dtype=np.int32),
    )
    schema = tiledb.ArraySchema(
        domain=dom,
        sparse=False,
        attrs=[tiledb.Attr(name="a", dtype=np.float64), tiledb.Attr(name="b", dtype=np.int16)],
    )
    tiledb.Array.create(dense_uri, schema)
    with tiledb.open(dense_uri, "w") as A:
        A[:] = {
            "a": np.arange(40, dtype=np.float64).reshape(10, 4) / 4,
            "b": np.arange(40, dtype=np.int16).reshape(10, 4),
        }
    sparse_uri = os.path.join(uri, "plain_sparse")
    dom = tiledb.Domain(tiledb.Dim(name="key", domain=(None, None), tile=None, dtype="ascii"))
    schema = tiledb.ArraySchema(
        domain=dom, sparse=True, attrs=[tiledb.Attr(name="val", dtype=np.float32, nullable=True)]
    )
    tiledb.Array.create(sparse_uri, schema)
    with tiledb.open(sparse_uri, "w") as A:
        A[np.array(["alpha", "beta", "gamma"])] = {"val": np.array([1.5, 2.5, 3.5], dtype=np.float32)}

    sub_uri = os.path.join(uri, "plain_sub")
    tiledb.Group.create(sub_uri)
    with tiledb.Group(sub_uri, "w") as g:
        g.meta["note"] = "a plain group inside a plain group"

    with tiledb.Group(uri, "w") as g:
        g.add("plain_dense", name="plain_dense", relative=True)
        g.add("plain_sparse", name="plain_sparse", relative=True)
        g.add("plain_sub", name="plain_sub", relative=True)
    # No bool: tiledb-py cannot read TILEDB_BOOL metadata, and the tests read plain
    # objects' metadata with tiledb-py.
    write_all_metadata(uri, is_group=True, with_bool=False)
    write_all_metadata(dense_uri, is_group=False, with_bool=False, prefix="arr_")
    with tiledb.open(sparse_uri, "w") as A:
        A.meta["description"] = "plain sparse array with a string dimension"


def add_member(group_uri, member_uri, name, relative):
    with tiledb.Group(group_uri, "w") as g:
        g.add(member_uri, name=name, relative=relative)


def build_hand(uri, rng):
    n_obs, n_var = 300, 50
    with tiledbsoma.Experiment.create(uri) as exp:
        exp.metadata["description"] = "hand-built SOMA experiment for soma-mount tests"
        exp.metadata["py_bool"] = True  # tiledbsoma's own writer: TILEDB_BOOL
        exp.metadata["py_int"] = 2**62 + 1  # tiledbsoma's own writer: int64
        exp.metadata["py_float"] = 2.5

    build_obs(os.path.join(uri, "obs"), n_obs, rng)
    with tiledbsoma.open(uri, "w") as exp:
        exp.set("obs", tiledbsoma.open(os.path.join(uri, "obs")), use_relative_uri=True)

        ms = exp.add_new_collection("ms")
        rna = ms.add_new_collection("RNA", tiledbsoma.Measurement)
        rna.metadata["layer_note"] = "RNA measurement"
        build_var(os.path.join(rna.uri, "var"), n_var)
        rna.set("var", tiledbsoma.open(os.path.join(rna.uri, "var")), use_relative_uri=True)
        X = rna.add_new_collection("X")
        build_sparse(os.path.join(X.uri, "data"), (n_obs, n_var), np.float32, rng)
        X.set("data", tiledbsoma.open(os.path.join(X.uri, "data")), use_relative_uri=True)
        obsm = rna.add_new_collection("obsm")
        build_dense(os.path.join(obsm.uri, "X_pca"), (n_obs, 5), np.float64, rng)
        obsm.set("X_pca", tiledbsoma.open(os.path.join(obsm.uri, "X_pca")), use_relative_uri=True)

        # Nested collections, 4 levels below the root.
        nested = exp.add_new_collection("nested")
        nested.metadata["depth"] = 1
        l2 = nested.add_new_collection("level2")
        l2.metadata["depth"] = 2
        l3 = l2.add_new_collection("level3")
        l3.metadata["depth"] = 3
        l4 = l3.add_new_collection("level4")
        l4.metadata["depth"] = 4
        build_sparse(os.path.join(l4.uri, "deep_sparse_3d"), (4, 5, 6), np.int32, rng, density=0.3)
        l4.set("deep_sparse_3d", tiledbsoma.open(os.path.join(l4.uri, "deep_sparse_3d")), use_relative_uri=True)
        # Dense array written only in part: non_empty_domain smaller than shape.
        build_dense(
            os.path.join(l3.uri, "partial_dense_u8"), (8, 6), np.uint8, rng, region=(slice(2, 5), slice(1, 3))
        )
        l3.set("partial_dense_u8", tiledbsoma.open(os.path.join(l3.uri, "partial_dense_u8")), use_relative_uri=True)
        build_dense(os.path.join(l2.uri, "dense_1d_i64"), (10,), np.int64, rng)
        l2.set("dense_1d_i64", tiledbsoma.open(os.path.join(l2.uri, "dense_1d_i64")), use_relative_uri=True)

        # DataFrames with unusual index columns.
        build_multi_index(os.path.join(uri, "multi_index"))
        exp.set("multi_index", tiledbsoma.open(os.path.join(uri, "multi_index")), use_relative_uri=True)
        build_f32_index(os.path.join(uri, "f32_index"))
        exp.set("f32_index", tiledbsoma.open(os.path.join(uri, "f32_index")), use_relative_uri=True)

        # A collection with a member named like a generated file: the member must win.
        clash = exp.add_new_collection("clash")
        clash.add_new_collection("metadata.json")

        # The "absolute" and "broken" targets are created here, linked below with tiledb-py.
        tiledbsoma.Collection.create(os.path.join(uri, "abs_target")).close()
        tiledbsoma.Collection.create(os.path.join(uri, "rel_target")).close()
        tiledbsoma.Collection.create(os.path.join(uri, "gone_target")).close()

    # Data-file edge cases (every column type, nulls, NaN/inf, quoting, empty arrays,
    # 3-D dense): a collection of arrays under "edge".
    build_edge(os.path.join(uri, "edge"), np.random.default_rng(SEED + 3))
    add_member(uri, "edge", "edge", relative=True)

    # Names with spaces / unicode / '%' (valid file names: shown verbatim).
    for name, sub in UNICODE_NAMES.items():
        sub_uri = os.path.join(uri, sub)
        if sub == "donnees":
            build_small_df(sub_uri, ["é", "ß", "細胞", "🧬"])
        else:
            with tiledbsoma.Collection.create(sub_uri) as c:
                c.metadata["member_name"] = name
        add_member(uri, sub, name, relative=True)

    # Names that cannot be file names (percent-encoded by soma-mount).
    for name, sub in ODD_NAMES.items():
        with tiledbsoma.Collection.create(os.path.join(uri, sub)) as c:
            c.metadata["member_name"] = name
        add_member(uri, sub, name, relative=True)

    # One member with an absolute URI, one with an explicitly relative URI.
    add_member(uri, "file://" + os.path.abspath(os.path.join(uri, "abs_target")), "absolute", relative=False)
    add_member(uri, "rel_target", "relative", relative=True)

    # A plain TileDB group holding plain TileDB arrays.
    build_plain(os.path.join(uri, "plain"))
    add_member(uri, "plain", "plain", relative=True)

    # Broken member: added while it existed (so the group still opens with tiledbsoma,
    # which refuses groups with members of unknown type), then deleted.
    add_member(uri, "gone_target", "gone", relative=True)
    shutil.rmtree(os.path.join(uri, "gone_target"))

    # Metadata of every type on the root group and on an array (obs).
    write_all_metadata(uri, is_group=True)
    write_all_metadata(os.path.join(uri, "obs"), is_group=False, prefix="obs_")
    # The public numpy path of tiledb-py on a SparseNDArray too.
    with tiledb.open(os.path.join(uri, "ms", "RNA", "X", "data"), "w") as A:
        A.meta["units"] = "counts"


# --------------------------------------------------------------------------------------
# hand/edge: value-formatting edge cases for the data files (data.csv, .tsv, .jsonl,
# .parquet, .npy)

# Strings that need CSV/TSV quoting or JSON escaping, plus look-alikes of special tokens.
EDGE_STRINGS = [
    "plain",
    "",  # empty string: CSV `""`, distinct from a null (empty field)
    "comma, inside",
    'quote " inside',
    '"starts with a quote',
    "tab\tinside",
    "line\nfeed",
    "crlf\r\nline",
    "lone\rcr",
    "  leading and trailing spaces  ",
    "unicode: é ß 細胞 🧬 \u00a0nbsp",
    "back\\slash and /slash",
    "NaN",
    "null",
    "true",
    "-inf",
    'all of them: ,"\t\n\r\n é',
    "\u2028 line separator \u2029 paragraph separator",
    "control \x01\x1f chars",
    "#hash, 'single' quotes",
]

F32_SPECIALS = [
    np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.5, 0.1, 1e16, 1e-7, 3.4028235e38, -3.4028235e38,
    1e-45, 1.1754944e-38, 16777216.0, 16777217.0, 123456.79, 2.5e-5, 100.0, 1e10,
]
F64_SPECIALS = [
    np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.5, 0.1, 1e16, 1e-7, 1.7976931348623157e308, -1e300,
    5e-324, 2.2250738585072014e-308, 9007199254740993.0, 1e22, 123456789012345680.0, 0.30000000000000004,
    1e21, 1e-5,
]


def build_edge_df(uri, n=40):
    """A DataFrame with every column type tiledbsoma supports, every one nullable
    (except the index) and holding nulls, plus extreme and special values."""
    schema = pa.schema(
        [
            pa.field("soma_joinid", pa.int64(), nullable=False),
            pa.field("i8", pa.int8()),
            pa.field("i16", pa.int16()),
            pa.field("i32", pa.int32()),
            pa.field("i64", pa.int64()),
            pa.field("u8", pa.uint8()),
            pa.field("u16", pa.uint16()),
            pa.field("u32", pa.uint32()),
            pa.field("u64", pa.uint64()),
            pa.field("f32", pa.float32()),
            pa.field("f64", pa.float64()),
            pa.field("flag", pa.bool_()),
            pa.field("s", pa.string()),
            pa.field("ls", pa.large_string()),
            pa.field("b", pa.binary()),
            pa.field("lb", pa.large_binary()),
            pa.field("t_s", pa.timestamp("s")),
            pa.field("t_ms", pa.timestamp("ms")),
            pa.field("t_us", pa.timestamp("us")),
            pa.field("t_ns", pa.timestamp("ns")),
            pa.field("e_str", pa.dictionary(pa.int8(), pa.string())),
            pa.field("e_int", pa.dictionary(pa.int16(), pa.int64())),
            pa.field("e_f32", pa.dictionary(pa.int32(), pa.float32())),
            pa.field("e_bool", pa.dictionary(pa.int8(), pa.bool_())),
            pa.field("e_u8", pa.dictionary(pa.uint8(), pa.uint8(), ordered=True)),
            # Non-nullable columns next to the nullable ones.
            pa.field("s_nn", pa.large_string(), nullable=False),
            pa.field("f32_nn", pa.float32(), nullable=False),
        ]
    )

    def cyc(values, k):
        return [values[(i * k) % len(values)] for i in range(n)]

    def nulls_at(values, every, offset):
        return [None if i % every == offset else v for i, v in enumerate(values)]

    def ints(dtype):
        info = np.iinfo(dtype)
        pool = [int(info.min), int(info.max), 0, 1, -1 if info.min < 0 else 2, int(info.max) - 1, 42, int(info.min) + 1]
        return nulls_at(cyc(pool, 1), 5, 2)

    strings = EDGE_STRINGS
    t_s = [0, -1, 1_700_000_000, 253_402_300_799, -2_208_988_800, 951_782_400, 86_399]  # 9999-12-31, 1900, 2000-02-29
    t_ms = [0, -1, 1_700_000_000_123, 253_402_300_799_999, -1_001, 951_782_400_010]
    t_us = [0, -1, 1_700_000_000_123_456, 253_402_300_799_999_999, -1_000_001, 951_782_400_000_010]
    t_ns = [0, -1, 1_700_000_000_123_456_789, 9_223_372_036_854_775_807, -1_000_000_001, 951_782_400_000_000_010]
    e_str_labels = ["alpha", "", "comma, label", 'quote "label"', "new\nline", "細胞", "tab\tlabel"]
    e_int_labels = [-(2**63), 2**63 - 1, 0, 7]
    e_f32_labels = [0.5, -0.25, 1e-7, 3.4028235e38, 0.1]
    e_u8_labels = [255, 0, 128]

    def enum(labels, idx_type, value_type, every, offset, k=1, ordered=False):
        idx = nulls_at(cyc(list(range(len(labels))), k), every, offset)
        return pa.DictionaryArray.from_arrays(
            pa.array(idx, idx_type), pa.array(labels, value_type), ordered=ordered
        )

    cols = {
        "soma_joinid": pa.array(np.arange(n, dtype=np.int64)),
        "i8": pa.array(ints(np.int8), pa.int8()),
        "i16": pa.array(ints(np.int16), pa.int16()),
        "i32": pa.array(ints(np.int32), pa.int32()),
        "i64": pa.array(ints(np.int64), pa.int64()),
        "u8": pa.array(ints(np.uint8), pa.uint8()),
        "u16": pa.array(ints(np.uint16), pa.uint16()),
        "u32": pa.array(ints(np.uint32), pa.uint32()),
        "u64": pa.array(ints(np.uint64), pa.uint64()),
        "f32": pa.array(nulls_at(cyc(F32_SPECIALS, 1), 7, 3), pa.float32()),
        "f64": pa.array(nulls_at(cyc(F64_SPECIALS, 1), 7, 4), pa.float64()),
        "flag": pa.array(nulls_at([i % 2 == 0 for i in range(n)], 3, 1), pa.bool_()),
        "s": pa.array(nulls_at(cyc(strings, 1), 6, 5), pa.string()),
        "ls": pa.array(nulls_at(cyc(strings, 3), 6, 0), pa.large_string()),
        "b": pa.array(nulls_at(cyc([b"", b"\x00", b"\xff\xfe,\"\n", b"abc", bytes(range(16))], 1), 4, 3), pa.binary()),
        "lb": pa.array(nulls_at(cyc([b"\x00\x01", b"", b"\xde\xad\xbe\xef"], 1), 4, 0), pa.large_binary()),
        "t_s": pa.array(nulls_at(cyc(t_s, 1), 5, 4), pa.timestamp("s")),
        "t_ms": pa.array(nulls_at(cyc(t_ms, 1), 5, 3), pa.timestamp("ms")),
        "t_us": pa.array(nulls_at(cyc(t_us, 1), 5, 1), pa.timestamp("us")),
        "t_ns": pa.array(nulls_at(cyc(t_ns, 1), 5, 0), pa.timestamp("ns")),
        "e_str": enum(e_str_labels, pa.int8(), pa.string(), 4, 1),
        "e_int": enum(e_int_labels, pa.int16(), pa.int64(), 5, 2),
        "e_f32": enum(e_f32_labels, pa.int32(), pa.float32(), 6, 3),
        "e_bool": enum([True, False], pa.int8(), pa.bool_(), 3, 2),
        "e_u8": enum(e_u8_labels, pa.uint8(), pa.uint8(), 7, 6, ordered=True),
        "s_nn": pa.array(cyc(strings, 7), pa.large_string()),
        "f32_nn": pa.array(cyc(F32_SPECIALS, 3), pa.float32()),
    }
    tbl = pa.Table.from_pydict(cols, schema=schema)
    write_new_frame(tbl, uri, schema=schema, index_column_names=["soma_joinid"], domain=[[0, n - 1]])


def build_empty_df(uri):
    """A DataFrame with a schema (enumeration, strings, floats) and zero rows."""
    schema = pa.schema(
        [
            pa.field("soma_joinid", pa.int64(), nullable=False),
            pa.field("name", pa.large_string()),
            pa.field("value", pa.float64()),
            pa.field("kind", pa.dictionary(pa.int8(), pa.string())),
        ]
    )
    tiledbsoma.DataFrame.create(uri, schema=schema, index_column_names=["soma_joinid"], domain=[[0, 9]]).close()


def build_string_index_df(uri):
    """A DataFrame indexed by a string column (TileDB ASCII dimension) whose keys need
    quoting, with a float index second: rows sort by (key, x)."""
    keys = ["b", "a,c", 'q"x', "a", "", "z z", "A", "a\tb"]
    schema = pa.schema(
        [
            pa.field("key", pa.large_string(), nullable=False),
            pa.field("x", pa.float64(), nullable=False),
            pa.field("soma_joinid", pa.int64(), nullable=False),
            pa.field("v", pa.int32()),
        ]
    )
    n = len(keys) * 2
    tbl = pa.Table.from_pydict(
        {
            "key": pa.array([keys[i % len(keys)] for i in range(n)], pa.large_string()),
            "x": pa.array([(-1.0) ** i * (i / 8) for i in range(n)], pa.float64()),
            "soma_joinid": pa.array(np.arange(n, dtype=np.int64)),
            "v": pa.array([None if i % 3 == 0 else i * 1000 - 5000 for i in range(n)], pa.int32()),
        },
        schema=schema,
    )
    write_new_frame(tbl, uri, schema=schema, index_column_names=["key", "x"], domain=[None, (-10.0, 10.0)])


def build_edge(uri, rng):
    """hand/edge: a collection of arrays that exercise the data-file encoders."""
    with tiledbsoma.Collection.create(uri) as c:
        c.metadata["purpose"] = "value formatting edge cases"

    def link(name):
        with tiledbsoma.open(uri, "w") as c:
            c.set(name, tiledbsoma.open(os.path.join(uri, name)), use_relative_uri=True)

    build_edge_df(os.path.join(uri, "all_types"))
    link("all_types")
    build_empty_df(os.path.join(uri, "empty_df"))
    link("empty_df")
    build_string_index_df(os.path.join(uri, "string_index"))
    link("string_index")

    # A SparseNDArray with zero stored cells.
    tiledbsoma.SparseNDArray.create(os.path.join(uri, "empty_sparse"), type=pa.float64(), shape=(10, 20)).close()
    link("empty_sparse")

    # A 3-D DenseNDArray, fully written, with NaN and infinities among its values.
    shape = (4, 5, 6)
    vals = rng.normal(size=shape).astype(np.float32)
    vals[0, 0, 0], vals[1, 2, 3], vals[3, 4, 5], vals[2, 0, 1] = np.nan, np.inf, -np.inf, -0.0
    vals[0, 1, 2] = np.float32(1e-45)
    with tiledbsoma.DenseNDArray.create(os.path.join(uri, "dense_3d_f32"), type=pa.float32(), shape=shape) as a:
        a.write(tuple(slice(0, s - 1) for s in shape), pa.Tensor.from_numpy(vals))
    link("dense_3d_f32")

    # A bool DenseNDArray (data.npy with dtype bool).
    bshape = (3, 7)
    with tiledbsoma.DenseNDArray.create(os.path.join(uri, "dense_bool"), type=pa.bool_(), shape=bshape) as a:
        a.write(
            tuple(slice(0, s - 1) for s in bshape),
            pa.Tensor.from_numpy(rng.integers(0, 2, size=bshape).astype(np.bool_)),
        )
    link("dense_bool")

    # Sparse arrays of the other value types: uint64 (values above 2**63) and float64
    # with NaN/inf.
    coords = np.array([0, 1, 3, 7], dtype=np.int64)
    with tiledbsoma.SparseNDArray.create(os.path.join(uri, "sparse_u64"), type=pa.uint64(), shape=(8,)) as a:
        a.write(
            pa.Table.from_pydict(
                {
                    "soma_dim_0": pa.array(coords),
                    "soma_data": pa.array([0, 2**63, 2**64 - 1, 12345678901234567890], pa.uint64()),
                }
            )
        )
    link("sparse_u64")
    with tiledbsoma.SparseNDArray.create(os.path.join(uri, "sparse_f64"), type=pa.float64(), shape=(5, 4)) as a:
        a.write(
            pa.Table.from_pydict(
                {
                    "soma_dim_0": pa.array([4, 0, 2, 0, 3, 1], pa.int64()),
                    "soma_dim_1": pa.array([3, 1, 2, 0, 0, 3], pa.int64()),
                    "soma_data": pa.array([np.nan, np.inf, -np.inf, -0.0, 5e-324, 1e16], pa.float64()),
                }
            )
        )
    link("sparse_f64")

    # slices/ and by/ cases (own RNG, so the arrays above are unchanged).
    srng = np.random.default_rng(SEED + 4)
    build_labels_df(os.path.join(uri, "labels"))
    link("labels")
    build_str_keys_df(os.path.join(uri, "str_keys"))
    link("str_keys")
    build_frag_sparse(os.path.join(uri, "frag_sparse"), srng)
    link("frag_sparse")
    build_frag_dense(os.path.join(uri, "frag_dense"), srng)
    link("frag_dense")


# --------------------------------------------------------------------------------------
# hand/edge: slices/ and by/ cases (issue 4)

# Labels of edge/labels' "label" column, in enumeration order. "unused" is added by
# schema evolution after the writes (tiledbsoma drops dictionary values no row uses),
# so it is listed under by/label/ but holds no rows.
LABELS = [
    "a/b",
    "50%",
    "x%/y",
    "with space",
    " padded ",
    ".",
    "..",
    "",
    "*",
    "%2F",
    "comma, here",
    "\u00fc/\u00df %",
    "-1",
    "tab\there",
]
LABELS_UNUSED = "unused"
GRP_LABELS = ["p q", "r%s", "t/u"]
NUM_LABELS = [-1, 0, 1000]
# ASCII only: writing a key above 0x7F fails ("outside of the defined current domain").
STR_KEYS = ["*", "a/b", "50%", "x,y", "", "-", "1-2", "%2F", "plain", "sp ace", "%", "~tilde"]


def build_labels_df(uri):
    """A DataFrame indexed by "pos" (int64, domain [-100, 100], values -30..29),
    written in 3 fragments of 20 rows, with enumerated columns for by/."""
    schema = pa.schema(
        [
            pa.field("pos", pa.int64(), nullable=False),
            pa.field("soma_joinid", pa.int64(), nullable=False),
            pa.field("label", pa.dictionary(pa.int8(), pa.string()), nullable=True),
            pa.field("grp/sub", pa.dictionary(pa.int16(), pa.large_string()), nullable=False),
            pa.field("num", pa.dictionary(pa.int8(), pa.int32()), nullable=True),
            pa.field("val", pa.float64(), nullable=True),
        ]
    )
    n = 60

    def block(lo, hi):
        pos = np.arange(lo, hi, dtype=np.int64)
        i = pos + 30
        label_idx = [None if k % 11 == 4 else int((k * 5) % len(LABELS)) for k in i]
        num_idx = [None if k % 5 == 1 else int(k % 3) for k in i]
        return pa.Table.from_pydict(
            {
                "pos": pa.array(pos),
                "soma_joinid": pa.array(i),
                "label": pa.DictionaryArray.from_arrays(pa.array(label_idx, pa.int8()), pa.array(LABELS, pa.string())),
                "grp/sub": pa.DictionaryArray.from_arrays(
                    pa.array((i % 3).astype(np.int16)), pa.array(GRP_LABELS, pa.large_string())
                ),
                "num": pa.DictionaryArray.from_arrays(pa.array(num_idx, pa.int8()), pa.array(NUM_LABELS, pa.int32())),
                "val": pa.array([None if k % 4 == 0 else float(k) / 4 for k in i], pa.float64()),
            },
            schema=schema,
        )

    # Written out of order: the middle block first.
    write_new_frame(block(-10, 10), uri, schema=schema, index_column_names=["pos"], domain=[(-100, 100)])
    for lo, hi in ((-30, -10), (10, 30)):
        time.sleep(0.005)
        with tiledbsoma.open(uri, "w") as df:
            df.write(block(lo, hi))
    assert n == 60
    # A label no row uses, added by schema evolution (a later timestamp than the writes).
    time.sleep(0.005)
    with tiledb.open(uri) as A:
        enmr = A.enum(A.schema.attr("label").enum_label)
    se = tiledb.ArraySchemaEvolution(tiledb.default_ctx())
    se.extend_enumeration(enmr.extend(np.array([LABELS_UNUSED])))
    se.array_evolve(uri)


def build_str_keys_df(uri):
    """A DataFrame indexed by one string column whose keys need slice-name escapes."""
    schema = pa.schema(
        [
            pa.field("key", pa.large_string(), nullable=False),
            pa.field("soma_joinid", pa.int64(), nullable=False),
            pa.field("v", pa.int32(), nullable=True),
        ]
    )
    n = len(STR_KEYS)
    tbl = pa.Table.from_pydict(
        {
            "key": pa.array(STR_KEYS, pa.large_string()),
            "soma_joinid": pa.array(np.arange(n, dtype=np.int64)),
            "v": pa.array([None if i == 3 else i * 10 - 20 for i in range(n)], pa.int32()),
        },
        schema=schema,
    )
    write_new_frame(tbl, uri, schema=schema, index_column_names=["key"], domain=[None])


FRAG_SPARSE_SHAPE = (1000, 40)
FRAG_DENSE_SHAPE = (120, 7)


def build_frag_sparse(uri, rng):
    """A 2-D SparseNDArray written in 4 fragments: three row blocks (rows 500-599
    never written) and a thin column-39 fragment spanning every block."""
    nr, nc = FRAG_SPARSE_SHAPE
    with tiledbsoma.SparseNDArray.create(uri, type=pa.float32(), shape=FRAG_SPARSE_SHAPE):
        pass
    for lo, hi in ((0, 250), (250, 500), (600, 1000)):
        cells = (hi - lo) * (nc - 1)
        flat = np.sort(rng.choice(cells, size=cells // 5, replace=False))
        r, c = np.unravel_index(flat, (hi - lo, nc - 1))
        time.sleep(0.005)
        with tiledbsoma.open(uri, "w") as a:
            a.write(
                pa.Table.from_pydict(
                    {
                        "soma_dim_0": pa.array((r + lo).astype(np.int64)),
                        "soma_dim_1": pa.array(c.astype(np.int64)),
                        "soma_data": pa.array(rng.normal(size=len(flat)).astype(np.float32)),
                    }
                )
            )
    rows = np.arange(3, nr, 37, dtype=np.int64)
    rows = rows[(rows < 500) | (rows >= 600)]
    time.sleep(0.005)
    with tiledbsoma.open(uri, "w") as a:
        a.write(
            pa.Table.from_pydict(
                {
                    "soma_dim_0": pa.array(rows),
                    "soma_dim_1": pa.array(np.full(len(rows), nc - 1, np.int64)),
                    "soma_data": pa.array(rows.astype(np.float32) / 8),
                }
            )
        )


def build_frag_dense(uri, rng):
    """A 2-D DenseNDArray written in 4 row blocks of 30 rows, plus a fifth fragment
    overwriting rows 10-69, columns 2-3."""
    nr, nc = FRAG_DENSE_SHAPE
    with tiledbsoma.DenseNDArray.create(uri, type=pa.int32(), shape=FRAG_DENSE_SHAPE):
        pass
    for lo in range(0, nr, 30):
        vals = rng.integers(-1000, 1000, size=(30, nc)).astype(np.int32)
        time.sleep(0.005)
        with tiledbsoma.open(uri, "w") as a:
            a.write((slice(lo, lo + 29), slice(0, nc - 1)), pa.Tensor.from_numpy(vals))
    time.sleep(0.005)
    with tiledbsoma.open(uri, "w") as a:
        a.write(
            (slice(10, 69), slice(2, 3)),
            pa.Tensor.from_numpy(np.arange(120, dtype=np.int32).reshape(60, 2) + 5000),
        )


# --------------------------------------------------------------------------------------
# big: a multi-million-cell SparseNDArray (multi-megabyte data.csv) for the tool tests

BIG_SHAPE = (200_000, 2_000)
BIG_PER_ROW = 16  # draws per row before de-duplication: ~3.2M stored cells


def big_cells(seed=SEED + 2):
    """(rows, cols, values) of big/X, sorted row-major. float32 counts-like values,
    about a fifth of them non-integers."""
    rng = np.random.default_rng(seed)
    nr, nc = BIG_SHAPE
    cols = np.sort(rng.integers(0, nc, size=(nr, BIG_PER_ROW), dtype=np.int64), axis=1)
    keep = np.ones_like(cols, dtype=bool)
    keep[:, 1:] = cols[:, 1:] != cols[:, :-1]
    rows = np.broadcast_to(np.arange(nr, dtype=np.int64)[:, None], cols.shape)[keep]
    cols = cols[keep]
    vals = (rng.poisson(2.0, size=len(cols)) + 1).astype(np.float32)
    frac = rng.random(len(cols)) < 0.2
    vals[frac] = (vals[frac] * rng.random(int(frac.sum()))).astype(np.float32)
    return rows, cols, vals


def build_big(uri):
    with tiledbsoma.Collection.create(uri) as c:
        c.metadata["purpose"] = "a multi-million-cell SparseNDArray for whole-file tool tests"
    rows, cols, vals = big_cells()
    x_uri = os.path.join(uri, "X")
    with tiledbsoma.SparseNDArray.create(x_uri, type=pa.float32(), shape=BIG_SHAPE) as a:
        a.write(
            pa.Table.from_pydict(
                {"soma_dim_0": pa.array(rows), "soma_dim_1": pa.array(cols), "soma_data": pa.array(vals)}
            )
        )
    with tiledbsoma.open(uri, "w") as c:
        c.set("X", tiledbsoma.open(x_uri), use_relative_uri=True)


# --------------------------------------------------------------------------------------
# scene


def build_scene(uri, rng):
    from tiledbsoma import (
        AffineTransform,
        Axis,
        CoordinateSpace,
        ScaleTransform,
    )

    space = CoordinateSpace([Axis(name="x", unit="micrometer"), Axis(name="y", unit="micrometer")])
    with tiledbsoma.Scene.create(uri, coordinate_space=space) as scene:
        scene.metadata["sample"] = "section-1"
        scene.add_new_collection("obsl")
        scene.add_new_collection("varl")
        scene.add_new_collection("img")

    # The point cloud is created on its own and then registered: Scene's
    # add_new_point_cloud_dataframe creates it at the scene's open timestamp, so the
    # enumeration extension done by the write lands at the same millisecond as the
    # original schema and libtiledb keeps the empty enumeration (tiledbsoma 2.3.0).
    n = 200
    schema = pa.schema(
        [
            pa.field("x", pa.float64(), nullable=False),
            pa.field("y", pa.float64(), nullable=False),
            pa.field("gene", pa.dictionary(pa.int8(), pa.string()), nullable=False),
            pa.field("quality", pa.float32(), nullable=True),
        ]
    )
    pts_uri = os.path.join(uri, "obsl", "points")
    pts_space = CoordinateSpace([Axis(name="x", unit="pixel"), Axis(name="y", unit="pixel")])
    # Written a few milliseconds after its create, as write_new_frame does and for its reason.
    tiledbsoma.PointCloudDataFrame.create(
        pts_uri, schema=schema, coordinate_space=pts_space, domain=[(0.0, 100.0), (-50.0, 50.0), (0, n - 1)]
    ).close()
    time.sleep(0.005)
    with tiledbsoma.open(pts_uri, "w") as pts:
        tbl = pa.Table.from_pydict(
            {
                "x": rng.uniform(0, 100, n),
                "y": rng.uniform(-50, 50, n),
                "soma_joinid": np.arange(n, dtype=np.int64),
                "gene": pa.DictionaryArray.from_arrays(
                    pa.array((np.arange(n) % 3).astype(np.int8)), pa.array(["CD3E", "MS4A1", "LYZ"])
                ),
                "quality": pa.array(rng.uniform(0, 1, n).astype(np.float32)),
            }
        )
        pts.write(tbl.select(pts.schema.names).cast(pts.schema))
        pts.metadata["soma_geometry_type"] = "radius"
        pts.metadata["soma_geometry"] = 1.5

    with tiledbsoma.open(uri, "w") as scene:
        scene["obsl"].set("points", tiledbsoma.open(pts_uri), use_relative_uri=True)
        scene.set_transform_to_point_cloud_dataframe(
            "points",
            transform=AffineTransform(("x", "y"), ("x", "y"), [[2.0, 0.5, 10.0], [-0.25, 2.0, -3.0]]),
        )

    with tiledbsoma.open(uri, "w") as scene:
        img = scene.add_new_multiscale_image(
            "tissue",
            "img",
            transform=ScaleTransform(("x", "y"), ("x", "y"), [0.5, 0.5]),
            type=pa.uint8(),
            level_shape=(3, 64, 48),
            coordinate_space=("x", "y"),
        )
        l0 = img["level0"]
        l0.write(
            (slice(None), slice(None), slice(None)),
            pa.Tensor.from_numpy(rng.integers(0, 256, size=(3, 64, 48), dtype=np.uint8)),
        )
        l1 = img.add_new_level("level1", shape=(3, 32, 24))
        l1.write(
            (slice(None), slice(None), slice(None)),
            pa.Tensor.from_numpy(rng.integers(0, 256, size=(3, 32, 24), dtype=np.uint8)),
        )
        img.close()

    build_scene_images(uri, np.random.default_rng(SEED + 6))


def build_scene_images(uri, rng):
    """More images in scene/img, one per PNG pixel format (tissue above is 8-bit RGB):
    gray16 (uint16, no channel axis: 16-bit gray), ga_f32 (float32, 2 channels last,
    two levels: gray + alpha scaled to 8 bits), rgba (uint8, 4 channels). Their
    transforms are a UniformScaleTransform, an AffineTransform and an IdentityTransform."""
    from tiledbsoma import AffineTransform, IdentityTransform, UniformScaleTransform

    xy = ("x", "y")
    with tiledbsoma.open(uri, "w") as scene:
        img = scene.add_new_multiscale_image(
            "gray16", "img", transform=UniformScaleTransform(xy, xy, 2.0), type=pa.uint16(),
            level_shape=(20, 30), has_channel_axis=False,
        )
        vals = rng.integers(0, 65536, size=(20, 30), dtype=np.uint16)
        vals[0, 0], vals[19, 29] = 0, 65535
        img["level0"].write((slice(None), slice(None)), pa.Tensor.from_numpy(vals))
        img.close()

        img = scene.add_new_multiscale_image(
            "ga_f32", "img", transform=AffineTransform(xy, xy, [[0.5, 0.0, 4.0], [0.0, 0.5, -2.0]]),
            type=pa.float32(), level_shape=(16, 12, 2), data_axis_order=("y", "x", "soma_channel"),
        )
        img["level0"].write(
            (slice(None),) * 3, pa.Tensor.from_numpy((rng.normal(size=(16, 12, 2)) * 3).astype(np.float32))
        )
        lv = img.add_new_level("half", shape=(8, 6, 2))
        lv.write((slice(None),) * 3, pa.Tensor.from_numpy(rng.uniform(-1, 1, size=(8, 6, 2)).astype(np.float32)))
        img.close()

        img = scene.add_new_multiscale_image(
            "rgba", "img", transform=IdentityTransform(xy, xy), type=pa.uint8(), level_shape=(4, 10, 14),
        )
        img["level0"].write(
            (slice(None),) * 3, pa.Tensor.from_numpy(rng.integers(0, 256, size=(4, 10, 14), dtype=np.uint8))
        )
        img.close()


# --------------------------------------------------------------------------------------
# v1: encoding 1.0.0, written by an old tiledbsoma in its own venv

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
V1_SCRIPT = os.path.join(REPO, "scripts", "make-fixture-v1.py")
# The files whose content the fixtures depend on (the stamp hashes them all).
STAMPED = (os.path.abspath(__file__), V1_SCRIPT)


def old_python():
    exe = os.environ.get("SOMA_OLD_PYTHON") or os.path.join(REPO, ".venv-old", "bin", "python")
    if not os.access(exe, os.X_OK):
        raise SystemExit(f"{exe} is missing: run scripts/setup (it makes .venv-old from requirements-old.txt)")
    return exe


def build_v1(uri):
    r = subprocess.run([old_python(), V1_SCRIPT, uri], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"make-fixture-v1.py failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")


# --------------------------------------------------------------------------------------
# legacy: 10x layouts with non-contiguous join ids, and malformed spatial metadata

# soma_joinids of noncontig's obs and var: sparse, not starting at 0, not in write order.
NONCONTIG_OBS = [3, 5, 7, 8, 40, 41, 100, 101, 102, 250, 511, 512, 999, 1000, 4095, 65536]
NONCONTIG_VAR = [2, 3, 9, 10, 57, 58, 300, 301, 1024]
NONCONTIG_CLUSTERS = ["alpha", "beta", "gamma/delta"]
NONCONTIG_CONDITIONS = ["ctrl", "stim"]
# Values of malformed spatial metadata (written with tiledb-py; tiledbsoma would refuse).
BAD_COORDINATE_SPACE = '[{"name": "x", "unit": "micrometer"}, {"name": '
BAD_TRANSFORM = '{"transform_type": "AffineTransform", "input_axes": ["x"'


def write_new_frame(tbl, uri, **create):
    """Creates a DataFrame (`create` as DataFrame.create takes) and writes `tbl` into it a
    few milliseconds later: a write that extends an enumeration at the create's millisecond
    leaves libtiledb holding the empty one (tiledbsoma 2.3.0), which verify() then finds
    ("has values but an empty enumeration"), as a clean-clone run once did."""
    tiledbsoma.DataFrame.create(uri, **create).close()
    time.sleep(0.005)
    with tiledbsoma.open(uri, "w") as df:
        df.write(tbl)


def _joinid_df(uri, fields, cols, domain_hi):
    schema = pa.schema([pa.field("soma_joinid", pa.int64(), nullable=False)] + fields)
    tbl = pa.Table.from_pydict(cols, schema=schema)
    write_new_frame(tbl, uri, schema=schema, index_column_names=["soma_joinid"], domain=[[0, domain_hi]])


def _x_layers(X, rows_j, cols_j, rng, layers):
    """Writes each (name, arrow type) layer of X: the same ~40% of the (obs, var) pairs,
    as float32 values or integer counts; obs rows_j[1] and var cols_j[-2] hold nothing."""
    pairs = [(r, c) for r in rows_j for c in cols_j if rng.random() < 0.4 and r != rows_j[1] and c != cols_j[-2]]
    perm = rng.permutation(len(pairs))  # written in random order
    r = np.array([pairs[i][0] for i in perm], np.int64)
    c = np.array([pairs[i][1] for i in perm], np.int64)
    counts = rng.integers(1, 1000, size=len(pairs))
    shape = (max(rows_j) + 1, max(cols_j) + 1)
    for name, t in layers:
        vals = counts.astype(t.to_pandas_dtype()) if pa.types.is_integer(t) else (counts / 7).astype(np.float32)
        uri = os.path.join(X.uri, name)
        with tiledbsoma.SparseNDArray.create(uri, type=t, shape=shape) as a:
            a.write(pa.Table.from_pydict({"soma_dim_0": r, "soma_dim_1": c, "soma_data": pa.array(vals, t)}))
        X.set(name, tiledbsoma.open(uri), use_relative_uri=True)


def build_noncontig(uri, rng):
    """An Experiment whose obs and var soma_joinids are sparse (see NONCONTIG_OBS/VAR),
    written in shuffled order; obs ids in "barcode", var ids/names in "feature_id" /
    "feature_name"; X/data float32 and X/counts int64."""
    obs_j = list(NONCONTIG_OBS)
    var_j = list(NONCONTIG_VAR)
    tiledbsoma.Experiment.create(uri).close()
    o = rng.permutation(len(obs_j))
    cond = [None if i % 5 == 3 else i % 2 for i in range(len(obs_j))]
    _joinid_df(
        os.path.join(uri, "obs"),
        [
            pa.field("barcode", pa.large_string(), nullable=False),
            pa.field("cluster", pa.dictionary(pa.int8(), pa.string()), nullable=False),
            pa.field("condition", pa.dictionary(pa.int8(), pa.string()), nullable=True),
            pa.field("n_counts", pa.float64(), nullable=False),
        ],
        {
            "soma_joinid": pa.array([obs_j[i] for i in o], pa.int64()),
            "barcode": pa.array([f"BC{obs_j[i]:06d}-1" for i in o], pa.large_string()),
            "cluster": pa.DictionaryArray.from_arrays(
                pa.array([i % 3 for i in o], pa.int8()), pa.array(NONCONTIG_CLUSTERS, pa.string())
            ),
            "condition": pa.DictionaryArray.from_arrays(
                pa.array([cond[i] for i in o], pa.int8()), pa.array(NONCONTIG_CONDITIONS, pa.string())
            ),
            "n_counts": pa.array([float(obs_j[i]) / 4 for i in o]),
        },
        max(obs_j) + 10,
    )
    with tiledbsoma.open(uri, "w") as exp:
        exp.set("obs", tiledbsoma.open(os.path.join(uri, "obs")), use_relative_uri=True)
        rna = exp.add_new_collection("ms").add_new_collection("RNA", tiledbsoma.Measurement)
        v = rng.permutation(len(var_j))
        _joinid_df(
            os.path.join(rna.uri, "var"),
            [
                pa.field("feature_name", pa.large_string(), nullable=False),
                pa.field("feature_id", pa.large_string(), nullable=False),
            ],
            {
                "soma_joinid": pa.array([var_j[i] for i in v], pa.int64()),
                "feature_name": pa.array([f"Gene-{var_j[i]}" for i in v], pa.large_string()),
                "feature_id": pa.array([f"ENSG{var_j[i]:011d}" for i in v], pa.large_string()),
            },
            max(var_j) + 10,
        )
        rna.set("var", tiledbsoma.open(os.path.join(rna.uri, "var")), use_relative_uri=True)
        X = rna.add_new_collection("X")
        _x_layers(X, obs_j, var_j, rng, [("data", pa.float32()), ("counts", pa.int64())])


def build_noids(uri, rng):
    """An Experiment whose obs has no string id column (barcodes are the soma_joinids)
    and whose var has "gene_ids" / "gene_names"."""
    n_obs, n_var = 12, 6
    tiledbsoma.Experiment.create(uri).close()
    _joinid_df(
        os.path.join(uri, "obs"),
        [pa.field("score", pa.float32(), nullable=False), pa.field("group", pa.dictionary(pa.int8(), pa.string()))],
        {
            "soma_joinid": pa.array(np.arange(n_obs, dtype=np.int64)),
            "score": pa.array(rng.random(n_obs).astype(np.float32)),
            "group": pa.DictionaryArray.from_arrays(
                pa.array(np.arange(n_obs) % 2, pa.int8()), pa.array(["g1", "g2"], pa.string())
            ),
        },
        n_obs - 1,
    )
    with tiledbsoma.open(uri, "w") as exp:
        exp.set("obs", tiledbsoma.open(os.path.join(uri, "obs")), use_relative_uri=True)
        rna = exp.add_new_collection("ms").add_new_collection("RNA", tiledbsoma.Measurement)
        _joinid_df(
            os.path.join(rna.uri, "var"),
            [pa.field("gene_names", pa.large_string(), nullable=False), pa.field("gene_ids", pa.large_string(), nullable=False)],
            {
                "soma_joinid": pa.array(np.arange(n_var, dtype=np.int64)),
                "gene_names": pa.array([f"N{i}" for i in range(n_var)], pa.large_string()),
                "gene_ids": pa.array([f"ID{i}" for i in range(n_var)], pa.large_string()),
            },
            n_var - 1,
        )
        rna.set("var", tiledbsoma.open(os.path.join(rna.uri, "var")), use_relative_uri=True)
        X = rna.add_new_collection("X")
        _x_layers(X, list(range(n_obs)), list(range(n_var)), rng, [("data", pa.float32())])


def build_legacy(uri, rng):
    with tiledbsoma.Collection.create(uri) as c:
        c.metadata["purpose"] = "10x layouts with sparse join ids; malformed spatial metadata"
    build_noncontig(os.path.join(uri, "noncontig"), rng)
    build_noids(os.path.join(uri, "noids"), rng)
    for name in ("bad_space", "bad_transforms"):
        tiledbsoma.Collection.create(os.path.join(uri, name)).close()
    with tiledb.Group(os.path.join(uri, "bad_space"), "w") as g:
        g.meta["soma_coordinate_space"] = BAD_COORDINATE_SPACE
    with tiledb.Group(os.path.join(uri, "bad_transforms"), "w") as g:
        g.meta["soma_scene_registry_points"] = BAD_TRANSFORM
    for name in ("noncontig", "noids", "bad_space", "bad_transforms"):
        add_member(uri, name, name, relative=True)


def stamp_digest():
    h = hashlib.sha256()
    for path in STAMPED:
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


# --------------------------------------------------------------------------------------


def verify(uri):
    """Read back every SOMA array reachable from uri with tiledbsoma, so a fixture that
    tiledbsoma wrote but cannot read (e.g. an enumeration left empty) fails here."""
    try:
        obj = tiledbsoma.open(uri)
    except Exception:  # broken member, plain TileDB object
        return
    with obj:
        if isinstance(obj, tiledbsoma._soma_group.SOMAGroup):
            for k in list(obj.keys()):
                verify(obj._contents[k].uri)
            return
        if obj.soma_type == "SOMADenseNDArray":
            obj.read().to_numpy()
            return
        tbl = obj.read().tables().concat() if obj.soma_type == "SOMASparseNDArray" else obj.read().concat()
        for f in tbl.schema:
            if pa.types.is_dictionary(f.type):
                col = tbl.column(f.name).combine_chunks()
                if len(col) > col.null_count and len(col.dictionary) == 0:
                    raise RuntimeError(f"{uri}: column {f.name!r} has values but an empty enumeration")
                col.to_pylist()


def main(argv):
    outdir = argv[1] if len(argv) > 1 else "fixtures"
    outdir = os.path.abspath(outdir)
    if os.path.exists(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir)
    rng = np.random.default_rng(SEED)
    build_hand(os.path.join(outdir, "hand"), rng)
    build_scene(os.path.join(outdir, "scene"), np.random.default_rng(SEED + 1))
    build_pbmc(os.path.join(outdir, "pbmc"))
    build_big(os.path.join(outdir, "big"))
    build_v1(os.path.join(outdir, "v1"))
    build_legacy(os.path.join(outdir, "legacy"), np.random.default_rng(SEED + 5))
    for store in ("hand", "scene", "pbmc", "big", "v1", "legacy"):
        verify(os.path.join(outdir, store))
    # Lets tests/python/conftest.py rebuild fixtures made by an older version of this
    # script (or of make-fixture-v1.py).
    with open(os.path.join(outdir, ".fixtures-stamp"), "w") as f:
        f.write(stamp_digest() + "\n")
    print(f"fixtures written to {outdir}")


if __name__ == "__main__":
    main(sys.argv)
