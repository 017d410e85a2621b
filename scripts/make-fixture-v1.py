#!/usr/bin/env python3
"""Write the encoding-1.0.0 fixture store (soma_encoding_version "1") with an old tiledbsoma.

Usage: .venv-old/bin/python scripts/make-fixture-v1.py OUTDIR/v1

Run by scripts/make-fixtures.py with the interpreter of .venv-old (requirements-old.txt
pins tiledbsoma 1.14.5, the newest 1.x that still writes encoding "1"; 1.15.0 and later
write "1.1.0"). Its arrays have no current domain (shape = the core domain), as every
store of that encoding.

The store (a small SOMAExperiment):
  obs            DataFrame: soma_joinid, obs_id, n_genes (int32), percent_mito (float64),
                 cell_type (enumeration, int8 -> string), phase (nullable enumeration with
                 nulls), note (nullable string)
  ms/RNA/var     DataFrame: soma_joinid, gene_ids, gene_symbols, highly_variable (bool)
  ms/RNA/X/data  SparseNDArray float32, N_OBS x N_VAR, ~30% of the cells
  ms/RNA/X/counts SparseNDArray int32, the same cells, integer counts
  ms/RNA/obsm/X_pca  DenseNDArray float64, N_OBS x 4

Deterministic: fixed values and a seeded RNG; only libtiledb's timestamps and UUIDs in
file names differ between runs. Checks what it wrote: every object's
soma_encoding_version must be "1".
"""

import os
import sys
import warnings

import numpy as np
import pyarrow as pa

warnings.filterwarnings("ignore")

import tiledbsoma  # noqa: E402

SEED = 20240612
N_OBS, N_VAR = 24, 10
CELL_TYPES = ["B cell", "T cell", "NK cell", "monocyte"]
PHASES = ["G1", "S", "G2M"]


def build_obs(uri, rng):
    schema = pa.schema(
        [
            pa.field("soma_joinid", pa.int64(), nullable=False),
            pa.field("obs_id", pa.large_string(), nullable=False),
            pa.field("n_genes", pa.int32(), nullable=False),
            pa.field("percent_mito", pa.float64(), nullable=False),
            pa.field("cell_type", pa.dictionary(pa.int8(), pa.string()), nullable=False),
            pa.field("phase", pa.dictionary(pa.int8(), pa.string()), nullable=True),
            pa.field("note", pa.large_string(), nullable=True),
        ]
    )
    j = np.arange(N_OBS, dtype=np.int64)
    phase_idx = [None if i % 5 == 2 else int(i % 3) for i in range(N_OBS)]
    tbl = pa.Table.from_pydict(
        {
            "soma_joinid": pa.array(j),
            "obs_id": pa.array([f"AAACCTG-{i:03d}-1" for i in range(N_OBS)], pa.large_string()),
            "n_genes": pa.array(rng.integers(200, 2000, size=N_OBS).astype(np.int32)),
            "percent_mito": pa.array(np.round(rng.uniform(0, 0.2, size=N_OBS), 4)),
            "cell_type": pa.DictionaryArray.from_arrays(
                pa.array((j * 7 % len(CELL_TYPES)).astype(np.int8)), pa.array(CELL_TYPES, pa.string())
            ),
            "phase": pa.DictionaryArray.from_arrays(pa.array(phase_idx, pa.int8()), pa.array(PHASES, pa.string())),
            "note": pa.array([None if i % 4 == 1 else f"note, {i}" for i in range(N_OBS)], pa.large_string()),
        },
        schema=schema,
    )
    with tiledbsoma.DataFrame.create(uri, schema=schema, index_column_names=["soma_joinid"]) as df:
        df.write(tbl)


def build_var(uri):
    schema = pa.schema(
        [
            pa.field("soma_joinid", pa.int64(), nullable=False),
            pa.field("gene_ids", pa.large_string(), nullable=False),
            pa.field("gene_symbols", pa.large_string(), nullable=False),
            pa.field("highly_variable", pa.bool_(), nullable=False),
        ]
    )
    j = np.arange(N_VAR, dtype=np.int64)
    tbl = pa.Table.from_pydict(
        {
            "soma_joinid": pa.array(j),
            "gene_ids": pa.array([f"ENSG{1000 + 17 * i:011d}" for i in range(N_VAR)], pa.large_string()),
            "gene_symbols": pa.array([f"GENE{i}" for i in range(N_VAR)], pa.large_string()),
            "highly_variable": pa.array(j % 3 == 0),
        },
        schema=schema,
    )
    with tiledbsoma.DataFrame.create(uri, schema=schema, index_column_names=["soma_joinid"]) as df:
        df.write(tbl)


def x_cells(rng):
    """(rows, cols, counts) of about 30% of the N_OBS x N_VAR cells, row-major; every
    cell and every gene has at least one stored value."""
    mask = rng.random((N_OBS, N_VAR)) < 0.3
    mask[np.arange(N_OBS), np.arange(N_OBS) % N_VAR] = True
    rows, cols = np.nonzero(mask)
    counts = rng.integers(1, 50, size=len(rows)).astype(np.int32)
    return rows.astype(np.int64), cols.astype(np.int64), counts


def build_sparse(uri, arrow_type, rows, cols, values):
    with tiledbsoma.SparseNDArray.create(uri, type=arrow_type, shape=(N_OBS, N_VAR)) as a:
        a.write(
            pa.Table.from_pydict(
                {"soma_dim_0": pa.array(rows), "soma_dim_1": pa.array(cols), "soma_data": pa.array(values, arrow_type)}
            )
        )


def build_dense(uri, rng):
    vals = np.round(rng.normal(size=(N_OBS, 4)), 6)
    with tiledbsoma.DenseNDArray.create(uri, type=pa.float64(), shape=(N_OBS, 4)) as a:
        a.write((slice(None), slice(None)), pa.Tensor.from_numpy(vals))


def build(uri):
    rng = np.random.default_rng(SEED)
    with tiledbsoma.Experiment.create(uri) as exp:
        exp.metadata["description"] = f"encoding 1.0.0 store written by tiledbsoma {tiledbsoma.__version__}"
    build_obs(os.path.join(uri, "obs"), rng)
    with tiledbsoma.open(uri, "w") as exp:
        exp.set("obs", tiledbsoma.open(os.path.join(uri, "obs")), use_relative_uri=True)
        ms = exp.add_new_collection("ms")
        rna = ms.add_new_collection("RNA", tiledbsoma.Measurement)
        build_var(os.path.join(rna.uri, "var"))
        rna.set("var", tiledbsoma.open(os.path.join(rna.uri, "var")), use_relative_uri=True)
        X = rna.add_new_collection("X")
        rows, cols, counts = x_cells(rng)
        # float32 values: counts scaled, some with fractions (log-normalised-like).
        data = (np.log1p(counts.astype(np.float64)) * 1.25).astype(np.float32)
        build_sparse(os.path.join(X.uri, "data"), pa.float32(), rows, cols, data)
        X.set("data", tiledbsoma.open(os.path.join(X.uri, "data")), use_relative_uri=True)
        build_sparse(os.path.join(X.uri, "counts"), pa.int32(), rows, cols, counts)
        X.set("counts", tiledbsoma.open(os.path.join(X.uri, "counts")), use_relative_uri=True)
        obsm = rna.add_new_collection("obsm")
        build_dense(os.path.join(obsm.uri, "X_pca"), rng)
        obsm.set("X_pca", tiledbsoma.open(os.path.join(obsm.uri, "X_pca")), use_relative_uri=True)


def check_encoding(uri):
    """Every object must say soma_encoding_version "1"; returns how many were checked."""
    with tiledbsoma.open(uri) as obj:
        v = obj.metadata.get("soma_encoding_version")
        if isinstance(v, bytes):
            v = v.decode()
        if v != "1":
            raise SystemExit(f"{uri}: soma_encoding_version is {v!r}, expected '1'")
        n = 1
        if obj.soma_type in ("SOMAExperiment", "SOMAMeasurement", "SOMACollection"):
            for name in list(obj.keys()):
                n += check_encoding(obj[name].uri)
    return n


def main(argv):
    if len(argv) != 2:
        raise SystemExit(__doc__)
    uri = os.path.abspath(argv[1])
    if os.path.exists(uri):
        raise SystemExit(f"{uri} exists")
    build(uri)
    n = check_encoding(uri)
    print(f"v1 store written to {uri} by tiledbsoma {tiledbsoma.__version__} ({n} objects, encoding '1')")


if __name__ == "__main__":
    main(sys.argv)
