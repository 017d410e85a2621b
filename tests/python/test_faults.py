"""Odd and broken stores, and load: soma-mount must never hand out a wrong byte, hang,
leak or die. Each broken store is built here, in a temporary directory, from
tiledbsoma (and tiledb-py for what tiledbsoma refuses to write)."""

from __future__ import annotations

import errno
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import tiledb
import tiledbsoma

from harness.mount import is_mounted, wait_until
from harness.process import rss_mb, thread_count
from harness.settings import EXIT_TIMEOUT


def _small_df(uri: str, n: int = 50) -> None:
    schema = pa.schema([("x", pa.int64()), ("s", pa.large_string())])
    with tiledbsoma.DataFrame.create(uri, schema=schema, domain=[(0, n - 1)]) as df:
        df.write(
            pa.table(
                {
                    "soma_joinid": pa.array(np.arange(n), pa.int64()),
                    "x": pa.array(np.arange(n) * 3, pa.int64()),
                    "s": pa.array([f"row {i}" for i in range(n)], pa.large_string()),
                }
            )
        )


def test_group_that_contains_itself_is_a_cycle_not_an_endless_tree(tmp_path, mount):
    root = str(tmp_path / "loop")
    with tiledbsoma.Collection.create(root) as c:
        c.add_new_collection("child")
    _small_df(str(tmp_path / "loop" / "df"))
    with tiledb.Group(root, "w") as g:
        g.add(root, name="myself")
        g.add(str(tmp_path / "loop" / "df"), name="df")
    with tiledb.Group(str(tmp_path / "loop" / "child"), "w") as g:
        g.add(root, name="parent")
    with mount(root) as mp:
        listing = set(os.listdir(mp))
        assert {"myself", "child", "df", "metadata.json"} <= listing
        assert os.listdir(Path(mp) / "myself") == ["error.txt"]
        assert "cycle" in (Path(mp) / "myself" / "error.txt").read_text()
        assert os.listdir(Path(mp) / "child" / "parent") == ["error.txt"]
        # A full recursive walk ends.
        r = subprocess.run(["ls", "-R", mp], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert (Path(mp) / "df" / "data.csv").read_text().count("\n") == 51


def test_truncated_fragment_is_eio_and_the_rest_keeps_working(tmp_path, mount):
    store = tmp_path / "store"
    with tiledbsoma.Collection.create(str(store)):
        pass
    _small_df(str(store / "good"))
    _small_df(str(store / "bad"))
    with tiledbsoma.open(str(store), "w") as c:
        c.set("good", tiledbsoma.open(str(store / "good")), use_relative_uri=True)
        c.set("bad", tiledbsoma.open(str(store / "bad")), use_relative_uri=True)
    # Cut every data file of the bad array's fragment in half.
    for f in (store / "bad" / "__fragments").rglob("*.tdb"):
        if f.stat().st_size > 16 and f.name != "__fragment_metadata.tdb":
            with open(f, "r+b") as fh:
                fh.truncate(f.stat().st_size // 2)
    with mount(store) as mp:
        with pytest.raises(OSError) as err:
            (Path(mp) / "bad" / "data.csv").read_bytes()
        assert err.value.errno == errno.EIO
        assert (Path(mp) / "good" / "data.csv").read_text().count("\n") == 51
        assert "bad" in os.listdir(mp)
        log = Path(mp.log).read_text(errors="replace")
        assert "ERROR" in log and "bad" in log, log[-2000:]
        assert mp.proc.poll() is None, "the daemon died"


def test_very_large_metadata_values(tmp_path, mount):
    uri = str(tmp_path / "big_md")
    _small_df(uri)
    big = "x" * (4 << 20)
    with tiledbsoma.open(uri, "w") as df:
        df.metadata["huge"] = big
    with mount(uri) as mp:
        path = Path(mp) / "metadata.json"
        text = path.read_text()
        assert os.stat(path).st_size == len(text.encode())
        import json

        assert json.loads(text)["huge"] == big


def test_member_that_is_not_a_tiledb_object(tmp_path, mount):
    root = str(tmp_path / "odd")
    with tiledbsoma.Collection.create(root):
        pass
    plain = tmp_path / "not-tiledb"
    plain.mkdir()
    (plain / "readme.txt").write_text("hello")
    _small_df(str(tmp_path / "ok"))
    with tiledb.Group(root, "w") as g:
        g.add(str(tmp_path / "ok"), name="ok")
    # Point a second member at a TileDB object, then replace it with a plain directory.
    _small_df(str(tmp_path / "soon-plain"))
    with tiledb.Group(root, "w") as g:
        g.add(str(tmp_path / "soon-plain"), name="plain")
    shutil.rmtree(tmp_path / "soon-plain")
    shutil.copytree(plain, tmp_path / "soon-plain")
    with mount(root) as mp:
        assert os.listdir(Path(mp) / "plain") == ["error.txt"]
        assert "soon-plain" in (Path(mp) / "plain" / "error.txt").read_text()
        assert (Path(mp) / "ok" / "data.csv").read_text().count("\n") == 51


# --------------------------------------------------------------------------------------
# load


def _read_all(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _read_random(path: Path, size: int, rng: random.Random, count: int) -> list[tuple[int, bytes]]:
    out = []
    with open(path, "rb") as f:
        for _ in range(count):
            offset = rng.randrange(0, max(1, size))
            f.seek(offset)
            out.append((offset, f.read(rng.randrange(1, 200_000))))
    return out


def _all_at_once(calls: list, what: str) -> list:
    """Runs every call on a thread of its own, all released at once, and returns their
    results in order. Fails the test if one is still running after 60 s or raised."""
    start = threading.Barrier(len(calls))
    results: list = [None] * len(calls)
    errors: list[str] = []

    def run(i: int) -> None:
        try:
            start.wait()
            results[i] = calls[i]()
        except Exception as e:  # noqa: BLE001 -- every failure is reported
            errors.append(f"{what} {i}: {e!r}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), f"a {what} hung"
    assert not errors, errors
    return results


@pytest.mark.timeout(300)
def test_sixteen_concurrent_readers(fixtures_dir, mount):
    """16 readers over the same and different files, sequential and random offsets, for a
    bounded time: every byte equals a single reader's, memory stays bounded, no deadlock."""
    with mount(fixtures_dir / "big", "--materialize-limit", "1M") as ref_mp:
        ref = {
            "csv": _read_all(Path(ref_mp) / "X" / "data.csv"),
            "tsv": _read_all(Path(ref_mp) / "X" / "data.tsv"),
        }
    with mount(fixtures_dir / "hand") as hand_mp:
        npy_path = Path(hand_mp) / "ms" / "RNA" / "obsm" / "X_pca" / "data.npy"
        ref["npy"] = _read_all(npy_path)
    with mount(fixtures_dir / "big", "--materialize-limit", "1M") as mp, mount(fixtures_dir / "hand") as hand:
        paths = {
            "csv": Path(mp) / "X" / "data.csv",
            "tsv": Path(mp) / "X" / "data.tsv",
            "npy": Path(hand) / "ms" / "RNA" / "obsm" / "X_pca" / "data.npy",
        }
        errors: list[str] = []
        peak = [0.0]
        deadline = time.monotonic() + 20

        def worker(i: int) -> None:
            rng = random.Random(i)
            kinds = ["csv", "tsv", "npy"]
            try:
                while time.monotonic() < deadline:
                    kind = kinds[(i + rng.randrange(3)) % 3]
                    if i % 2 == 0 or kind == "npy":
                        if kind == "npy":
                            for offset, data in _read_random(paths[kind], len(ref[kind]), rng, 20):
                                if data != ref[kind][offset : offset + len(data)]:
                                    errors.append(f"reader {i}: {kind} bytes differ at {offset}")
                        else:
                            data = _read_all(paths[kind])
                            if data != ref[kind]:
                                errors.append(f"reader {i}: whole {kind} differs ({len(data)} bytes)")
                    else:
                        # Random offsets on a data file: once generated it is exact and seekable.
                        data = _read_all(paths[kind])
                        if data != ref[kind]:
                            errors.append(f"reader {i}: whole {kind} differs")
                        for offset, part in _read_random(paths[kind], len(ref[kind]), rng, 10):
                            if part != ref[kind][offset : offset + len(part)]:
                                errors.append(f"reader {i}: {kind} bytes differ at {offset}")
                    peak[0] = max(peak[0], rss_mb(mp.proc.pid))
            except Exception as e:  # noqa: BLE001 -- every failure is reported
                errors.append(f"reader {i}: {e!r}")

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        hung = [t for t in threads if t.is_alive()]
        assert not hung, f"{len(hung)} readers still blocked 100 s after the deadline"
        assert not errors, "\n".join(errors[:20])
        assert mp.proc.poll() is None
        print(f"\nsixteen readers: the daemon's RSS peaked at {peak[0]:.0f} MB")
        assert peak[0] < 1024, f"daemon RSS reached {peak[0]:.0f} MB"


@pytest.mark.timeout(120)
def test_concurrent_first_looks_list_each_directory_once(fixtures_dir, mount):
    """Sixteen threads look up different entries of the same directories of a fresh mount at
    once. Each directory is listed once (the others wait for that listing), so the inode a
    lookup gave an entry is the one its directory's listing shows."""
    with mount(fixtures_dir / "pbmc") as mp:
        root = Path(mp)
        paths = ["metadata.json", "obs", "ms", "obs/metadata.json", "obs/data.csv", "obs/by",
                 "obs/schema.json", "ms/RNA", "ms/metadata.json", "ms/RNA/X", "ms/RNA/var",
                 "ms/RNA/metadata.json", "ms/RNA/X/data", "ms/RNA/var/data.csv",
                 "ms/RNA/X/data/schema.json", "ms/RNA/var/metadata.json"]
        inodes = _all_at_once([lambda rel=rel: os.stat(root / rel).st_ino for rel in paths], "lookup")
        for rel, ino in zip(paths, inodes):
            parent = (root / rel).parent
            listed = {e.name: e.inode() for e in os.scandir(parent)}
            name = Path(rel).name
            assert listed.get(name) == ino, f"{rel}: looked up as inode {ino}, listed as {listed.get(name)}"


@pytest.mark.timeout(120)
def test_concurrent_opens_generate_a_file_once(fixtures_dir, mount):
    """Eight threads open the same Parquet file (generated whole on open) of a fresh mount at
    once: the file is generated once, the other opens wait for it, and all read the same
    bytes. Counted from the daemon's debug log, which names every file it generates."""
    rel = "ms/RNA/X/data/data.parquet"
    with mount(fixtures_dir / "pbmc", "-vv") as mp:
        os.listdir(Path(mp) / "ms" / "RNA" / "X" / "data")
        got = _all_at_once([lambda: _read_all(Path(mp) / rel)] * 8, "read")
        log = Path(mp.log).read_text(errors="replace")
    assert len(got) == 8 and len(set(got)) == 1 and got[0].startswith(b"PAR1"), [len(g) for g in got]
    generated = [line for line in log.splitlines() if "generated" in line and "as parquet" in line]
    assert len(generated) == 1, f"data.parquet generated {len(generated)} times: {generated}"


@pytest.mark.timeout(120)
def test_readers_killed_mid_file_free_their_work(fixtures_dir, mount):
    with mount(fixtures_dir / "big", "--materialize-limit", "0") as mp:
        path = Path(mp) / "X" / "data.csv"
        os.listdir(Path(mp) / "X")
        baseline = thread_count(mp.proc.pid)
        readers = []
        for _ in range(6):
            p = subprocess.Popen(["sh", "-c", f"head -c 100000 '{path}' > /dev/null; sleep 30"])
            readers.append(p)
        # Also a reader killed while reading.
        slow = subprocess.Popen(["sh", "-c", f"cat '{path}' | (head -c 1000; sleep 30) > /dev/null"])
        time.sleep(1.0)
        for p in readers + [slow]:
            p.kill()
            p.wait(EXIT_TIMEOUT)
        subprocess.run(["pkill", "-f", f"cat {path}"], check=False)
        # The generators behind the closed files stop; the daemon's threads go back down.
        assert wait_until(lambda: thread_count(mp.proc.pid) <= baseline + 2, 20), (
            f"threads: {thread_count(mp.proc.pid)}, baseline {baseline}"
        )
        # And it still serves the whole file correctly.
        assert path.read_bytes().count(b"\n") > 1000


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "umount"])
def test_unmount_during_active_reads(how, fixtures_dir, mount):
    """SIGTERM, SIGINT and umount while readers are in the middle of files: the daemon
    stops the files' generation, waits for it and ends with status 0; no mount is left, and
    the readers get an error or EOF, never a hang."""
    with mount(fixtures_dir / "big", "--materialize-limit", "0") as mp:
        path = Path(mp) / "X" / "data.csv"
        readers = [
            subprocess.Popen(["dd", f"if={path}", "of=/dev/null", "bs=4096"], stderr=subprocess.DEVNULL)
            for _ in range(4)
        ]
        time.sleep(0.3)
        if how == "umount":
            # Busy: a plain umount fails while files are open; the lazy one detaches.
            r = subprocess.run(["umount", mp], capture_output=True, text=True, timeout=EXIT_TIMEOUT)
            if r.returncode != 0:
                subprocess.run(["umount", "-l", mp], check=True, timeout=EXIT_TIMEOUT)
        else:
            mp.proc.send_signal(getattr(signal, how))
        try:
            rc = mp.proc.wait(30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the daemon still runs 30 s after {how} during reads")
        assert rc == 0, f"the daemon ended with status {rc} after {how} during reads"
        assert b"still ran" not in mp.log.read_bytes(), "the daemon gave up waiting for its work"
        for r in readers:
            try:
                r.wait(30)
            except subprocess.TimeoutExpired:
                r.kill()
                pytest.fail(f"a reader hung after {how}")
        assert wait_until(lambda: not is_mounted(mp), 5), f"{mp} is still mounted after {how}"
