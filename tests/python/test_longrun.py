"""A long-running mount: a store that keeps changing under many readers, the
kernel forgetting inodes, slow generations, one memory budget, and `soma-mount status`.

1. Soak (test_soak_appends_under_readers): tiledbsoma appends to a store every ~2.5 s
   while reader threads list, read and stat through a mount with --metadata-ttl 1. Every
   file read equals tiledbsoma's read at one of the states written so far, never an older
   one than the same reader saw before for the same path, and never one older than the
   TTL allows; the daemon's RSS, inode count, open fds and threads stay flat while the
   page cache's dentries and inodes are dropped periodically (the kernel sends FORGET).
   It runs for SOMA_SOAK_SECONDS seconds (default 60, the CI setting; at least 60); set
   it higher for a real soak, e.g. SOMA_SOAK_SECONDS=3600 (its pytest timeout follows).
   A fragment committed while an array is opened (test_a_fragment_committed_during_an_
   open_is_not_in_its_snapshot): the daemon held between the open and the fragment list.
2. Forget (test_forget_releases_inodes_after_drop_caches): 50,000 distinct slice names
   stat'ed raise the daemon's inode count by about that; dropping the kernel's caches
   brings it back within seconds, four times over, and RSS does not creep.
3. Slow generation over S3 (test_slow_generations_never_block_ls_and_stat): with the S3
   server frozen, readers of files that need the store hang, while ls/stat of listed
   paths and `soma-mount status` answer at once; status shows the generations running and
   waiting; once the server is back every reader gets tiledbsoma's content.
4. Memory budget (test_memory_budget_bounds_sixteen_streaming_readers): 16 concurrent
   readers of big streamed files under --max-memory 128M get exactly the bytes a lone
   reader gets, and the daemon's peak RSS stays under its baseline + budget + margin.
5. Status (test_status_file_and_command, test_status_during_a_generation): the hidden
   `.soma-mount.status` file and `soma-mount status [--json] <mountpoint>`.

The status JSON is checked against the shape docs/REFERENCE.md gives:
  {pid, uri, uptime_seconds, inodes, open_handles,
   memory: {budget_bytes, in_use_bytes, peak_bytes, waiting},
   generations: {limit, running: [{path, bytes, rows, estimated_bytes, seconds,
                                   bytes_per_second, readers}], waiting},
   cache: {bytes, limit_bytes, entries}}

Numbers (RSS, inodes, fds, threads, peaks) are printed: run with -s to see them.
Dropping caches (`echo 2 > /proc/sys/vm/drop_caches`) needs root, like every mount here,
and acts on the whole machine: other FUSE mounts see their dentries dropped too, so do not
run this file beside tests that count the kernel's lookups (test_tree's ls -l test,
test_remote's request counts).

Run: .venv/bin/python -m pytest tests/python/test_longrun.py -q -s
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import random
import re
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness import data_reference
from harness import tree_reference
import test_remote as tr
import test_slices as ts
import test_tree as tt
from harness.mount import mount_guard, wait_until
from harness.settings import binary_path, within
from harness.moto_server import S3Server, config_args
from harness.tree_reference import json_equal, load_json_strict
from harness.process import rss_mb, thread_count
from harness import formats

import tiledbsoma

MiB = 1 << 20
STATUS_FILE = ".soma-mount.status"
DEFAULT_MAX_MEMORY = 512 * MiB
DEFAULT_MAX_GENERATIONS = 4
DEFAULT_CACHE_SIZE = 10 << 30


# --------------------------------------------------------------------------------------
# the daemon, seen from /proc and through its status


def proc_kb(pid: int, key: str) -> int:
    """A "kB" field of /proc/<pid>/status (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(f"/proc/{pid}/status has no {key}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def drop_caches() -> None:
    """Evict unused dentries and inodes (the kernel sends FUSE FORGET for them)."""
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")


def read_status(mp) -> dict:
    """The hidden status file at the mount's root, parsed."""
    with open(Path(mp) / STATUS_FILE, "rb") as f:
        return json.loads(f.read())


def status_cmd(mp, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    """`soma-mount status [args] <mp>`."""
    return subprocess.run(
        [str(binary_path()), "status", *args, os.fspath(mp)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout or within(5.0),
    )


def status_json_cmd(mp) -> dict:
    r = status_cmd(mp, "--json")
    assert r.returncode == 0, f"soma-mount status --json exited {r.returncode}: {r.stderr}{r.stdout}"
    try:
        return json.loads(r.stdout)
    except ValueError as e:
        raise AssertionError(f"soma-mount status --json printed no JSON ({e}): {r.stdout[:2000]!r}") from e


NUM = "number"
INT = "int"
RUNNING_SHAPE = {
    "path": str,
    "bytes": INT,
    "rows": INT,
    "estimated_bytes": (INT, None),
    "seconds": NUM,
    "bytes_per_second": NUM,
    "readers": INT,
}
STATUS_SHAPE = {
    "pid": INT,
    "uri": str,
    "uptime_seconds": NUM,
    "inodes": INT,
    "open_handles": INT,
    "memory": {"budget_bytes": INT, "in_use_bytes": INT, "peak_bytes": INT, "waiting": INT},
    "generations": {"limit": INT, "running": [RUNNING_SHAPE], "waiting": INT},
    "cache": {"bytes": INT, "limit_bytes": INT, "entries": INT},
}


def _value_ok(v, want) -> bool:
    if isinstance(want, tuple):
        return any(_value_ok(v, w) for w in want)
    if want is None:
        return v is None
    if want == INT:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0
    if want == NUM:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
    return isinstance(v, want)


def shape_problems(v, shape, where: str = "status") -> list[str]:
    """Where v departs from the status shape (missing keys, wrong types,
    negative counts); extra keys are allowed."""
    if isinstance(shape, dict):
        if not isinstance(v, dict):
            return [f"{where} is {type(v).__name__}, expected an object"]
        out = []
        for k, sub in shape.items():
            if k not in v:
                out.append(f"{where}.{k} is missing")
            else:
                out += shape_problems(v[k], sub, f"{where}.{k}")
        return out
    if isinstance(shape, list):
        if not isinstance(v, list):
            return [f"{where} is {type(v).__name__}, expected a list"]
        out = []
        for i, item in enumerate(v):
            out += shape_problems(item, shape[0], f"{where}[{i}]")
        return out
    if not _value_ok(v, shape):
        return [f"{where} is {v!r}, expected {shape if isinstance(shape, str) else getattr(shape, '__name__', shape)}"]
    return []


def assert_status_shape(s: dict, what: str) -> None:
    p = shape_problems(s, STATUS_SHAPE)
    assert not p, f"{what} does not have the status shape:\n  " + "\n  ".join(p) + f"\n{json.dumps(s)[:3000]}"


def running_paths(s: dict) -> list[str]:
    return [g["path"] for g in s["generations"]["running"]]


# --------------------------------------------------------------------------------------
# 1. soak


# At least 60 s: flatness compares the first third of the samples with the second half.
SOAK_SECONDS = max(60.0, float(os.environ.get("SOMA_SOAK_SECONDS", "60")))
APPEND_EVERY = 2.5  # seconds between tiledbsoma's appends
ROWS_PER_APPEND = 60
X_COLS = 8
TTL = 1  # --metadata-ttl of the soak mount
# A read that starts this long after a write returned must show it: the TTL plus slack for
# a busy machine (docs/SEMANTICS.md: a change shows once --metadata-ttl has passed).
FRESH_AFTER = TTL + within(1.0)
SAMPLE_EVERY = 6.0  # seconds between samples of the idle daemon (each one drops caches)
SOAK_READERS = 4
STAT_BURST = 250  # distinct slice names stat'ed per burst
CATS = ["red", "green", "blue"]
OBS_SCHEMA = pa.schema(
    [
        pa.field("soma_joinid", pa.int64(), nullable=False),
        pa.field("name", pa.large_string(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
        pa.field("cat", pa.dictionary(pa.int8(), pa.large_string()), nullable=False),
    ]
)
OBS_DOMAIN = 1_000_000
X_SHAPE = (1_000_000, X_COLS)
# Flatness of the daemon over the soak: the maximum over its second half may exceed the
# maximum over its first third by at most this much.
FLAT_RSS_MB = 48.0
FLAT_RSS_FACTOR = 1.25
FLAT_FDS = 16
FLAT_THREADS = 8
FLAT_INODES = 300
FLAT_IN_USE_MB = 16.0


def obs_rows(lo: int, hi: int) -> pa.Table:
    ids = np.arange(lo, hi, dtype=np.int64)
    return pa.table(
        {
            "soma_joinid": ids,
            "name": pa.array([f"cell-{i}" for i in ids], pa.large_string()),
            "value": ids * 0.25 + 0.125,
            "cat": pa.DictionaryArray.from_arrays(
                pa.array(((ids * 7) % 3).astype(np.int8)), pa.array(CATS, pa.large_string())
            ),
        },
        schema=OBS_SCHEMA,
    )


def x_cells(lo: int, hi: int) -> pa.Table:
    i, j = np.meshgrid(np.arange(lo, hi, dtype=np.int64), np.arange(X_COLS, dtype=np.int64), indexing="ij")
    i, j = i.reshape(-1), j.reshape(-1)
    keep = (i + j) % 3 != 0
    i, j = i[keep], j[keep]
    return pa.table(
        {"soma_dim_0": i, "soma_dim_1": j, "soma_data": ((i % 97) * 0.5 + j).astype(np.float32)}
    )


@dataclass
class Snapshot:
    k: int
    written_at: float  # time.monotonic() once tiledbsoma's writes of this state returned
    tables: dict  # array name -> pa.Table as tiledbsoma reads it (row-major, schema order)
    metadata: dict  # array name -> metadata as tiledbsoma reads it (normalized)
    schema_json: dict  # array name -> the schema.json it implies (tree_reference.expected_schema_of)


class LiveStore:
    """A Collection (obs: DataFrame with an enumerated column; X: SparseNDArray) that
    tiledbsoma appends to; after each append, the state tiledbsoma reads back is kept."""

    ARRAYS = ("obs", "X")

    def __init__(self, uri: str):
        self.uri = uri
        self.snapshots: list[Snapshot] = []
        self.schemas: dict = {}
        self.soma_types: dict = {}
        self.expected: dict = {}  # (Spec, k) -> the rows that spec shows in state k

    def create(self) -> None:
        with tiledbsoma.Collection.create(self.uri) as c:
            c.metadata["purpose"] = "soak"
            c.add_new_dataframe("obs", schema=OBS_SCHEMA, domain=[[0, OBS_DOMAIN - 1]]).close()
            c.add_new_sparse_ndarray("X", type=pa.float32(), shape=X_SHAPE).close()
        self.append()

    def append(self) -> Snapshot:
        k = len(self.snapshots)
        lo, hi = k * ROWS_PER_APPEND, (k + 1) * ROWS_PER_APPEND
        # One open per array: its rows and its metadata go in together.
        with tiledbsoma.open(f"{self.uri}/obs", "w") as df:
            df.write(obs_rows(lo, hi))
            df.metadata["appends"] = k + 1
            df.metadata["rows"] = hi
        with tiledbsoma.open(f"{self.uri}/X", "w") as X:
            X.write(x_cells(lo, hi))
            X.metadata["appends"] = k + 1
        written = time.monotonic()
        tables, md, sj = {}, {}, {}
        for name in self.ARRAYS:
            with tiledbsoma.open(f"{self.uri}/{name}") as obj:
                tables[name] = tr.soma_ref(name, obj).table
                md[name] = tr.normalized_metadata(obj)
                sj[name] = tree_reference.expected_schema_of(obj, False)
                self.schemas[name] = obj.schema
                self.soma_types[name] = obj.soma_type
        assert tables["obs"].num_rows == hi, f"tiledbsoma reads {tables['obs'].num_rows} obs rows after append {k}"
        snap = Snapshot(k, written, tables, md, sj)
        self.snapshots.append(snap)
        return snap


@dataclass(frozen=True)
class Spec:
    """What a path of the soak mount shows: which array, which rows, which format."""

    rel: str
    array: str
    what: str  # "data", "metadata", "schema"
    fmt: str = ""  # csv, tsv, jsonl, parquet
    rows: tuple | None = None  # (a, b) on the first index column, inclusive
    cols: tuple | None = None  # (a, b) on X's second dimension
    label: str | None = None  # obs/by/cat/<label>


def whole(array: str, fmt: str) -> Spec:
    return Spec(f"{array}/data.{fmt}", array, "data", fmt)


def named_slice(array: str, rows: tuple, fmt: str, cols: tuple | None = None) -> Spec:
    name = f"{rows[0]}-{rows[1]}" + (f",{cols[0]}-{cols[1]}" if cols else "")
    return Spec(f"{array}/slices/{name}.{fmt}", array, "data", fmt, rows, cols)


def by_label(label: str, fmt: str) -> Spec:
    return Spec(f"obs/by/cat/{label}/data.{fmt}", "obs", "data", fmt, label=label)


FIXED_SPECS = [
    whole("obs", "csv"),
    whole("obs", "tsv"),
    whole("obs", "parquet"),
    whole("obs", "jsonl"),
    whole("X", "csv"),
    whole("X", "parquet"),
    Spec("obs/metadata.json", "obs", "metadata"),
    Spec("X/metadata.json", "X", "metadata"),
    Spec("obs/schema.json", "obs", "schema"),
    Spec("X/schema.json", "X", "schema"),
    by_label("red", "csv"),
    by_label("blue", "parquet"),
    named_slice("obs", (0, OBS_DOMAIN - 1), "csv"),  # every row: grows with each append
]
# Named slices the readers pick from: a fixed pool, so that each one's content is checked
# once per state (random names would each be a new file to check).
SLICE_POOL = [
    named_slice("obs", rows, fmt)
    for rows in ((0, 0), (5, 42), (100, 399), (1000, 1099), (2500, 2999), (10, 100_000))
    for fmt in ("csv", "tsv", "jsonl", "parquet")
] + [
    named_slice("X", rows, fmt, cols)
    for rows, cols in (((3, 3), None), ((60, 200), None), ((1000, 1500), (2, 5)), ((0, 5000), (7, 7)))
    for fmt in ("csv", "tsv")
]
CHUNK_NAME = re.compile(r"^(-?\d+)(?:-(-?\d+))?\.(csv|tsv|jsonl|parquet)$")


def expected_table(store: LiveStore, spec: Spec, snap: Snapshot) -> pa.Table:
    key = (spec, snap.k)
    if key not in store.expected:
        store.expected[key] = _filtered(spec, snap)
    return store.expected[key]


def _filtered(spec: Spec, snap: Snapshot) -> pa.Table:
    t = snap.tables[spec.array]
    mask = np.ones(t.num_rows, bool)
    first = "soma_joinid" if spec.array == "obs" else "soma_dim_0"
    if spec.rows is not None:
        v = t.column(first).to_numpy()
        mask &= (v >= spec.rows[0]) & (v <= spec.rows[1])
    if spec.cols is not None:
        v = t.column("soma_dim_1").to_numpy()
        mask &= (v >= spec.cols[0]) & (v <= spec.cols[1])
    if spec.label is not None:
        mask &= np.array([x == spec.label for x in data_reference.canonical_values(t.column("cat"))], bool)
    return t.filter(pa.array(mask))


def content_rows(spec: Spec, data: bytes) -> int | None:
    """Data rows in a generated file (None: unparseable; the full check says why)."""
    try:
        if spec.fmt == "parquet":
            return pq.ParquetFile(io.BytesIO(data)).metadata.num_rows
        n = data.count(b"\n")  # no value of the soak store holds a newline
        return n - 1 if spec.fmt in ("csv", "tsv") else n
    except Exception:  # noqa: BLE001
        return None


def check_data(ref, spec: Spec, data: bytes) -> list[str]:
    """test_data's checks of one file's content against a reference."""
    probs = formats.Problems(spec.rel)
    if spec.fmt == "parquet":
        try:
            t = data_reference.read_parquet_bytes(data)
        except Exception as e:  # noqa: BLE001
            probs.add(f"pyarrow cannot read it: {type(e).__name__}: {e}")
        else:
            formats.check_parquet(ref, t, probs)
    else:
        text = formats.decode_utf8(data, spec.rel, probs)
        if text is not None:
            if spec.fmt == "jsonl":
                formats.check_jsonl(ref, text, probs)
            else:
                formats.check_delimited(ref, text, spec.fmt, probs)
    return probs.done()


def matching_snapshots(store: LiveStore, spec: Spec, data: bytes, upto: int) -> tuple[list[int], list[str]]:
    """The states (indices into store.snapshots[:upto]) whose tiledbsoma read this content
    equals, and, if none, the problems against the closest one."""
    snaps = store.snapshots[:upto]
    if spec.what == "metadata":
        try:
            got = load_json_strict(data.decode("utf-8"))
        except Exception as e:  # noqa: BLE001
            return [], [f"{spec.rel}: not JSON: {e}"]
        ks = [s.k for s in snaps if json_equal(got, s.metadata[spec.array])]
        return ks, ([] if ks else [f"{spec.rel}: {got} is none of the states written ({snaps[-1].metadata[spec.array]} last)"])
    if spec.what == "schema":
        try:
            got = load_json_strict(data.decode("utf-8"))
        except Exception as e:  # noqa: BLE001
            return [], [f"{spec.rel}: not JSON: {e}"]
        ks = [s.k for s in snaps if not tt._compare_schema(spec.rel, got, s.schema_json[spec.array])]
        return ks, ([] if ks else tt._compare_schema(spec.rel, got, snaps[-1].schema_json[spec.array]))
    n = content_rows(spec, data)
    cands = [s for s in snaps if expected_table(store, spec, s).num_rows == n]
    if not cands:
        # closest state by row count, for the message
        s = min(snaps, key=lambda s: abs(expected_table(store, spec, s).num_rows - (n or 0)))
        ref = ts.make_ref(spec.rel, store.soma_types[spec.array], expected_table(store, spec, s), store.schemas[spec.array])
        counts = sorted({expected_table(store, spec, s).num_rows for s in snaps})
        return [], [f"{spec.rel}: {n} rows, no state written had that many ({counts[:3]}...{counts[-3:]})"] + check_data(
            ref, spec, data
        )
    # States with the same rows share one table: check each distinct table once.
    ks, last_problems, groups = [], [], []
    for s in cands:
        t = expected_table(store, spec, s)
        if groups and groups[-1][0].equals(t):
            groups[-1][1].append(s.k)
        else:
            groups.append((t, [s.k]))
    for t, members in groups:
        ref = ts.make_ref(spec.rel, store.soma_types[spec.array], t, store.schemas[spec.array])
        p = check_data(ref, spec, data)
        if p:
            last_problems = p
        else:
            ks += members
    return ks, last_problems


def same_view(store: LiveStore, spec: Spec, a: Snapshot, b: Snapshot) -> bool:
    """Whether spec's path shows the same in states a and b."""
    if spec.what == "metadata":
        return json_equal(a.metadata[spec.array], b.metadata[spec.array])
    if spec.what == "schema":
        return a.schema_json[spec.array] == b.schema_json[spec.array]
    return expected_table(store, spec, a).equals(expected_table(store, spec, b))


class SoakRun:
    """The readers, the writer and the sampler of one soak, and what they saw.

    Every SAMPLE_EVERY seconds the sampler quiesces the readers (they finish what they
    are doing and wait), so that the daemon is measured idle: RSS, fds, threads, the
    status (inodes, open handles, memory in use, generations), then the kernel's caches
    are dropped and the inodes the daemon still holds counted."""

    def __init__(self, store: LiveStore, mp, seconds: float):
        self.store = store
        self.mp = mp
        self.root = Path(mp)
        self.t0 = time.monotonic()
        self.deadline = self.t0 + seconds
        self.lock = threading.Lock()
        self.reads: list[tuple] = []  # (reader, spec, t_start, t_end, digest)
        self.contents: dict = {}  # (rel, digest) -> bytes
        self.pending: list[tuple] = []  # (rel, digest, t_end) not checked yet
        self.matches: dict = {}  # (rel, digest) -> (states it equals, problems if none)
        self.specs: dict = {}  # rel -> Spec
        self.errors: list[str] = []
        self.samples: list[dict] = []
        self.stat_counter = itertools.count()
        self.stats_done = 0
        self.walks = 0
        self.status_error: str | None = None
        # the readers' gate: cleared while the sampler measures an idle daemon
        self.go = threading.Event()
        self.go.set()
        self.cv = threading.Condition()
        self.active = 0

    def now(self) -> float:
        return time.monotonic() - self.t0

    def error(self, msg: str) -> None:
        with self.lock:
            if len(self.errors) < 200:
                self.errors.append(f"t={self.now():.1f}s {msg}")

    # -- readers -----------------------------------------------------------------------

    def enter(self) -> bool:
        """Wait for the gate; False once the soak is over."""
        while time.monotonic() < self.deadline:
            self.go.wait(1.0)
            with self.cv:
                if self.go.is_set():
                    self.active += 1
                    return True
        return False

    def leave(self) -> None:
        with self.cv:
            self.active -= 1
            self.cv.notify_all()

    def read(self, reader: int, spec: Spec) -> None:
        t_start = time.monotonic()
        try:
            with open(self.root / spec.rel, "rb") as f:
                data = f.read()
        except OSError as e:
            self.error(f"reader {reader}: reading {spec.rel}: {e!r}")
            return
        t_end = time.monotonic()
        digest = hashlib.sha256(data).hexdigest()
        with self.lock:
            if (spec.rel, digest) not in self.contents:
                self.contents[(spec.rel, digest)] = data
                self.pending.append((spec.rel, digest, t_end))
            self.specs[spec.rel] = spec
            self.reads.append((reader, spec, t_start, t_end, digest))

    def random_slice(self, rng: random.Random) -> Spec:
        return rng.choice(SLICE_POOL)

    def listed_chunk(self, reader: int, rng: random.Random) -> Spec | None:
        # One format directory, listed once: under appends two listings may straddle a new
        # snapshot, so the four directories' agreement is test_slices' check, on a still store.
        array = rng.choice(["obs", "X"])
        fmt = rng.choice(ts.FORMATS)
        try:
            names = os.listdir(self.root / array / "slices" / fmt)
        except OSError as e:
            self.error(f"reader {reader}: listing {array}/slices/{fmt}: {e!r}")
            return None
        chunks = [m for m in map(CHUNK_NAME.match, names) if m]
        if len(chunks) != len(names) or not chunks:
            self.error(f"reader {reader}: {array}/slices/{fmt} lists {sorted(names)[:12]} (expected chunk files A-B.<ext>)")
            return None
        m = rng.choice(chunks)
        a = int(m.group(1))
        b = int(m.group(2)) if m.group(2) is not None else a
        return named_slice(array, (a, b), m.group(3))

    def walk(self, reader: int) -> None:
        try:
            for dirpath, dirnames, filenames in os.walk(self.root, onerror=lambda e: self.error(f"walk: {e!r}")):
                rel = os.path.relpath(dirpath, self.root)
                if rel == ".":
                    if STATUS_FILE in filenames:
                        self.error(f"reader {reader}: readdir of the root lists {STATUS_FILE}")
                    if not {"obs", "X"} <= set(dirnames):
                        self.error(f"reader {reader}: the root lists {sorted(dirnames + filenames)}")
                elif rel in ("obs", "X"):
                    want = {"data.csv", "data.tsv", "data.parquet", "data.jsonl", "metadata.json", "schema.json"}
                    if not want <= set(filenames):
                        self.error(f"reader {reader}: {rel} lists {sorted(filenames)}")
                elif rel == "obs/by/cat":
                    if set(dirnames) != set(CATS):
                        self.error(f"reader {reader}: obs/by/cat lists {sorted(dirnames)}, expected {CATS}")
        except OSError as e:
            self.error(f"reader {reader}: walk: {e!r}")
        with self.lock:
            self.walks += 1

    def stat_burst(self, reader: int) -> None:
        for _ in range(STAT_BURST):
            n = next(self.stat_counter)
            rel = f"{'obs' if n % 2 else 'X'}/slices/{n}-{n}.csv"
            try:
                os.stat(self.root / rel)
            except OSError as e:
                self.error(f"reader {reader}: stat {rel}: {e!r}")
                return
        with self.lock:
            self.stats_done += STAT_BURST

    def reader(self, i: int) -> None:
        rng = random.Random(1000 + i)
        try:
            while self.enter():
                try:
                    r = rng.random()
                    if r < 0.5:
                        self.read(i, rng.choice(FIXED_SPECS))
                    elif r < 0.65:
                        self.read(i, self.random_slice(rng))
                    elif r < 0.75:
                        spec = self.listed_chunk(i, rng)
                        if spec is not None:
                            self.read(i, spec)
                    elif r < 0.85:
                        self.walk(i)
                    else:
                        self.stat_burst(i)
                finally:
                    self.leave()
        except Exception as e:  # noqa: BLE001 -- every failure is reported
            self.error(f"reader {i}: {e!r}")

    # -- writer and sampler --------------------------------------------------------------

    def writer(self) -> None:
        try:
            while time.monotonic() < self.deadline - APPEND_EVERY:
                time.sleep(APPEND_EVERY)
                self.store.append()
        except Exception as e:  # noqa: BLE001
            self.error(f"writer: {e!r}")

    def status(self) -> dict | None:
        try:
            return read_status(self.mp)
        except (OSError, ValueError) as e:
            self.status_error = self.status_error or repr(e)
            return None

    def sample_idle(self) -> dict:
        """Quiesce the readers, measure the idle daemon, drop caches, count inodes."""
        pid = self.mp.proc.pid
        with self.cv:
            self.go.clear()
            idle = self.cv.wait_for(lambda: self.active == 0, timeout=60)
        try:
            if not idle:
                self.error("the readers did not finish what they were doing within 60 s (a read hangs?)")
            # A generation whose reader has closed its file stops; give it a moment.
            wait_until(lambda: (st := self.status()) is None or not st["generations"]["running"], within(2.0), 0.1)
            st = self.status() or {}
            s = {
                "t": self.now(),
                "rss": round(rss_mb(pid), 1),
                "fds": open_fds(pid),
                "threads": thread_count(pid),
                "inodes": st.get("inodes"),
                "open_handles": st.get("open_handles"),
                "in_use_mb": round(st["memory"]["in_use_bytes"] / MiB, 1) if "memory" in st else None,
                "running": len(st["generations"]["running"]) if "generations" in st else None,
                "cache_entries": st.get("cache", {}).get("entries"),
            }
            drop_caches()
            time.sleep(0.5)
            after = self.status() or {}
            s["inodes_after_drop"] = after.get("inodes")
            return s
        finally:
            self.go.set()

    def sampler(self, stop: threading.Event) -> None:
        try:
            while not stop.wait(SAMPLE_EVERY) and time.monotonic() < self.deadline:
                s = self.sample_idle()
                s["states"] = len(self.store.snapshots)
                s["reads"] = len(self.reads)
                self.samples.append(s)
                print(
                    f"soak t={s['t']:6.1f}s rss={s['rss']:6.1f} MB fds={s['fds']:3d} threads={s['threads']:3d}"
                    f" inodes={s['inodes']}->{s['inodes_after_drop']} (dropped) handles={s['open_handles']}"
                    f" in_use={s['in_use_mb']} MiB running={s['running']} cache_entries={s['cache_entries']}"
                    f" states={s['states']} reads={s['reads']} stats={self.stats_done} walks={self.walks}",
                    flush=True,
                )
        except Exception as e:  # noqa: BLE001
            self.error(f"sampler: {e!r}")

    # -- checks ------------------------------------------------------------------------

    def check_some(self, final: bool) -> int:
        """Check pending contents against the states recorded so far: a content read
        before the last recorded state was written can show no later state (the next
        write starts after that state is recorded). Returns how many were checked."""
        snaps = self.store.snapshots
        n = len(snaps)
        horizon = snaps[-1].written_at
        with self.lock:
            ready = [p for p in self.pending if final or p[2] < horizon]
            self.pending = [p for p in self.pending if not (final or p[2] < horizon)]
        for rel, digest, _ in ready:
            self.matches[(rel, digest)] = matching_snapshots(self.store, self.specs[rel], self.contents[(rel, digest)], n)
        return len(ready)

    def extend_matches(self) -> None:
        """A content checked early matched the states recorded then; the states recorded
        after it that show the same (an append outside a slice's rows) match it too."""
        snaps = self.store.snapshots
        for (rel, digest), (ks, _why) in self.matches.items():
            if not ks:
                continue
            spec, k0 = self.specs[rel], max(ks)
            for k in range(k0 + 1, len(snaps)):
                if not same_view(self.store, spec, snaps[k0], snaps[k]):
                    break
                ks.append(k)

    def check_reads(self) -> list[str]:
        """Every read equals a state written; per reader and path it never goes back;
        and none is older than FRESH_AFTER allows."""
        self.check_some(final=True)
        self.extend_matches()
        problems: list[str] = []
        last_seen: dict = {}
        snaps = self.store.snapshots
        stale = 0
        for reader, spec, t_start, _t_end, digest in sorted(self.reads, key=lambda r: r[2]):
            ks, why = self.matches[(spec.rel, digest)]
            when = f"t={t_start - self.t0:.1f}s"
            if not ks:
                problems.append(f"reader {reader} {when}: {spec.rel} equals no state tiledbsoma wrote: " + "; ".join(why[:6]))
                continue
            key = (reader, spec.rel)
            if key in last_seen and max(ks) < min(last_seen[key]):
                problems.append(
                    f"reader {reader} {when}: {spec.rel} went back to state {max(ks)} after showing state"
                    f" {min(last_seen[key])}"
                )
            last_seen[key] = ks
            due = [s.k for s in snaps if s.written_at <= t_start - FRESH_AFTER]
            if due and max(ks) < max(due):
                stale += 1
                if stale <= 10:
                    problems.append(
                        f"reader {reader} {when}: {spec.rel} shows state {max(ks)}, but state {max(due)} was written"
                        f" {t_start - snaps[max(due)].written_at:.1f}s before the read began (--metadata-ttl {TTL})"
                    )
        if stale > 10:
            problems.append(f"... {stale} stale reads in all")
        return problems

    def check_idle(self) -> list[str]:
        """The idle daemon at every sample, and its flatness over the run."""
        problems = []
        for s in self.samples:
            if s["open_handles"] is not None and s["open_handles"] > 1:
                problems.append(f"t={s['t']:.0f}s: {s['open_handles']} open handles with every reader idle")
            if s["running"]:
                problems.append(f"t={s['t']:.0f}s: {s['running']} generations still running with every reader idle")
        total = self.samples[-1]["t"] if self.samples else 0
        warm = [s for s in self.samples if s["t"] <= total / 3]
        late = [s for s in self.samples if s["t"] >= total / 2]
        if len(warm) < 2 or len(late) < 2:
            return problems + [f"too few samples of the daemon ({len(self.samples)}) to judge flatness: run longer"]

        def bound(key, limit, unit=""):
            vals_w = [s[key] for s in warm if s[key] is not None]
            vals_l = [s[key] for s in late if s[key] is not None]
            if not vals_w or not vals_l:
                problems.append(f"{key}: no samples (status unreadable: {self.status_error})")
                return
            first, last = max(vals_w), max(vals_l)
            lim = limit(first)
            print(f"soak {key}: max {first}{unit} in the first third, {last}{unit} in the second half (bound {lim:.1f})")
            if last > lim:
                problems.append(
                    f"{key} grew: max {last}{unit} over the second half, {first}{unit} over the first third"
                    f" (bound {lim:.1f}{unit}); samples: {[s[key] for s in self.samples]}"
                )

        bound("rss", lambda v: v * FLAT_RSS_FACTOR + FLAT_RSS_MB, " MB")
        bound("fds", lambda v: v + FLAT_FDS)
        bound("threads", lambda v: v + FLAT_THREADS)
        bound("inodes_after_drop", lambda v: v + FLAT_INODES)
        bound("in_use_mb", lambda v: v + FLAT_IN_USE_MB, " MiB")
        return problems


@pytest.mark.timeout(int(SOAK_SECONDS) + 420)
def test_soak_appends_under_readers(tmp_path, mount):
    """tiledbsoma appends to obs and X every 2.5 s for SOMA_SOAK_SECONDS (default 60)
    while 4 reader threads read whole data files (csv/tsv/jsonl/parquet), metadata.json,
    schema.json, by/ files, named and listed slices, walk the tree and stat thousands of
    distinct slice names, through a mount with --metadata-ttl 1. Every 6 s the readers
    pause; the idle daemon's RSS, fds, threads and status are sampled, the kernel's
    dentries and inodes dropped and the inodes the daemon still holds counted.

    Asserts: no read fails or hangs; each file read equals tiledbsoma's read of one of the
    written states (test_data's checks), never an older one than the same reader saw
    before at that path, and never older than the last state written more than the TTL
    + slack before the read began; once writing stops and the TTL passes, the files show
    the last state; readdir never lists the status file; idle, the daemon has no open
    handle (but the status file's) and no generation running; the second half's maximum
    RSS, fds, threads, memory in use and inodes after the drop stay within a margin of
    the first third's."""
    store = LiveStore(str(tmp_path / "live"))
    store.create()
    with mount(store.uri, "--metadata-ttl", str(TTL)) as mp:
        run = SoakRun(store, mp, SOAK_SECONDS)
        stop = threading.Event()
        readers = [threading.Thread(target=run.reader, args=(i,), daemon=True) for i in range(SOAK_READERS)]
        writer = threading.Thread(target=run.writer, daemon=True)
        sampler = threading.Thread(target=run.sampler, args=(stop,), daemon=True)
        for t in [writer, sampler, *readers]:
            t.start()
        # Check what the readers saw while they run (this thread has nothing else to do).
        checked = 0
        give_up = run.deadline + 120
        while any(t.is_alive() for t in [writer, *readers]) and time.monotonic() < give_up:
            n = run.check_some(final=False)
            checked += n
            if not n:
                time.sleep(0.2)
        hung = [t.name for t in [writer, *readers] if t.is_alive()]
        stop.set()
        sampler.join(90)
        assert not hung, f"still running 120 s after the soak's end: {hung}; errors so far: {run.errors[:10]}"
        assert mp.proc.poll() is None, f"the daemon exited ({mp.proc.returncode}) during the soak"

        # Writing has stopped: after the TTL every file shows the last state.
        time.sleep(FRESH_AFTER)
        final_start = time.monotonic()
        for spec in FIXED_SPECS:
            run.read(-1, spec)
        last = len(store.snapshots) - 1

        problems = list(run.errors)
        t_check = time.monotonic()
        problems += run.check_reads()
        print(
            f"soak: {len(run.contents)} distinct contents checked against tiledbsoma's states"
            f" ({checked} during the run, the rest in {time.monotonic() - t_check:.1f}s after it)"
        )
        for reader, spec, t_start, _t_end, digest in run.reads:
            if reader == -1 and t_start >= final_start:
                ks, _ = run.matches[(spec.rel, digest)]
                if ks and last not in ks:
                    problems.append(f"{spec.rel} {FRESH_AFTER:.1f}s after the last write shows state {max(ks)}, not {last}")
        problems += run.check_idle()
        n_reads = len(run.reads)
        print(
            f"soak: {SOAK_SECONDS:.0f}s, {len(store.snapshots)} states written, {n_reads} reads"
            f" ({len(run.contents)} distinct contents), {run.stats_done} distinct slice names stat'ed, {run.walks} walks"
        )
        # The run did what it is for.
        if len(store.snapshots) < max(3, int(SOAK_SECONDS / APPEND_EVERY / 2)):
            problems.append(f"only {len(store.snapshots)} states were written in {SOAK_SECONDS}s")
        if n_reads < 50 or run.stats_done < 1000 or run.walks < 2:
            problems.append(f"too little was done: {n_reads} reads, {run.stats_done} stats, {run.walks} walks")
        if run.status_error:
            problems.append(f"the status file could not be read: {run.status_error}")
        formats.fail_if(problems, "soak problems")


@pytest.mark.timeout(180)
def test_a_fragment_committed_after_an_open_is_not_in_its_snapshot(tmp_path, mount):
    """An array's snapshot is what its open read: X/schema.json's non_empty_domain, its
    cell_count (the cells of the fragments the open loaded, as libtiledb counts their whole
    tiles, loaded with the open) and X/data.csv. With a long metadata TTL, the daemon opens
    X (its metadata.json is read), then tiledbsoma appends to it: schema.json and data.csv
    must then show the state the open saw, before the append, even though neither was
    read before it. The soak once saw a schema.json with the domain of one state and the
    count of the state after (the count came from a fragment list loaded after the open)."""
    store = LiveStore(str(tmp_path / "live"))
    store.create()
    store.append()
    with mount(store.uri, "-v", "--metadata-ttl", "600") as mp:
        (Path(mp) / "X" / "metadata.json").read_bytes()
        opened = store.snapshots[-1]
        store.append()
        schema = load_json_strict((Path(mp) / "X" / "schema.json").read_text())
        problems = tt._compare_schema("X/schema.json", schema, opened.schema_json["X"])
        spec = whole("X", "csv")
        ks, data_problems = matching_snapshots(store, spec, (Path(mp) / spec.rel).read_bytes(), len(store.snapshots))
        if ks != [opened.k]:
            problems += [f"X/data.csv shows states {ks}, not {opened.k}"] + data_problems
        formats.fail_if(problems, "problems with a fragment committed after an open")


# --------------------------------------------------------------------------------------
# 2. forget


FORGET_NAMES = 50_000
FORGET_ROUNDS = 4
FORGET_SLACK = 200  # inodes: the root's and the status file's own, and what the kernel keeps
FORGET_RSS_CREEP_MB = 8.0  # RSS after the last round over RSS after the first
FORGET_RSS_MB = 48.0  # RSS after any round over RSS before the first


@pytest.mark.timeout(300)
def test_forget_releases_inodes_after_drop_caches(fixtures_dir, mount):
    """Four rounds over big/X (200,000 rows): stat 50,000 new distinct slice names
    (slices/<i>-<i>.csv; a stat never generates a slice), then drop the kernel's caches.

    Asserts each round: the status "inodes" grew by at least 95% of 50,000; within 5 s
    (times the margin) of the drop it is back to at most its starting value + 200. RSS
    after the last round is at most 8 MB over RSS after the first (released inodes are
    reused, not leaked: 50,000 held inodes cost ~3.5 MB each round) and at most 48 MB
    over RSS before the first. Forgotten names still resolve: slices read afterwards
    equal tiledbsoma's read."""
    node = ts.node_named(fixtures_dir, "big", "X")
    with mount(fixtures_dir / "big") as mp:
        pid = mp.proc.pid
        d = Path(mp) / "X" / "slices"
        os.listdir(d)
        start = read_status(mp)["inodes"]
        rss0 = rss_mb(pid)
        print(f"\nforget: start: {start} inodes, RSS {rss0:.1f} MB")
        after_rss = []
        for r in range(FORGET_ROUNDS):
            before = read_status(mp)["inodes"]
            t0 = time.monotonic()
            for i in range(r * FORGET_NAMES, (r + 1) * FORGET_NAMES):
                os.stat(d / f"{i}-{i}.csv")
            stat_s = time.monotonic() - t0
            grown = read_status(mp)["inodes"]
            rss_full = rss_mb(pid)
            assert grown - before >= 0.95 * FORGET_NAMES, (
                f"round {r}: {FORGET_NAMES} distinct names stat'ed, but the daemon's inodes went {before} -> {grown}"
            )
            t1 = time.monotonic()
            drop_caches()
            counts = []

            def back() -> bool:
                counts.append(read_status(mp)["inodes"])
                return counts[-1] <= start + FORGET_SLACK

            ok = wait_until(back, within(5.0), 0.25)
            took = time.monotonic() - t1
            rss = rss_mb(pid)
            after_rss.append(rss)
            print(
                f"forget round {r}: {stat_s:.1f}s of stats, inodes {before} -> {grown} -> {counts[-1]}"
                f" ({took:.1f}s after the drop); RSS {rss_full:.1f} MB full, {rss:.1f} MB after"
            )
            assert ok, (
                f"round {r}: {within(5.0):.0f}s after dropping caches the daemon still holds {counts[-1]} inodes"
                f" (started at {start}, {grown} before the drop; seen {counts[:5]}...{counts[-3:]})"
            )
        assert after_rss[-1] <= after_rss[0] + FORGET_RSS_CREEP_MB, (
            f"RSS crept from {after_rss[0]:.1f} MB after round 0 to {after_rss[-1]:.1f} MB after round"
            f" {FORGET_ROUNDS - 1} (each round's inodes were released): {after_rss}"
        )
        assert max(after_rss) <= rss0 + FORGET_RSS_MB, f"RSS {max(after_rss):.1f} MB, {rss0:.1f} MB at the start"
        # A forgotten name is looked up again and serves tiledbsoma's rows.
        probs = formats.Problems("X/slices after forget")
        for a, b in ((7, 7), (123_456, 123_460), (199_990, 199_999)):
            ts.check_file_against(d / f"{a}-{b}.csv", ts.expected_slice(node, [(a, b)]), probs)
        formats.fail_if(probs.done(), "problems reading forgotten slice names")
        assert mp.proc.poll() is None


# --------------------------------------------------------------------------------------
# 3. slow generations over S3


S3_READERS = [
    # (array, file) -- every one needs the store to be read; obs/data.parquet twice
    ("obs", "data.parquet"),
    ("obs", "data.parquet"),
    ("ms/RNA/var", "data.parquet"),
    ("ms/RNA/X/data", "data.parquet"),
    ("ms/raw/X/data", "data.parquet"),
    ("ms/RNA/obsm/X_pca", "data.parquet"),
    ("ms/RNA/varm/PCs", "data.parquet"),
    ("obs", "data.csv"),
    ("ms/RNA/X/data", "slices/0-9.csv"),
]
FROZEN_OP = 0.5  # seconds (times the margin) for each ls / stat while the server is frozen
MAX_OPS = 600


@pytest.mark.timeout(300)
def test_slow_generations_never_block_ls_and_stat(fixtures_dir):
    """pbmc over a local S3 server (moto), --metadata-ttl 600, long libtiledb timeouts.
    After a walk of the whole tree the server is frozen (SIGSTOP) and 9 readers start on
    8 distinct files that need the store (6 data.parquet, obs/data.csv, a slice of X).

    Asserts while frozen: at least 5 of the files still wait on the store (libtiledb's
    VFS read-ahead cache is off; the daemon may serve a file from what listing read), and
    none of those finishes; `ls` of every listed directory and `stat` of every listed
    directory, metadata.json and schema.json (files whose size needs no data) each answer
    within 0.5 s (times the margin), and so does `soma-mount status --json`; status shows
    at most "limit" (default 4) generations running, every one a file being read, and
    running + waiting = the files still waiting. Once the
    server resumes, every reader completes with tiledbsoma's content (test_data's checks),
    and status shows no generation left."""
    server = S3Server()
    try:
        server.start()
        server.create_bucket(tr.BUCKET)
        server.upload_tree(fixtures_dir / "pbmc", tr.BUCKET, "pbmc")
        # Long timeouts: the readers must wait out the freeze, not fail. No VFS read-ahead
        # cache: listing reads some data (the AnnData/Zarr views read obs and var), which
        # libtiledb would otherwise keep and serve without the store.
        cfg = server.tiledb_config(
            vfs__s3__request_timeout_ms=120_000, vfs__s3__connect_timeout_ms=30_000, vfs__read_ahead_cache_size=0
        )
        with mount_guard(f"s3://{tr.BUCKET}/pbmc", *config_args(cfg), "--metadata-ttl", "600") as mp:
            root = Path(mp)
            dirs, stat_files = [], []
            for dirpath, dirnames, filenames in os.walk(root):
                dirs.append(Path(dirpath))
                stat_files += [Path(dirpath) / f for f in filenames if f in ("metadata.json", "schema.json")]
            for rel, _ in S3_READERS:
                assert (root / rel).is_dir(), f"{rel} is not listed in the S3 mount"
            before = read_status(mp)
            assert_status_shape(before, "the status file before the freeze")
            limit = before["generations"]["limit"]
            assert limit == DEFAULT_MAX_GENERATIONS, f"generations.limit is {limit}, the default is {DEFAULT_MAX_GENERATIONS}"

            results: dict = {}

            def reader(i: int, rel: str) -> None:
                try:
                    with open(root / rel, "rb") as f:
                        results[i] = f.read()
                except Exception as e:  # noqa: BLE001
                    results[i] = e

            threads = []
            problems: list[str] = []  # gathered, so that one run reports every finding
            server.pause()
            try:
                for i, (a, f) in enumerate(S3_READERS):
                    t = threading.Thread(target=reader, args=(i, f"{a}/{f}"), daemon=True)
                    t.start()
                    threads.append(t)
                time.sleep(1.0)  # their opens reach the daemon and hang on the store
                # Files whose readers are still waiting (the daemon may hold some data from
                # the listing; the rest needs the store).
                pending = sorted({f"{S3_READERS[i][0]}/{S3_READERS[i][1]}" for i in range(len(S3_READERS)) if i not in results})
                if len(pending) < 5:
                    problems.append(f"only {pending} wait on the frozen server: the test needs files that need the store")

                # status first: it is read through the root, which no reader touches
                seen: list = []

                def tracks_all() -> bool:
                    value, err, secs = tr.run_bounded(lambda: status_json_cmd(mp), within(2.0))
                    seen.append((value, err, secs))
                    if value == "HUNG" or err is not None:
                        return True
                    g = value["generations"]
                    return len(g["running"]) + g["waiting"] == len(pending)

                ok = wait_until(tracks_all, within(5.0), 0.3)
                value, err, secs = seen[-1]
                if value == "HUNG" or err is not None:
                    problems.append(f"soma-mount status --json while frozen: {tr.describe(value, err)}")
                else:
                    s = value
                    p = shape_problems(s, STATUS_SHAPE)
                    problems += [f"status --json while frozen: {m}" for m in p]
                    print(f"\nfrozen S3: status --json in {secs:.2f}s, generations {json.dumps(s['generations'])}")
                    if secs >= within(1.0):
                        problems.append(f"soma-mount status --json took {secs:.2f}s while the server was frozen")
                    if not p:
                        paths = running_paths(s)
                        g = s["generations"]
                        if not paths:
                            problems.append(f"no generation running while {len(pending)} files are being read: {g}")
                        if len(paths) > limit:
                            problems.append(f"{len(paths)} generations running, the limit is {limit}: {paths}")
                        if not set(paths) <= set(pending):
                            problems.append(f"running generations {paths} are not the files being read {pending}")
                        if len(set(paths)) != len(paths):
                            problems.append(f"a file is generated twice at once: {paths}")
                        if not ok:
                            problems.append(
                                f"{len(pending)} distinct files are being read; status shows {len(paths)} running"
                                f" ({paths}) + {g['waiting']} waiting"
                            )

                ops: list[tuple[str, float]] = []
                current = [""]

                def ls_and_stat():
                    todo = [("ls", p, os.listdir) for p in dirs[: MAX_OPS // 2]]
                    todo += [("stat", p, os.stat) for p in (dirs + stat_files)[: MAX_OPS // 2]]
                    for what, p, fn in todo:
                        current[0] = f"{what} {p.relative_to(root)}"
                        t0 = time.monotonic()
                        fn(p)
                        ops.append((current[0], time.monotonic() - t0))

                value, err, secs = tr.run_bounded(ls_and_stat, within(10.0))
                if value == "HUNG":
                    problems.append(
                        f"`{current[0]}` hung (> {within(10.0):.0f}s) while the server was frozen and"
                        f" {len(S3_READERS)} readers waited on it ({len(ops)} ls/stat answered before it)"
                    )
                elif err is not None:
                    problems.append(f"`{current[0]}` failed while the server was frozen: {tr.describe(value, err)}")
                else:
                    slow = sorted(ops, key=lambda o: -o[1])
                    print(f"frozen S3: {len(ops)} ls/stat in {secs:.2f}s, slowest {slow[:3]}")
                    if slow[0][1] >= within(FROZEN_OP):
                        problems.append(f"ls/stat took up to {slow[0][1]:.2f}s while generations hung: {slow[:5]}")

                done = [f"{S3_READERS[i][0]}/{S3_READERS[i][1]}" for i in list(results)]
                if set(done) & set(pending):
                    problems.append(f"readers of {sorted(set(done) & set(pending))} finished while the server was frozen")
            finally:
                server.resume()
            for t in threads:
                t.join(within(30.0))
            hung = [S3_READERS[i] for i, t in enumerate(threads) if t.is_alive()]
            assert not hung, f"readers still hang {within(30.0):.0f}s after the server resumed: {hung}; {problems}"
            for i, (a, f) in enumerate(S3_READERS):
                got = results.get(i)
                if isinstance(got, Exception):
                    problems.append(f"{a}/{f}: {got!r}")
                    continue
                node = ts.node_named(fixtures_dir, "pbmc", a)
                spec = Spec(f"{a}/{f}", a, "data", f.rsplit(".", 1)[1])
                ref = ts.expected_slice(node, [(0, 9)]) if f.startswith("slices/") else data_reference.ref_of(node)
                problems += check_data(ref, spec, got)
            if not wait_until(
                lambda: not (st := read_status(mp))["generations"]["running"] and st["generations"]["waiting"] == 0,
                within(5.0),
            ):
                problems.append(f"generations left in status after every reader finished: {read_status(mp)['generations']}")
            formats.fail_if(problems, "problems with a frozen, then resumed, S3 server")
    finally:
        server.close()


# --------------------------------------------------------------------------------------
# 4. one memory budget


BUDGET = "128M"
BUDGET_BYTES = 128 * MiB
# What the daemon holds beyond the budget's accounting, which covers each reader's batches,
# encoders and libtiledb's tiles (its queries' sm.mem.total_budget): thread stacks, the
# allocator's slack and libtiledb's per-query state. (When libtiledb's tiles were not
# accounted, the same readers took up to 150 MB over the baseline with 120 MiB accounted;
# now about 20 MB.)
RSS_MARGIN_MB = 32.0
QUARTERS = [(0, 49_999), (50_000, 99_999), (100_000, 149_999), (150_000, 199_999)]
BIG_FILES = ["data.csv", "data.tsv", "data.jsonl", "data.parquet"] + [
    f"slices/{a}-{b}.{ext}" for ext in ("csv", "tsv", "jsonl") for a, b in QUARTERS
]


def _sha_of(path: Path) -> tuple[str, int]:
    """sha256 and length of a file read to its end with os.open/os.read: no fstat (which
    Python's open() makes, and which waits for a file's whole generation), so a streamed
    file is read while it is generated."""
    h = hashlib.sha256()
    n = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while chunk := os.read(fd, MiB):
            h.update(chunk)
            n += len(chunk)
    finally:
        os.close(fd)
    return h.hexdigest(), n


@pytest.mark.timeout(300)
def test_memory_budget_bounds_sixteen_streaming_readers(fixtures_dir, mount):
    """16 readers at once of 16 distinct files of big/X (3.2M cells: data.csv/tsv/jsonl
    streamed with --materialize-limit 0, data.parquet, and 12 row-quarter slices), with
    --max-memory 128M and --max-generations 16 (the budget is the only bound).

    Asserts: every reader completes and gets exactly the bytes that a lone reader got on
    a mount of its own (sha256); the status says budget_bytes = 128 MiB, in_use_bytes
    (sampled) and peak_bytes never above it, and peak_bytes > 0 (the readers were
    accounted); the daemon's peak RSS (VmHWM) stays under its RSS before the readers +
    128 MiB + 32 MB (the budget covers libtiledb's tiles too)."""
    with mount(fixtures_dir / "big", "--materialize-limit", "0") as ref_mp:
        alone = {}
        for rel in BIG_FILES:
            alone[rel] = _sha_of(Path(ref_mp) / "X" / rel)
    # --max-generations 16: all 16 files generate at once, so the memory budget, not the
    # generation slots, is what bounds them.
    with mount(
        fixtures_dir / "big", "--max-memory", BUDGET, "--max-generations", "16", "--materialize-limit", "0"
    ) as mp:
        pid = mp.proc.pid
        x = Path(mp) / "X"
        os.listdir(x)
        os.listdir(x / "slices")
        s0 = read_status(mp)
        assert_status_shape(s0, "the status file")
        assert s0["memory"]["budget_bytes"] == BUDGET_BYTES, f"--max-memory {BUDGET}: budget_bytes is {s0['memory']}"
        base_rss = rss_mb(pid)
        results: dict = {}
        start = threading.Barrier(len(BIG_FILES))

        def reader(rel: str) -> None:
            try:
                start.wait()
                results[rel] = _sha_of(x / rel)
            except Exception as e:  # noqa: BLE001
                results[rel] = e

        samples = []
        done = threading.Event()

        def sampler() -> None:
            while not done.is_set():
                try:
                    st = read_status(mp)
                    samples.append((rss_mb(pid), st["memory"]["in_use_bytes"], st["memory"]["waiting"]))
                except Exception as e:  # noqa: BLE001
                    samples.append((rss_mb(pid), repr(e), None))
                done.wait(0.2)

        threads = [threading.Thread(target=reader, args=(rel,), daemon=True) for rel in BIG_FILES]
        smp = threading.Thread(target=sampler, daemon=True)
        t0 = time.monotonic()
        smp.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join(within(60.0))
        took = time.monotonic() - t0
        done.set()
        smp.join(10)
        hung = [rel for rel, t in zip(BIG_FILES, threads) if t.is_alive()]
        assert not hung, f"readers still running after {took:.0f}s under --max-memory {BUDGET}: {hung}"
        hwm = proc_kb(pid, "VmHWM") / 1024
        s1 = read_status(mp)
        assert_status_shape(s1, "the status file after the readers")
        in_use = [u for _, u, _ in samples if isinstance(u, int)]
        waits = [w for _, _, w in samples if isinstance(w, int)]
        print(
            f"\nmemory budget {BUDGET}: {len(BIG_FILES)} readers in {took:.1f}s; RSS {base_rss:.0f} MB before,"
            f" peak (VmHWM) {hwm:.0f} MB, bound {base_rss + BUDGET_BYTES / MiB + RSS_MARGIN_MB:.0f} MB;"
            f" status peak_bytes {s1['memory']['peak_bytes'] / MiB:.1f} MiB, in_use sampled max"
            f" {max(in_use, default=0) / MiB:.1f} MiB, most readers waiting {max(waits, default=0)}"
        )
        problems = []
        for rel in BIG_FILES:
            got = results.get(rel)
            if isinstance(got, Exception):
                problems.append(f"X/{rel}: {got!r}")
            elif got != alone[rel]:
                problems.append(f"X/{rel}: {got[1]} bytes sha256 {got[0][:12]}, alone {alone[rel][1]} bytes {alone[rel][0][:12]}")
        bad_samples = [u for _, u, _ in samples if not isinstance(u, int)]
        if bad_samples:
            problems.append(f"status unreadable during the reads: {bad_samples[:3]}")
        if max(in_use, default=0) > BUDGET_BYTES:
            problems.append(f"memory.in_use_bytes reached {max(in_use)} > budget {BUDGET_BYTES}")
        if s1["memory"]["peak_bytes"] > BUDGET_BYTES:
            problems.append(f"memory.peak_bytes {s1['memory']['peak_bytes']} > budget {BUDGET_BYTES}")
        if s1["memory"]["peak_bytes"] <= 0:
            problems.append("memory.peak_bytes is 0 after 16 readers: nothing was accounted")
        if hwm > base_rss + BUDGET_BYTES / MiB + RSS_MARGIN_MB:
            problems.append(
                f"the daemon's peak RSS {hwm:.0f} MB > {base_rss:.0f} MB before + {BUDGET} budget + {RSS_MARGIN_MB:.0f} MB"
            )
        formats.fail_if(problems, f"problems under --max-memory {BUDGET}")
        assert mp.proc.poll() is None


# --------------------------------------------------------------------------------------
# 5. status


@pytest.mark.timeout(120)
def test_status_file_and_command(fixtures_dir, mount):
    """The hidden status file and `soma-mount status` on an idle mount.

    Asserts: readdir of the root does not list .soma-mount.status but it opens; its JSON
    has the status shape, the daemon's pid, the mounted URI, the defaults (budget 512 MiB,
    generations limit 4, cache limit 10 GiB) and nothing running; each open gives fresh
    JSON (uptime_seconds grows); --max-memory 1G, --max-generations 3 and --cache-size 2G
    show in a second mount's status; `soma-mount status --json` prints the same JSON
    (uptime aside) and `soma-mount status` prints text with the URI, exit status 0."""
    uri = fixtures_dir / "hand"
    with mount(uri) as mp:
        assert STATUS_FILE not in os.listdir(mp), f"readdir of the root lists {STATUS_FILE}"
        s = read_status(mp)
        assert_status_shape(s, "the status file")
        assert s["pid"] == mp.proc.pid, f"status pid {s['pid']}, the daemon is {mp.proc.pid}"
        assert s["uri"].rstrip("/").endswith(str(uri)), f"status uri {s['uri']!r}, mounted {uri}"
        assert s["memory"]["budget_bytes"] == DEFAULT_MAX_MEMORY, s["memory"]
        assert s["memory"]["peak_bytes"] <= s["memory"]["budget_bytes"], s["memory"]
        assert s["generations"]["limit"] == DEFAULT_MAX_GENERATIONS, s["generations"]
        assert s["generations"]["running"] == [] and s["generations"]["waiting"] == 0, s["generations"]
        assert s["cache"]["limit_bytes"] == DEFAULT_CACHE_SIZE, s["cache"]
        assert s["inodes"] >= 1, s
        time.sleep(0.3)
        s2 = read_status(mp)
        assert s2["uptime_seconds"] > s["uptime_seconds"], f"a second open gave uptime {s2['uptime_seconds']} after {s['uptime_seconds']}"
        j = status_json_cmd(mp)
        assert_status_shape(j, "soma-mount status --json")
        drop = ("uptime_seconds", "inodes", "open_handles")
        assert {k: v for k, v in j.items() if k not in drop} == {k: v for k, v in s2.items() if k not in drop}, (
            f"status --json {j} differs from the status file {s2}"
        )
        r = status_cmd(mp)
        assert r.returncode == 0, f"soma-mount status exited {r.returncode}: {r.stderr}"
        assert str(uri) in r.stdout, f"soma-mount status does not name the URI:\n{r.stdout}"
        print(f"\nsoma-mount status (idle):\n{r.stdout}")
    with mount(uri, "--max-memory", "1G", "--max-generations", "3", "--cache-size", "2G") as mp:
        s = read_status(mp)
        assert s["memory"]["budget_bytes"] == 1 << 30, s["memory"]
        assert s["generations"]["limit"] == 3, s["generations"]
        assert s["cache"]["limit_bytes"] == 2 << 30, s["cache"]


@pytest.mark.timeout(120)
def test_status_during_a_generation(fixtures_dir, mount):
    """big/X/data.jsonl (~180 MB, streamed with --materialize-limit 0) is opened and 1 MiB
    read, then the reader pauses with the file open.

    Asserts: within 5 s (times the margin) status lists a running generation with path
    "X/data.jsonl", bytes >= 1 MiB and below what it may run ahead of the reader (1 MiB +
    64 MiB, + 16 MiB slack), rows > 0 with bytes/rows a JSON Lines row's length (20-200),
    seconds > 0, and open_handles >= 1; the first line read is row 0 as
    tiledbsoma reads it; `soma-mount status` prints the path (exit 0) and `--json` has
    the same entry; after the file is closed the generation goes from status within 10 s."""
    with tiledbsoma.open(str(fixtures_dir / "big" / "X")) as X:
        first = X.read(coords=(slice(0, 0),), result_order="row-major").tables().concat()
    want = [
        ("soma_dim_0", int(first["soma_dim_0"][0].as_py())),
        ("soma_dim_1", int(first["soma_dim_1"][0].as_py())),
        ("soma_data", float(first["soma_data"][0].as_py())),
    ]
    rel = "X/data.jsonl"
    with mount(fixtures_dir / "big", "--materialize-limit", "0") as mp:
        # os.open/os.read, not open(): Python's open() fstat()s, and an fstat waits for the
        # whole generation.
        fd = os.open(Path(mp) / rel, os.O_RDONLY)
        try:
            head = b""
            while len(head) < MiB:
                chunk = os.read(fd, MiB - len(head))
                assert chunk, f"{rel} ended after {len(head)} bytes"
                head += chunk
            line0 = data_reference.load_json_line(head.split(b"\n", 1)[0].decode())
            assert [(k, float(v) if k == "soma_data" else int(v)) for k, v in line0] == want, (
                f"first line of {rel}: {line0}, tiledbsoma reads {want}"
            )
            seen = []

            def listed() -> bool:
                seen.append(read_status(mp))
                return rel in running_paths(seen[-1])

            assert wait_until(listed, within(5.0), 0.2), f"status never listed {rel} as running: {seen[-1]['generations']}"
            time.sleep(1.0)  # let it run up to its read-ahead bound
            s = read_status(mp)
            assert_status_shape(s, "the status file during a generation")
            g = next((g for g in s["generations"]["running"] if g["path"] == rel), None)
            assert g is not None, f"{rel} left status while its reader holds it open: {s['generations']}"
            print(f"\nstatus during a generation: {json.dumps(g)}; open_handles {s['open_handles']}")
            assert MiB <= g["bytes"] <= MiB + 64 * MiB + 16 * MiB, (
                f"{rel}: {g['bytes']} bytes generated for a reader paused at 1 MiB (at most 64 MiB ahead)"
            )
            assert g["rows"] > 0 and 20 <= g["bytes"] / g["rows"] <= 200, f"bytes {g['bytes']} for rows {g['rows']}"
            # (g["readers"]: the daemon counts reads waiting on the generation, and this
            # reader waits on nothing, so no bound is asserted.)
            assert g["seconds"] > 0, g
            assert g["estimated_bytes"] is None or g["estimated_bytes"] > 0, g
            assert s["open_handles"] >= 1, f"a file is open, status says open_handles {s['open_handles']}"
            r = status_cmd(mp)
            assert r.returncode == 0, f"soma-mount status exited {r.returncode}: {r.stderr}"
            assert rel in r.stdout, f"soma-mount status does not show {rel}:\n{r.stdout}"
            print(f"soma-mount status:\n{r.stdout}")
            j = status_json_cmd(mp)
            assert_status_shape(j, "soma-mount status --json during a generation")
            assert rel in running_paths(j), f"status --json does not list {rel}: {j['generations']}"
        finally:
            os.close(fd)
        ok = wait_until(lambda: rel not in running_paths(read_status(mp)), within(10.0), 0.2)
        assert ok, f"{rel} still generating 10 s after its only reader closed it: {read_status(mp)['generations']}"
        assert mp.proc.poll() is None
