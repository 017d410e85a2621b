"""What the benchmarks share: the benchmark's experiment and wide obs (bench-data/, built
once with tiledbsoma), scanpy's pbmc demo store, a fresh mount with an empty cache
(`fresh_mount`, through the tests' harness), timing and whole reads, and the Python side of
a task run in a fresh interpreter (`run_fresh`, a function of scripts/bench_tasks.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import tiledbsoma

from harness.mount import mount_guard
from harness.settings import REPO

BENCH_TASKS = Path(__file__).resolve().parent / "bench_tasks.py"
N_OBS, N_VAR, NNZ = 100_000, 20_000, 25_000_000
VERSION = "5"  # bump to rebuild the data set
DENSE_SHAPE = (50_000, 1_000)  # obsm/dense: 200 MB of float32 for the .npy window read


WIDE_ROWS = 1_000_000


WIDE_VERSION = "1"  # bump to rebuild the wide obs


def var_table() -> pa.Table:
    """The experiment's var: N_VAR genes, a join id and a name each."""
    return pa.table(
        {
            "soma_joinid": pa.array(np.arange(N_VAR, dtype=np.int64)),
            "var_id": pa.array([f"gene_{i:05d}" for i in range(N_VAR)], pa.large_string()),
        }
    )


def build_wide(root: Path) -> Path:
    """A collection with a wide obs (ids, ten categorical columns, floats, integers, a
    flag, a nullable free-text column) and a small var to warm a mount with."""
    uri = root / "wide"
    stamp = root / f".built-wide-{WIDE_VERSION}"
    if stamp.exists():
        return uri
    shutil.rmtree(uri, ignore_errors=True)
    print(f"building {uri}: an obs of {WIDE_ROWS} rows x 28 columns ...", flush=True)
    rng = np.random.default_rng(1)
    n = WIDE_ROWS
    columns = {
        "soma_joinid": pa.array(np.arange(n, dtype=np.int64)),
        "obs_id": pa.array([f"AAACCTGAGAAACCAT-{i}" for i in range(n)], pa.large_string()),
    }
    for k in range(10):
        labels = pa.array([f"type_{k}_{j}" for j in range(5 + 40 * k)], pa.large_string())
        codes = rng.integers(0, len(labels), n).astype(np.int16)
        columns[f"cat{k}"] = pa.DictionaryArray.from_arrays(pa.array(codes), labels)
    for k in range(8):
        columns[f"f{k}"] = pa.array(rng.standard_normal(n).astype(np.float32 if k % 2 else np.float64))
    for k in range(6):
        columns[f"i{k}"] = pa.array(rng.integers(0, 10**k * 100, n))
    columns["flag"] = pa.array(rng.random(n) < 0.5)
    columns["note"] = pa.array(
        [None if i % 7 == 0 else f'note, "{i}"' for i in range(n)], pa.large_string()
    )
    obs = pa.table(columns)
    var = var_table()
    with tiledbsoma.Collection.create(str(uri)) as coll:
        coll.add_new_dataframe("obs", schema=obs.schema, domain=[(0, n - 1)])
        coll.add_new_dataframe("var", schema=var.schema, domain=[(0, N_VAR - 1)])
    time.sleep(0.01)  # see build()
    with tiledbsoma.open(str(uri / "obs"), "w") as df:
        df.write(obs)
    with tiledbsoma.open(str(uri / "var"), "w") as df:
        df.write(var)
    stamp.touch()
    return uri


def build(root: Path) -> Path:
    uri = root / "experiment"
    stamp = root / f".built-{VERSION}"
    if stamp.exists():
        return uri
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    print(f"building {uri}: {N_OBS} cells x {N_VAR} genes, {NNZ} nonzeros ...", flush=True)
    rng = np.random.default_rng(0)
    cell_types = ["B", "T", "NK", "Mono", "DC", "Plasma"]
    obs = pa.table(
        {
            "soma_joinid": pa.array(np.arange(N_OBS, dtype=np.int64)),
            "obs_id": pa.array([f"cell_{i:06d}" for i in range(N_OBS)], pa.large_string()),
            "cell_type": pa.DictionaryArray.from_arrays(
                pa.array(rng.integers(0, len(cell_types), N_OBS).astype(np.int8)),
                pa.array(cell_types, pa.large_string()),
            ),
            "n_genes": pa.array(rng.integers(200, 5000, N_OBS), pa.int64()),
            "percent_mito": pa.array(rng.random(N_OBS).astype(np.float32)),
        }
    )
    var = var_table()
    # Create every object first and write afterwards: tiledbsoma 2.3.0 loses the labels an
    # enumeration gets from a write made in the same millisecond as its schema.
    with tiledbsoma.Experiment.create(str(uri)) as exp:
        exp.add_new_dataframe("obs", schema=obs.schema, domain=[(0, N_OBS - 1)])
        ms = exp.add_new_collection("ms", tiledbsoma.Collection)
        rna = ms.add_new_collection("RNA", tiledbsoma.Measurement)
        rna.add_new_dataframe("var", schema=var.schema, domain=[(0, N_VAR - 1)])
        X = rna.add_new_collection("X")
        X.add_new_sparse_ndarray("data", type=pa.float32(), shape=(N_OBS, N_VAR))
        obsm = rna.add_new_collection("obsm")
        obsm.add_new_dense_ndarray("dense", type=pa.float32(), shape=DENSE_SHAPE)
    time.sleep(0.01)
    with tiledbsoma.open(str(uri / "obs"), "w") as df:
        df.write(obs)
    with tiledbsoma.open(str(uri / "ms" / "RNA" / "var"), "w") as df:
        df.write(var)
    with tiledbsoma.open(str(uri / "ms" / "RNA" / "X" / "data"), "w") as data:
        per_cell = NNZ // N_OBS
        chunk = 10_000
        for start in range(0, N_OBS, chunk):
            rows = np.repeat(np.arange(start, start + chunk, dtype=np.int64), per_cell)
            # distinct columns per row: a random offset, then every (N_VAR / per_cell)-th gene
            step = N_VAR // per_cell
            offsets = rng.integers(0, step, chunk)
            cols = offsets[:, None] + np.arange(per_cell, dtype=np.int64)[None, :] * step
            vals = rng.random(rows.size, dtype=np.float32) * 10
            data.write(
                pa.table(
                    {
                        "soma_dim_0": rows,
                        "soma_dim_1": cols.ravel(),
                        "soma_data": vals,
                    }
                )
            )
    with tiledbsoma.open(str(uri / "ms" / "RNA" / "obsm" / "dense"), "w") as dense:
        rows = DENSE_SHAPE[0] // 10
        for start in range(0, DENSE_SHAPE[0], rows):
            block = rng.random((rows, DENSE_SHAPE[1]), dtype=np.float32)
            dense.write((slice(start, start + rows - 1), slice(None)), pa.Tensor.from_numpy(block))
    stamp.touch()
    return uri


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def cat(path: Path) -> int:
    n = 0
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(1 << 20):
            n += len(chunk)
    return n


def cache_use(cache: Path) -> tuple[int, int]:
    """The bytes of the files in a cache directory, and the bytes they take on disk."""
    apparent = on_disk = 0
    for dirpath, _, files in os.walk(cache):
        for name in files:
            st = os.stat(os.path.join(dirpath, name))
            apparent, on_disk = apparent + st.st_size, on_disk + st.st_blocks * 512
    return apparent, on_disk


def run_fresh(fn, args) -> tuple[float | None, float]:
    """Runs `fn(*args)` (a function of scripts/bench_tasks.py; the arguments passed as text)
    in a fresh interpreter: its seconds (`None`: it failed, or ran out of memory) and its
    peak resident memory (MiB), tiledbsoma loaded."""
    if fn.__module__ != "bench_tasks":
        raise ValueError(f"{fn.__name__} is not a function of bench_tasks.py")
    proc = subprocess.run(
        [sys.executable, str(BENCH_TASKS), "run", fn.__name__, *(str(a) for a in args)],
        stdout=subprocess.PIPE,
        check=False,
    )
    words = proc.stdout.split()
    if proc.returncode == 0 and len(words) >= 2:
        return float(words[-2]), float(words[-1])
    # Failed (out of memory, killed): no time, and no peak it could tell.
    return None, float("nan")


def python_peak_mb(fn, args) -> float:
    """The peak resident memory (MB) of a fresh interpreter that runs `fn(*args)`: the
    Python side's memory for the task."""
    seconds, peak = run_fresh(fn, args)
    if seconds is None:
        raise RuntimeError(f"the Python side of {fn.__name__} failed")
    return peak


def demo_store() -> Path:
    """scanpy's pbmc68k_reduced through tiledbsoma, as scripts/demo writes it."""
    store = REPO / "demo" / "pbmc"
    if not store.exists():
        import scanpy
        import tiledbsoma.io

        store.parent.mkdir(exist_ok=True)
        tiledbsoma.io.from_anndata(str(store), scanpy.datasets.pbmc68k_reduced(), measurement_name="RNA")
    return store


def fresh_mount(uri, *args: str, timeout: float = 60.0):
    """`with fresh_mount(uri, *args) as m:` the daemon (SOMA_MOUNT_BIN, else the release
    build) mounts `uri` on a new directory with an empty cache (`m.cache_dir`), looked for
    every 2 ms so that a mount's start is timed closely; always unmounted. Its output is
    dropped."""
    return mount_guard(uri, *args, timeout=timeout, poll=0.002, log=os.devnull)
