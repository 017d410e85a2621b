"""Whole-file behaviour of a multi-megabyte data file with ordinary tools
(docs/REFERENCE.md "Sizes and reads"): big/X/data.csv (~3.2M cells, ~50 MB) is read by cat,
head, tail, wc, cp, Python, pandas and polars, each on a fresh mount with a fresh
--cache-dir and a --materialize-limit below its size, so it meets the file in its
not-yet-generated state (size 0, direct I/O),
and every tool must get exactly the whole content.

The content is checked once against tiledbsoma's row-major read (the `golden` fixture:
`cat` on a fresh mount, parsed and compared value for value); every other tool's
output is then compared byte for byte with it.

Run: .venv/bin/python -m pytest tests/python/test_tools.py -q
"""

from __future__ import annotations

import hashlib
import io
import mmap
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pytest

from harness import data_reference
from harness import tree_reference  # noqa: F401  (quiets tiledbsoma's warnings)
import tiledbsoma
from harness.mount import wait_until
from harness.settings import within

STORE = "big"
REL = Path("X") / "data.csv"
HEADER = b"soma_dim_0,soma_dim_1,soma_data\n"
TOOL_TIMEOUT = 120  # seconds for one tool run on the big file
# A --materialize-limit below big/X/data.csv's size (51 MB, estimated about as much): the
# file is streamed, not generated whole when opened, unless a test says otherwise.
STREAMED = ("--materialize-limit", "16M")
SETTLE = 2.0  # seconds a stat may take to show the size after a full read has finished

pytestmark = pytest.mark.timeout(300)


# --------------------------------------------------------------------------------------
# reference


@pytest.fixture(scope="module")
def big_ref(fixtures_dir):
    """(rows, cols, values) of big/X in row-major order, from tiledbsoma."""
    with tiledbsoma.open(str(fixtures_dir / STORE / "X")) as X:
        t = X.read(result_order="row-major").tables().concat()
        nnz = int(X.nnz)
    rows = t.column("soma_dim_0").to_numpy()
    cols = t.column("soma_dim_1").to_numpy()
    vals = t.column("soma_data").to_numpy()
    assert len(rows) == nnz > 1_000_000, "fixture: big/X must have millions of cells"
    return rows, cols, vals


def expected_line(ref, i: int) -> str:
    rows, cols, vals = ref
    return f"{rows[i]},{cols[i]},"  # the value is checked by check_float_text


def frame_problems(df, ref, what: str) -> list[str]:
    """A parsed (soma_dim_0, soma_dim_1, soma_data) frame against the reference."""
    rows, cols, vals = ref
    out = []
    if list(df.columns) != ["soma_dim_0", "soma_dim_1", "soma_data"]:
        return [f"{what}: columns {list(df.columns)}"]
    if len(df) != len(rows):
        return [f"{what}: {len(df)} rows, expected {len(rows)} (nnz)"]
    for name, want in (("soma_dim_0", rows), ("soma_dim_1", cols)):
        got = np.asarray(df[name].to_numpy(), dtype=np.int64)
        bad = got != want
        if bad.any():
            i = int(np.argmax(bad))
            out.append(f"{what}: {name} differs in {int(bad.sum())} rows, first row {i}: {got[i]} vs {want[i]}")
    got = np.asarray(df["soma_data"].to_numpy(), dtype=np.float64).astype(np.float32)
    bad = got != vals
    if bad.any():
        i = int(np.argmax(bad))
        out.append(f"{what}: soma_data differs in {int(bad.sum())} rows, first row {i}: {got[i]!r} vs {vals[i]!r}")
    return out


def csv_problems(content: bytes, ref) -> list[str]:
    """Everything the contract says about big/X/data.csv, against tiledbsoma."""
    rows, cols, vals = ref
    nnz = len(rows)
    if not content.startswith(HEADER):
        return [f"does not start with the header: {content[:100]!r}"]
    if not content.endswith(b"\n"):
        return [f"does not end with \\n: {content[-100:]!r}"]
    if b'"' in content or b"\r" in content:
        return ["quotes or CR in an all-numeric CSV"]
    lines = content.count(b"\n")
    if lines != nnz + 1:
        return [f"{lines} lines, expected {nnz + 1} (header + nnz)"]
    df = pd.read_csv(
        io.BytesIO(content), dtype={"soma_dim_0": np.int64, "soma_dim_1": np.int64, "soma_data": str},
        keep_default_na=False,
    )
    out = frame_problems(
        df.assign(soma_data=pd.to_numeric(df["soma_data"].replace({"NaN": "nan"}), errors="coerce")), ref, "content"
    )
    # The text of every distinct value: the shortest float32 text.
    texts = pd.unique(df["soma_data"])
    first = {}
    for i, t in enumerate(df["soma_data"].to_numpy()):
        if t not in first:
            first[t] = i
        if len(first) == len(texts):
            break
    for t in texts:
        i = first[t]
        msg = data_reference.check_float_text(t, float(vals[i]), "f32")
        if msg:
            out.append(f"row {i}: {msg}")
            if len(out) > 20:
                break
    # First and last rows spelled out.
    body = content[len(HEADER):]
    first_line = body[: body.index(b"\n")].decode()
    last_line = body[body.rstrip(b"\n").rindex(b"\n") + 1 : -1].decode()
    for i, line in ((0, first_line), (nnz - 1, last_line)):
        if not line.startswith(expected_line(ref, i)) or data_reference.check_float_text(
            line.rsplit(",", 1)[1], float(vals[i]), "f32"
        ):
            out.append(f"row {i} is {line!r}, expected {expected_line(ref, i)}{vals[i]!r}")
    return out


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def same(got: bytes, want: bytes, what: str):
    if got != want:
        n = min(len(got), len(want))
        diff = next((i for i in range(0, n, 1 << 16) if got[i : i + (1 << 16)] != want[i : i + (1 << 16)]), n)
        pytest.fail(
            f"{what}: {len(got)} bytes (sha256 {sha(got)[:16]}), expected {len(want)} (sha256 {sha(want)[:16]});"
            f" first difference near byte {diff}",
            pytrace=False,
        )


def run(cmd, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, timeout=TOOL_TIMEOUT, **kw)
    assert r.returncode == 0, f"{cmd} exited {r.returncode}: {r.stderr.decode(errors='replace')[:2000]}"
    assert r.stderr == b"", f"{cmd} wrote to stderr: {r.stderr.decode(errors='replace')[:2000]}"
    return r


# --------------------------------------------------------------------------------------
# fixtures


@pytest.fixture
def fresh(mount, fixtures_dir):
    """fresh(*extra_args): a new mount of the big store with a new --cache-dir, and the
    path of X/data.csv in it, which must not be generated yet (size 0) unless the
    options say otherwise."""

    def _fresh(*args):
        limit = () if "--materialize-limit" in args else STREAMED
        return mount(fixtures_dir / STORE, *limit, *args)

    return _fresh


def not_generated(path: Path):
    st = os.stat(path).st_size
    assert st == 0, f"{path} on a fresh mount reports {st} bytes: expected 0 (not generated yet)"


def size_settles(path: Path, n: int) -> str | None:
    """After a full read, stat must show the exact size (within SETTLE seconds, to let
    the daemon finish caching after the reader's close). None if so."""
    seen = []

    def ok():
        seen.append(os.stat(path).st_size)
        return seen[-1] == n

    if wait_until(ok, SETTLE):
        return None
    return f"stat size {seen[-1]} (seen {sorted(set(seen))}) after a full read, content is {n}"


@pytest.fixture(scope="module")
def golden(fixtures_dir, big_ref):
    """`cat X/data.csv` on a fresh mount (fresh cache, the file streamed), checked value
    for value against tiledbsoma. Returns (content, problems)."""
    from harness.mount import mount_guard

    with mount_guard(fixtures_dir / STORE, *STREAMED, label="golden mount of big") as mp:
        path = Path(mp) / REL
        st0 = os.stat(path).st_size
        content = run(["cat", str(path)]).stdout
        settle = size_settles(path, len(content))
    problems = csv_problems(content, big_ref)
    if st0 != 0:
        problems.append(f"stat before the first read was {st0}, expected 0 (not generated)")
    if settle:
        problems.append(settle)
    return content, problems


@pytest.fixture
def golden_ok(golden):
    content, problems = golden
    if problems:
        pytest.fail("`cat` of big/X/data.csv is wrong, see test_cat_matches_tiledbsoma", pytrace=False)
    return content


# --------------------------------------------------------------------------------------
# each tool on a fresh mount (file not generated yet: size 0, direct I/O)


def test_cat_matches_tiledbsoma(golden, big_ref):
    content, problems = golden
    assert len(content) > 10 << 20, f"big/X/data.csv is only {len(content)} bytes: expected multi-megabyte"
    if problems:
        pytest.fail("cat of big/X/data.csv:\n" + "\n".join(f"  - {p}" for p in problems), pytrace=False)


def test_head_c(fresh, golden_ok):
    with fresh() as mp:
        path = Path(mp) / REL
        not_generated(path)
        out = run(["head", "-c", "1000", str(path)]).stdout
        same(out, golden_ok[:1000], "head -c 1000")
        assert mp.proc.poll() is None, "the daemon died"


def test_tail_n(fresh, golden_ok):
    want = b"\n".join(golden_ok.rstrip(b"\n").split(b"\n")[-5:]) + b"\n"
    with fresh() as mp:
        path = Path(mp) / REL
        not_generated(path)
        out = run(["tail", "-n", "5", str(path)]).stdout
        same(out, want, "tail -n 5")
        msg = size_settles(path, len(golden_ok))
        assert msg is None, f"after tail: {msg}"


def test_wc_c(fresh, golden_ok):
    with fresh() as mp:
        path = Path(mp) / REL
        not_generated(path)
        out = run(["wc", "-c", str(path)]).stdout.decode()
        assert int(out.split()[0]) == len(golden_ok), f"wc -c says {out.strip()}, content is {len(golden_ok)}"
        out = run(["wc", "-l", str(path)]).stdout.decode()
        assert int(out.split()[0]) == golden_ok.count(b"\n"), f"wc -l says {out.strip()}"


def test_cp(fresh, golden_ok, tmp_path):
    with fresh() as mp:
        path = Path(mp) / REL
        not_generated(path)
        dst = tmp_path / "copy.csv"
        run(["cp", str(path), str(dst)])
        same(dst.read_bytes(), golden_ok, "cp")
        msg = size_settles(path, len(golden_ok))
        assert msg is None, f"after cp: {msg}"


def test_python_read(fresh, golden_ok):
    with fresh() as mp:
        path = Path(mp) / REL
        not_generated(path)
        with open(path, "rb") as f:
            data = f.read()
        same(data, golden_ok, "open().read()")
        with open(path, "rb") as f:  # small reads until EOF, as a line reader does
            chunks = []
            while True:
                c = f.read1(7919)
                if not c:
                    break
                chunks.append(c)
        same(b"".join(chunks), golden_ok, "read1() loop")
        with open(path, encoding="utf-8", newline="") as f:
            n = sum(1 for _ in f)
        assert n == golden_ok.count(b"\n"), f"text-mode iteration saw {n} lines"


def test_pandas_read_csv(fresh, golden_ok, big_ref):
    with fresh() as mp:
        path = Path(mp) / REL
        not_generated(path)
        df = pd.read_csv(path)
        problems = frame_problems(df, big_ref, "pandas.read_csv")
        assert str(df["soma_dim_0"].dtype) == "int64" and str(df["soma_dim_1"].dtype) == "int64", df.dtypes
        assert not problems, problems


# --------------------------------------------------------------------------------------
# a generated file: exact size, mmap, size-trusting readers


def test_generated_file_has_exact_size_and_mmaps(fresh, golden_ok, big_ref):
    with fresh() as mp:
        path = Path(mp) / REL
        not_generated(path)
        same(path.read_bytes(), golden_ok, "first full read")
        msg = size_settles(path, len(golden_ok))
        assert msg is None, msg
        assert os.stat(path).st_size == len(golden_ok)
        with open(path, "rb") as f:
            assert os.fstat(f.fileno()).st_size == len(golden_ok), "fstat of the generated file"
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                assert len(mm) == len(golden_ok)
                same(mm[:], golden_ok, "mmap of the generated file")
                assert mm[-200:] == golden_ok[-200:]
        same(run(["tail", "-c", "100", str(path)]).stdout, golden_ok[-100:], "tail -c 100 of the generated file")
        df = pl.read_csv(path)
        problems = frame_problems(df.to_pandas(), big_ref, "polars.read_csv")
        assert df.schema["soma_dim_0"] == pl.Int64 and df.schema["soma_data"] == pl.Float64, df.schema
        assert not problems, problems
        lazy = pl.scan_csv(path).select(pl.len()).collect().item()
        assert lazy == len(big_ref[0]), f"polars.scan_csv counts {lazy} rows"


def test_materialize_on_open_gives_exact_fstat(fresh, golden_ok):
    """A --materialize-limit above the file's size: opening generates it whole, so the
    first fstat, mmap and size-trusting readers see the exact size."""
    with fresh("--materialize-limit", "1G") as mp:
        path = Path(mp) / REL
        with open(path, "rb") as f:
            n = os.fstat(f.fileno()).st_size
            assert n == len(golden_ok), f"fstat right after open: {n}, content is {len(golden_ok)}"
            assert os.stat(path).st_size == len(golden_ok), "stat after open"
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                same(mm[:], golden_ok, "mmap right after open")
        same(run(["tail", "-c", "1000", str(path)]).stdout, golden_ok[-1000:], "tail -c 1000")


def test_exact_sizes_option(fresh, golden_ok):
    with fresh("--exact-sizes") as mp:
        path = Path(mp) / REL
        with open(path, "rb") as f:
            n = os.fstat(f.fileno()).st_size
            assert n == len(golden_ok), f"--exact-sizes: fstat after open {n}, content is {len(golden_ok)}"
            assert os.stat(path).st_size == len(golden_ok), "--exact-sizes: stat after open"
            same(f.read(), golden_ok, "--exact-sizes read")
        # Another data file of the same array, opened first with stat: exact too.
        tsv = Path(mp) / "X" / "data.tsv"
        with open(tsv, "rb") as f:
            n = os.fstat(f.fileno()).st_size
            data = f.read()
        assert n == len(data) == len(golden_ok), f"--exact-sizes data.tsv: fstat {n}, content {len(data)}"
        assert data == golden_ok.replace(b",", b"\t")


# --------------------------------------------------------------------------------------
# head is fast, and the daemon keeps serving after a reader stops early


def test_head_n_is_fast_and_daemon_keeps_serving(fresh, golden_ok):
    want = b"".join(golden_ok.splitlines(keepends=True)[:10])
    with fresh() as mp:
        path = Path(mp) / REL
        not_generated(path)
        t0 = time.monotonic()
        out = run(["head", "-n", "10", str(path)]).stdout
        elapsed = time.monotonic() - t0
        same(out, want, "head -n 10")
        assert elapsed < within(1.0), f"head -n 10 took {elapsed:.2f}s on a fresh mount (contract: within a second)"
        # Again while whatever the first head started may still be running.
        t0 = time.monotonic()
        same(run(["head", "-n", "10", str(path)]).stdout, want, "second head -n 10")
        assert time.monotonic() - t0 < within(1.0), "second head -n 10 took more than a second"
        assert mp.proc.poll() is None, "the daemon exited after head"
        # The daemon keeps serving: metadata, a listing, and the whole file.
        assert "data.csv" in os.listdir(Path(mp) / "X")
        assert (Path(mp) / "X" / "schema.json").read_bytes().startswith(b"{")
        same(run(["cat", str(path)]).stdout, golden_ok, "cat after head")
        same(run(["head", "-c", "100", str(Path(mp) / "X" / "data.jsonl")]).stdout[:1], b"{", "head of data.jsonl")
        assert mp.proc.poll() is None, "the daemon exited"


@pytest.mark.parametrize("ext", ["tsv", "jsonl"])
def test_head_n_is_fast_on_tsv_and_jsonl(ext, fresh, golden_ok, big_ref):
    rows, cols, vals = big_ref
    with fresh() as mp:
        path = Path(mp) / "X" / f"data.{ext}"
        not_generated(path)
        t0 = time.monotonic()
        out = run(["head", "-n", "10", str(path)]).stdout
        elapsed = time.monotonic() - t0
        assert elapsed < within(1.0), f"head -n 10 data.{ext} took {elapsed:.2f}s on a fresh mount"
        lines = out.decode().split("\n")
        assert lines[-1] == "" and len(lines) == 11, out[:2000]
        if ext == "tsv":
            want = b"".join(golden_ok.splitlines(keepends=True)[:10]).replace(b",", b"\t")
            same(out, want, "head -n 10 data.tsv")
        else:
            for i, line in enumerate(lines[:10]):
                pairs = data_reference.load_json_line(line)
                assert [k for k, _ in pairs] == ["soma_dim_0", "soma_dim_1", "soma_data"], line
                (_, r), (_, c), (_, v) = pairs
                assert (int(r), int(c)) == (rows[i], cols[i]), (i, line)
                assert np.float32(v) == vals[i], (i, line)
        assert mp.proc.poll() is None, "the daemon exited after head"


def test_two_readers_at_once(fresh, golden_ok, tmp_path):
    """Two processes read the not-yet-generated file at the same time: identical bytes."""
    with fresh() as mp:
        path = Path(mp) / REL
        not_generated(path)
        outs = [tmp_path / f"out{i}.csv" for i in range(3)]
        procs = []
        for o in outs[:2]:
            with open(o, "wb") as fo:
                procs.append(subprocess.Popen(["cat", str(path)], stdout=fo, stderr=subprocess.PIPE))
        # A third, Python reader with a different read size, started alongside; and
        # stat polled meanwhile: 0 (not generated) or exact, never anything between.
        sizes = set()
        with open(path, "rb") as f:
            chunks = []
            while True:
                c = f.read1(1 << 20)
                if not c:
                    break
                chunks.append(c)
                sizes.add(os.stat(path).st_size)
        data = b"".join(chunks)
        outs[2].write_bytes(data)
        assert sizes <= {0, len(golden_ok)}, f"stat during the reads said {sorted(sizes)}; content is {len(golden_ok)}"
        for p in procs:
            try:
                _, err = p.communicate(timeout=TOOL_TIMEOUT)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                pytest.fail("a concurrent cat did not finish")
            assert p.returncode == 0, err
        for i, o in enumerate(outs):
            same(o.read_bytes(), golden_ok, f"concurrent reader {i}")


# --------------------------------------------------------------------------------------
# the same tools on a small file forced into the streamed state


@pytest.mark.parametrize("tool", ["cat", "tail", "wc", "cp", "python", "pandas"])
def test_tools_on_streamed_small_file(tool, mount, fixtures_dir, tmp_path):
    """hand/obs/data.csv with --materialize-limit 0 (never generated whole on open, nor on
    stat): every tool gets the content a default mount serves, whether it fstats the open
    file (and so waits for the generation) or not."""
    rel = Path("obs") / "data.csv"
    with mount(fixtures_dir / "hand") as mp:
        want = (Path(mp) / rel).read_bytes()
    assert want.count(b"\n") == 301
    with mount(fixtures_dir / "hand", "--materialize-limit", "0") as mp:
        path = Path(mp) / rel
        not_generated(path)
        if tool == "cat":
            same(run(["cat", str(path)]).stdout, want, "cat")
        elif tool == "tail":
            tail = b"\n".join(want.rstrip(b"\n").split(b"\n")[-5:]) + b"\n"
            same(run(["tail", "-n", "5", str(path)]).stdout, tail, "tail -n 5")
        elif tool == "wc":
            assert int(run(["wc", "-c", str(path)]).stdout.split()[0]) == len(want)
        elif tool == "cp":
            run(["cp", str(path), str(tmp_path / "c.csv")])
            same((tmp_path / "c.csv").read_bytes(), want, "cp")
        elif tool == "python":
            with open(path, "rb") as f:
                same(f.read(), want, "open().read()")
        elif tool == "pandas":
            a = pd.read_csv(path, dtype=str, keep_default_na=False)
            b = pd.read_csv(io.BytesIO(want), dtype=str, keep_default_na=False)
            pd.testing.assert_frame_equal(a, b)
        msg = size_settles(path, len(want))
        assert msg is None, f"after {tool}: {msg}"


def test_reopen_while_open_after_eviction(mount, fixtures_dir):
    """A file held open from the cache (through FUSE passthrough where the kernel has it)
    can be opened again after its cache entry was evicted: the new open reads the same bytes
    while the old handle keeps reading. (The kernel refuses a second open of an inode read
    through passthrough unless that open is passthrough too, with the same backing file.)"""
    obs, var = Path("obs") / "data.csv", Path("ms") / "RNA" / "var" / "data.csv"
    with mount(fixtures_dir / "hand") as mp:
        want = (Path(mp) / obs).read_bytes()
    # Every file streams (never generated on open), and the cache holds one entry.
    with mount(fixtures_dir / "hand", "--materialize-limit", "0", "--cache-size", "1") as mp:
        mp = Path(mp)
        same((mp / obs).read_bytes(), want, "first read (generates the entry)")
        with open(mp / obs, "rb") as held:
            same(held.read(100), want[:100], "held open from the cache")
            (mp / var).read_bytes()  # its entry evicts obs's
            with open(mp / obs, "rb") as again:
                same(again.read(), want, "opened again after eviction")
            same(held.read(), want[100:], "the first handle, read on")
        same((mp / obs).read_bytes(), want, "a later open")
