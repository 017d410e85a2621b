"""soma-mount benchmark: the mounted files against the Python reference path, in one run.

Builds a synthetic experiment once (bench-data/, at least 100,000 cells x 20,000 genes and
25 million nonzeros in X), then measures, each on a fresh mount with an empty cache (for the
side-by-side rows, one whose daemon has first served another array's file: the Python path
runs in one warm interpreter, so both sides are warm; the sides take turns, and the best of
`TRIES` tries is taken on each):

- `cat X/data/data.csv` and `cat obs/data.csv` against tiledbsoma `read()` then
  `pyarrow.csv.write_csv` (what a user would run to get the same CSV);
- `cat X/data/data.parquet` against tiledbsoma `read()` then `pyarrow.parquet.write_table`;
- the same for the CSV and Parquet of a wide obs (bench-data/wide: a collection whose `obs`
  has a million rows and 28 columns of every common kind, as atlases have; no target);
- a query selecting about a tenth of the cells (`where/n_genes < 680/`): `cat` of its
  `ms/RNA/X/data/data.csv` against tiledbsoma's `axis_query(...).X("data").tables()` then
  `pyarrow.csv.write_csv`, and `cat` of its `anndata/RNA.h5ad` against the query's
  `to_anndata` then `write_h5ad` (the mount's h5ad also holds obsm, which the query's
  `to_anndata` cannot read dense: it does more), and again against the same content made
  in Python (`h5ad + obsm`: obsm's rows read from the dense array's span of the cells,
  as a user would, before `write_h5ad`; no target);
- `cat` of the layer's Cell Ranger HDF5 matrix `ms/RNA/10x/data/matrix.h5` against
  tiledbsoma's X to a scipy matrix, then the v3 layout written with h5py (`10x h5`);
- the time `head -n 10 X/data/data.csv` takes to print its 10 lines;
- `cat` of the middle chunk listed in `X/data/slices/csv/` against `cat` of all of X, as a
  share of the full read next to the chunk's share of the cells;
- `ls -l X/data/slices/parquet/` and `ls -l X/data/slices/csv/` on a fresh mount (the sizes
  of every chunk: counted for sized Parquet, generated for CSV) next to reading every chunk
  after it, and what the chunks then take in the cache, on disk and as files;
- a 10-row window of `obsm/dense/data.npy` (200 MB) through `numpy.load(mmap_mode="r")`
  against reading all of it, next to the window's share of the array;
- over a local S3 server (moto, on 127.0.0.1, holding the pbmc demo store): `ls -R` of the
  mount and `cat` of a `metadata.json`, first look and again within the metadata TTL;
- `anndata.experimental.read_lazy` of `anndata/RNA.zarr` and 100 of its rows to memory, on a
  fresh mount with an empty cache, against tiledbsoma reading the same rows with
  `ExperimentAxisQuery(...).to_anndata` (obs, var and X: tiledbsoma's query cannot read a
  dense obsm, so obsm is left out on both sides), in one warm interpreter;
- the daemon's peak resident memory (VmHWM) over the whole run, and for each side-by-side
  row the daemon's peak in its mounts next to the peak of a fresh Python interpreter that
  runs the Python path once;
- 16 readers at once of X (its CSV, TSV and JSON Lines and 13 CSV chunks of `slices/`) on a
  fresh mount with `--max-memory 512M` and `256M`: the daemon's peak RSS, which the budget
  bounds (target: the budget plus 64 MiB).

It prints seconds and ratios (Python time / soma-mount time: above 1 means soma-mount is
faster). Numbers are for this machine; run it twice and compare on the same machine.

The results are saved in `<data>/results.json`. `scripts/bench --markdown` also prints the
headline table in Markdown and rewrites it in README.md and docs/PERFORMANCE.md between their
markers (scripts/bench_report.py); `--results FILE` reports saved results without measuring.

`scripts/bench --scale` runs the scale benchmark instead (scripts/bench_scale.py: a store of
256 million X cells, written once, mount and tiledbsoma side by side, time and peak RSS).

`scripts/bench --latency [--delays 0,20,50] [--tries 3]` runs the latency benchmark instead
(scripts/bench_latency.py): pbmc and a store of 10 fragments over a local S3 server behind a
proxy that holds each request N ms, against tiledbsoma, with the requests and rounds each
side sends.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

import bench_report
from bench_common import (
    DENSE_SHAPE,
    REPO,
    build,
    build_wide,
    cache_use,
    cat,
    demo_store,
    fresh_mount,
    python_peak_mb,
    timed,
)
from bench_tasks import (
    LAZY_ROWS,
    QUERY,
    python_10x_h5,
    python_csv,
    python_parquet,
    query_h5ad,
    query_h5ad_same_content,
    query_rows,
    query_x_csv,
)
from harness.moto_server import S3Server, config_args

# Tries per side-by-side row, the best taken on each side; the sides take turns. This
# machine's timings wander by a third from try to try, and through slower and faster phases,
# and obs's CSV takes tens of milliseconds: the best of five, taken in turns, is a steadier
# measure than the best of two, or five on one side and then five on the other.
TRIES = 5


def sixteen_readers(uri: Path, budget: str) -> tuple[float, float, int]:
    """16 readers at once of X, fresh mount with `--max-memory budget` (the rest default):
    data.csv, data.tsv, data.jsonl and 13 chunks of slices/csv/. The daemon's RSS before
    the reads and its peak (VmHWM), in MB, and the bytes the readers got."""
    with fresh_mount(uri, "--max-memory", budget) as m:
        x = Path(m) / "ms/RNA/X/data"
        chunks = sorted(os.listdir(x / "slices/csv"), key=lambda p: int(p.split("-")[0]))
        step = max(1, len(chunks) // 13)
        files = [x / "data.csv", x / "data.tsv", x / "data.jsonl"]
        files += [x / "slices/csv" / c for c in chunks[::step][:13]]
        before = m.rss_mb()
        got: list[int] = []
        threads = [threading.Thread(target=lambda f=f: got.append(cat(f))) for f in files]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if len(got) != len(files):
            raise RuntimeError("a reader of the sixteen failed")
        return before, m.peak_rss_mb(), sum(got)


def s3_latencies(store: Path) -> list[tuple[str, float, float]]:
    """(what, first look, cached) over a local S3 server holding `store`."""
    def ls_r(root: Path) -> int:
        return sum(len(files) + len(dirs) for _, dirs, files in os.walk(root))

    out = []
    with S3Server() as server:
        server.create_bucket("bench")
        server.upload_tree(store, "bench", "pbmc")
        args = config_args(server.tiledb_config())
        with fresh_mount("s3://bench/pbmc", *args, "--metadata-ttl", "600") as m:
            first = timed(lambda: ls_r(Path(m)))
            again = timed(lambda: ls_r(Path(m)))
            out.append(("ls -R", first, again))
        with fresh_mount("s3://bench/pbmc", *args, "--metadata-ttl", "600") as m:
            md = Path(m) / "ms" / "RNA" / "X" / "data" / "metadata.json"
            first = timed(lambda: md.read_bytes())
            again = timed(lambda: md.read_bytes())
            out.append(("cat metadata", first, again))
    return out


def lazy_rows(store: Path, shift: int = 0) -> None:
    """read_lazy of a mounted AnnData Zarr store, then LAZY_ROWS (moved by `shift`) to
    memory."""
    import anndata

    lazy = anndata.experimental.read_lazy(store)
    del lazy.obsm["dense"]  # as tiledbsoma's query reads them: obs, var and X
    rows = lazy[LAZY_ROWS[0] + shift : LAZY_ROWS[1] + shift].to_memory()
    assert rows.n_obs == LAZY_ROWS[1] - LAZY_ROWS[0] and rows.X.nnz > 0


def lazy_side_by_side(uri: Path) -> tuple[float, float, float, float]:
    """(soma-mount cold, soma-mount again, tiledbsoma, daemon peak MB): the best of TRIES
    each, taking turns; every soma-mount try on a fresh mount with an empty cache (its first
    look at the store), then other rows on the same mount."""
    import anndata.experimental  # noqa: F401 -- imported before timing, on both sides

    t_cold = t_again = t_ref = float("inf")
    peak = 0.0
    for _ in range(TRIES):
        t_ref = min(t_ref, timed(lambda: query_rows(str(uri))))
        with fresh_mount(uri) as m:
            store = Path(m) / "anndata" / "RNA.zarr"
            t_cold = min(t_cold, timed(lambda: lazy_rows(store)))
            t_again = min(t_again, timed(lambda: lazy_rows(store, shift=20_000)))
            peak = max(peak, m.peak_rss_mb())
    return t_cold, t_again, t_ref, peak


def measure(data: Path) -> dict:
    """Runs every measurement on the data set under `data` (built first if missing); the
    results, as `print_results` and bench_report.headline_table read them."""
    uri = build(data)
    wide = build_wide(data)
    x_uri = str(uri / "ms" / "RNA" / "X" / "data")
    obs_uri = str(uri / "obs")
    wide_uri = str(wide / "obs")
    scratch = Path(tempfile.mkdtemp(prefix="soma-bench-out-"))
    rows = []
    peak = 0.0
    try:
        # (what, store, file, another array's file to warm with, the Python path: a
        # function of this module and its arguments)
        for name, store, rel, warm, (ref, ref_args) in [
            ("X csv", uri, "ms/RNA/X/data/data.csv", "ms/RNA/var/data.csv",
             (python_csv, (x_uri, scratch / "x.csv"))),
            ("obs csv", uri, "obs/data.csv", "ms/RNA/var/data.csv",
             (python_csv, (obs_uri, scratch / "obs.csv"))),
            ("X parquet", uri, "ms/RNA/X/data/data.parquet", "ms/RNA/var/data.csv",
             (python_parquet, (x_uri, scratch / "x.parquet"))),
            ("wide csv", wide, "obs/data.csv", "var/data.csv",
             (python_csv, (wide_uri, scratch / "wide.csv"))),
            ("wide parquet", wide, "obs/data.parquet", "var/data.csv",
             (python_parquet, (wide_uri, scratch / "wide.parquet"))),
            ("query X csv", uri, f"where/{QUERY}/ms/RNA/X/data/data.csv", "ms/RNA/var/data.csv",
             (query_x_csv, (str(uri), scratch / "query.csv"))),
            ("query h5ad", uri, f"where/{QUERY}/anndata/RNA.h5ad", "ms/RNA/var/data.csv",
             (query_h5ad, (str(uri), scratch / "query.h5ad"))),
            ("h5ad + obsm", uri, f"where/{QUERY}/anndata/RNA.h5ad", "ms/RNA/var/data.csv",
             (query_h5ad_same_content, (str(uri), scratch / "query-obsm.h5ad"))),
            ("10x h5", uri, "ms/RNA/10x/data/matrix.h5", "ms/RNA/var/data.csv",
             (python_10x_h5, (str(uri), scratch / "matrix.h5"))),
        ]:
            t_ref = t_mount = float("inf")
            size = 0
            row_peak = 0.0
            # The sides take turns, so a slow phase of the machine falls on both alike.
            for _ in range(TRIES):
                t_ref = min(t_ref, timed(lambda: ref(*ref_args)))
                with fresh_mount(store) as m:
                    # Warm like the Python side (which runs in one interpreter): the
                    # daemon first serves another array's file, so the timed read pays for
                    # generating its file, not for the process's first libtiledb query.
                    cat(Path(m) / warm)

                    def run():
                        nonlocal size
                        size = cat(Path(m) / rel)

                    t_mount = min(t_mount, timed(run))
                    row_peak = max(row_peak, m.peak_rss_mb())
            peak = max(peak, row_peak)
            rows.append((name, t_mount, t_ref, size, row_peak, python_peak_mb(ref, ref_args)))
            for f in scratch.iterdir():
                f.unlink()
        readers = [(budget, sixteen_readers(uri, budget)) for budget in ("512M", "256M")]
        with fresh_mount(uri, "--chunk-cells", "1000000") as m:
            slices = Path(m) / "ms/RNA/X/data/slices/csv"
            chunks = sorted(os.listdir(slices), key=lambda p: int(p.split("-")[0]))
            middle = chunks[len(chunks) // 2]
            t_chunk = timed(lambda: cat(slices / middle))
        with fresh_mount(uri) as m:
            npy = Path(m) / "ms/RNA/obsm/dense/data.npy"
            row = DENSE_SHAPE[0] // 2

            def window():
                a = np.load(npy, mmap_mode="r")
                return np.array(a[row : row + 10])

            t_window = timed(window)
            t_whole = timed(lambda: cat(npy))
            peak = max(peak, m.peak_rss_mb())
        with fresh_mount(uri) as m:
            t = time.perf_counter()
            out = subprocess.run(
                ["head", "-n", "10", str(Path(m) / "ms/RNA/X/data/data.csv")],
                capture_output=True, check=True,
            ).stdout
            t_head = time.perf_counter() - t
            assert out.count(b"\n") == 10
            peak = max(peak, m.peak_rss_mb())
        listings = []
        for fmt in ("parquet", "csv"):
            with fresh_mount(uri) as m:
                listing = Path(m) / "ms/RNA/X/data/slices" / fmt
                t_ls = timed(lambda: subprocess.run(["ls", "-l", str(listing)], capture_output=True, check=True))
                names = os.listdir(listing)
                t_read = timed(lambda: [cat(listing / n) for n in names])
                apparent, on_disk = cache_use(m.cache_dir)
                listings.append((fmt, len(names), t_ls, t_read, apparent, on_disk))
                peak = max(peak, m.peak_rss_mb())
        t_lazy, t_lazy_again, t_query, lazy_peak = lazy_side_by_side(uri)
        peak = max(peak, lazy_peak)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    s3 = s3_latencies(demo_store())
    return {
        "side_by_side": [
            {"name": name, "mount_s": t_mount, "python_s": t_ref, "size_bytes": size,
             "mount_peak_mib": mount_peak, "python_peak_mib": ref_peak}
            for name, t_mount, t_ref, size, mount_peak, ref_peak in rows
        ],
        "head_s": t_head,
        "lazy": {"cold_s": t_lazy, "again_s": t_lazy_again, "python_s": t_query, "rows": LAZY_ROWS[1] - LAZY_ROWS[0]},
        "chunk": {"seconds": t_chunk, "count": len(chunks), "name": middle},
        "npy": {"window_s": t_window, "whole_s": t_whole},
        "listings": [
            {"format": fmt, "chunks": n, "ls_s": t_ls, "read_s": t_read, "apparent_bytes": apparent,
             "on_disk_bytes": on_disk}
            for fmt, n, t_ls, t_read, apparent, on_disk in listings
        ],
        "s3": [{"what": what, "first_s": first, "again_s": again} for what, first, again in s3],
        "peak_mib": peak,
        "readers": [
            {"budget": budget, "before_mib": before, "peak_mib": hwm, "bytes_read": got}
            for budget, (before, hwm, got) in readers
        ],
    }


def print_results(results: dict) -> None:
    """The results as text, one line a measurement, and whether each target is met."""
    rows = [
        (r["name"], r["mount_s"], r["python_s"], r["size_bytes"], r["mount_peak_mib"], r["python_peak_mib"])
        for r in results["side_by_side"]
    ]
    t_head = results["head_s"]
    t_lazy, t_lazy_again, t_query = (results["lazy"][k] for k in ("cold_s", "again_s", "python_s"))
    t_chunk, n_chunks, middle = (results["chunk"][k] for k in ("seconds", "count", "name"))
    t_window, t_whole = results["npy"]["window_s"], results["npy"]["whole_s"]
    listings = [
        (ls["format"], ls["chunks"], ls["ls_s"], ls["read_s"], ls["apparent_bytes"], ls["on_disk_bytes"])
        for ls in results["listings"]
    ]
    s3 = [(r["what"], r["first_s"], r["again_s"]) for r in results["s3"]]
    peak = results["peak_mib"]
    readers = [(r["budget"], (r["before_mib"], r["peak_mib"], r["bytes_read"])) for r in results["readers"]]
    print()
    print(f"{'what':<12} {'soma-mount':>11} {'python':>9} {'ratio':>7}  size")
    def seconds(t: float) -> str:
        return f"{t:.2f}s" if t >= 1 else f"{t * 1000:.0f}ms"

    for name, t_mount, t_ref, size, mount_peak, ref_peak in rows:
        print(
            f"{name:<12} {seconds(t_mount):>11} {seconds(t_ref):>9} {t_ref / t_mount:>6.2f}x  "
            f"{size / 1e6:.0f} MB; peak RSS {mount_peak:.0f} MiB daemon, {ref_peak:.0f} MiB Python"
        )
    print(f"{'head -n 10':<12} {t_head * 1000:>9.0f}ms")
    print(
        f"{'lazy rows':<12} {seconds(t_lazy):>11} {seconds(t_query):>9} {t_query / t_lazy:>6.2f}x  "
        f"read_lazy + {LAZY_ROWS[1] - LAZY_ROWS[0]} rows to memory (cold mount) against "
        "ExperimentAxisQuery.to_anndata"
    )
    print(
        f"{'lazy again':<12} {seconds(t_lazy_again):>11} {seconds(t_query):>9} "
        f"{t_query / t_lazy_again:>6.2f}x  other rows, read_lazy again on the same mount"
    )
    t_full = rows[0][1]
    print(
        f"{'one chunk':<12} {t_chunk:>10.2f}s: {t_chunk / t_full:.1%} of the full CSV read, "
        f"for 1 of {n_chunks} chunks ({1 / n_chunks:.1%} of the cells; {middle})"
    )
    print(
        f"{'npy window':<12} {t_window * 1000:>9.0f}ms for 10 of {DENSE_SHAPE[0]} rows; "
        f"the whole {DENSE_SHAPE[0] * DENSE_SHAPE[1] * 4 / 1e6:.0f} MB file: {t_whole:.2f}s "
        f"({t_window / t_whole:.1%} of it)"
    )
    for fmt, n, t_ls, t_read, apparent, on_disk in listings:
        print(
            f"{'ls -l ' + fmt:<12} {seconds(t_ls):>11} for the sizes of {n} chunks of X; reading them "
            f"after: {seconds(t_read)} ({t_ls / t_read:.0%}); cache {on_disk / 1e6:.0f} MB on disk "
            f"for {apparent / 1e6:.0f} MB of files"
        )
    for what, first, again in s3:
        print(f"{'S3 ' + what:<12} {first * 1000:>9.0f}ms first look, {again * 1000:.0f}ms cached")
    print(f"{'daemon RSS':<12} {peak:>9.0f}MB (peak)")
    for budget, (before, hwm, got) in readers:
        print(
            f"{'16 readers':<12} {hwm:>8.0f}MiB peak RSS with --max-memory {budget} ({before:.0f} MiB "
            f"before; X as csv, tsv, jsonl and 13 csv chunks at once, {got / 1e6:.0f} MB read)"
        )
    targets = [
        ("X csv >= 2x", rows[0][2] / rows[0][1] >= 2),
        ("obs csv >= 2x", rows[1][2] / rows[1][1] >= 2),
        ("parquet >= 1.5x", rows[2][2] / rows[2][1] >= 1.5),
        ("query X csv >= 2x", rows[5][2] / rows[5][1] >= 2),
        ("query h5ad >= 2x", rows[6][2] / rows[6][1] >= 2),
        ("10x h5 >= 2x", rows[8][2] / rows[8][1] >= 2),
        ("head < 100 ms", t_head < 0.1),
        ("RSS < 512 MB", peak < 512),
        ("16 readers <= budget + 64 MiB", all(hwm <= int(b[:-1]) + 64 for b, (_, hwm, _) in readers)),
        ("lazy rows faster", t_lazy < t_query),
    ]
    print("targets: " + ", ".join(f"{n}: {'met' if ok else 'MISSED'}" for n, ok in targets))


def main() -> int:
    if "--latency" in sys.argv[1:]:
        # The latency benchmark over a local S3 server behind a latency proxy, on its own.
        import bench_latency

        return bench_latency.main([a for a in sys.argv[1:] if a != "--latency"])
    if "--scale" in sys.argv[1:]:
        # The scale benchmark on a store ten times the largest test store, on its own.
        import bench_scale

        return bench_scale.main([a for a in sys.argv[1:] if a != "--scale"])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO / "bench-data"), help="where to build the data set")
    parser.add_argument(
        "--markdown", action="store_true",
        help="also print the headline table in Markdown and rewrite it in README.md and docs/PERFORMANCE.md",
    )
    parser.add_argument(
        "--results", metavar="JSON",
        help="report the results saved in JSON (by an earlier run: <data>/results.json) instead of measuring",
    )
    parser.add_argument("--repo", default=str(REPO), help="the checkout whose documents --markdown rewrites")
    args = parser.parse_args()
    if args.results:
        results = json.loads(Path(args.results).read_text())
        if not args.markdown:
            print_results(results)
    else:
        results = measure(Path(args.data))
        saved = Path(args.data) / "results.json"
        saved.write_text(json.dumps(results, indent=1) + "\n")
        print(f"results saved in {saved}")
        print_results(results)
    if args.markdown:
        table = bench_report.headline_table(results)
        print()
        print(table, end="")
        for path in bench_report.rewrite_documents(Path(args.repo), table):
            print(f"rewrote the table in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
