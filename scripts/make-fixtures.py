#!/usr/bin/env python3
"""Build the TileDB-SOMA fixture stores used by soma-mount's integration tests.

Usage: python scripts/make-fixtures.py [OUTDIR]      (default: fixtures/)

Removes OUTDIR and rewrites it with three stores, all written with tiledbsoma
(the reference implementation), plus tiledb-py where tiledbsoma refuses:

  OUTDIR/pbmc   scanpy's bundled pbmc68k_reduced, via tiledbsoma.io.from_anndata
  OUTDIR/hand   a hand-built SOMAExperiment full of edge cases (see build_hand)
  OUTDIR/scene  a spatial SOMAScene: PointCloudDataFrame in obsl, 2-level
                MultiscaleImage in img, with transforms registered

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
import sys
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
}
# Member names that are valid file names (must appear verbatim, even with '%').
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
    with tiledbsoma.DataFrame.create(uri, schema=schema, index_column_names=["soma_joinid"], domain=[[0, n - 1]]) as df:
        df.write(tbl)


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
    with tiledbsoma.DataFrame.create(uri, schema=schema, index_column_names=["soma_joinid"], domain=[[0, nvar + 9]]) as df:
        df.write(tbl)


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
    with tiledbsoma.DataFrame.create(
        uri,
        schema=schema,
        index_column_names=["name", "score", "k", "when", "soma_joinid"],
        domain=[None, (-1.5, 1000.25), (-5, 50), (1_500_000_000_000, 1_700_000_000_000), (0, 99)],
    ) as df:
        df.write(tbl)


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
    with tiledbsoma.DataFrame.create(
        uri, schema=schema, index_column_names=["f32", "u8", "soma_joinid"], domain=[(-2.5, 3.75), (1, 200), (0, 19)]
    ) as df:
        df.write(tbl)


def build_small_df(uri, rows):
    schema = pa.schema([pa.field("soma_joinid", pa.int64(), nullable=False), pa.field("texte", pa.large_string())])
    tbl = pa.Table.from_pydict(
        {"soma_joinid": np.arange(len(rows), dtype=np.int64), "texte": pa.array(rows, pa.large_string())}, schema=schema
    )
    with tiledbsoma.DataFrame.create(uri, schema=schema, domain=[[0, len(rows) - 1]]) as df:
        df.write(tbl)


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
    with tiledbsoma.PointCloudDataFrame.create(
        pts_uri, schema=schema, coordinate_space=pts_space, domain=[(0.0, 100.0), (-50.0, 50.0), (0, n - 1)]
    ) as pts:
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
    for store in ("hand", "scene", "pbmc"):
        verify(os.path.join(outdir, store))
    # Lets tests/python/conftest.py rebuild fixtures made by an older version of this script.
    with open(__file__, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(outdir, ".fixtures-stamp"), "w") as f:
        f.write(digest + "\n")
    print(f"fixtures written to {outdir}")


if __name__ == "__main__":
    main(sys.argv)
