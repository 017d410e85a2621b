"""Integration tests for data.npy (docs/REFERENCE.md "Files in an array directory"):
data.npy of every numeric DenseNDArray, on a fresh mount: exact size at stat before any
read, independent byte ranges (pread) and numpy memory-map slices, against tiledbsoma.

Run: .venv/bin/python -m pytest tests/python/test_npy.py -q
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from numpy.lib import format as npformat

from harness import data_reference, formats, tree_reference
from harness.formats import fail_if

NPY_STORES = ["hand", "pbmc", "scene", "v1"]

pytestmark = pytest.mark.timeout(300)


# --------------------------------------------------------------------------------------
# data.npy on a fresh mount


def dense_nodes(fixtures_dir, store):
    out = []
    for n in tree_reference.walk_store(fixtures_dir, store):
        if n.kind == "soma_array" and n.soma_type == "SOMADenseNDArray":
            out.append(n)
    return out


def _npy_header(f) -> tuple[tuple, bool, np.dtype, int]:
    version = npformat.read_magic(f)
    shape, fortran, dtype = (
        npformat.read_array_header_1_0(f) if version == (1, 0) else npformat.read_array_header_2_0(f)
    )
    return shape, fortran, dtype, f.tell()


def random_slices(shape, rng, n):
    out = []
    for k in range(n):
        sl = []
        for s in shape:
            kind = (k + len(sl)) % 4
            if kind == 0:  # a range
                a, b = sorted(int(x) for x in rng.integers(0, s + 1, size=2))
                sl.append(slice(a, max(b, a + 1)))
            elif kind == 1:  # one index
                sl.append(int(rng.integers(0, s)))
            elif kind == 2:  # strided
                sl.append(slice(int(rng.integers(0, s)), None, int(rng.integers(1, 4))))
            else:  # reversed
                sl.append(slice(None, None, -1))
        out.append(tuple(sl))
    return out


@pytest.mark.parametrize("store", NPY_STORES)
def test_npy_fresh_mount(store, fixtures_dir, mount):
    """On a fresh mount: stat of data.npy says header + cells x itemsize before any
    read; random byte ranges read on their own (pread, first the far end) equal those of
    tiledbsoma's values; numpy.load(mmap_mode="r") slices equal tiledbsoma's read."""
    nodes = [n for n in dense_nodes(fixtures_dir, store) if data_reference.ref_of(n).npy]
    assert nodes, f"no numeric dense arrays in {store}"
    problems = []
    with mount(fixtures_dir / store) as mp:
        for node in nodes:
            want = data_reference.ref_of(node).dense
            path = Path(mp).joinpath(*node.relpath) / "data.npy"
            where = node.display
            try:
                st0 = os.stat(path).st_size
                with open(path, "rb") as f:
                    shape, fortran, dtype, off = _npy_header(f)
            except Exception as e:  # noqa: BLE001
                problems.append(f"{where}: data.npy: {type(e).__name__}: {e}")
                continue
            if tuple(shape) != want.shape or fortran or dtype != want.dtype:
                problems.append(f"{where}: header shape={shape} fortran={fortran} dtype={dtype}, expected {want.shape} C {want.dtype}")
                continue
            if off % 64:
                problems.append(f"{where}: data starts at byte {off}, not a multiple of 64")
            expect = off + want.size * want.dtype.itemsize
            if st0 != expect:
                problems.append(f"{where}: stat before any read says {st0}, header {off} + {want.size} cells x {want.dtype.itemsize} = {expect}")
            body = want.tobytes(order="C")
            rng = np.random.default_rng(want.size + off)
            with open(path, "rb") as f:
                ranges = [(max(0, len(body) - 17), 17), (0, 1)]
                ranges += [(int(rng.integers(0, max(1, len(body)))), int(rng.integers(1, 5000))) for _ in range(20)]
                for start, n in ranges:
                    got = os.pread(f.fileno(), n, off + start)
                    if got != body[start:start + n]:
                        problems.append(f"{where}: pread({n}, {off + start}) differs from tiledbsoma's values")
                        break
                if os.pread(f.fileno(), 10, expect) != b"":
                    problems.append(f"{where}: bytes past the reported size")
            try:
                mm = np.load(path, mmap_mode="r")
            except Exception as e:  # noqa: BLE001
                problems.append(f"{where}: numpy.load(mmap_mode='r') fails: {type(e).__name__}: {e}")
                continue
            for sl in random_slices(want.shape, rng, 30):
                if not formats.arrays_equal(np.asarray(mm[sl]), np.asarray(want[sl])):
                    problems.append(f"{where}: mmap slice {sl} differs from tiledbsoma")
                    break
            if not formats.arrays_equal(np.array(mm), want):
                problems.append(f"{where}: the whole memory map differs from tiledbsoma")
            del mm
    fail_if(problems, f"data.npy problems in {store} ({len(nodes)} arrays)")


