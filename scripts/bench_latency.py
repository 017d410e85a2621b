"""soma-mount against tiledbsoma over an object store with latency: `scripts/bench --latency`.

A local S3 server (moto, tests/python/s3server.py) holds the pbmc fixture and the `big`
fixture (a collection whose X is 200,000 x 2,000, 3.2 million cells); a proxy on 127.0.0.1 in front of it
(tests/python/s3proxy.py) holds each request N ms and counts them. At each N (0, 20 and 50
ms by default) five tasks run on both sides, each on a fresh mount with an empty cache and in
a fresh Python interpreter with tiledbsoma already imported, the sides taking turns, best of
`--tries`:

| task | soma-mount | Python |
|---|---|---|
| ls -R | `ls -R` of the pbmc mount | open every member of pbmc, read its metadata |
| obs csv | `cat obs/data.csv` | `obs.read()` + pyarrow CSV |
| var parquet | `cat ms/RNA/var/data.parquet` | `var.read()` + pyarrow Parquet |
| head X | `head -n 5 X/data.csv` of big | `X.read(coords=(0,))` |
| X slice | `cat X/slices/csv/<first>.csv` of big | `X.read(coords=(slice,))` + pyarrow CSV |
| query X | `cat where/<q>/ms/RNA/X/data/data.csv` of pbmc | `axis_query(value_filter=q).X("data")` + pyarrow CSV |
| query h5ad | `cat where/<q>/anndata/RNA.h5ad` of pbmc | `axis_query(value_filter=q).to_anndata()` + `write_h5ad` |

(`<q>` is `QUERY`, a sixth of pbmc's cells.)

A mount's time is the command's, the daemon already mounted (its root opened); its requests
are counted from the daemon's start to its unmount, so what it opens ahead of the command is
counted too. A Python side opens the same root, then the member the mount's path reaches
(`exp.obs`, `exp.ms["RNA"].var`, `big["X"]`); its time and requests are the task's, after
the import.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))

from s3proxy import LatencyProxy  # noqa: E402 -- the tests' helpers
from s3server import S3Server, config_args  # noqa: E402

BIN = Path(os.environ.get("SOMA_MOUNT_BIN") or REPO / "target" / "release" / "soma-mount")
BUCKET = "bench"
MOUNT_TIMEOUT = 60.0
TASK_TIMEOUT = 300.0
QUERY = "louvain in ['1', '2']"

# The Python side of each task: a fresh interpreter imports everything, says "ready", waits
# for a line on stdin, runs the task, and prints its seconds.
CHILD = r"""
import io, json, os, sys, tempfile, time
import pyarrow as pa, pyarrow.csv as pacsv, pyarrow.parquet as pq
import tiledbsoma
cfg, task, uri, path, arg = json.loads(sys.argv[1])
ctx = tiledbsoma.SOMATileDBContext(tiledb_config=cfg)

def walk(obj):
    n = len(dict(obj.metadata))
    if obj.soma_type in ("SOMACollection", "SOMAExperiment", "SOMAMeasurement", "SOMAScene"):
        for key in obj:
            with obj[key] as member:
                n += walk(member)
    return n

def run():
    with tiledbsoma.open(uri, context=ctx) as root:
        if task == "ls -R":
            walk(root)
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
        elif task == "X slice":
            t = a.read(coords=(slice(arg[0], arg[1]),)).tables().concat()
            pacsv.write_csv(t, io.BytesIO())
        else:
            raise SystemExit("unknown task " + task)

print("ready", flush=True)
sys.stdin.readline()
t = time.perf_counter()
run()
print(time.perf_counter() - t, flush=True)
"""


class Mount:
    """A fresh mount of `uri` with an empty cache; always unmounted."""

    def __init__(self, uri: str, *args: str):
        self.dir = Path(tempfile.mkdtemp(prefix="soma-bench-mnt-"))
        self.cache = Path(tempfile.mkdtemp(prefix="soma-bench-cache-"))
        self.proc = subprocess.Popen(
            [str(BIN), "-f", uri, str(self.dir), "--cache-dir", str(self.cache), *args],
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not os.path.ismount(self.dir):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("soma-mount did not mount")
            time.sleep(0.01)

    def close(self) -> None:
        if os.path.ismount(self.dir):
            subprocess.run(["umount", str(self.dir)], check=False)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            subprocess.run(["umount", "-l", str(self.dir)], check=False, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.cache, ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def mount_side(proxy: LatencyProxy, uri: str, cfg: dict, command: list[str]) -> tuple[float, int]:
    """(seconds, requests) of `command` (a list with "{mnt}" in it) on a fresh mount."""
    proxy.reset()
    with Mount(uri, *config_args(cfg)) as m:
        argv = [a.replace("{mnt}", str(m.dir)) for a in command]
        t = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True, timeout=TASK_TIMEOUT)
        secs = time.perf_counter() - t
    return secs, proxy.count()


def python_side(proxy: LatencyProxy, cfg: dict, task: str, uri: str, path: list, arg=None) -> tuple[float, int]:
    """(seconds, requests) of the task in a fresh interpreter, tiledbsoma imported: the
    store at `uri` opened, then its member at `path` (keys), as the mount reaches it."""
    import json

    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, json.dumps([cfg, task, uri, path, arg])],
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
        count = proxy.count()
        child.wait(TASK_TIMEOUT)
        if child.returncode != 0 or not line.strip():
            raise RuntimeError(f"the Python side of {task} failed")
        return float(line), count
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def first_slice(proxy_cfg: dict, big_uri: str) -> tuple[str, tuple[int, int]]:
    """The first chunk listed in X/slices/csv/ and the rows it holds."""
    with Mount(big_uri, *config_args(proxy_cfg)) as m:
        names = os.listdir(m.dir / "X" / "slices" / "csv")
    name = min(names, key=lambda p: int(p.split("-")[0]))
    lo, hi = name.removesuffix(".csv").split("-")
    return name, (int(lo), int(hi))


def run(delays: list[float], tries: int, fixtures: Path) -> int:
    rows = []
    with S3Server() as server:
        server.create_bucket(BUCKET)
        server.upload_tree(fixtures / "pbmc", BUCKET, "pbmc")
        server.upload_tree(fixtures / "big", BUCKET, "big")
        with LatencyProxy(server.port) as proxy:
            cfg = server.tiledb_config(vfs__s3__endpoint_override=proxy.endpoint)
            pbmc, big = f"s3://{BUCKET}/pbmc", f"s3://{BUCKET}/big"
            slice_name, rows_range = first_slice(cfg, big)
            tasks = [
                ("ls -R", pbmc, ["ls", "-R", "{mnt}"], []),
                ("obs csv", pbmc, ["cat", "{mnt}/obs/data.csv"], ["obs"]),
                ("var parquet", pbmc, ["cat", "{mnt}/ms/RNA/var/data.parquet"], ["ms", "RNA", "var"]),
                ("head X", big, ["head", "-n", "5", "{mnt}/X/data.csv"], ["X"]),
                ("X slice", big, ["cat", "{mnt}/X/slices/csv/" + slice_name], ["X"]),
                ("query X", pbmc, ["cat", f"{{mnt}}/where/{QUERY}/ms/RNA/X/data/data.csv"], []),
                ("query h5ad", pbmc, ["cat", f"{{mnt}}/where/{QUERY}/anndata/RNA.h5ad"], []),
            ]
            for delay in delays:
                proxy.set_delay(delay)
                for name, uri, command, path in tasks:
                    arg = list(rows_range) if name == "X slice" else QUERY if name.startswith("query") else None
                    best_m = best_p = (float("inf"), 0)
                    for _ in range(tries):
                        best_m = min(best_m, mount_side(proxy, uri, cfg, command))
                        best_p = min(best_p, python_side(proxy, cfg, name, uri, path, arg))
                    rows.append((delay, name, best_m, best_p))
                    print(f"  {delay:g} ms {name}: {best_m[0]:.2f}s/{best_m[1]} vs {best_p[0]:.2f}s/{best_p[1]}",
                          file=sys.stderr, flush=True)
    print()
    print(f"X slice: {slice_name}; times best of {tries}, requests of the best try")
    print(f"{'delay':>5} {'task':<12} {'mount':>8} {'python':>8} {'speed-up':>8} "
          f"{'req mount':>9} {'req py':>7} {'req ratio':>9}")
    for delay, name, (tm, rm), (tp, rp) in rows:
        print(f"{delay:>3g}ms {name:<12} {tm:>7.2f}s {tp:>7.2f}s {tp / tm:>7.2f}x "
              f"{rm:>9} {rp:>7} {rm / max(rp, 1):>8.2f}x")
    return 0


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delays", default="0,20,50", help="ms per request, comma-separated")
    parser.add_argument("--tries", type=int, default=3)
    parser.add_argument("--fixtures", default=os.environ.get("SOMA_FIXTURES") or str(REPO / "fixtures"))
    args = parser.parse_args(argv)
    # A SIGTERM unwinds like an interrupt: the mounts are unmounted, the S3 server stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    fixtures = Path(args.fixtures)
    if not (fixtures / "pbmc").exists():
        subprocess.run([sys.executable, str(REPO / "scripts" / "make-fixtures.py"), str(fixtures)], check=True)
    return run([float(d) for d in args.delays.split(",")], args.tries, fixtures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
