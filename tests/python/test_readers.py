"""Readers that trust file sizes, on their first read of a data file (docs/REFERENCE.md, "Sizes and
reads"): no reader is ever left with fewer rows than the array holds.

Before a data file is generated, soma-mount reports size 0 and serves it with direct I/O, which
read-until-EOF readers (pandas, pyarrow, readr) handle; DuckDB, polars and data.table's fread
instead size their reads from `stat`/`fstat` or mmap the file, and fread does not even open a
file whose stat says 0. Each reader here reads a pbmc data file FIRST, on a fresh mount with a
fresh cache and a --materialize-limit below the file's size (so opening it does not generate it
whole), and must get every row: its row count and the sums of integer columns equal
tiledbsoma's. An error is a failure too: the contract names these readers as getting every row.
fread, which only stats the path, is given --exact-sizes there (docs/REFERENCE.md's rule: a stat of a
file above --materialize-limit generates it only with --exact-sizes).

Whole directories: tar, rsync -a and cp -a of obs/ (slices/ and by/ included) with
--exact-sizes must copy every file exactly as a plain read of the mount returns it (GNU tar
archives a file whose stat says 0 as empty without opening it, and exits 0); and
data.table's fread gets every row of a file that was only stat'ed before, with --exact-sizes,
and of a small file (below the default --materialize-limit) on a default mount. tar of obs/ on
a default mount copies every file exactly, slices/ and by/ included: every listed file
estimated below the limit is generated at its first stat.

Run: .venv/bin/python -m pytest tests/python/test_readers.py -q
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pyarrow.compute as pc
import pyarrow.csv
import pytest

from harness import tree_reference  # noqa: F401  (quiets tiledbsoma's warnings)
import tiledbsoma
from harness.mount import hash_tree, mount_guard

STORE = "pbmc"
SMALL_LIMIT = "1K"  # --materialize-limit below every data file read here: opening does not generate
TOOL_TIMEOUT = 120  # seconds for one reader or copier run


# --------------------------------------------------------------------------------------
# what tiledbsoma reads


@dataclass(frozen=True)
class Table:
    """A whole-array data file of the store: its array directory, and the integer columns
    whose sums are compared."""

    array: str
    sum_columns: tuple[str, ...]

    def data_file(self, mp, ext: str) -> Path:
        return Path(mp) / self.array / f"data.{ext}"


TABLES = {
    "obs": Table("obs", ("soma_joinid", "n_genes")),  # 700 rows of mixed types
    "X": Table("ms/RNA/X/data", ("soma_dim_0", "soma_dim_1")),  # ~535k cells
}


@dataclass(frozen=True)
class Summary:
    """The row count and the sums of some integer columns of a table, as one reader saw it;
    `notes` (what the reader said on stderr) is shown on a mismatch, never compared."""

    rows: int
    sums: tuple[int | None, ...]  # None: the reader has no such column
    notes: str = field(default="", compare=False)


def summarize(frame: pd.DataFrame, columns: tuple[str, ...]) -> Summary:
    return Summary(len(frame), tuple(int(frame[c].sum()) if c in frame else None for c in columns))


@pytest.fixture(scope="module")
def expected(fixtures_dir) -> dict[str, Summary]:
    """Table name -> its Summary as tiledbsoma reads the array."""
    out = {}
    for name, table in TABLES.items():
        with tiledbsoma.open(str(fixtures_dir / STORE / table.array)) as array:
            read = array.read()
            t = read.concat() if isinstance(array, tiledbsoma.DataFrame) else read.tables().concat()
        out[name] = Summary(t.num_rows, tuple(pc.sum(t[c]).as_py() for c in table.sum_columns))
    return out


def assert_every_row(got: Summary, want: Summary, what: str):
    if got != want:
        said = f"\nthe reader said:\n{got.notes}" if got.notes else ""
        pytest.fail(
            f"{what}: {got.rows} rows with sums {got.sums},"
            f" tiledbsoma reads {want.rows} rows with sums {want.sums}{said}",
            pytrace=False,
        )


# --------------------------------------------------------------------------------------
# readers


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT, **kw)
    assert r.returncode == 0, f"{cmd} exited {r.returncode}:\n{r.stderr[-3000:]}"
    return r


@functools.cache
def r_has(package: str) -> bool:
    if shutil.which("Rscript") is None:
        return False
    r = subprocess.run(["Rscript", "-e", f'quit(status = !requireNamespace("{package}", quietly = TRUE))'],
                       capture_output=True, timeout=60)
    return r.returncode == 0


# Reads `path` (args[1]) with the given R expression, prints its row count and the sums of
# the columns args[-1] (NROW and [[ ]] of NULL, which fread returns for an empty file, give 0).
R_SUMMARY = r"""
args <- commandArgs(trailingOnly = TRUE)
path <- args[1]
d <- {read}
cat(NROW(d), vapply(args[-1], function(col) sprintf("%.0f", sum(as.numeric(d[[col]]))), ""), "\n")
"""


def r_summary(read: str, path: Path, columns: tuple[str, ...]) -> Summary:
    r = run(["Rscript", "-e", R_SUMMARY.replace("{read}", read), str(path), *columns])
    rows, *sums = map(int, r.stdout.split())
    return Summary(rows, tuple(sums), r.stderr.strip())


def fread(path: Path, columns: tuple[str, ...]) -> Summary:
    return r_summary("data.table::fread(path, showProgress = FALSE)", path, columns)


def duckdb_frame(function: str, path: Path) -> pd.DataFrame:
    with duckdb.connect() as con:
        return con.execute(f"select * from {function}(?)", [str(path)]).df()


@dataclass(frozen=True)
class Reader:
    ext: str  # the data file it reads
    summary: Callable[[Path, tuple[str, ...]], Summary]
    needs_r: str | None = None  # the R package it needs
    mount_args: tuple[str, ...] = ()  # what the mount needs for this reader, beyond SMALL_LIMIT


def python_reader(ext: str, read: Callable[[Path], pd.DataFrame]) -> Reader:
    return Reader(ext, lambda path, columns: summarize(read(path), columns))


READERS = {
    "duckdb-read_csv": python_reader("csv", lambda p: duckdb_frame("read_csv", p)),
    "duckdb-read_json": python_reader("jsonl", lambda p: duckdb_frame("read_json", p)),
    "polars-read_csv": python_reader("csv", lambda p: pl.read_csv(p).to_pandas()),
    "polars-scan_csv": python_reader("csv", lambda p: pl.scan_csv(p).collect().to_pandas()),
    "polars-read_ndjson": python_reader("jsonl", lambda p: pl.read_ndjson(p).to_pandas()),
    "pandas-read_csv": python_reader("csv", pd.read_csv),
    "pyarrow-read_csv": python_reader("csv", lambda p: pyarrow.csv.read_csv(p).to_pandas()),
    "readr-read_csv": Reader(
        "csv",
        functools.partial(r_summary, "readr::read_csv(path, show_col_types = FALSE, progress = FALSE)"),
        needs_r="readr",
    ),
    "data.table-fread": Reader("csv", fread, needs_r="data.table", mount_args=("--exact-sizes",)),
}


def skip_without_r(package: str | None):
    if package and not r_has(package):
        pytest.skip(f"R's {package} is not installed (scripts/setup installs it)")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("table", TABLES)
@pytest.mark.parametrize("reader", READERS)
def test_first_read_gets_every_row(reader, table, fixtures_dir, expected):
    """The reader is the first to touch the file, on a fresh mount where opening does not
    generate it (--materialize-limit below its size)."""
    r, t = READERS[reader], TABLES[table]
    what = f"{reader} of {t.array}/data.{r.ext}"
    skip_without_r(r.needs_r)
    with mount_guard(fixtures_dir / STORE, "--materialize-limit", SMALL_LIMIT, *r.mount_args) as mp:
        try:
            got = r.summary(t.data_file(mp, r.ext), t.sum_columns)
        except Exception as e:  # an error instead of the rows fails too: shown as the reader said it
            got = e
    if isinstance(got, Exception):
        pytest.fail(f"{what}: {type(got).__name__}: {got}", pytrace=False)
    assert_every_row(got, expected[table], what)


@pytest.mark.timeout(120)
def test_fread_after_stat_with_exact_sizes(fixtures_dir, expected):
    """A size reported by a stat before the file was ever opened does not shorten fread."""
    skip_without_r("data.table")
    t = TABLES["X"]
    with mount_guard(fixtures_dir / STORE, "--exact-sizes") as mp:
        path = t.data_file(mp, "csv")
        os.stat(path)
        got = fread(path, t.sum_columns)
    assert_every_row(got, expected["X"], "fread after stat, --exact-sizes")


@pytest.mark.timeout(120)
def test_fread_small_file_on_default_mount(fixtures_dir, expected):
    """obs/data.csv is far below the default --materialize-limit (64M): fread, the first to
    touch it, gets every row."""
    skip_without_r("data.table")
    t = TABLES["obs"]
    with mount_guard(fixtures_dir / STORE) as mp:
        got = fread(t.data_file(mp, "csv"), t.sum_columns)
    assert_every_row(got, expected["obs"], "fread of obs/data.csv, default mount")


@pytest.mark.timeout(180)
def test_fread_of_a_file_a_fifth_below_the_limit(fixtures_dir, expected):
    """X's data.csv with --materialize-limit a quarter above its real size: its estimate (its
    index columns as wide as their stored numbers) is below the limit, so fread, the first
    to touch it, gets every row."""
    skip_without_r("data.table")
    t = TABLES["X"]
    with mount_guard(fixtures_dir / STORE, "--exact-sizes") as mp:
        real = os.stat(t.data_file(mp, "csv")).st_size
    with mount_guard(fixtures_dir / STORE, "--materialize-limit", str(real * 5 // 4)) as mp:
        got = fread(t.data_file(mp, "csv"), t.sum_columns)
    assert_every_row(got, expected["X"], f"fread of X/data.csv, limit {real * 5 // 4} for {real} bytes")


# --------------------------------------------------------------------------------------
# copies of a whole array directory


def tar_copy(src: Path, dst: Path):
    archive = dst.parent / f"{dst.name}.tar"
    run(["tar", "-cf", str(archive), "-C", str(src.parent), src.name])
    run(["tar", "-xf", str(archive), "-C", str(dst)])


COPIERS: dict[str, Callable[[Path, Path], None]] = {
    "tar": tar_copy,
    "rsync": lambda src, dst: run(["rsync", "-a", str(src), str(dst)]),
    "cp": lambda src, dst: run(["cp", "-a", str(src), str(dst)]),
}


def content_size(path: Path) -> str:
    if path.is_dir():
        return "a directory"
    return f"{len(path.read_bytes())} bytes" if path.exists() else "missing"


def assert_exact_copy(copier: str, mp, tmp_path: Path, expected: dict[str, Summary],
                      only=lambda path: True):
    """`copier` copies obs/ out of the fresh mount `mp` first; then every file of the copy
    (those `only` keeps) must hash as a plain read of the mount does, and the copied data.csv
    hold tiledbsoma's rows."""
    if shutil.which(copier) is None:
        pytest.skip(f"{copier} is not installed (scripts/setup installs it)")
    src, dst = Path(mp) / "obs", tmp_path / "copy"
    dst.mkdir()
    COPIERS[copier](src, dst)
    copied = {p: h for p, h in hash_tree(dst / "obs").items() if only(p)}
    served = {p: h for p, h in hash_tree(src).items() if only(p)}
    differ = sorted(p for p in copied.keys() | served.keys() if copied.get(p) != served.get(p))
    if differ:
        examples = "\n".join(
            f"  {p}: copy {content_size(dst / 'obs' / p)}, plain read {content_size(src / p)}"
            for p in differ[:5]
        )
        pytest.fail(f"{copier}: {len(differ)} of {len(served)} paths differ from a plain read, e.g.\n{examples}",
                    pytrace=False)
    t = TABLES["obs"]
    got = summarize(pd.read_csv(dst / "obs" / "data.csv"), t.sum_columns)
    assert_every_row(got, expected["obs"], f"{copier}'s copy of obs/data.csv")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("copier", COPIERS)
def test_copy_directory_with_exact_sizes(copier, fixtures_dir, tmp_path, expected):
    with mount_guard(fixtures_dir / STORE, "--exact-sizes") as mp:
        assert_exact_copy(copier, mp, tmp_path, expected)


@pytest.mark.timeout(120)
def test_tar_directory_on_default_mount(fixtures_dir, tmp_path, expected):
    """Every file of obs/ (its data files, its chunks in slices/<format>/, its categories in
    by/) is far below the default --materialize-limit (64M): a stat generates it, so tar
    archives it whole."""
    with mount_guard(fixtures_dir / STORE) as mp:
        assert_exact_copy("tar", mp, tmp_path, expected)
