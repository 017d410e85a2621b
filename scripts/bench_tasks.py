"""The Python side of the benchmarks: what a user would run with tiledbsoma to get what the
mount serves, one function a task. Each is timed in a fresh interpreter, started as

    python scripts/bench_tasks.py run FUNCTION ARG...      (prints its seconds and peak MiB)
    python scripts/bench_tasks.py latency JSON             (says "ready", waits for a line,
                                                            runs the task, prints its seconds)

`run_fresh` (scripts/bench_common.py) starts the first; scripts/bench_latency.py the second.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import tiledbsoma

QUERY = "n_genes < 680"  # about a tenth of the cells: n_genes is uniform in [200, 5000)
# The rows read lazily: 100 cells in the middle of X.
LAZY_ROWS = (50_000, 50_100)


def read_table(uri: str) -> pa.Table:
    with tiledbsoma.open(uri) as obj:
        result = obj.read()
        return result.tables().concat() if hasattr(result, "tables") else result.concat()


def python_csv(uri: str, out: Path) -> None:
    pacsv.write_csv(read_table(uri), str(out))


def python_parquet(uri: str, out: Path) -> None:
    pq.write_table(read_table(uri), str(out))


def query_x_csv(uri: str, out: Path) -> None:
    """The query's X as CSV through tiledbsoma, as a user would write it."""
    with tiledbsoma.Experiment.open(uri) as exp:
        obs_query = tiledbsoma.AxisQuery(value_filter=QUERY)
        with exp.axis_query("RNA", obs_query=obs_query) as query:
            table = query.X("data").tables().concat()
    pacsv.write_csv(table, out)


def query_h5ad(uri: str, out: Path) -> None:
    """The query's AnnData through tiledbsoma, written as h5ad."""
    with tiledbsoma.Experiment.open(uri) as exp:
        obs_query = tiledbsoma.AxisQuery(value_filter=QUERY)
        with exp.axis_query("RNA", obs_query=obs_query) as query:
            query.to_anndata(X_name="data").write_h5ad(out)


def query_h5ad_same_content(uri: str, out: Path) -> None:
    """The query's AnnData as the mount's h5ad holds it: with obsm, which the query's
    `to_anndata` cannot read dense (it refuses a DenseNDArray), so its rows are read as a
    user would, the dense array's span of the query's cells read whole and theirs taken
    (cells past its rows are 0, as in the mount's file)."""
    with tiledbsoma.Experiment.open(uri) as exp:
        obs_query = tiledbsoma.AxisQuery(value_filter=QUERY)
        with exp.axis_query("RNA", obs_query=obs_query) as query:
            adata = query.to_anndata(X_name="data")
            ids = query.obs_joinids().to_numpy()
        for name, dense in exp.ms["RNA"].obsm.items():
            rows, width = dense.shape
            inside = ids[ids < rows]
            matrix = np.zeros((len(ids), width), dtype=dense.schema.field("soma_data").type.to_pandas_dtype())
            if len(inside):
                span = dense.read((slice(int(inside.min()), int(inside.max())), slice(None))).to_numpy()
                matrix[ids < rows] = span[inside - inside.min()]
            adata.obsm[name] = matrix
    adata.write_h5ad(out)


def python_10x_h5(uri: str, out: Path) -> None:
    """The layer as Cell Ranger's HDF5 matrix, as a user would write it: tiledbsoma's X to a
    scipy matrix (cells by join id, genes by join id), then the v3 layout with h5py
    (barcodes from obs_id, features from var_id)."""
    import h5py
    import scipy.sparse

    with tiledbsoma.Experiment.open(uri) as exp:
        obs = exp.obs.read(column_names=["soma_joinid", "obs_id"]).concat().sort_by("soma_joinid")
        var = exp.ms["RNA"].var.read(column_names=["soma_joinid", "var_id"]).concat().sort_by("soma_joinid")
        x = exp.ms["RNA"].X["data"].read().tables().concat()
    cells, genes = obs["soma_joinid"].to_numpy(), var["soma_joinid"].to_numpy()
    rows = np.searchsorted(cells, x["soma_dim_0"].to_numpy())
    cols = np.searchsorted(genes, x["soma_dim_1"].to_numpy())
    matrix = scipy.sparse.csr_matrix((x["soma_data"].to_numpy(), (rows, cols)), shape=(len(cells), len(genes)))
    del x, rows, cols
    ids = np.array(var["var_id"].to_pylist(), dtype="S")
    with h5py.File(out, "w") as f:
        m = f.create_group("matrix")
        m["barcodes"] = np.array(obs["obs_id"].to_pylist(), dtype="S")
        m["data"] = matrix.data
        m["indices"] = matrix.indices.astype(np.int64)
        m["indptr"] = matrix.indptr.astype(np.int64)
        m["shape"] = np.array([len(genes), len(cells)], dtype=np.int32)
        features = m.create_group("features")
        features["id"] = ids
        features["name"] = ids
        features["feature_type"] = np.full(len(ids), b"Gene Expression", dtype="S15")
        features["genome"] = np.full(len(ids), b"", dtype="S1")
        features["_all_tag_keys"] = np.array([b"genome"])


def query_rows(uri: str, first: int | str = LAZY_ROWS[0], end: int | str = LAZY_ROWS[1]) -> None:
    """The rows `first` to `end` (LAZY_ROWS) through tiledbsoma's axis query, as an AnnData
    (the bounds may come as text, from `python_run`)."""
    first, end = int(first), int(end)
    coords = (slice(first, end - 1),)
    with tiledbsoma.Experiment.open(uri) as exp:
        with exp.axis_query("RNA", obs_query=tiledbsoma.AxisQuery(coords=coords)) as query:
            rows = query.to_anndata(X_name="data")
    assert rows.n_obs == end - first and rows.X.nnz > 0


def py_walk(uri: str) -> None:
    """Opens every object of the experiment, as a walk of its tree with tiledbsoma."""

    def walk(obj) -> int:
        n = 1
        if isinstance(obj, tiledbsoma.Collection):
            for key in obj:
                n += walk(obj[key])
        return n

    with tiledbsoma.open(uri) as root:
        walk(root)


def py_x_csv(uri: str, out: str) -> None:
    python_csv(uri, Path(out))


def py_h5ad(uri: str, out: str) -> None:
    import tiledbsoma.io

    with tiledbsoma.Experiment.open(uri) as exp:
        tiledbsoma.io.to_anndata(exp, measurement_name="RNA", X_layer_name="data").write_h5ad(out)


def _walk_metadata(obj) -> int:
    """Reads the metadata of `obj` and of every member below it; the number of entries."""
    n = len(dict(obj.metadata))
    if obj.soma_type in ("SOMACollection", "SOMAExperiment", "SOMAMeasurement", "SOMAScene"):
        for key in obj:
            with obj[key] as member:
                n += _walk_metadata(member)
    return n


def latency_task(cfg: dict, task: str, uri: str, path: list, arg) -> None:
    """One task of the latency benchmark (scripts/bench_latency.py): the store at `uri`
    opened with the libtiledb configuration `cfg`, then its member at `path` (keys), as
    the mount reaches it, and what a user would run for the task."""
    ctx = tiledbsoma.SOMATileDBContext(tiledb_config=cfg)
    with tiledbsoma.open(uri, context=ctx) as root:
        if task == "ls -R":
            _walk_metadata(root)
            return
        if task == "h5ad":
            # The whole measurement as a query of every cell: `to_anndata` of the experiment
            # refuses the bench's obsm, which holds the first half of the cells.
            out = tempfile.mkdtemp()
            with root.axis_query("RNA") as q:
                q.to_anndata(X_name="data").write_h5ad(os.path.join(out, "whole.h5ad"))
            return
        a = root
        for key in path:
            a = a[key]
        if task == "obs csv":
            pacsv.write_csv(a.read().concat(), io.BytesIO())
        elif task == "var parquet":
            pq.write_table(a.read().concat(), io.BytesIO())
        elif task == "head X":
            a.read(coords=(0,)).tables().concat()
        elif task in ("query X", "query h5ad"):
            obs_query = tiledbsoma.AxisQuery(value_filter=arg)
            with a.axis_query("RNA", obs_query=obs_query) as q:
                if task == "query X":
                    pacsv.write_csv(q.X("data").tables().concat(), io.BytesIO())
                else:
                    out = tempfile.mkdtemp()
                    q.to_anndata(X_name="data").write_h5ad(os.path.join(out, "q.h5ad"))
        elif task == "X csv":
            pacsv.write_csv(a.read().tables().concat(), io.BytesIO())
        elif task == "X parquet":
            pq.write_table(a.read().tables().concat(), io.BytesIO())
        elif task == "ls -l slices":
            _ = a.nnz
        elif task == "X slice":
            t = a.read(coords=(slice(arg[0], arg[1]),)).tables().concat()
            pacsv.write_csv(t, io.BytesIO())
        else:
            raise SystemExit("unknown task " + task)


def peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM), in MiB. A process reports its own: the
    rusage of a child counts the memory of the process it was started from (the high-water
    mark survives into exec)."""
    with open("/proc/self/status") as f:
        hwm = next(line for line in f if line.startswith("VmHWM:"))
    return int(hwm.split()[1]) / 1024


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "run":
        fn = globals()[argv[1]]
        t = time.perf_counter()
        fn(*argv[2:])
        print(time.perf_counter() - t, peak_rss_mib())
        return 0
    if len(argv) == 2 and argv[0] == "latency":
        cfg, task, uri, path, arg = json.loads(argv[1])
        if task == "h5ad":
            importlib.import_module("anndata")  # imported before the timing starts
        print("ready", flush=True)
        sys.stdin.readline()
        t = time.perf_counter()
        latency_task(cfg, task, uri, path, arg)
        print(time.perf_counter() - t, flush=True)
        return 0
    sys.exit("usage: bench_tasks.py run FUNCTION ARG... | bench_tasks.py latency JSON")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
