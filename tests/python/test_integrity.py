"""No silent data loss: every file is whole, or its readers get an error (docs/REFERENCE.md, "Sizes
and reads" and "Errors").

- A generation that fails anywhere (its reader thread, an encoder thread, the commit) is an
  error for its readers (EIO), leaves nothing in the cache, and the next open generates the
  file afresh and whole. Faults are injected with SOMA_MOUNT_FAULT=<point>:<n> (the n-th
  pass through the point panics, once; src/fault.rs).
- The shapes of store that once lost rows, misordered them, crashed the daemon or failed a
  whole array, each written with tiledbsoma here and compared with what tiledbsoma reads.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet
import pytest

from harness import tree_reference  # noqa: F401  (quiets tiledbsoma's warnings)
import tiledbsoma
from harness.mount import mount_guard, wait_until

SMALL_LIMIT = "1K"  # below every data file read here: opening streams it


def cache_entries(mp) -> list[str]:
    """The files in a mount's cache directory: committed entries and leftovers."""
    return sorted(os.listdir(mp.cache_dir))


def stat_or_none(path):
    """os.stat(path), or None while it fails with EIO."""
    try:
        return os.stat(path)
    except OSError as e:
        if e.errno != errno.EIO:
            raise
        return None


def read_bytes(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def nnz(uri) -> int:
    with tiledbsoma.SparseNDArray.open(str(uri)) as x:
        return x.nnz


# --------------------------------------------------------------------------------------
# failures inside a generation


@pytest.fixture(scope="module")
def pbmc_x(fixtures_dir):
    """pbmc's X layer: its path under a mount, and the rows tiledbsoma reads of it."""
    return "ms/RNA/X/data", nnz(fixtures_dir / "pbmc" / "ms" / "RNA" / "X" / "data")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("point", ["read:2", "encode:3", "commit:1"])
def test_a_streamed_generation_that_fails_is_an_error_and_leaves_nothing(
    point, fixtures_dir, pbmc_x, monkeypatch
):
    monkeypatch.setenv("SOMA_MOUNT_FAULT", point)
    array, rows = pbmc_x
    with mount_guard(fixtures_dir / "pbmc", "--materialize-limit", SMALL_LIMIT) as mp:
        path = Path(mp) / array / "data.csv"
        with pytest.raises(OSError) as failed:
            read_bytes(path)
        assert failed.value.errno == errno.EIO
        assert not [e for e in cache_entries(mp) if e.endswith(".data")], "a failed file was cached"
        # The kernel tells the daemon that the file was closed after close() returns
        # (FUSE's release is sent in the background): until then a stat still asks about
        # the failed generation that the open handle reads, and fails with it.
        assert wait_until(lambda: stat_or_none(path) is not None, 5), "stat fails after close"
        assert os.stat(path).st_size == 0, "a failed file has no size"
        # The fault fires once: the next open generates the file afresh, and whole.
        text = read_bytes(path)
        assert text.count(b"\n") == rows + 1
        assert os.stat(path).st_size == len(text)
        assert "fault injected" in mp.log.read_text(errors="replace")


@pytest.mark.timeout(120)
def test_a_whole_generation_that_fails_is_an_error_and_is_retried(fixtures_dir, pbmc_x, monkeypatch):
    """Parquet is generated whole when opened: the open itself fails, then succeeds."""
    monkeypatch.setenv("SOMA_MOUNT_FAULT", "read:1")
    array, rows = pbmc_x
    with mount_guard(fixtures_dir / "pbmc") as mp:
        path = Path(mp) / array / "data.parquet"
        with pytest.raises(OSError) as failed:
            open(path, "rb").close()
        assert failed.value.errno == errno.EIO
        assert cache_entries(mp) == []
        assert pa.parquet.read_table(path).num_rows == rows


@pytest.mark.timeout(120)
def test_fstat_of_a_generation_that_fails_is_an_error(fixtures_dir, pbmc_x, monkeypatch):
    """DuckDB opens, then fstats: a failure must not read as an empty file."""
    monkeypatch.setenv("SOMA_MOUNT_FAULT", "read:3")
    array, _ = pbmc_x
    with mount_guard(fixtures_dir / "pbmc", "--materialize-limit", SMALL_LIMIT) as mp:
        with open(Path(mp) / array / "data.tsv", "rb") as f:
            with pytest.raises(OSError) as failed:
                os.fstat(f.fileno())
        assert failed.value.errno == errno.EIO


@pytest.mark.timeout(120)
def test_fstat_waits_for_the_exact_size(fixtures_dir, pbmc_x):
    array, rows = pbmc_x
    with mount_guard(fixtures_dir / "pbmc", "--materialize-limit", SMALL_LIMIT) as mp:
        path = Path(mp) / array / "data.jsonl"
        assert os.stat(path).st_size == 0, "not generated yet: size 0"
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            text = f.read()
        assert size == len(text) > 0
        assert text.count(b"\n") == rows


# --------------------------------------------------------------------------------------
# shapes of store that once went wrong


def write_frame(uri, schema, index, domain, table, **create):
    with tiledbsoma.DataFrame.create(
        str(uri), schema=schema, index_column_names=index, domain=domain, **create
    ) as df:
        df.write(table)


@pytest.fixture(scope="module")
def odd_stores(tmp_path_factory):
    """A collection of the data frames that once went wrong, written by tiledbsoma."""
    root = tmp_path_factory.mktemp("odd") / "odd"
    tiledbsoma.Collection.create(str(root)).close()
    ints = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("v", pa.int32())])

    # Two int64 index columns, the first's domain starting off the tile grid (tiles are laid
    # out from the schema domain, near the bottom of the int64 range).
    a, b = (g.ravel() for g in np.meshgrid(np.arange(-3000, 3000), np.arange(10), indexing="ij"))
    write_frame(root / "negative", ints, ["a", "b"], [(-3000, 2999), (0, 9)],
                pa.table({"soma_joinid": np.arange(a.size), "a": a, "b": b,
                          "v": np.arange(a.size, dtype=np.int32)}))
    # A tile extent that is not a power of two, even though the domain starts at 0.
    a, b = np.repeat(np.arange(16), 2), np.tile([0, 5], 16)
    write_frame(root / "extent3", ints, ["a", "b"], [(0, 100), (0, 9)],
                pa.table({"soma_joinid": np.arange(32), "a": a, "b": b, "v": np.arange(32, dtype=np.int32)}),
                platform_config={"tiledb": {"create": {"dims": {"a": {"tile": 3}}}}})
    # Three index columns, far from zero.
    a, b, c = (g.ravel() for g in np.meshgrid(np.arange(10**12, 10**12 + 40), np.arange(-3, 3),
                                               np.arange(4), indexing="ij"))
    three = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("c", pa.int64()), ("v", pa.int32())])
    write_frame(root / "three", three, ["a", "b", "c"],
                [(10**12, 10**12 + 99), (-3, 2), (0, 3)],
                pa.table({"soma_joinid": np.arange(a.size), "a": a, "b": b, "c": c,
                          "v": np.arange(a.size, dtype=np.int32)}),
                platform_config={"tiledb": {"create": {"dims": {"a": {"tile": 7}, "b": {"tile": 5}}}}})
    # A string index holding only the empty string.
    write_frame(root / "empty_string", pa.schema([("s", pa.large_string()), ("v", pa.int32())]),
                ["s"], [None],
                pa.table({"soma_joinid": [0], "s": pa.array([""], pa.large_string()),
                          "v": pa.array([1], pa.int32())}))
    # The same under a second index column.
    write_frame(root / "empty_string_2d",
                pa.schema([("s", pa.large_string()), ("i", pa.int64()), ("v", pa.int32())]),
                ["s", "i"], [None, (0, 9)],
                pa.table({"soma_joinid": [0, 1], "s": pa.array(["", ""], pa.large_string()),
                          "i": [0, 3], "v": pa.array([1, 2], pa.int32())}))
    # Categoricals with numeric labels, entirely null: enumerations without labels.
    nulls = pa.array([None] * 3, pa.int32())
    write_frame(root / "null_categories",
                pa.schema([("f", pa.dictionary(pa.int32(), pa.float64())),
                           ("i", pa.dictionary(pa.int32(), pa.int64()))]),
                ["soma_joinid"], [(0, 9)],
                pa.table({"soma_joinid": np.arange(3),
                          "f": pa.DictionaryArray.from_arrays(nulls, pa.array([], pa.float64())),
                          "i": pa.DictionaryArray.from_arrays(nulls, pa.array([], pa.int64()))}))
    with tiledbsoma.Collection.open(str(root), "w") as coll:
        for name in ["negative", "extent3", "three", "empty_string", "empty_string_2d", "null_categories"]:
            coll.set(name, tiledbsoma.DataFrame.open(str(root / name)), use_relative_uri=True)
    return root


def expected_frame(uri, coords=()) -> pd.DataFrame:
    """What tiledbsoma reads, rows sorted by the index columns, as text would give it."""
    with tiledbsoma.DataFrame.open(str(uri)) as df:
        index = list(df.index_column_names)
        table = df.read(coords=coords).concat()
        names = [*index, *(n for n in df.schema.names if n not in index)]
    return table.to_pandas()[names].sort_values(index, kind="stable").reset_index(drop=True)


def served_frame(path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=False, na_values=[""], dtype=object)


def assert_same_rows(path, expected: pd.DataFrame):
    got = served_frame(path)
    assert list(got.columns) == list(expected.columns)
    assert len(got) == len(expected), f"{path}: {len(got)} rows, tiledbsoma reads {len(expected)}"
    want = expected.astype(object).where(expected.notna(), None).astype(str)
    have = got.where(got.notna(), None).astype(str)
    mismatched = (want.replace({'""': ""}) != have.replace({'""': ""})).any(axis=1)
    assert not mismatched.any(), f"{path}: first differing row {int(mismatched.idxmax())}"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", ["negative", "extent3", "three"])
def test_several_int64_index_columns_read_whole_and_sorted(name, odd_stores):
    expected = expected_frame(odd_stores / name)
    for limit in ("1K", "1G"):  # streamed and generated whole: one reader for both
        with mount_guard(odd_stores, "--materialize-limit", limit) as mp:
            assert_same_rows(Path(mp) / name / "data.csv", expected)


@pytest.mark.timeout(120)
def test_several_index_columns_sliced(odd_stores):
    with mount_guard(odd_stores) as mp:
        got = served_frame(Path(mp) / "negative" / "slices" / "-1000--990,3-4.csv")
        expected = expected_frame(odd_stores / "negative", coords=(slice(-1000, -990), slice(3, 4)))
        assert len(got) == len(expected) == 22
        assert got["a"].astype(int).tolist() == expected["a"].tolist()
        assert got["b"].astype(int).tolist() == expected["b"].tolist()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["empty_string", "empty_string_2d"])
def test_the_empty_string_slice_is_served_and_the_daemon_lives(name, odd_stores):
    with mount_guard(odd_stores) as mp:
        text = read_bytes(Path(mp) / name / "slices" / "%00.csv").decode()
        assert text.splitlines()[1:] == [line for line in read_bytes(Path(mp) / name / "data.csv").decode().splitlines()[1:]]
        assert len(text.splitlines()) == 1 + len(expected_frame(odd_stores / name, coords=([""],)))
        # Values that are not there: a header alone.
        assert read_bytes(Path(mp) / name / "slices" / "x.csv").decode().count("\n") == 1
        assert mp.proc.poll() is None, "the daemon died"
        assert "metadata.json" in os.listdir(mp)


@pytest.mark.timeout(120)
def test_categoricals_without_labels_read_as_nulls(odd_stores):
    with mount_guard(odd_stores) as mp:
        array = Path(mp) / "null_categories"
        assert read_bytes(array / "data.csv").decode().splitlines() == ["soma_joinid,f,i", "0,,", "1,,", "2,,"]
        table = pa.parquet.read_table(array / "data.parquet")
        assert table.num_rows == 3 and table.column("f").null_count == 3
        assert os.listdir(array / "by" / "f") == ["__null__"]
        assert read_bytes(array / "by" / "f" / "__null__" / "data.csv").decode().count("\n") == 4
