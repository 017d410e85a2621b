"""Cells counted from fragment metadata (docs/SEMANTICS.md, "Sizes"): the Parquet of an ND
array and of each chunk of `slices/parquet/` is sized from its cell count, which comes from
the fragments' tiles when no two fragments can hold the same cell, and from reading the
coordinates otherwise. Either way the sizes are exact.

Each store is one SparseNDArray written with tiledbsoma in 1 to 4 fragments, at increasing
timestamps, with a small capacity and small tile extents (many tiles, many chunks):

- appended: each fragment writes rows no other one holds (their boxes apart): the whole
  array counted from fragment metadata, and each chunk too where it is cut between tiles
  (tiles that share rows are never parted, and where they hold more than four chunks'
  cells the chunks are cut from estimates and counted from the coordinates);
- overwritten: a later fragment writes again some cells an earlier one holds (their boxes
  overlap; the later value wins): counted by reading the coordinates;
- deleted: some rows deleted after they were written: counted by reading the coordinates.

On a fresh mount (-v, a --chunk-cells of 300 or of 100,000), for every file of `slices/parquet/` and for
`data.parquet`: the size `stat` shows first is the size of the bytes read, and the rows are
tiledbsoma's read of the same range. The daemon's log says which way each count went.

Run: .venv/bin/python -m pytest tests/python/test_counts.py -q
"""

from __future__ import annotations

import io
import os
import random
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness import tree_reference  # noqa: F401  (quiets tiledbsoma's warnings)
import tiledbsoma
from harness.mount import mount_guard
from harness.random_store import Clock

KINDS = ("appended", "overwritten", "deleted")
SEEDS = range(4)
FROM_METADATA = "counted from fragment metadata"
FROM_COORDINATES = "counted by reading their coordinates"


def build(uri: str, kind: str, seed: int) -> int:
    """Writes the store; returns how many fragments hold its cells."""
    rng = random.Random(f"{kind}-{seed}")
    rows, cols = rng.choice([200, 600, 1500]), rng.choice([5, 40])
    fragments = rng.randint(2 if kind != "appended" else 1, 4)
    config = {
        "tiledb": {
            "create": {
                "capacity": rng.choice([7, 16, 50]),
                "dims": {"soma_dim_0": {"tile": rng.choice([3, 10, 64])}, "soma_dim_1": {"tile": rng.choice([2, 8])}},
            }
        }
    }
    clock = Clock()
    tiledbsoma.SparseNDArray.create(
        uri, type=pa.float32(), shape=(rows, cols), platform_config=config, tiledb_timestamp=clock()
    ).close()

    def write(cells: list[tuple[int, int]]) -> None:
        table = pa.table({
            "soma_dim_0": pa.array([c[0] for c in cells], pa.int64()),
            "soma_dim_1": pa.array([c[1] for c in cells], pa.int64()),
            "soma_data": pa.array([rng.random() for _ in cells], pa.float32()),
        })
        with tiledbsoma.open(uri, "w", tiledb_timestamp=clock()) as a:
            a.write(table)

    # Rows in blocks, one a fragment: their boxes apart.
    bounds = sorted(rng.sample(range(1, rows), fragments - 1)) if fragments > 1 else []
    blocks = list(zip([0] + bounds, bounds + [rows]))
    written: list[tuple[int, int]] = []
    for lo, hi in blocks:
        cells = sorted({(rng.randrange(lo, hi), rng.randrange(cols)) for _ in range(rng.randint(1, 3 * (hi - lo)))})
        if kind == "overwritten" and written:
            cells = sorted(set(cells) | set(rng.sample(written, max(1, len(written) // 5))))
        write(cells)
        written += cells
    if kind == "deleted":
        lo = rng.randrange(rows)
        with tiledbsoma.open(uri, "d", tiledb_timestamp=clock()) as a:
            a.delete_cells((slice(lo, min(rows - 1, lo + rng.choice([0, 5, 50]))),))
    clock.wait_past_last()
    return len(blocks)


def tiledbsoma_rows(uri: str, lo: int | None = None, hi: int | None = None) -> pa.Table:
    with tiledbsoma.open(uri) as a:
        coords = (slice(lo, hi),) if lo is not None else ()
        table = a.read(coords).tables().concat()
    return table.sort_by([("soma_dim_0", "ascending"), ("soma_dim_1", "ascending")])


def chunk_range(name: str) -> tuple[int, int]:
    m = re.fullmatch(r"(-?\d+)-(-?\d+)\.parquet", name)
    assert m, name
    return int(m.group(1)), int(m.group(2))


def check_file(path: Path, expected: pa.Table) -> None:
    size = os.stat(path).st_size  # the first stat: before any read
    data = path.read_bytes()
    assert size == len(data), f"{path.name}: stat {size}, read {len(data)} bytes"
    got = pq.read_table(io.BytesIO(data))
    assert got.num_rows == expected.num_rows, f"{path.name}: {got.num_rows} rows, tiledbsoma {expected.num_rows}"
    for column in ("soma_dim_0", "soma_dim_1", "soma_data"):
        assert got.column(column).to_pylist() == expected.column(column).to_pylist(), f"{path.name}: {column}"


@pytest.mark.parametrize("chunk_cells", [300, 100_000])
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", KINDS)
def test_parquet_sizes_are_exact_and_counted_from_metadata_where_fragments_allow(tmp_path, kind, seed, chunk_cells):
    uri = str(tmp_path / "X")
    build(uri, kind, seed)
    log = tmp_path / "daemon.log"
    with mount_guard(uri, "-v", "--chunk-cells", str(chunk_cells), log=log) as mp:
        parquet = Path(mp) / "slices" / "parquet"
        names = sorted(os.listdir(parquet), key=lambda n: chunk_range(n)[0])
        assert names, "slices/parquet/ lists the chunks"
        total = 0
        previous_hi = None
        for name in names:
            lo, hi = chunk_range(name)
            if previous_hi is not None:
                assert lo == previous_hi + 1, f"chunks follow one another: {names}"
            previous_hi = hi
            expected = tiledbsoma_rows(uri, lo, hi)
            check_file(parquet / name, expected)
            total += expected.num_rows
        whole = tiledbsoma_rows(uri)
        assert total == whole.num_rows, "the chunks hold every cell once"
        check_file(Path(mp) / "data.parquet", whole)
    text = log.read_text()
    if kind == "appended":
        # The whole array's edges fall between tiles; a chunk's do where tiles leave room.
        assert f": {whole.num_rows} cells, {FROM_METADATA}" in text, text[-3000:]
        assert f"{FROM_COORDINATES} (fragments overlap)" not in text, text[-3000:]
        if chunk_cells >= 100_000:
            # Every chunk between tiles (there is room for all of them): nothing read.
            assert FROM_COORDINATES not in text, text[-3000:]
    else:
        why = "fragments overlap" if kind == "overwritten" else "cells may have been deleted"
        assert f"{FROM_COORDINATES} ({why})" in text, text[-3000:]
        assert FROM_METADATA not in text, text[-3000:]
