"""soma-mount's scale benchmark (`scripts/bench --scale`): ten times the largest test store.

Writes once, with tiledbsoma and in bounded memory (X appended in pieces, a fragment each),
an experiment of SCALE_OBS cells with several categorical obs columns, SCALE_VAR genes and
SCALE_PER_CELL nonzeros a cell in X (256 million), and keeps it between runs
(bench-data-scale/). Then, each on a fresh mount with an empty cache against tiledbsoma in a
fresh interpreter, it reports the time and the peak resident memory (VmHWM) of each side:

- `ls -R` of the mount against tiledbsoma opening every object of the experiment;
- `cat X/data/data.csv` against `read()` then `pyarrow.csv.write_csv`;
- `ls -l X/data/slices/parquet/` (the size of every chunk; no Python counterpart);
- `cp anndata/RNA.h5ad` against `tiledbsoma.io.to_anndata` then `write_h5ad`;
- a `where/` query's h5ad (a tenth of the cells) against its `axis_query(...).to_anndata`
  then `write_h5ad`;
- `read_lazy` of `anndata/RNA.zarr` and 100 rows to memory against tiledbsoma's axis query
  of those rows `.to_anndata`.

A Python side that fails (out of memory, killed) is reported as not finishing. It is not
part of CI: it takes tens of minutes and several GB of disk.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import tiledbsoma

import bench_tasks
from bench_common import REPO, cat, fresh_mount, run_fresh, timed
from bench_tasks import py_h5ad, py_walk, py_x_csv

SCALE_OBS, SCALE_VAR, SCALE_PER_CELL = 1_000_000, 4_000, 256
SCALE_VERSION = "1"  # bump to rebuild
CELLS_PER_PIECE = 50_000  # X is appended in pieces of this many cells (rows): 20 fragments
QUERY = bench_tasks.QUERY  # about a tenth of the cells
LAZY_ROWS = (500_000, 500_100)
CATEGORIES = {
    "cell_type": ["B", "T", "NK", "Mono", "DC", "Plasma", "pDC", "Platelet"],
    "tissue": ["blood", "lung", "liver", "kidney", "spleen"],
    "donor": [f"donor_{i:02d}" for i in range(40)],
    "assay": ["10x 3' v2", "10x 3' v3", "10x 5' v1"],
}


def build_scale(root: Path) -> Path:
    """The scale experiment under `root`, written once (a stamp marks it whole)."""
    uri = root / "experiment"
    stamp = root / f".built-{SCALE_VERSION}"
    if stamp.exists():
        return uri
    shutil.rmtree(uri, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    nnz = SCALE_OBS * SCALE_PER_CELL
    print(f"building {uri}: {SCALE_OBS} cells x {SCALE_VAR} genes, {nnz} nonzeros ...", flush=True)
    rng = np.random.default_rng(1)
    columns = {
        "soma_joinid": pa.array(np.arange(SCALE_OBS, dtype=np.int64)),
        "obs_id": pa.array([f"cell_{i:07d}" for i in range(SCALE_OBS)], pa.large_string()),
    }
    for name, labels in CATEGORIES.items():
        columns[name] = pa.DictionaryArray.from_arrays(
            pa.array(rng.integers(0, len(labels), SCALE_OBS).astype(np.int8)),
            pa.array(labels, pa.large_string()),
        )
    columns["n_genes"] = pa.array(rng.integers(200, 5000, SCALE_OBS), pa.int64())
    columns["percent_mito"] = pa.array(rng.random(SCALE_OBS).astype(np.float32))
    obs = pa.table(columns)
    var = pa.table(
        {
            "soma_joinid": pa.array(np.arange(SCALE_VAR, dtype=np.int64)),
            "var_id": pa.array([f"gene_{i:05d}" for i in range(SCALE_VAR)], pa.large_string()),
        }
    )
    # Every object first, then the writes (as bench_common.build: an enumeration written in the
    # millisecond of its schema loses its labels in tiledbsoma 2.3.0).
    with tiledbsoma.Experiment.create(str(uri)) as exp:
        exp.add_new_dataframe("obs", schema=obs.schema, domain=[(0, SCALE_OBS - 1)])
        ms = exp.add_new_collection("ms", tiledbsoma.Collection)
        rna = ms.add_new_collection("RNA", tiledbsoma.Measurement)
        rna.add_new_dataframe("var", schema=var.schema, domain=[(0, SCALE_VAR - 1)])
        rna.add_new_collection("X").add_new_sparse_ndarray(
            "data", type=pa.float32(), shape=(SCALE_OBS, SCALE_VAR)
        )
    time.sleep(0.01)
    with tiledbsoma.open(str(uri / "obs"), "w") as df:
        df.write(obs)
    with tiledbsoma.open(str(uri / "ms" / "RNA" / "var"), "w") as df:
        df.write(var)
    step = SCALE_VAR // SCALE_PER_CELL
    for start in range(0, SCALE_OBS, CELLS_PER_PIECE):
        # One open a piece: each piece's memory is freed before the next.
        rows = np.repeat(np.arange(start, start + CELLS_PER_PIECE, dtype=np.int64), SCALE_PER_CELL)
        offsets = rng.integers(0, step, CELLS_PER_PIECE)
        cols = offsets[:, None] + np.arange(SCALE_PER_CELL, dtype=np.int64)[None, :] * step
        values = np.floor(rng.random(rows.size, dtype=np.float32) * 20) + 1
        with tiledbsoma.open(str(uri / "ms" / "RNA" / "X" / "data"), "w") as data:
            data.write(pa.table({"soma_dim_0": rows, "soma_dim_1": cols.ravel(), "soma_data": values}))
        print(f"  X: {start + CELLS_PER_PIECE} of {SCALE_OBS} cells", flush=True)
    stamp.touch()
    return uri


# The mount's side of the tasks (their Python side: functions of bench_tasks.py, each run in a
# fresh interpreter).


def lazy_rows(store: Path) -> None:
    import anndata

    rows = anndata.experimental.read_lazy(store)[LAZY_ROWS[0] : LAZY_ROWS[1]].to_memory()
    assert rows.n_obs == LAZY_ROWS[1] - LAZY_ROWS[0] and rows.X.nnz > 0


def ls_r(root: Path) -> int:
    return sum(len(files) + len(dirs) for _, dirs, files in os.walk(root))


def ls_l(directory: Path) -> int:
    return len(subprocess.run(["ls", "-l", str(directory)], capture_output=True, check=True).stdout)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="soma-mount's scale benchmark")
    parser.add_argument(
        "--data", default=str(REPO / "bench-data-scale"), help="where to build the store"
    )
    args = parser.parse_args(argv)
    uri = build_scale(Path(args.data))
    x_uri = str(uri / "ms" / "RNA" / "X" / "data")
    scratch = Path(tempfile.mkdtemp(prefix="soma-bench-scale-"))
    x = Path("ms/RNA/X/data")
    # (what, the mount's task on its directory, the Python side: function and arguments)
    tasks = [
        ("ls -R", lambda d: ls_r(d), (py_walk, (uri,))),
        ("cat X csv", lambda d: cat(d / x / "data.csv"), (py_x_csv, (x_uri, scratch / "x.csv"))),
        ("ls -l slices/parquet", lambda d: ls_l(d / x / "slices" / "parquet"), None),
        ("cp RNA.h5ad", lambda d: cat(d / "anndata" / "RNA.h5ad"), (py_h5ad, (uri, scratch / "x.h5ad"))),
        (
            "query h5ad",
            lambda d: cat(d / "where" / QUERY / "anndata" / "RNA.h5ad"),
            (bench_tasks.query_h5ad, (uri, scratch / "q.h5ad")),
        ),
        ("lazy 100 rows", lambda d: lazy_rows(d / "anndata" / "RNA.zarr"), (bench_tasks.query_rows, (uri, *LAZY_ROWS))),
    ]
    results = []
    try:
        for name, task, ref in tasks:
            with fresh_mount(uri) as m:
                t_mount = timed(lambda: task(Path(m)))
                peak_mount = m.peak_rss_mb()
            t_ref, peak_ref = run_fresh(*ref) if ref else (None, None)
            for f in scratch.iterdir():
                f.unlink()
            results.append((name, t_mount, peak_mount, t_ref, peak_ref))
            print(f"  {name}: done", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    cells = SCALE_OBS * SCALE_PER_CELL
    print(f"\nscale store: {SCALE_OBS:,} cells x {SCALE_VAR:,} genes, {cells:,} X cells")
    print(f"{'what':<22} {'soma-mount':>11} {'peak':>9} {'python':>11} {'peak':>9} {'ratio':>7}")
    for name, t_mount, peak_mount, t_ref, peak_ref in results:
        if ref_missing := peak_ref is None:
            python, ratio = "-", ""
        elif t_ref is None:
            python, ratio = "did not finish", ""
        else:
            python, ratio = f"{t_ref:.2f}s", f"{t_ref / t_mount:.2f}x"
        python_peak = "" if ref_missing or math.isnan(peak_ref) else f"{peak_ref:.0f} MiB"
        print(
            f"{name:<22} {t_mount:>10.2f}s {peak_mount:>5.0f} MiB {python:>11} {python_peak:>9} {ratio:>7}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
