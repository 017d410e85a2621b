"""slices/<format>/ as datasets, and size-trusting readers on the first read of a fresh mount
(docs/REFERENCE.md, "Slices and datasets", "Legacy single-cell layout", "Sizes and reads").

`<array>/slices/` lists one directory per format (csv/, tsv/, parquet/, jsonl/), each the array
cut along its first index column into chunks `A-B.<ext>` of about --chunk-cells stored cells;
Spark, pyarrow.dataset, Dask, polars and DuckDB read such a directory, or a glob of it, whole.
polars and Spark drop the files whose size is 0 when they expand a glob or list a directory,
data.table's fread, tar and Seurat's Read10X take sizes from `stat`: every listed file must
report its exact size at its first stat. So every test here mounts a store FRESH (its own
daemon and cache, through harness.mount's mount_guard; never a session mount), and the reader under
test is the first to stat the files it reads (or second only to a `cat` of one chunk).

1. Datasets (big's X cut into 20+ chunks; pbmc's X and obs, each with --chunk-cells set so the
   array is about 25 chunks): for each reader, the row count, the exact sums of integer columns
   and the sum of a float32 column equal tiledbsoma's, on a fresh mount and on a fresh mount
   where one chunk was `cat` first. The format directories list the same chunks, whose rows
   concatenated in order (parsed with pyarrow) equal data.parquet's; slices named by their
   ranges still open under slices/.
2. data.table's fread of by/ and 10x files, and tar of obs/ and of 10x/, on a fresh default
   mount: every row, every byte.
3. Seurat's Read10X of the 10x directory on a fresh default mount equals tiledbsoma's X.
4. `ls -l slices/parquet/` of the 20+-chunk X reports the exact size of every chunk without
   generating them: it takes at most a fifth of the time of then reading them.

Float sums: every reader sums the float32 column as float64 after rounding each value to
float32 (a CSV reader parses the shortest float32 text as a double: rounding it to float32
gives the stored value back), so sums differ from tiledbsoma's only by summation order:
within 1e-9 of the sum of absolute values. Integer sums and row counts are exact.

Run: .venv/bin/python -m pytest tests/python/test_datasets.py -q
"""

from __future__ import annotations

import csv
import functools
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv
import pyarrow.dataset
import pyarrow.json
import pyarrow.parquet as pq
import pytest

from harness import data_reference
from harness import tree_reference
import tiledbsoma
from harness.mount import mount_guard
from harness.settings import within
from test_readers import r_has, run

FORMATS = ("csv", "tsv", "parquet", "jsonl")
CHUNKS = 25  # --chunk-cells = stored cells // CHUNKS
MIN_CHUNKS = 20
TOOL_TIMEOUT = 120  # seconds for one subprocess (R, tar, ls, cat)
FLOAT_RTOL = 1e-9  # float sums, relative to the sum of absolute values (summation order only)
CHUNK_RE = re.compile(r"(-?\d+)-(-?\d+)")


# --------------------------------------------------------------------------------------
# what tiledbsoma reads


@dataclass(frozen=True)
class Target:
    """An array read as a dataset: its store, its path under the store's root (member names),
    the integer columns whose sums are compared exactly, and a float32 column whose sum is
    compared within FLOAT_RTOL."""

    store: str
    array: str
    int_cols: tuple[str, ...]
    float_col: str

    @property
    def first_col(self) -> str:
        return self.int_cols[0]


TARGETS = {
    "big-X": Target("big", "X", ("soma_dim_0", "soma_dim_1"), "soma_data"),  # ~3.2M cells
    "pbmc-X": Target("pbmc", "ms/RNA/X/data", ("soma_dim_0", "soma_dim_1"), "soma_data"),  # ~535k cells
    "pbmc-obs": Target("pbmc", "obs", ("soma_joinid", "n_genes"), "percent_mito"),  # 700 rows, enumerations
}


@dataclass(frozen=True)
class Summary:
    """Rows, exact integer sums and the float sum of a table, as one reader saw it."""

    rows: int
    int_sums: tuple[int, ...]
    float_sum: float


@dataclass
class Expected:
    ref: data_reference.Ref  # tiledbsoma's whole read
    summary: Summary
    float_abs: float  # sum of |float column|, the scale of the float tolerance

    @property
    def chunk_cells(self) -> int:
        return max(1, self.summary.rows // CHUNKS)


_EXPECTED: dict = {}


def soma_node(fixtures_dir: Path, store: str, array: str) -> tree_reference.Node:
    """The tree_reference.Node of the array at member path `array` of `store`, found through
    tiledbsoma's members."""
    uri = str(fixtures_dir / store)
    for name in array.split("/"):
        with tiledbsoma.open(uri) as group:
            uri = tree_reference._soma_members(group)[name]
    parts = tuple(array.split("/"))
    return tree_reference.Node(uri=uri, relpath=parts, member_name=parts[-1], kind="soma_array")


def summarize_arrow(t: pa.Table, target: Target) -> Summary:
    f = pc.cast(pc.cast(t.column(target.float_col), pa.float32()), pa.float64())
    return Summary(
        t.num_rows,
        tuple(int(pc.sum(pc.cast(t.column(c), pa.int64())).as_py() or 0) for c in target.int_cols),
        float(pc.sum(f).as_py() or 0.0),
    )


def expected_of(fixtures_dir: Path, name: str) -> Expected:
    key = (str(fixtures_dir), name)
    if key not in _EXPECTED:
        t = TARGETS[name]
        ref = data_reference.reference(soma_node(fixtures_dir, t.store, t.array))
        f = pc.cast(ref.table.column(t.float_col), pa.float64())
        _EXPECTED[key] = Expected(ref, summarize_arrow(ref.table, t), float(pc.sum(pc.abs(f)).as_py() or 0.0))
    return _EXPECTED[key]


def assert_summary(got: Summary, want: Expected, what: str):
    w = want.summary
    tol = FLOAT_RTOL * want.float_abs + 1e-12
    if got.rows != w.rows or got.int_sums != w.int_sums or not abs(got.float_sum - w.float_sum) <= tol:
        pytest.fail(
            f"{what}: {got.rows} rows, integer sums {got.int_sums}, float sum {got.float_sum!r};"
            f" tiledbsoma reads {w.rows} rows, integer sums {w.int_sums}, float sum {w.float_sum!r}"
            f" (tolerance {tol:.3g})",
            pytrace=False,
        )


# --------------------------------------------------------------------------------------
# helpers


def chunk_ranges(names: list[str], ext: str, where: str) -> list[tuple[int, int, str]]:
    """(A, B, name) of the chunk files `A-B.<ext>` in a listing, sorted; fails on any other
    name, an unparsable or reversed range, or chunks that overlap."""
    out, bad = [], []
    for n in names:
        stem, dot, e = n.rpartition(".")
        m = CHUNK_RE.fullmatch(stem) if dot and e == ext else None
        if not m or int(m.group(1)) > int(m.group(2)):
            bad.append(n)
            continue
        out.append((int(m.group(1)), int(m.group(2)), n))
    assert not bad, f"{where} lists names that are no chunk `A-B.{ext}`: {sorted(bad)[:10]}"
    out.sort()
    for (a0, b0, n0), (a1, b1, n1) in zip(out, out[1:]):
        assert b0 < a1, f"{where}: chunks {n0} and {n1} overlap"
    return out


def cat_one_chunk(d: Path, ext: str) -> str:
    """`cat` the middle chunk of the format directory d (listed, not stat'ed, by os.listdir)."""
    chunks = chunk_ranges(os.listdir(d), ext, str(d))
    assert chunks, f"{d} lists no chunks"
    name = chunks[len(chunks) // 2][2]
    r = subprocess.run(["cat", str(d / name)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=TOOL_TIMEOUT)
    assert r.returncode == 0, f"cat {d / name} exited {r.returncode}: {r.stderr.decode(errors='replace')}"
    return name


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """The schema with dictionaries as their value type, every field nullable, no metadata:
    what a text format parses into, and what tables are compared in."""
    fields = []
    for f in schema:
        t = f.type.value_type if pa.types.is_dictionary(f.type) else f.type
        fields.append(pa.field(f.name, t, nullable=True))
    return pa.schema(fields)


def plain_table(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """t cast to plain_schema(schema) (dictionaries decoded), one chunk per column."""
    cols = []
    for f in schema:
        c = t.column(f.name)
        if pa.types.is_dictionary(c.type):
            c = pa.chunked_array([ch.dictionary_decode() for ch in c.chunks], c.type.value_type)
        cols.append(pc.cast(c, f.type).combine_chunks())
    return pa.Table.from_arrays(cols, schema=schema)


def parse_chunk(data: bytes, fmt: str, schema: pa.Schema) -> pa.Table:
    """A chunk file parsed with pyarrow into plain `schema` (docs/REFERENCE.md, "Value formatting": a
    null is an empty unquoted field, an empty string is quoted)."""
    if fmt == "parquet":
        return plain_table(pq.read_table(io.BytesIO(data)), schema)
    if fmt in ("csv", "tsv"):
        return pyarrow.csv.read_csv(
            io.BytesIO(data),
            parse_options=pyarrow.csv.ParseOptions(delimiter="," if fmt == "csv" else "\t"),
            convert_options=pyarrow.csv.ConvertOptions(
                column_types=schema,
                include_columns=schema.names,
                null_values=[""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        ).select(schema.names).cast(schema)
    return pyarrow.json.read_json(
        io.BytesIO(data), parse_options=pyarrow.json.ParseOptions(explicit_schema=schema)
    ).select(schema.names).cast(schema)


def table_difference(got: pa.Table, want: pa.Table) -> str | None:
    """None if equal, else where the two (plain) tables first differ."""
    if got.num_rows != want.num_rows:
        return f"{got.num_rows} rows, expected {want.num_rows}"
    for name in want.column_names:
        g, w = got.column(name), want.column(name)
        if g.equals(w):
            continue
        neq = pc.invert(pc.fill_null(pc.equal(g, w), False))
        both_null = pc.and_(pc.is_null(g), pc.is_null(w))
        if pa.types.is_floating(w.type):
            both_null = pc.or_(both_null, pc.and_(pc.is_nan(g), pc.is_nan(w)))
        bad = pc.and_(neq, pc.invert(pc.fill_null(both_null, False)))
        idx = np.flatnonzero(bad.to_numpy(zero_copy_only=False))
        if len(idx):
            i = int(idx[0])
            return f"column {name}: {len(idx)} rows differ, first row {i}: {g[i].as_py()!r}, expected {w[i].as_py()!r}"
    return None


# --------------------------------------------------------------------------------------
# readers of a whole format directory


# Spark runs in a Python process of its own, started without fork(): pyspark launches its JVM
# with a preexec_fn, which makes Python fork(), and a fork of the test process, grown large
# by the tests before (libtiledb maps much memory), fails with ENOMEM under the kernel's
# heuristic overcommit. The process reads requests and answers summaries, a line of JSON each.
SPARK_PROCESS = r"""
import json, sys
from pyspark.sql import SparkSession, functions as F

local_dir = sys.argv[1]
spark = (
    SparkSession.builder.master("local[2]")
    .appName("soma-mount test_datasets")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.memory", "1g")
    .config("spark.local.dir", local_dir)
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    ask = json.loads(line)
    try:
        if ask["fmt"] == "parquet":
            df = spark.read.parquet(ask["dir"])
        else:
            df = spark.read.csv(ask["dir"], header=True, inferSchema=True)
        row = df.agg(
            F.count(F.lit(1)),
            *[F.sum(F.col(c).cast("long")) for c in ask["int_cols"]],
            F.sum(F.col(ask["float_col"]).cast("float").cast("double")),
        ).collect()[0]
        answer = {"rows": int(row[0]), "int_sums": [int(v or 0) for v in row[1:-1]], "float_sum": float(row[-1] or 0.0)}
    except Exception as e:
        answer = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(answer), flush=True)
spark.stop()
"""


class SparkProcess:
    """A local Spark session (2 cores, small driver, no UI) in a process of its own."""

    def __init__(self, local_dir: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SPARK_PROCESS, str(local_dir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        ready = self.proc.stdout.readline()
        if not ready:
            self.close()
            pytest.fail("the Spark process ended before its session started")

    def read(self, d: Path, fmt: str, t: "Target") -> Summary:
        ask = {"dir": str(d), "fmt": fmt, "int_cols": list(t.int_cols), "float_col": t.float_col}
        self.proc.stdin.write(json.dumps(ask) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline() or '{"error": "the Spark process ended"}')
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return Summary(answer["rows"], tuple(answer["int_sums"]), answer["float_sum"])

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    """One Spark session for the module, in its own process (see SPARK_PROCESS)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("no Java runtime for Spark (scripts/setup installs openjdk-17-jre-headless)")
    session = SparkProcess(tmp_path_factory.mktemp("spark-local"))
    try:
        yield session
    finally:
        session.close()


@pytest.fixture(scope="module")
def dask_client():
    """A Dask distributed LocalCluster of two worker processes, one thread each, for the module."""
    from distributed import Client, LocalCluster

    log = logging.getLogger("distributed")  # its in-process scheduler logs each step at INFO
    level = log.level
    log.setLevel(logging.WARNING)
    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        memory_limit="2GiB",
        silence_logs=logging.ERROR,
    )
    client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()
        log.setLevel(level)


def polars_read(scan: Callable, glob: bool):
    def read(d: Path, fmt: str, t: Target, _ctx) -> Summary:
        lf = scan(str(d / f"*.{fmt}") if glob else str(d))
        row = lf.select(
            pl.len(),
            *[pl.col(c).cast(pl.Int64).sum() for c in t.int_cols],
            pl.col(t.float_col).cast(pl.Float32).cast(pl.Float64).sum(),
        ).collect().row(0)
        return Summary(int(row[0]), tuple(int(v) for v in row[1:-1]), float(row[-1]))

    return read


def spark_read(d: Path, fmt: str, t: Target, spark: SparkProcess) -> Summary:
    return spark.read(d, fmt, t)


def pyarrow_dataset_read(d: Path, fmt: str, t: Target, _ctx) -> Summary:
    table = pyarrow.dataset.dataset(str(d), format="parquet").to_table(columns=[*t.int_cols, t.float_col])
    return summarize_arrow(table, t)


def duckdb_read(function: str):
    def read(d: Path, fmt: str, t: Target, _ctx) -> Summary:
        cols = ", ".join(f'sum("{c}"::BIGINT)' for c in t.int_cols)
        sql = f'select count(*), {cols}, sum("{t.float_col}"::FLOAT::DOUBLE) from {function}(?)'
        with duckdb.connect() as con:
            row = con.execute(sql, [str(d / f"*.{fmt}")]).fetchone()
        return Summary(int(row[0]), tuple(int(v or 0) for v in row[1:-1]), float(row[-1] or 0.0))

    return read


def dask_read(d: Path, fmt: str, t: Target, client) -> Summary:
    import dask.dataframe as dd

    df = dd.read_parquet(str(d))
    parts = [
        df.shape[0],
        *[df[c].astype("int64").sum() for c in t.int_cols],
        df[t.float_col].astype("float32").astype("float64").sum(),
    ]
    vals = client.compute(parts, sync=True)
    return Summary(int(vals[0]), tuple(int(v) for v in vals[1:-1]), float(vals[-1]))


@dataclass(frozen=True)
class Reader:
    fmt: str  # the format directory it reads
    read: Callable  # (format dir, fmt, target, fixture value or None) -> Summary
    fixture: str | None = None  # a module fixture it needs (a Spark session, a Dask client)


READERS = {
    "polars-scan_parquet-glob": Reader("parquet", polars_read(pl.scan_parquet, glob=True)),
    "polars-scan_parquet-dir": Reader("parquet", polars_read(pl.scan_parquet, glob=False)),
    "polars-scan_csv-glob": Reader("csv", polars_read(pl.scan_csv, glob=True)),
    "polars-scan_csv-dir": Reader("csv", polars_read(pl.scan_csv, glob=False)),
    "spark-parquet-dir": Reader("parquet", spark_read, "spark"),
    "spark-csv-dir": Reader("csv", spark_read, "spark"),
    "pyarrow-dataset-dir": Reader("parquet", pyarrow_dataset_read),
    "duckdb-read_parquet-glob": Reader("parquet", duckdb_read("read_parquet")),
    "duckdb-read_csv-glob": Reader("csv", duckdb_read("read_csv")),
    "dask-read_parquet-dir": Reader("parquet", dask_read, "dask_client"),
}


# --------------------------------------------------------------------------------------
# 1. datasets


@pytest.mark.timeout(180)
@pytest.mark.parametrize("first_read", [None, "one chunk"])
@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("target", TARGETS)
def test_dataset_reads_every_row(target, reader, first_read, fixtures_dir, soma_mount_bin, request):
    """The reader reads slices/<format>/ whole, first on a fresh mount (or second to a `cat`
    of one chunk), and gets tiledbsoma's rows."""
    t, r = TARGETS[target], READERS[reader]
    want = expected_of(fixtures_dir, target)
    ctx = request.getfixturevalue(r.fixture) if r.fixture else None
    what = f"{reader} of {t.store}/{t.array}/slices/{r.fmt}/ (--chunk-cells {want.chunk_cells})"
    with mount_guard(fixtures_dir / t.store, "--chunk-cells", want.chunk_cells, label=what) as mp:
        d = Path(mp) / t.array / "slices" / r.fmt
        try:
            if first_read == "one chunk":
                what += f" after cat {cat_one_chunk(d, r.fmt)}"
            got = r.read(d, r.fmt, t, ctx)
        except Exception as e:  # noqa: BLE001  (a reader's error fails, shown as it said it)
            got = e
    if isinstance(got, Exception):
        pytest.fail(f"{what}: {type(got).__name__}: {str(got)[:3000]}", pytrace=False)
    assert_summary(got, want, what)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("target", TARGETS)
def test_format_dirs_hold_the_same_chunks_of_the_whole_array(target, fixtures_dir, soma_mount_bin):
    """slices/ lists exactly the format directories; each lists the same chunks (20 or more
    here), and each format's chunks, parsed and concatenated in order, equal data.parquet
    (which equals tiledbsoma's read)."""
    t = TARGETS[target]
    want = expected_of(fixtures_dir, target)
    schema = plain_schema(want.ref.schema)
    with mount_guard(fixtures_dir / t.store, "--chunk-cells", want.chunk_cells) as mp:
        a = Path(mp) / t.array
        top = sorted(os.listdir(a / "slices"))
        assert top == sorted(FORMATS), f"{t.array}/slices lists {top}, expected one directory per format"
        ranges = {}
        for fmt in FORMATS:
            d = a / "slices" / fmt
            assert d.is_dir(), f"{d} is not a directory"
            ranges[fmt] = chunk_ranges(os.listdir(d), fmt, f"{t.array}/slices/{fmt}")
        stems = {fmt: [(lo, hi) for lo, hi, _ in r] for fmt, r in ranges.items()}
        differ = {fmt: s[:5] for fmt, s in stems.items() if s != stems["parquet"]}
        assert not differ, f"the format directories list other chunks: {differ} vs parquet's {stems['parquet'][:5]}"
        n = len(stems["parquet"])
        assert n >= MIN_CHUNKS, (
            f"{t.array}: {n} chunks of about {want.chunk_cells} of {want.summary.rows} cells: {stems['parquet']}"
        )

        whole = plain_table(pq.read_table(a / "data.parquet"), schema)
        diff = table_difference(whole, plain_table(want.ref.table, schema))
        assert diff is None, f"{t.array}/data.parquet differs from tiledbsoma's read: {diff}"
        problems = []
        for fmt in FORMATS:
            parts = []
            for lo, hi, name in ranges[fmt]:
                part = parse_chunk((a / "slices" / fmt / name).read_bytes(), fmt, schema)
                first = part.column(t.first_col).to_numpy()
                if len(first) and (first.min() < lo or first.max() > hi):
                    problems.append(f"slices/{fmt}/{name} holds {t.first_col} {first.min()}..{first.max()}")
                parts.append(part)
            diff = table_difference(pa.concat_tables(parts).combine_chunks(), whole)
            if diff:
                problems.append(f"slices/{fmt}/ chunks concatenated differ from data.parquet: {diff}")
    assert not problems, f"{t.array}:\n" + "\n".join(problems)


def named_slices(nd: bool) -> list[tuple[str, tuple[int, int]]]:
    """Slices by name (never listed) and the range of the first index column each holds; an
    ND array's names give the second dimension too (`*`: all)."""
    rest = ",*" if nd else ""
    return [
        (f"0-9{rest}.csv", (0, 9)),
        ("17.jsonl", (17, 17)),
        (f"100-199{rest}.parquet", (100, 199)),
        ("5-5.tsv", (5, 5)),
    ]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("target", TARGETS)
def test_named_slices_still_open(target, fixtures_dir, soma_mount_bin):
    """slices/<ranges>.<ext> opens by name beside the format directories, and holds the rows
    of tiledbsoma's read whose first index column is in the range."""
    t = TARGETS[target]
    want = expected_of(fixtures_dir, target)
    schema = plain_schema(want.ref.schema)
    ref = plain_table(want.ref.table, schema)
    first = ref.column(t.first_col)
    problems = []
    with mount_guard(fixtures_dir / t.store, "--chunk-cells", want.chunk_cells) as mp:
        d = Path(mp) / t.array / "slices"
        for name, (lo, hi) in named_slices(want.ref.soma_type in tree_reference.ND_TYPES):
            fmt = name.rsplit(".", 1)[1]
            try:
                data = (d / name).read_bytes()
            except OSError as e:
                problems.append(f"slices/{name}: {e}")
                continue
            rows = ref.filter(pc.and_(pc.greater_equal(first, lo), pc.less_equal(first, hi)))
            diff = table_difference(parse_chunk(data, fmt, schema), rows)
            if diff:
                problems.append(f"slices/{name}: {diff}")
    assert not problems, f"{t.array}:\n" + "\n".join(problems)


# --------------------------------------------------------------------------------------
# 2. fread and tar on a fresh default mount

# Reads args[1] with fread (header args[2]) as text, writes it back tab-separated.
R_FREAD = r"""
args <- commandArgs(trailingOnly = TRUE)
d <- data.table::fread(args[1], header = as.logical(args[2]), colClasses = "character",
                       na.strings = NULL, showProgress = FALSE)
data.table::fwrite(d, "", sep = "\t", col.names = FALSE, quote = FALSE, na = "")
"""


def obs_by_louvain_0(fixtures_dir: Path) -> pa.Table:
    with tiledbsoma.open(str(fixtures_dir / "pbmc" / "obs")) as obs:
        return obs.read(value_filter="louvain == '0'").concat()


def obs_ids(fixtures_dir: Path) -> list[str]:
    with tiledbsoma.open(str(fixtures_dir / "pbmc" / "obs")) as obs:
        t = obs.read(column_names=["soma_joinid", "obs_id"]).concat().sort_by("soma_joinid")
    return t.column("obs_id").to_pylist()


def var_ids(fixtures_dir: Path) -> list[str]:
    with tiledbsoma.open(str(fixtures_dir / "pbmc" / "ms" / "RNA" / "var")) as var:
        t = var.read(column_names=["soma_joinid", "var_id"]).concat().sort_by("soma_joinid")
    return t.column("var_id").to_pylist()


FREAD_FILES = {
    "obs/by/louvain/0/data.csv": True,  # the file, whether it has a header
    "ms/RNA/10x/data/barcodes.tsv": False,
    "ms/RNA/10x/data/genes.tsv": False,
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path", FREAD_FILES)
def test_fread_first_read_on_default_mount(path, fixtures_dir, soma_mount_bin):
    """fread, the first to stat the file, gets every row: the same fields as a plain read of
    the file afterwards, and tiledbsoma's rows."""
    if not r_has("data.table"):
        pytest.skip("R's data.table is not installed (scripts/setup installs it)")
    header = FREAD_FILES[path]
    with mount_guard(fixtures_dir / "pbmc") as mp:
        f = Path(mp) / path
        r = run(["Rscript", "-e", R_FREAD, str(f), "TRUE" if header else "FALSE"])
        got = [line.split("\t") for line in r.stdout.splitlines()]
        plain = list(csv.reader(io.StringIO(f.read_bytes().decode("utf-8"), newline=""),
                                delimiter="," if path.endswith(".csv") else "\t"))
    plain = plain[1:] if header else plain
    what = f"fread of {path} on a fresh default mount"
    assert len(got) == len(plain), f"{what}: {len(got)} rows, a plain read afterwards {len(plain)}\n{r.stderr[-2000:]}"
    assert got == plain, f"{what}: rows differ from a plain read afterwards, e.g. {next(g for g, p in zip(got, plain) if g != p)}"
    if path.startswith("obs/"):
        want = obs_by_louvain_0(fixtures_dir)
        names = want.column_names
        ids = [int(row[names.index("soma_joinid")]) for row in got]
        genes = [int(row[names.index("n_genes")]) for row in got]
        assert ids == want.column("soma_joinid").to_pylist(), f"{what}: soma_joinids differ from tiledbsoma's"
        assert genes == want.column("n_genes").to_pylist(), f"{what}: n_genes differ from tiledbsoma's"
    elif path.endswith("barcodes.tsv"):
        assert [row[0] for row in got] == obs_ids(fixtures_dir), f"{what}: barcodes differ from obs_id"
    else:
        assert [row[0] for row in got] == var_ids(fixtures_dir), f"{what}: feature ids differ from var_id"
        assert {row[2] for row in got} == {"Gene Expression"}, f"{what}: third column {sorted({row[2] for row in got})[:5]}"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("subtree", ["obs", "ms/RNA/10x"])
def test_tar_first_read_on_default_mount(subtree, fixtures_dir, soma_mount_bin, tmp_path):
    """tar of a subtree, the first to stat its files: every file is archived, each with the
    size and the bytes a plain read of the mount gives afterwards (GNU tar archives a file
    whose stat says 0 as empty without reading it)."""
    if shutil.which("tar") is None:
        pytest.skip("tar is not installed (scripts/setup installs it)")
    archive = tmp_path / "subtree.tar"
    src = Path(subtree)
    problems = []
    with mount_guard(fixtures_dir / "pbmc") as mp:
        parent = Path(mp) / src.parent
        r = subprocess.run(["tar", "-cf", str(archive), "-C", str(parent), src.name],
                           capture_output=True, text=True, timeout=TOOL_TIMEOUT)
        if r.returncode != 0:
            problems.append(f"tar exited {r.returncode}: {r.stderr[-2000:]}")
        served = {}
        for dirpath, _, filenames in os.walk(parent / src.name):
            for n in filenames:
                p = Path(dirpath) / n
                served[str(p.relative_to(parent))] = p.read_bytes()
    with tarfile.open(archive) as tf:
        members = {m.name: m for m in tf.getmembers() if m.isfile()}
        missing = sorted(served.keys() - members.keys())
        if missing:
            problems.append(f"{len(missing)} files not archived, e.g. {missing[:5]}")
        empty, short, differ = [], [], []
        for name, m in sorted(members.items()):
            data = served.get(name)
            if data is None:
                problems.append(f"{name} is archived but not served")
                continue
            if m.size == 0 and data:
                empty.append(f"{name} ({len(data)} bytes)")
            elif m.size != len(data):
                short.append(f"{name} ({m.size} archived, {len(data)} served)")
            elif tf.extractfile(m).read() != data:
                differ.append(name)
    for what, names in (("archived empty", empty), ("archived with another size", short),
                        ("archived with other bytes", differ)):
        if names:
            problems.append(f"{len(names)} of {len(members)} files {what}, e.g. {names[:5]}")
    assert not problems, f"tar of {subtree}/ from a fresh mount:\n" + "\n".join(problems)


# --------------------------------------------------------------------------------------
# 3. Seurat's Read10X

# Line 1: features, cells, nonzero count, sum; line 2: nonzeros per cell; then the cell names.
R_READ10X = r"""
suppressPackageStartupMessages(library(Seurat))
m <- Seurat::Read10X(commandArgs(trailingOnly = TRUE)[1])
x <- m@x
cat(nrow(m), ncol(m), sum(x != 0), sprintf("%.17g", sum(x)), "\n")
cat(Matrix::colSums(m != 0), "\n")
writeLines(colnames(m))
"""


@functools.cache
def seurat_loads() -> str | None:
    """None if `library(Seurat)` loads in Rscript, else why not."""
    if shutil.which("Rscript") is None:
        return "Rscript is not installed"
    r = subprocess.run(["Rscript", "-e", "suppressPackageStartupMessages(library(Seurat))"],
                       capture_output=True, text=True, timeout=TOOL_TIMEOUT)
    return None if r.returncode == 0 else f"library(Seurat) fails: {r.stderr.strip()[-500:]}"


@pytest.mark.timeout(180)
def test_seurat_read10x_on_default_mount(fixtures_dir, soma_mount_bin):
    """Read10X of ms/RNA/10x/data, the first to touch it on a fresh default mount, gives
    tiledbsoma's X (layer data) as features x cells: its dimensions, nonzero count and sum,
    the nonzeros of each cell and the cells' names (obs_id)."""
    why = seurat_loads()
    if why:
        pytest.skip(f"{why} (scripts/setup installs r-cran-seurat)")
    x = expected_of(fixtures_dir, "pbmc-X").ref.table
    cells = obs_ids(fixtures_dir)
    n_var = len(var_ids(fixtures_dir))
    with tiledbsoma.open(str(fixtures_dir / "pbmc" / "obs")) as obs:
        joinids = np.sort(obs.read(column_names=["soma_joinid"]).concat().column("soma_joinid").to_numpy())
    values = x.column("soma_data").to_numpy().astype(np.float64)
    nz = values != 0
    per_cell = np.bincount(np.searchsorted(joinids, x.column("soma_dim_0").to_numpy()[nz]), minlength=len(cells))
    with mount_guard(fixtures_dir / "pbmc") as mp:
        r = run(["Rscript", "-e", R_READ10X, str(Path(mp) / "ms" / "RNA" / "10x" / "data")])
    lines = r.stdout.splitlines()
    n_feat, n_cells, nnz, total = lines[0].split()
    what = "Read10X of ms/RNA/10x/data on a fresh default mount"
    assert (int(n_feat), int(n_cells), int(nnz)) == (n_var, len(cells), int(nz.sum())), (
        f"{what}: {n_feat} features x {n_cells} cells, {nnz} nonzeros;"
        f" tiledbsoma: {n_var} x {len(cells)}, {int(nz.sum())} nonzeros\n{r.stderr[-2000:]}"
    )
    # Read10X parses the text of each float32 value as a double: each within 2^-24 of it.
    want_sum = float(values.sum())
    assert abs(float(total) - want_sum) <= 1e-6 * float(np.abs(values).sum()), f"{what}: sum {total}, tiledbsoma {want_sum}"
    got_per_cell = [int(float(v)) for v in lines[1].split()]
    assert got_per_cell == per_cell.tolist(), f"{what}: the nonzeros per cell differ from tiledbsoma's"
    assert lines[2:] == cells, f"{what}: cell names differ from obs_id, e.g. {lines[2:5]} vs {cells[:3]}"


# --------------------------------------------------------------------------------------
# 4. ls -l of slices/parquet/: exact sizes, without generating the chunks


@pytest.mark.timeout(180)
def test_ls_parquet_chunks_exact_sizes_without_generating(fixtures_dir, soma_mount_bin):
    """`ls -l slices/parquet/` of big's X (20+ chunks), the first listing on a fresh mount,
    shows every chunk's exact size (the bytes then read from it), and takes at most a fifth
    of the time of reading every chunk: the sizes come from fragment metadata, no chunk is
    generated (a floor of within(0.1) s keeps a fast read from failing a cheap listing; what
    the daemon's cache gained during the listing is shown, and must stay below a tenth of the
    chunks' bytes)."""
    t = TARGETS["big-X"]
    want = expected_of(fixtures_dir, "big-X")
    with mount_guard(fixtures_dir / t.store, "--chunk-cells", want.chunk_cells) as mp:
        d = Path(mp) / t.array / "slices" / "parquet"
        cached = cache_bytes(mp.cache_dir)
        t0 = time.monotonic()
        r = run(["ls", "-l", "--time-style=+%s", str(d)])
        ls_seconds = time.monotonic() - t0
        cached = cache_bytes(mp.cache_dir) - cached
        listed = {}
        for line in r.stdout.splitlines()[1:]:  # "total N" first
            mode, _links, _user, _group, size, _time, name = line.split(maxsplit=6)
            assert mode.startswith("-"), f"ls -l {d}: not a regular file: {line}"
            listed[name] = int(size)
        chunks = chunk_ranges(list(listed), "parquet", str(d))
        assert len(chunks) >= MIN_CHUNKS, f"{len(chunks)} chunks of about {want.chunk_cells} cells: {sorted(listed)}"
        t0 = time.monotonic()
        read = {name: len((d / name).read_bytes()) for name in listed}
        read_seconds = time.monotonic() - t0
    wrong = {n: (listed[n], read[n]) for n in listed if listed[n] != read[n]}
    assert not wrong, (
        f"ls -l {t.array}/slices/parquet on a fresh mount: {len(wrong)} of {len(listed)} sizes are not the bytes"
        f" read afterwards (listed, read): {dict(list(wrong.items())[:5])}"
    )
    bound = max(read_seconds / 5, within(0.1))
    total = sum(listed.values())
    assert ls_seconds <= bound and cached < total / 10, (
        f"ls -l of {len(listed)} chunks ({total} bytes) took {ls_seconds:.2f} s, reading them {read_seconds:.2f} s"
        f" afterwards, and the cache gained {cached} bytes during the listing: listing must not generate them"
        f" (bound {bound:.2f} s)"
    )


def cache_bytes(cache_dir: str | None) -> int:
    """Bytes of the files under a daemon's --cache-dir."""
    assert cache_dir, "mount_guard made no cache directory"
    return sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(cache_dir) for f in fs)
