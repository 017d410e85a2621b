"""The content cache at its limits: a file larger than the cache's file system,
or than `--cache-size`, is still read whole, every byte, as tiledbsoma reads the array;
nothing partial is cached; the cache stays under `--cache-size` while a large file is
written into it; the daemon lives on.

Each test puts the cache on a tmpfs of its own (mounted here, as root), so what the cache
takes on disk is the file system's own count, files removed but still open included.

Run: .venv/bin/python -m pytest tests/python/test_cache.py -q
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from harness.formats import check_delimited, fail_if, Problems
from harness.data_reference import arrays_of, ref_of

pytestmark = pytest.mark.timeout(300)


@contextlib.contextmanager
def small_file_system(size: str):
    """A tmpfs of `size` on a fresh directory; always unmounted and removed."""
    path = tempfile.mkdtemp(prefix="soma-mount-tmpfs-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], check=True, timeout=30)
    try:
        yield Path(path)
    finally:
        subprocess.run(["umount", "-l", path], timeout=30)
        os.rmdir(path)


def used_bytes(path: Path) -> int:
    """What the file system at `path` holds, in bytes."""
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def x_of_big(fixtures_dir):
    """The big store's X (a sparse matrix of numbers whose CSV is about 51 MB) and its
    reference as tiledbsoma reads it."""
    (node,) = [n for n in arrays_of(fixtures_dir, "big") if n.relpath == ("X",)]
    return node, ref_of(node)


def check_csv(ref, data: bytes, what: str):
    probs = Problems(what)
    check_delimited(ref, data.decode("utf-8"), "csv", probs)
    fail_if(probs.done(), f"problems in {what}")


def test_a_file_larger_than_the_cache_file_system_is_read_whole_and_not_cached(fixtures_dir, mount):
    """The cache is a 16 MiB file system; X's CSV is about 51 MB. Two readers at once each
    get every row tiledbsoma reads; it is served with a size of 0 (direct I/O) and
    nothing of it is left in the cache; the log says why; other files still work."""
    node, ref = x_of_big(fixtures_dir)
    with small_file_system("16m") as fs, mount(fixtures_dir / "big", "--cache-dir", fs / "cache") as mp:
        path = Path(mp, *node.relpath, "data.csv")
        got: dict[int, bytes | Exception] = {}

        def read(i: int):
            try:
                got[i] = path.read_bytes()
            except Exception as e:  # noqa: BLE001
                got[i] = e

        readers = [threading.Thread(target=read, args=(i,)) for i in range(2)]
        for t in readers:
            t.start()
        for t in readers:
            t.join(240)
        for i in range(2):
            assert isinstance(got.get(i), bytes), f"reader {i}: {got.get(i)!r}"
            assert len(got[i]) > 16 << 20, "the file is larger than the cache's file system"
            check_csv(ref, got[i], f"reader {i} of X/data.csv")
        assert path.stat().st_size == 0, "not cached: its size is not known"
        left = {p.name: p.stat().st_size for p in (fs / "cache").iterdir()}
        assert all(size < 1 << 20 for size in left.values()), f"partial content cached: {left}"
        assert not [n for n in left if n.endswith(".tmp")], f"temporary files left: {left}"
        log = Path(mp.log).read_text(errors="replace")
        assert "not cached (No space left on device" in log, log[-3000:]
        # The daemon lives on, and smaller files are cached as ever.
        meta = Path(mp, *node.relpath, "metadata.json")
        assert meta.read_bytes() and meta.stat().st_size == len(meta.read_bytes())
        assert mp.proc.poll() is None


def test_cache_size_holds_while_a_file_larger_than_a_tenth_of_it_is_written(fixtures_dir, mount):
    """--cache-size 90M, the cache holding X's TSV (51 MB): generating X's CSV (51 MB)
    evicts the TSV as the CSV grows, so the cache's file system never holds more than
    90 MiB (sampled all along); the CSV is then cached whole, with its exact size.
    A file larger than --cache-size is read whole and not cached."""
    node, ref = x_of_big(fixtures_dir)
    limit = 90 << 20
    with small_file_system("256m") as fs, mount(
        fixtures_dir / "big", "--cache-dir", fs / "cache", "--cache-size", "90M"
    ) as mp:
        x = Path(mp, *node.relpath)
        tsv = (x / "data.tsv").read_bytes()
        assert used_bytes(fs) >= len(tsv), "the TSV is cached"
        peak, done = [used_bytes(fs)], threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], used_bytes(fs))
                done.wait(0.005)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            csv = (x / "data.csv").read_bytes()
        finally:
            done.set()
            sampler.join(10)
        assert len(tsv) + len(csv) > limit, "both do not fit"
        assert peak[0] <= limit, f"the cache held {peak[0]} bytes, over --cache-size ({limit})"
        check_csv(ref, csv, "X/data.csv")
        assert (x / "data.csv").stat().st_size == len(csv), "cached whole: its exact size"
        assert (x / "data.tsv").stat().st_size == 0, "the TSV was evicted"
        # The JSON Lines (about 110 MB, more than --cache-size): read whole, not cached.
        jsonl = (x / "data.jsonl").read_bytes()
        assert len(jsonl) > limit
        assert jsonl.count(b"\n") == ref.nrows
        assert (x / "data.jsonl").stat().st_size == 0
        assert used_bytes(fs) <= limit
        log = Path(mp.log).read_text(errors="replace")
        assert "not cached" in log and "--cache-size" in log, log[-3000:]
        assert mp.proc.poll() is None
