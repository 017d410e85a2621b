"""soma-mount against tiledbsoma over an object store with latency: `scripts/bench --latency`.

A local S3 server (moto, tests/python/harness/moto_server.py) holds two stores:
- pbmc, the test fixture: one fragment per array, an experiment five levels deep;
- appended, the benchmark's experiment (bench-data/experiment, built by scripts/bench_common.py):
  X is 100,000 x 20,000 with 25 million cells written in 10 fragments, as a store grown by
  appends is.

A proxy on 127.0.0.1 in front of the server (tests/python/harness/latency_proxy.py) holds each request N
ms, and counts requests and rounds (the longest chain of requests each sent after the one
before it was answered). At each N (0, 20 and 50 ms by default) every task runs on both
sides, each on a fresh mount with an empty cache and in a fresh Python interpreter with
tiledbsoma already imported, the sides taking turns, best of `--tries`:

| task | soma-mount | Python |
|---|---|---|
| ls -R | `ls -R` of the mount | open every member, read its metadata |
| obs csv | `cat obs/data.csv` | `obs.read()` + pyarrow CSV |
| var parquet | `cat ms/RNA/var/data.parquet` | `var.read()` + pyarrow Parquet |
| head X | `head -n 5 ms/RNA/X/data/data.csv` | `X.read(coords=(0,))` |
| X slice | `cat ms/RNA/X/data/slices/csv/<first>.csv` | `X.read(coords=(slice,))` + pyarrow CSV |
| query X | `cat where/<q>/ms/RNA/X/data/data.csv` | `axis_query(value_filter=q).X("data")` + pyarrow CSV |
| query h5ad | `cat where/<q>/anndata/RNA.h5ad` | `axis_query(value_filter=q).to_anndata()` + `write_h5ad` |
| X csv | `cat ms/RNA/X/data/data.csv` | `X.read()` + pyarrow CSV |
| X parquet | `cat ms/RNA/X/data/data.parquet` | `X.read()` + pyarrow Parquet |
| h5ad | `cat anndata/RNA.h5ad` | `axis_query("RNA").to_anndata()` + `write_h5ad` (no obsm) |
| ls -l slices | `ls -l ms/RNA/X/data/slices/parquet/` (a Spark driver's listing) | `X.nnz` |

(`ls -R` and the queries run on pbmc, `<q>` being `QUERY`, a sixth of its cells; the four
whole-array tasks on appended.) Beside each time: the requests, the bytes of the answers,
and the rounds; `ls -l slices` also says how many GETs read a tile (any file of a fragment
but its metadata).

A mount's time counts its start: from the daemon's launch (the root opened before it
mounts) to the command's end; its requests and rounds are counted from its launch to its
unmount, so what it opens ahead of the command is counted too. A Python side opens the
store's root, then the member the mount's path reaches (bench_tasks.latency_task); its
time, requests and rounds are the task's, after the import.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench_common import REPO, build, fresh_mount
from harness.latency_proxy import LatencyProxy
from harness.moto_server import S3Server, config_args

BENCH_TASKS = Path(__file__).resolve().parent / "bench_tasks.py"
BUCKET = "bench"
TASK_TIMEOUT = 300.0
QUERY = "louvain in ['1', '2']"


def mount_side(proxy: LatencyProxy, uri: str, cfg: dict, command: list[str]) -> tuple[float, int, int, int, int]:
    """(seconds, requests, rounds, bytes, tile reads) of a fresh mount and `command` (a list
    with "{mnt}" in it) on it, from the daemon's launch to the command's end."""
    proxy.reset()
    t = time.perf_counter()
    with fresh_mount(uri, *config_args(cfg)) as m:
        argv = [a.replace("{mnt}", str(m)) for a in command]
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True, timeout=TASK_TIMEOUT)
        secs = time.perf_counter() - t
    return secs, proxy.count(), proxy.rounds(), proxy.bytes_answered(), proxy.tile_reads()


def python_side(
    proxy: LatencyProxy, cfg: dict, task: str, uri: str, path: list, arg=None
) -> tuple[float, int, int, int, int]:
    """(seconds, requests, rounds, bytes, tile reads) of the task in a fresh interpreter, tiledbsoma imported: the
    store at `uri` opened, then its member at `path` (keys), as the mount reaches it."""
    import json

    child = subprocess.Popen(
        [sys.executable, str(BENCH_TASKS), "latency", json.dumps([cfg, task, uri, path, arg])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the Python side of {task} did not start")
        proxy.reset()
        child.stdin.write("go\n")
        child.stdin.flush()
        line = child.stdout.readline()
        counts = proxy.count(), proxy.rounds(), proxy.bytes_answered(), proxy.tile_reads()
        child.wait(TASK_TIMEOUT)
        if child.returncode != 0 or not line.strip():
            raise RuntimeError(f"the Python side of {task} failed")
        return (float(line), *counts)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def first_slice(proxy_cfg: dict, uri: str, x: str) -> tuple[str, tuple[int, int]]:
    """The first chunk listed in `<x>/slices/csv/` of the store at `uri`, and the rows it
    holds (its name's first and last)."""
    with fresh_mount(uri, *config_args(proxy_cfg)) as m:
        names = os.listdir(Path(m) / x / "slices" / "csv")
    name = min(names, key=lambda p: int(p.split("-")[0]))
    lo, hi = name.removesuffix(".csv").split("-")
    return name, (int(lo), int(hi))


X = "ms/RNA/X/data"
X_KEYS = ["ms", "RNA", "X", "data"]


def tasks_of(store: str, uri: str, slice_name: str, rows: tuple[int, int]) -> list[tuple]:
    """(task, uri, command, Python's path of keys, Python's argument) of a store's tasks."""
    out = []
    if store == "pbmc":
        out.append(("ls -R", uri, ["ls", "-R", "{mnt}"], [], None))
    out += [
        ("obs csv", uri, ["cat", "{mnt}/obs/data.csv"], ["obs"], None),
        ("var parquet", uri, ["cat", "{mnt}/ms/RNA/var/data.parquet"], ["ms", "RNA", "var"], None),
        ("head X", uri, ["head", "-n", "5", f"{{mnt}}/{X}/data.csv"], X_KEYS, None),
        ("X slice", uri, ["cat", f"{{mnt}}/{X}/slices/csv/{slice_name}"], X_KEYS, list(rows)),
    ]
    if store == "pbmc":
        out += [
            ("query X", uri, ["cat", f"{{mnt}}/where/{QUERY}/{X}/data.csv"], [], QUERY),
            ("query h5ad", uri, ["cat", f"{{mnt}}/where/{QUERY}/anndata/RNA.h5ad"], [], QUERY),
        ]
    else:
        out += [
            ("X csv", uri, ["cat", f"{{mnt}}/{X}/data.csv"], X_KEYS, None),
            ("X parquet", uri, ["cat", f"{{mnt}}/{X}/data.parquet"], X_KEYS, None),
            ("h5ad", uri, ["cat", "{mnt}/anndata/RNA.h5ad"], [], None),
            ("ls -l slices", uri, ["ls", "-l", f"{{mnt}}/{X}/slices/parquet/"], X_KEYS, None),
        ]
    return out


def run(delays: list[float], tries: int, fixtures: Path, appended: Path, only: set[str] | None) -> int:
    rows = []
    with S3Server() as server:
        server.create_bucket(BUCKET)
        server.upload_tree(fixtures / "pbmc", BUCKET, "pbmc")
        server.upload_tree(appended, BUCKET, "appended")
        with LatencyProxy(server.port) as proxy:
            cfg = server.tiledb_config(vfs__s3__endpoint_override=proxy.endpoint)
            tasks = []
            for store in ("pbmc", "appended"):
                uri = f"s3://{BUCKET}/{store}"
                slice_name, rows_range = first_slice(cfg, uri, X)
                tasks += [(store, *t) for t in tasks_of(store, uri, slice_name, rows_range)]
            for delay in delays:
                proxy.set_delay(delay)
                for store, name, uri, command, path, arg in tasks:
                    if only and name not in only:
                        continue
                    best_m = best_p = (float("inf"), 0, 0, 0, 0)
                    for _ in range(tries):
                        best_m = min(best_m, mount_side(proxy, uri, cfg, command))
                        best_p = min(best_p, python_side(proxy, cfg, name, uri, path, arg))
                    rows.append((delay, store, name, best_m, best_p))
                    print(f"  {delay:g} ms {store} {name}: {best_m[0]:.2f}s/{best_m[1]}/{best_m[2]} "
                          f"vs {best_p[0]:.2f}s/{best_p[1]}/{best_p[2]}", file=sys.stderr, flush=True)
    print()
    print(f"times best of {tries}, with the mount's start; requests, rounds, MB answered and tile")
    print("GETs of the best try, mount/python")
    print(f"{'delay':>5} {'store':<8} {'task':<12} {'mount':>7} {'python':>7} {'speed-up':>8} "
          f"{'requests':>9} {'rounds':>7} {'MB':>13} {'tile GETs':>9}")
    for delay, store, name, (tm, rm, km, bm, gm), (tp, rp, kp, bp, gp) in rows:
        mb = f"{bm / 1e6:.1f}/{bp / 1e6:.1f}"
        print(f"{delay:>3g}ms {store:<8} {name:<12} {tm:>6.2f}s {tp:>6.2f}s {tp / tm:>7.2f}x "
              f"{rm:>4}/{rp:<4} {km:>3}/{kp:<3} {mb:>13} {gm:>4}/{gp:<4}")
    return 0


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delays", default="0,20,50", help="ms per request, comma-separated")
    parser.add_argument("--tries", type=int, default=3)
    parser.add_argument("--fixtures", default=os.environ.get("SOMA_FIXTURES") or str(REPO / "fixtures"))
    parser.add_argument("--data", default=str(REPO / "bench-data"), help="where the benchmark's experiment is built")
    parser.add_argument("--only", default="", help="these tasks alone, comma-separated")
    args = parser.parse_args(argv)
    # A SIGTERM unwinds like an interrupt: the mounts are unmounted, the S3 server stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    fixtures = Path(args.fixtures)
    if not (fixtures / "pbmc").exists():
        subprocess.run([sys.executable, str(REPO / "scripts" / "make-fixtures.py"), str(fixtures)], check=True)
    appended = build(Path(args.data))
    only = {t.strip() for t in args.only.split(",") if t.strip()} or None
    return run([float(d) for d in args.delays.split(",")], args.tries, fixtures, appended, only)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
