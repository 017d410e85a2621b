"""Differential test: random SOMA stores, mounted through real FUSE, against tiledbsoma.

Each case is one seed. random_store.build_store writes a random store with that seed
(DataFrames with 1 to 3 index columns of every index type and awkward domains, sparse
and partly written dense ND arrays, odd tile extents, capacities and orders, several
fragments, overwrites, deletes, resized domains, enumerations, NaN, infinities, text
that needs quoting; see random_store.py), mounts it once with harness.mount's mount_guard (a
random --chunk-cells; data files generated whole on open, with or without
--exact-sizes, or streamed past a tiny --materialize-limit) and checks it against
tiledbsoma and the contract (docs/REFERENCE.md):

- the root lists every member once, under its own name ("The tree"), and each array
  directory lists what it must (data files, data.npy, slices/, by/);
- schema.json: columns, types, domains, shape, non-empty domain, enumerations, and
  cell_count as the sum of the fragments' cell counts;
- data.csv, data.tsv, data.jsonl and data.parquet (and data.npy for a numeric dense
  array) hold what tiledbsoma reads, rows sorted by the index columns, values written
  as "How values are written" says, also after an earlier reader stopped early;
- slices/ lists chunks that cover every row and concatenate to the data files; each chunk of
  slices/parquet/, stat'ed first, reports the size of the bytes then read;
- random named slices ("Slices": `A-B`, `A`, `*`, missing trailing ranges, negative
  and float bounds, ranges outside the domain, percent-encoded string keys, `%00`)
  hold tiledbsoma's rows within the ranges, in every format; a reversed range is
  ENOENT;
- by/<column>/ lists every label of an enumerated column, and a few labels' files
  hold what tiledbsoma's read(value_filter=...) returns.

The comparisons are test_data's, test_slices' and test_tree's (built on data_reference.py
and tree_reference.py); this file generates the cases. A failure names its seed and lists
every difference after a one-line description of each array of the store.

Environment:
  SOMA_DIFF_STORES      how many seeds to run (default 40, about a minute on 2 cores);
                        a longer run: SOMA_DIFF_STORES=300
  SOMA_DIFF_FIRST_SEED  the first seed (default 0): seeds FIRST .. FIRST+STORES-1
  SOMA_DIFF_SEEDS       a comma-separated list of seeds instead (to replay a failure)

Run:    .venv/bin/python -m pytest tests/python/test_differential.py -q
Replay: SOMA_DIFF_SEEDS=17 .venv/bin/python -m pytest tests/python/test_differential.py
By hand: .venv/bin/python tests/python/random_store.py 17 /tmp/s17 && soma-mount /tmp/s17 /mnt/s17
"""

from __future__ import annotations

import math
import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from harness import random_store
from harness import tree_reference
import tiledb
from harness.mount import mount_guard
from harness.data_reference import ref_of
from harness.formats import Problems, arrays_equal, fail_if
from test_slices import (
    FORMATS,
    _in_spec,
    check_chunk_listing,
    check_chunks_concatenate,
    check_file_against,
    enum_columns,
    expected_by,
    expected_slice,
    info_of,
    label_kind,
    list_slices,
    make_ref,
    match_listing,
    slice_name,
)
from test_tree import _compare_schema, read_json

DEFAULT_STORES = 40
SLICES_PER_ARRAY = 8
LABELS_PER_COLUMN = 2  # label directories of each enumerated column read (plus __null__)
CHUNK_CELLS = [16, 50, 200, 1_000_000]
MAX_CHUNKS_READ = 24  # chunks are read back in every format only when there are at most this many
DATA_FILES = {f"data.{fmt}" for fmt in FORMATS}


def seeds() -> list[int]:
    listed = os.environ.get("SOMA_DIFF_SEEDS", "").strip()
    if listed:
        return [int(s) for s in listed.split(",")]
    first = int(os.environ.get("SOMA_DIFF_FIRST_SEED", "0"))
    return list(range(first, first + int(os.environ.get("SOMA_DIFF_STORES", DEFAULT_STORES))))


class DaemonDied(Exception):
    pass


def ensure_alive(mp, after):
    if mp.proc.poll() is not None:
        raise DaemonDied(f"the daemon exited with status {mp.proc.returncode} after reading {after}")


# --------------------------------------------------------------------------------------
# the tree and schema.json


def check_root_listing(mp, root: tree_reference.Node) -> list[str]:
    """Every member listed once, under a name of its own, next to metadata.json."""
    shown = {name: tree_reference.encode_name(name) for name in root.members}
    problems = []
    if len(set(shown.values())) != len(shown):
        problems.append(f"members {sorted(shown)} do not get distinct names: {shown}")
    listing = os.listdir(mp)
    want = set(shown.values()) | {"metadata.json"}
    if len(listing) != len(set(listing)) or set(listing) != want:
        problems.append(f"ls <root> gives {sorted(listing)}, expected {sorted(want)}")
    return problems


def check_array_listing(d: Path, ref, enums: list, probs: Problems):
    want = DATA_FILES | {"metadata.json", "schema.json", "slices"}
    if ref.npy:
        want.add("data.npy")
    if enums:
        want.add("by")
    if ref.soma_type in ("SOMADataFrame", "SOMAPointCloudDataFrame", "SOMAGeometryDataFrame"):
        want.add("where")
    try:
        listing = os.listdir(d)
    except OSError as e:
        probs.add(f"ls: {e}")
        return
    if sorted(listing) != sorted(want):
        probs.add(f"ls gives {sorted(listing)}, expected {sorted(want)}")


def check_schema_json(node, d: Path, probs: Problems):
    want = tree_reference.expected_schema(node.uri)
    if want["cell_count"] is not None:
        # REFERENCE.md: the sum of the fragments' cell counts (tiledbsoma's count dedups).
        want["cell_count"] = sum(tiledb.array_fragments(node.uri).cell_num)
    try:
        got = read_json(d / "schema.json")
    except (OSError, AssertionError) as e:
        probs.add(f"schema.json: {e}")
        return
    for msg in _compare_schema("schema.json", got, want):
        probs.add(msg)


# --------------------------------------------------------------------------------------
# whole arrays


def check_reference_sorted(node, info, ref):
    """tiledbsoma's row-major read must already be in the contract's order (sorted by
    the index columns), else the reference itself is wrong."""
    if ref.nrows > 1 and info.soma_type != "SOMADenseNDArray":
        order = pc.sort_indices(ref.table, sort_keys=[(c, "ascending") for c in info.index_cols])
        assert order.to_pylist() == list(range(ref.nrows)), (
            f"reference: tiledbsoma's row-major read of {node.display} is not sorted by {info.index_cols}"
        )


def read_prefix(path: Path, rng: random.Random, probs: Problems):
    """Read the start of a file and close it, as `head` does: a reader that stops early
    must not change what the next one gets."""
    try:
        with open(path, "rb") as f:
            f.read(rng.choice([1, 100, 4096]))
    except OSError as e:
        probs.add(f"{path.name}: reading its first bytes: {e}")


def check_npy(path: Path, ref, probs: Problems):
    try:
        got = np.load(path)
    except Exception as e:  # noqa: BLE001
        probs.add(f"data.npy: numpy.load fails: {type(e).__name__}: {e}")
        return
    if not arrays_equal(got, ref.dense):
        probs.add(f"data.npy ({got.dtype}, {got.shape}) differs from tiledbsoma ({ref.dense.dtype}, {ref.dense.shape})")


def check_files_at_once(mp, paths: list[Path], ref, probs: Problems):
    """test_slices.check_file_against on every path, all read at the same time, as the
    parallel readers of a pipeline would."""
    with ThreadPoolExecutor(max(1, len(paths))) as pool:
        for _ in pool.map(lambda path: check_file_against(path, ref, probs), paths):
            pass
    ensure_alive(mp, ", ".join(sorted({path.name for path in paths})))


def check_data_files(mp, d: Path, ref, rng: random.Random, probs: Problems):
    """Every data file, after a reader stopped early; one of them read twice at once."""
    read_prefix(d / f"data.{rng.choice(FORMATS)}", rng, probs)
    paths = [d / f"data.{fmt}" for fmt in FORMATS]
    check_files_at_once(mp, paths + [rng.choice(paths)], ref, probs)
    if ref.npy:
        check_npy(d / "data.npy", ref, probs)
        ensure_alive(mp, d / "data.npy")


def check_chunks(mp, node, d: Path, info, ref, probs: Problems):
    try:
        names = list_slices(d)
    except OSError as e:
        probs.add(f"ls slices/: {e}")
        return
    first = info.index_cols[0]
    first_values = next(c for c in ref.cols if c.name == first).values if info.first_is_int else []
    # Chunks come from fragment metadata: an array whose cells were all deleted may
    # still list chunks (holding no rows); one never written lists none.
    never_written = ref.nrows == 0 and not len(tiledb.array_fragments(node.uri))
    chunks = check_chunk_listing(names, first_values, info.first_is_int, never_written, "slices", probs)
    sized = info.soma_type in ("SOMASparseNDArray", "SOMADenseNDArray")
    check_first_stat_sizes(d / "slices" / "parquet", sized, probs)
    if len(chunks) <= MAX_CHUNKS_READ and (chunks or ref.nrows == 0):
        check_chunks_concatenate(d, chunks, first, probs)
    ensure_alive(mp, d / "slices")


def check_first_stat_sizes(d: Path, sized: bool, probs: Problems):
    """Every file of d, stat'ed before anything has read it, reports the size of the bytes
    then read (docs/REFERENCE.md "Sizes and reads"): `sized` Parquet (of ND arrays) from its row count,
    whatever the limit; every other listed file generated by its first stat when it is
    below --materialize-limit (StreamedProblems drops what a tiny limit excuses)."""
    try:
        stated = {name: os.stat(d / name).st_size for name in sorted(os.listdir(d))}
        read = {name: len((d / name).read_bytes()) for name in stated}
    except OSError as e:
        probs.add(f"{d.name}/: {e}")
        return
    wrong = {n: (stated[n], read[n]) for n in stated if stated[n] != read[n]}
    if wrong:
        what = "sized Parquet" if sized else FIRST_STAT_BELOW_LIMIT
        probs.add(f"{d.name}/: {what}: sizes at the first stat differ from the bytes read (stat, read): {dict(list(wrong.items())[:5])}")


# --------------------------------------------------------------------------------------
# random slices


def non_integral(v: float) -> float:
    """v moved to a multiple of 1/8 that is not an integer: test_slices.fmt_number
    spells it exactly in either precision (the spelling of an integral float bound is
    left open by the contract)."""
    v = math.floor(v * 8) / 8
    return v + 0.125 if v.is_integer() else v


def spellable(v: float, kind: str) -> bool:
    """Whether v can be a float bound as test_slices.fmt_number writes it."""
    x = np.float32(v) if kind == "f32" else np.float64(v)
    return not float(v).is_integer() and float(np.format_float_positional(x, unique=True, trim="-")) == v


def bound(rng: random.Random, lo, hi, present: list):
    """A random bound: a stored value, the domain's edge or just past it, far outside,
    or anywhere in between."""
    r = rng.random()
    if present and r < 0.4:
        return rng.choice(present)
    if r < 0.6:
        return rng.choice([lo, hi, lo - 1, hi + 1, lo - 7, hi + 7])
    if r < 0.7:
        return rng.choice([lo - 10**6, hi + 10**6, -5, -1, 0])
    return lo + (hi - lo) * rng.random()


def int_bound(rng: random.Random, lo, hi, present: list, t: pa.DataType) -> int:
    """bound() as an integer of the column's type (a bound the type cannot hold is
    left out: the contract does not say what it means)."""
    info = np.iinfo(t.to_pandas_dtype())
    return min(max(int(bound(rng, lo, hi, present)), int(info.min)), int(info.max))


def random_spec(rng: random.Random, kind: str, t: pa.DataType, domain, present: list):
    """One index column's part of a slice name: None ('*'), a point, or (a, b)."""
    if rng.random() < 0.2:
        return None
    if kind == "str":
        return rng.choice(present) if present and rng.random() < 0.6 else rng.choice(["", "*", "%", "absent,/%"])
    if kind in ("f32", "f64"):
        points = [v for v in present if spellable(v, kind)]
        if points and rng.random() < 0.25:
            return rng.choice(points)
        a, b = sorted(non_integral(bound(rng, *domain, present)) for _ in range(2))
        return (a, b)
    if rng.random() < 0.25:
        return int_bound(rng, *domain, present, t)
    return tuple(sorted(int_bound(rng, *domain, present, t) for _ in range(2)))


def random_specs(rng: random.Random, info, ref) -> list:
    specs = []
    for i, name in enumerate(info.index_cols):
        present = sorted(set(ref.table.column(name).to_pylist()), key=repr)
        specs.append(random_spec(rng, info.kind(i), ref.schema.field(name).type, info.domain[i], present))
    while len(specs) > 1 and specs[-1] is None and rng.random() < 0.5:
        specs.pop()  # missing trailing ranges mean all of a column
    return specs


def expected_rows(node, info, ref, specs: list):
    """The rows of slice `specs`: those of tiledbsoma's whole read within the ranges
    (so clipped to the domain, and in order), as test_slices.expected_slice's
    cross-check filters them; dense arrays through expected_slice itself. Not
    tiledbsoma's read(coords=...) of sparse arrays: given a range on a string index
    column of an array of two fragments or more, libtiledb 2.30 crashes (SIGSEGV) in a
    row-major read when the range takes in "", and may return rows of other keys when
    the second fragment rewrote cells of the first."""
    if info.soma_type == "SOMADenseNDArray":
        return expected_slice(node, specs)
    mask = np.ones(ref.nrows, bool)
    for i, sp in enumerate(specs):
        mask &= _in_spec(ref.table.column(info.index_cols[i]).to_pylist(), sp, info.kind(i))
    return make_ref(node.display, info.soma_type, ref.table.filter(pa.array(mask)), ref.schema)


def check_random_slices(mp, node, d: Path, info, ref, rng: random.Random, probs: Problems):
    for _ in range(SLICES_PER_ARRAY):
        specs = random_specs(rng, info, ref)
        want = expected_rows(node, info, ref, specs)
        paths = [d / "slices" / slice_name(info, specs, fmt) for fmt in FORMATS]
        for path in paths:
            if not os.path.exists(path):
                probs.add(f"slices/{path.name!r} does not exist (expected {want.nrows} rows)")
        ensure_alive(mp, paths[0].stem)
        check_files_at_once(mp, [path for path in paths if path.exists()], want, probs)


def check_reversed_range(mp, d: Path, info, probs: Problems):
    """A reversed range on the first index column is ENOENT."""
    kind = info.kind(0)
    if kind == "str":
        return
    lo, hi = info.domain[0]
    if kind in ("f32", "f64"):
        a = non_integral(hi)
        reversed_range = (a, a - 1)
    else:
        reversed_range = (max(hi, lo + 1), lo)
    path = d / "slices" / slice_name(info, [reversed_range], "csv")
    if os.path.exists(path):
        probs.add(f"slices/{path.name!r}: a reversed range exists, expected ENOENT")
    ensure_alive(mp, path)


# --------------------------------------------------------------------------------------
# by/


def check_by(mp, node, d: Path, enums: list, rng: random.Random, probs: Problems):
    """ls by/<column> against the enumeration; a few labels' data files (and
    __null__'s) against tiledbsoma's read(value_filter=...)."""
    for f, labels in enums:
        cd = d / "by" / tree_reference.encode_name(f.name)
        try:
            names = os.listdir(cd)
        except OSError as e:
            probs.add(f"ls by/{f.name}: {e}")
            continue
        shown = match_listing(set(names), labels, label_kind(f), f.nullable, f"ls {cd.name}", probs)
        labelled = [(labels[i], False, name) for i, name in shown.items()]
        targets = rng.sample(labelled, min(len(labelled), LABELS_PER_COLUMN))
        if f.nullable:
            targets.append((None, True, "__null__"))
        for label, is_null, name in targets:
            want = expected_by(node, f, label, is_null)
            check_files_at_once(mp, [cd / name / f"data.{fmt}" for fmt in FORMATS], want, probs)


# --------------------------------------------------------------------------------------
# mounts and the test


def check_array(mp, node, rng: random.Random, probs: Problems):
    info, ref = info_of(node), ref_of(node)
    check_reference_sorted(node, info, ref)
    enums = enum_columns(node) if info.soma_type == "SOMADataFrame" else []
    d = Path(mp).joinpath(*node.relpath)
    check_array_listing(d, ref, enums, probs)
    check_schema_json(node, d, probs)
    check_data_files(mp, d, ref, rng, probs)
    check_chunks(mp, node, d, info, ref, probs)
    check_random_slices(mp, node, d, info, ref, rng, probs)
    check_reversed_range(mp, d, info, probs)
    check_by(mp, node, d, enums, rng, probs)


STREAMED = ["--materialize-limit", "1K"]
FIRST_STAT_BELOW_LIMIT = "a listed file below --materialize-limit"


class StreamedProblems(Problems):
    """Problems of a mount with a tiny --materialize-limit, where text files are
    streamed rather than generated whole on open (Parquet still is)."""

    def add(self, msg: str):
        if FIRST_STAT_BELOW_LIMIT in msg:
            return
        if "must be generated whole on open" not in msg or ".parquet:" in msg:
            super().add(msg)


def mount_options(rng: random.Random) -> list[str]:
    """A random --chunk-cells; data files generated whole on open (the default, or
    --exact-sizes), or streamed."""
    return ["--chunk-cells", str(rng.choice(CHUNK_CELLS))] + rng.choice([[], [], ["--exact-sizes"], STREAMED])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds(), ids=lambda s: f"seed{s}")
def test_random_store_matches_tiledbsoma(seed, tmp_path, soma_mount_bin):
    store = random_store.build_store(str(tmp_path / "store"), seed)
    nodes = tree_reference.walk(store.uri)
    options = mount_options(random.Random(seed))
    problems = []
    with mount_guard(store.uri, *options, label=f"random store, seed {seed}") as mp:
        problems += check_root_listing(mp, nodes[0])
        for node in nodes[1:]:
            probs = (StreamedProblems if STREAMED[0] in options else Problems)(node.display)
            try:
                check_array(mp, node, random.Random(f"{seed}/{node.member_name}"), probs)
            except DaemonDied as e:
                probs.add(str(e))
                break
            finally:
                problems += probs.done()
    fail_if(
        problems,
        f"differences in the random store of seed {seed} (mounted with {' '.join(options)};"
        f" replay: SOMA_DIFF_SEEDS={seed}); the store:\n{store.summary()}\nthe differences",
    )
