"""Integration tests for queries as paths, where/ (docs/REFERENCE.md "Queries: `where/`").

Data frames (test_df_*; run alone with -k test_df_):
- <dataframe>/where/<filter>/ holds data.csv, data.tsv, data.parquet, data.jsonl and the
  frame's schema.json (the same bytes as the frame's own). The data files hold the rows
  of tiledbsoma's SOMADataFrame.read(value_filter=<filter>) in the frame's sort order
  (by the index columns), checked value for value by test_data's checkers through
  read_data_file (so the size rules are checked too). The filters are DF_CASES below:
  numeric and float comparisons, enumerated columns by label (string, int, float and
  bool labels), in / not in, not, and / or, parentheses, chained comparisons, single
  and double quotes, attr("..."), an index column, True/False, labels with "/" and "%"
  written %2F and %25 in the path, `all`, and filters matching nothing.
- The frame lists `where`; `ls where/` lists nothing.
- `all` is the whole frame: the same bytes as the frame's data.<ext>.
- A query matching nothing: header-only CSV/TSV, empty JSON Lines, zero-row Parquet
  with the frame's schema.
- Spellings of one filter (operand order, quotes, spaces, parentheses, `in` vs `or`,
  chained vs `and`) give identical bytes.
- A bad filter (does not parse, unknown column, literal of the wrong type, a
  non-integral float for an integer column) is a directory holding only error.txt,
  which shows the filter with a caret (^) under the offending position; the daemon
  keeps serving.

Experiments (test_exp_*; run alone with -k test_exp_; each skips while
<experiment>/where/all/obs does not exist): <experiment>/where/<obs filter>/ holds obs/,
ms/<m>/var/ (every gene), ms/<m>/X/<layer>/, ms/<m>/obsm/<name>/, ms/<m>/10x/<layer>/ and
anndata/<m>.h5ad; ms/<m>/where/<var filter>/ restricts genes too (var/, X/<layer>/,
10x/<layer>/, anndata.h5ad). The reference is tiledbsoma's exp.axis_query(...) (obs(),
var(), X(layer).tables() with the store's join ids) and, for the h5ad files, the whole
experiment's to_anndata restricted to the selected cells and genes (as test_anndata
does for anndata/by/), cross-checked against the query's own to_anndata. A query's
scattered cells of an X written in fragments that overwrite each other's cells
(test_exp_where_scattered_cells_of_an_overwritten_x) are checked against the whole X read
in one range, then filtered: 8 random stores, or SOMA_WHERE_SEEDS of them from
SOMA_WHERE_FIRST_SEED (a longer run: SOMA_WHERE_SEEDS=200).

Two tiledbsoma 2.3.0 limits shape the references (the filters themselves are the
contract's grammar): `not (<and/or/in>)` crashes tiledbsoma (a segfault), so such a
filter is checked against an equivalent tiledbsoma can run (`ref` in DF_CASES, itself
checked to be the complement of the negated filter); and tiledbsoma accepts a
non-integral float for an integer column (it truncates), which the contract makes an
error. tiledbsoma has no `all`: its reference is a read without a filter.

Run: .venv/bin/python -m pytest tests/python/test_where.py -q
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import scipy.sparse as sp

from harness import data_reference, tenx, tree_reference
import test_anndata
import test_slices
import tiledbsoma
from harness.mount import mount_guard
from harness.settings import within
from harness.data_reference import Ref
from harness.formats import decode_utf8, fail_if, Problems, read_data_file
from test_slices import check_file_against, make_ref, table_values, values_equal

pytestmark = pytest.mark.timeout(300)

FORMATS = ("csv", "tsv", "parquet", "jsonl")
DATA_FILES = tuple(f"data.{fmt}" for fmt in FORMATS)
# What a where/<filter>/ directory of a data frame holds (docs/REFERENCE.md: "data.<ext> in every
# format, with the frame's schema.json").
WHERE_FILES = {*DATA_FILES, "schema.json"}
# A bad filter's directory, its error.txt or a file it does not hold answers within this
# (with harness.settings' margin): nothing hangs.
ANSWER_SECONDS = 5.0


# --------------------------------------------------------------------------------------
# filters in paths


def encode_filter(text: str) -> str:
    """A filter as a path component: '%' -> %25, '/' -> %2F (docs/REFERENCE.md)."""
    return text.replace("%", "%25").replace("/", "%2F")


def decode_filter(component: str) -> str:
    return re.sub("%(25|2F)", lambda m: "%" if m.group(1) == "25" else "/", component)


def decoded_index(component: str, i: int) -> int:
    """The position in the decoded filter of position i of the path component (inside an
    escape: the character it stands for)."""
    d = k = 0
    while k < len(component) and k <= i:
        step = 3 if re.match("%(25|2F)", component[k:k + 3]) else 1
        if k + step > i:
            return d
        k += step
        d += 1
    return d + (i - k)


def where_dir(base: Path, text: str) -> Path:
    return base / "where" / encode_filter(text)


def absent(path: Path) -> str | None:
    """None if path is ENOENT; else what it is."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"stat gives {e}, expected ENOENT"
    return "exists"


# --------------------------------------------------------------------------------------
# data frames: cases


@dataclass(frozen=True)
class Q:
    """A where/ query on a data frame.

    filter: as tiledbsoma reads it; the path component is encode_filter(filter).
    expect: what tiledbsoma returns, checked so that a fixture change cannot make a case
            vacuous: "some" (neither no row nor every row), "none" or "all".
    ref:    an equivalent filter tiledbsoma can run, for `not (<compound>)`, which crashes
            tiledbsoma 2.3.0; the reference checks that ref's rows are the complement of
            `negates`'s (true where the columns hold no null and no NaN)."""

    store: str
    frame: str
    filter: str
    expect: str = "some"
    ref: str | None = None
    negates: str | None = None

    def __str__(self):
        return f"{self.store}:{self.frame}:{self.filter}"


# Rows tiledbsoma 2.3.0 returns are in the comments (of the frame's total).
DF_CASES = [
    # pbmc obs (700 rows; no nulls)
    Q("pbmc", "obs", "n_genes > 1200"),  # 229: int64
    Q("pbmc", "obs", "percent_mito < 0.02"),  # 510: float32
    Q("pbmc", "obs", 'louvain == "3"'),  # 70: enumeration, by label
    Q("pbmc", "obs", "phase == 'S'"),  # 182: single quotes
    Q("pbmc", "obs", 'bulk_labels == "CD4+/CD25 T Reg"'),  # 68: "/" as %2F
    Q("pbmc", "obs", 'bulk_labels in ["CD14+ Monocyte", "CD4+/CD45RO+ Memory"]'),  # 148
    Q("pbmc", "obs", 'louvain not in ["0", "1", "2"]'),  # 330
    Q("pbmc", "obs", 'not phase == "G1"'),  # 199
    Q("pbmc", "obs", 'not (n_genes > 1200 or phase == "G1")',  # 122
      ref='not (n_genes > 1200) and not (phase == "G1")', negates='n_genes > 1200 or phase == "G1"'),
    Q("pbmc", "obs", 'not (louvain in ["1", "2"])',  # 460
      ref='louvain not in ["1", "2"]', negates='louvain in ["1", "2"]'),
    Q("pbmc", "obs", 'phase == "G2M" or percent_mito > 0.03'),  # 21
    Q("pbmc", "obs", "1000 < n_genes < 1100"),  # 288: chained
    Q("pbmc", "obs", 'attr("S_score") > 0'),  # 194
    Q("pbmc", "obs", '(phase == "S" and louvain == "1") or n_counts < 2500'),  # 40
    Q("pbmc", "obs", 'obs_id == "AAAGCCTGGCTAAC-1"'),  # 1
    Q("pbmc", "obs", "n_genes > 1000", "all"),  # 700
    Q("pbmc", "obs", "all", "all"),  # 700
    Q("pbmc", "obs", "n_genes < 0", "none"),
    Q("pbmc", "obs", 'bulk_labels == "no/such%label"', "none"),  # %2F and %25, no such label
    # pbmc var (765 rows)
    Q("pbmc", "ms/RNA/var", "highly_variable == True"),  # 309: bool
    Q("pbmc", "ms/RNA/var", "highly_variable == False and means > 1.0"),  # 163
    Q("pbmc", "ms/RNA/var", 'var_id in ["HES4", "SSU72", "NOPE"]'),  # 2
    Q("pbmc", "ms/RNA/var", "dispersions_norm >= 1.5 or n_counts < 100"),  # 170
    # hand obs (300 rows; nullable columns with nulls, NaN in f64)
    Q("hand", "obs", 'cell_type == "NK/γδ"'),  # 58: "/" and non-ASCII
    Q("hand", "obs", 'cell_type == ""'),  # 57: the empty label
    Q("hand", "obs", 'cell_type == "monocyte, classical"'),  # 57
    Q("hand", "obs", 'cell_type != "B cell"'),  # 229: nulls excluded
    Q("hand", "obs", 'cell_type in ["NK/γδ", "monocyte, classical"]'),  # 115
    Q("hand", "obs", 'cell_type not in ["B cell", "T cell"]'),  # 172
    Q("hand", "obs", "lane == -4"),  # 75: int32 labels
    Q("hand", "obs", "lane in [1, 3]"),  # 150
    Q("hand", "obs", "dose == 0.5"),  # 100: float64 labels
    Q("hand", "obs", "qc_pass == True"),  # 150: bool labels
    Q("hand", "obs", 'batch != "batch-B"'),  # 200
    Q("hand", "obs", "i8 < 0"),  # 147: nullable int8
    Q("hand", "obs", "not (i8 < 0)"),  # 110: nulls excluded (libtiledb's negation)
    Q("hand", "obs", "f64 > 0"),  # 122
    Q("hand", "obs", "not (f64 > 0)"),  # 128: NaN and nulls excluded (libtiledb's negation)
    Q("hand", "obs", "flag == False"),  # 188: nullable bool
    Q("hand", "obs", "u64 > 9223372036854775900"),  # 269: above int64's range
    Q("hand", "obs", "-15000 <= i16 <= -10000"),  # 50
    Q("hand", "obs", 'obs_id in ["cell_0001", "cell_0299", "nope"]'),  # 2
    Q("hand", "obs", "f32 > 0.5"),  # 81
    Q("hand", "obs", 'lane in [1, 3] and cell_type == "NK/γδ"'),  # 29
    # hand edge/labels (60 rows; a column named "grp/sub"; labels with "/" and "%")
    Q("hand", "edge/labels", 'attr("grp/sub") == "t/u"'),  # 20
    Q("hand", "edge/labels", 'attr("grp/sub") in ["p q", "r%s"]'),  # 40
    Q("hand", "edge/labels", 'label == "x%/y"'),  # 3
    Q("hand", "edge/labels", 'label == "50%"'),  # 4
    Q("hand", "edge/labels", 'label == "%2F"'),  # 4: the path says "%252F"
    Q("hand", "edge/labels", 'label == ".."'),  # 3
    Q("hand", "edge/labels", 'label == "unused"', "none"),  # a label no row holds
    Q("hand", "edge/labels", "num in [0, 1000]"),  # 32
    Q("hand", "edge/labels", "num == -1"),  # 16
    Q("hand", "edge/labels", "val >= 2.5"),  # 38: nullable float64
    Q("hand", "edge/labels", "pos < 0"),  # 30: the index column
    Q("hand", "edge/labels", "-5 <= pos < 5"),  # 10
    # hand: other index layouts
    Q("hand", "multi_index", 'name == "n3" and k > 0'),  # 2 of 40
    Q("hand", "multi_index", "score > 3.0"),  # 21
    Q("hand", "edge/string_index", 'key == "a"'),  # 2 of 16
    Q("hand", "edge/string_index", "x < 0"),  # 8
    Q("hand", "edge/str_keys", 'key == "a/b"'),  # 1 of 12
    Q("hand", "edge/str_keys", 'key in ["%", "*", "x,y"]'),  # 3
    Q("hand", "f32_index", 'label == "odd"'),  # 10 of 20
    Q("hand", "f32_index", "f32 >= -1.0"),  # 8
    Q("hand", "f32_index", 'u8 < 100 and label == "even"'),  # 5
    Q("hand", "ms/RNA/var", "n_cells >= 100"),  # 16 of 50
    Q("hand", "edge/empty_df", "value > 0", "none"),  # 0 of 0
    Q("hand", "edge/empty_df", "all", "all"),  # 0 of 0
]

# Filters spelled differently that mean the same rows: identical bytes in every format.
SPELLINGS = [
    ("pbmc", "obs", ["n_genes > 1200", "1200 < n_genes", "n_genes>1200", "n_genes   >   1200", "(n_genes > 1200)",
                     "attr('n_genes') > 1200", "n_genes > 1200.0"]),
    ("pbmc", "obs", ['phase == "S"', "phase == 'S'", '"S" == phase', 'phase in ["S"]', 'not phase != "S"']),
    ("pbmc", "obs", ['louvain in ["3", "5"]', 'louvain in ["5", "3"]', 'louvain == "3" or louvain == "5"',
                     '(louvain == "3") or (louvain == "5")']),
    ("pbmc", "obs", ["1000 < n_genes < 1100", "n_genes > 1000 and n_genes < 1100", "1100 > n_genes > 1000"]),
    ("pbmc", "ms/RNA/var", ["highly_variable == True", "highly_variable != False"]),
    ("hand", "edge/labels", ['attr("grp/sub") == "t/u"', "attr('grp/sub') == 't/u'"]),
    ("hand", "edge/labels", ["pos >= 0", "0 <= pos", 'attr("pos") >= 0']),
]


@dataclass(frozen=True)
class Bad:
    """A filter the directory must refuse with error.txt.

    at:       (lo, hi) ranges, inclusive, of positions in the decoded filter where the
              caret may point (None: not checked, for a blank filter);
    mentions: words the message (apart from the echoed filter) must name."""

    store: str
    frame: str
    filter: str
    at: tuple | None
    mentions: tuple = ()

    def __str__(self):
        return f"{self.store}:{self.frame}:{self.filter}"


def whole(text: str) -> tuple:
    """Anywhere in the filter, or its end (where a filter cut short is wrong)."""
    return ((0, len(text)),)


BAD_FILTERS = [
    # does not parse
    Bad("pbmc", "obs", "n_genes >", ((8, 9),)),
    Bad("pbmc", "obs", "n_genes = 5", ((8, 10),)),
    Bad("pbmc", "obs", "(n_genes > 1", ((0, 0), (11, 12))),
    Bad("pbmc", "obs", "n_genes > 1 and", ((12, 15),)),
    Bad("pbmc", "obs", 'phase == "G1', ((9, 12),)),
    Bad("pbmc", "obs", "n_genes > 1 extra", ((11, 16),)),
    Bad("pbmc", "obs", 'phase == "G1" && n_genes > 1', ((14, 15),)),
    Bad("pbmc", "obs", "n_genes / 2 > 1", ((8, 10),)),  # the path says %2F
    Bad("pbmc", "obs", " ", None),
    # unknown column
    Bad("pbmc", "obs", "nosuch > 1", ((0, 5),), ("nosuch",)),
    Bad("pbmc", "obs", 'attr("no such") == 1', ((0, 14),), ("no such",)),
    Bad("pbmc", "obs", "phase == S", ((6, 9),)),  # a bare name: a column, and there is no S
    Bad("hand", "edge/labels", 'label == "a/b" or nosuch == 1', ((18, 23),), ("nosuch",)),  # after a %2F
    # a literal of the wrong type
    Bad("pbmc", "obs", 'n_genes == "abc"', whole('n_genes == "abc"'), ("n_genes",)),
    Bad("pbmc", "obs", "n_genes > 1.5", whole("n_genes > 1.5"), ("n_genes",)),
    Bad("pbmc", "obs", "phase == 3", whole("phase == 3"), ("phase",)),
    Bad("pbmc", "obs", 'louvain in ["1", 2]', whole('louvain in ["1", 2]'), ("louvain",)),
    Bad("pbmc", "obs", 'percent_mito < "x"', whole('percent_mito < "x"'), ("percent_mito",)),
    Bad("hand", "obs", "i8 > 2.5", whole("i8 > 2.5"), ("i8",)),
    Bad("hand", "obs", 'lane == "x"', whole('lane == "x"'), ("lane",)),
    Bad("hand", "obs", "cell_type == 3", whole("cell_type == 3"), ("cell_type",)),
    Bad("hand", "obs", 'dose == "a"', whole('dose == "a"'), ("dose",)),
    Bad("hand", "edge/labels", 'attr("grp/sub") == 1', whole('attr("grp/sub") == 1'), ("grp/sub",)),
]


# --------------------------------------------------------------------------------------
# data frames: references


def frame_node(fixtures_dir: Path, store: str, frame: str):
    return test_slices.node_named(fixtures_dir, store, frame)


def soma_rows(uri: str, value_filter: str | None) -> pa.Table:
    """tiledbsoma's read(value_filter=...) in the frame's order (by the index columns)."""
    with tiledbsoma.open(uri) as df:
        return df.read(value_filter=value_filter, result_order="row-major").concat()


_DF_REFS: dict = {}


def expected_where(fixtures_dir: Path, q: Q) -> Ref:
    """The rows of where/<q.filter>/ as tiledbsoma reads them."""
    key = (str(fixtures_dir), str(q))
    if key in _DF_REFS:
        return _DF_REFS[key]
    node = frame_node(fixtures_dir, q.store, q.frame)
    whole_ref = data_reference.ref_of(node)
    vf = None if q.filter == "all" else (q.ref or q.filter)
    got = soma_rows(node.uri, vf).select(whole_ref.schema.names)
    if q.negates:
        inner = soma_rows(node.uri, q.negates)
        drop = pa.array(np.isin(whole_ref.table.column("soma_joinid").to_numpy(), inner.column("soma_joinid").to_numpy()))
        complement = whole_ref.table.filter(pc.invert(drop))
        assert values_equal(table_values(got, whole_ref.schema), table_values(complement, whole_ref.schema)), (
            f"test bug: {q.ref!r} ({got.num_rows} rows) is not the complement of {q.negates!r} ({inner.num_rows} rows)"
        )
    n, total = got.num_rows, whole_ref.nrows
    ok = {"some": 0 < n < total, "none": n == 0, "all": n == total}[q.expect]
    assert ok, f"fixture changed: tiledbsoma gives {n} of {total} rows for {q}, the case wants {q.expect!r}"
    ref = make_ref(f"{q.frame}/where/{encode_filter(q.filter)}", whole_ref.soma_type, got, whole_ref.schema)
    _DF_REFS[key] = ref
    return ref


def check_where_files(d: Path, ref: Ref, frame_dir: Path, probs: Problems):
    """One where/<filter>/ directory of a data frame: its listing, its data files against
    ref, and its schema.json against the frame's."""
    try:
        listing = set(os.listdir(d))
    except OSError as e:
        probs.add(f"ls: {e}")
        return
    if listing != WHERE_FILES:
        probs.add(f"lists {sorted(listing)}, expected {sorted(WHERE_FILES)}")
        if "error.txt" in listing:
            with contextlib.suppress(OSError):
                probs.add(f"error.txt says: {(d / 'error.txt').read_text(errors='replace')[:500]!r}")
            return
    for fmt in FORMATS:
        check_file_against(d / f"data.{fmt}", ref, probs)
    schema = read_data_file(d / "schema.json", probs)
    if schema is not None and schema != (frame_dir / "schema.json").read_bytes():
        probs.add("schema.json differs from the frame's own schema.json")


# --------------------------------------------------------------------------------------
# data frames: tests


def test_df_where_cases_cover_the_grammar():
    """The case list has what the contract's grammar names (guards against a silently
    thinned list)."""
    text = " ".join(q.filter for q in DF_CASES)
    for piece in ("==", "!=", "<", "<=", ">", ">=", " in [", " not in [", " and ", " or ", "not (", "attr(",
                  "'", '"', "True", "False", "%", "/", "."):
        assert piece in text, f"no case uses {piece!r}"
    assert any(re.search(r"\d+ <=? \w+ <=? -?\d+", q.filter) for q in DF_CASES), "no chained comparison"
    assert {q.expect for q in DF_CASES} == {"some", "none", "all"}
    assert {q.store for q in DF_CASES} == {"hand", "pbmc"}


@pytest.mark.parametrize("store", ["pbmc", "hand"])
def test_df_lists_where_and_where_lists_nothing(store, fixtures_dir, mounts):
    """Every data frame with a case lists a `where` directory, and `ls where/` is empty
    (filter directories are entered by name)."""
    mp = Path(mounts(store))
    problems = []
    for frame in sorted({q.frame for q in DF_CASES if q.store == store}):
        d = mp / frame
        if "where" not in os.listdir(d):
            problems.append(f"{frame}: `where` is not listed ({sorted(os.listdir(d))})")
            continue
        if not (d / "where").is_dir():
            problems.append(f"{frame}/where is not a directory")
            continue
        inside = os.listdir(d / "where")
        if inside:
            problems.append(f"{frame}/where lists {sorted(inside)[:10]}, expected nothing")
    fail_if(problems, f"where/ listing problems in {store}")


@pytest.mark.parametrize("q", DF_CASES, ids=str)
def test_df_where_matches_value_filter(q, fixtures_dir, mounts):
    """<frame>/where/<filter>/: data.<fmt> hold tiledbsoma's read(value_filter=<filter>),
    schema.json is the frame's."""
    ref = expected_where(fixtures_dir, q)
    frame_dir = Path(mounts(q.store)) / q.frame
    probs = Problems(f"{q.frame}/where/{encode_filter(q.filter)}")
    check_where_files(where_dir(frame_dir, q.filter), ref, frame_dir, probs)
    fail_if(probs.done(), f"problems with {q} ({ref.nrows} rows expected)")


@pytest.mark.parametrize("store,frame", [
    ("pbmc", "obs"), ("pbmc", "ms/RNA/var"), ("hand", "obs"), ("hand", "edge/labels"), ("hand", "multi_index"),
    ("hand", "edge/string_index"), ("hand", "edge/all_types"), ("hand", "edge/empty_df"),
])
def test_df_where_all_is_the_whole_frame(store, frame, fixtures_dir, mounts):
    """where/all/data.<fmt> are the frame's own data.<fmt>, byte for byte."""
    d = Path(mounts(store)) / frame
    probs = Problems(f"{store}/{frame}/where/all")
    for name in DATA_FILES:
        got = read_data_file(d / "where" / "all" / name, probs)
        if got is not None and got != (d / name).read_bytes():
            probs.add(f"{name} differs from the frame's {name} ({len(got)} vs {len(d.joinpath(name).read_bytes())} bytes)")
    fail_if(probs.done(), "where/all problems")


@pytest.mark.parametrize("q", [q for q in DF_CASES if q.expect == "none"], ids=str)
def test_df_where_nothing_matches(q, fixtures_dir, mounts):
    """No matching row: CSV and TSV hold the header line only, JSON Lines nothing, Parquet
    zero rows with the frame's columns, types and nullability; each size exact."""
    ref = expected_where(fixtures_dir, q)
    d = where_dir(Path(mounts(q.store)) / q.frame, q.filter)
    assert (d / "data.csv").read_bytes() == (",".join(ref.names) + "\n").encode(), f"{q}: data.csv"
    assert (d / "data.tsv").read_bytes() == ("\t".join(ref.names) + "\n").encode(), f"{q}: data.tsv"
    assert (d / "data.jsonl").read_bytes() == b"", f"{q}: data.jsonl"
    t = data_reference.read_parquet_bytes((d / "data.parquet").read_bytes())
    assert t.num_rows == 0 and t.column_names == ref.names, f"{q}: data.parquet has {t.num_rows} rows, {t.column_names}"
    rt = data_reference.pyarrow_roundtrip_schema(ref.schema)
    for col in ref.cols:
        f = t.schema.field(col.name)
        assert data_reference.parquet_type_ok(f.type, col.type, rt.field(col.name).type), f"{q}: {col.name} is {f.type}"
        assert f.nullable == col.nullable, f"{q}: {col.name} nullable={f.nullable}"
    for name in DATA_FILES:
        assert os.stat(d / name).st_size == len((d / name).read_bytes()), f"{q}: size of {name}"


def test_df_percent_encoding_spelled_out(fixtures_dir, mounts):
    """The path components written out: %2F is "/", %25 is "%" (decoded once: "%252F" is
    the text "%2F"); a where/ query on one label gives the bytes of by/<column>/<label>/."""
    mp = Path(mounts("hand"))
    labels = mp / "edge" / "labels"
    assert encode_filter('label == "%2F"') == 'label == "%252F"'
    assert encode_filter('attr("grp/sub") == "t/u"') == 'attr("grp%2Fsub") == "t%2Fu"'
    for component, by_dir in (
        ('label == "a%2Fb"', "by/label/a%2Fb"),
        ('label == "x%25%2Fy"', "by/label/x%25%2Fy"),
        ('label == "50%25"', "by/label/50%"),
        ('label == "%252F"', "by/label/%252F"),
        ('attr("grp%2Fsub") == "t%2Fu"', "by/grp%2Fsub/t%2Fu"),
        ('attr("grp%2Fsub") == "r%25s"', "by/grp%2Fsub/r%s"),
    ):
        for name in DATA_FILES:
            got = (labels / "where" / component / name).read_bytes()
            assert got == (labels / by_dir / name).read_bytes(), f"where/{component}/{name} differs from {by_dir}/{name}"
    pbmc = Path(mounts("pbmc")) / "obs"
    csv = (pbmc / "where" / 'bulk_labels == "CD4+%2FCD25 T Reg"' / "data.csv").read_text()
    assert csv.count("\n") == 1 + 68 and "CD4+/CD25 T Reg" in csv, "pbmc bulk_labels == \"CD4+/CD25 T Reg\""


@pytest.mark.parametrize("store,frame,spellings", SPELLINGS, ids=lambda v: v if isinstance(v, str) else v[0])
def test_df_equivalent_spellings_give_identical_bytes(store, frame, spellings, fixtures_dir, mounts):
    frame_dir = Path(mounts(store)) / frame
    node = frame_node(fixtures_dir, store, frame)
    whole_ref = data_reference.ref_of(node)
    # tiledbsoma agrees that they are one query
    rows = [soma_rows(node.uri, s).select(whole_ref.schema.names) for s in spellings]
    for s, r in zip(spellings[1:], rows[1:]):
        assert values_equal(table_values(r, whole_ref.schema), table_values(rows[0], whole_ref.schema)), (
            f"test bug: tiledbsoma reads {s!r} ({r.num_rows} rows) and {spellings[0]!r} ({rows[0].num_rows}) differently"
        )
    assert 0 < rows[0].num_rows < whole_ref.nrows, f"fixture changed: {spellings[0]!r} gives {rows[0].num_rows} rows"
    first = make_ref(f"{frame}/where", whole_ref.soma_type, rows[0], whole_ref.schema)
    probs = Problems(f"{store}/{frame}/where/{encode_filter(spellings[0])}")
    check_where_files(where_dir(frame_dir, spellings[0]), first, frame_dir, probs)
    fail_if(probs.done(), f"problems with {spellings[0]!r}")
    for name in DATA_FILES:
        want = (where_dir(frame_dir, spellings[0]) / name).read_bytes()
        for s in spellings[1:]:
            got = (where_dir(frame_dir, s) / name).read_bytes()
            assert got == want, f"where/{encode_filter(s)}/{name} differs from where/{encode_filter(spellings[0])}/{name}"


def caret_position(text: str, component: str) -> tuple[int | None, int | None]:
    """(caret position in the decoded filter, index of the line that echoes the filter):
    the first line that shows the filter (decoded, or as the path spells it), followed by
    a line whose first non-blank character is '^'."""
    decoded = decode_filter(component)
    lines = text.split("\n")
    for i, line in enumerate(lines[:-1]):
        for shown in dict.fromkeys((decoded, component)):
            col = line.find(shown)
            if col < 0:
                continue
            nxt = lines[i + 1]
            c = nxt.find("^")
            if c < 0 or nxt[:c].strip():
                continue
            rel = c - col
            return (rel if shown == decoded else decoded_index(component, rel)), i
    return None, None


def check_error_dir(d: Path, bad: Bad, probs: Problems):
    """A bad filter's directory: error.txt alone, whose text shows the filter with a caret
    at an allowed position and names bad.mentions outside the echoed filter."""
    t0 = time.monotonic()
    try:
        listing = sorted(os.listdir(d))
    except OSError as e:
        probs.add(f"ls: {e} (expected a directory holding error.txt)")
        return
    if listing != ["error.txt"]:
        probs.add(f"lists {listing}, expected only error.txt")
    for name in sorted(WHERE_FILES):
        msg = absent(d / name)
        if msg:
            probs.add(f"{name}: {msg}, expected ENOENT (a bad filter holds only error.txt)")
    data = read_data_file(d / "error.txt", probs)
    elapsed = time.monotonic() - t0
    if elapsed > within(ANSWER_SECONDS):
        probs.add(f"took {elapsed:.1f}s to answer")
    if data is None:
        return
    text = decode_utf8(data, "error.txt", probs)
    if text is None:
        return
    if not text.strip():
        probs.add("error.txt is empty")
        return
    if bad.at is None:
        return
    pos, line = caret_position(text, encode_filter(bad.filter))
    if pos is None:
        probs.add(f"error.txt does not show the filter with a caret line under it:\n{text}")
        return
    if not any(lo <= pos <= hi for lo, hi in bad.at):
        probs.add(f"the caret is at position {pos} of {bad.filter!r}, expected within {bad.at}:\n{text}")
    rest = "\n".join(ln for k, ln in enumerate(text.split("\n")) if k not in (line, line + 1))
    for word in bad.mentions:
        if word not in rest and encode_filter(word) not in rest:
            probs.add(f"the message does not name {word!r}:\n{text}")


@pytest.mark.parametrize("bad", BAD_FILTERS, ids=str)
def test_df_bad_filter_holds_only_error_txt(bad, mounts):
    mp = mounts(bad.store)
    d = where_dir(Path(mp) / bad.frame, bad.filter)
    probs = Problems(f"{bad.frame}/where/{encode_filter(bad.filter)}")
    check_error_dir(d, bad, probs)
    assert mp.proc.poll() is None, f"the daemon exited ({mp.proc.returncode}) on {bad}"
    fail_if(probs.done(), f"problems with the bad filter {bad.filter!r}")


def _junk_filters(k: int) -> list[str]:
    forms = [
        lambda i: f"n_genes > {i} and",
        lambda i: f"nosuch{i} == {i}",
        lambda i: f'phase == "G{i}',
        lambda i: f"n_genes == {i}.5",
        lambda i: f'n_genes in ["{i}"]',
        lambda i: f"(((n_genes > {i})",
        lambda i: f"n_genes <> {i}",
        lambda i: f'attr("x{i}") == 1',
    ]
    return [forms[i % len(forms)](i // len(forms)) for i in range(k)]


@pytest.mark.timeout(300)
def test_df_daemon_keeps_serving_after_bad_filters(fixtures_dir):
    """On a fresh mount: every bad filter of BAD_FILTERS for pbmc obs and 80 more, each an
    error.txt directory; then the daemon still serves: obs/data.csv reads back unchanged
    and a valid where/ query has its rows."""
    good = Q("pbmc", "obs", 'louvain == "3"')
    ref = expected_where(fixtures_dir, good)
    with mount_guard(fixtures_dir / "pbmc", label="pbmc (bad filters)") as mp:
        obs = Path(mp) / "obs"
        before = (obs / "data.csv").read_bytes()
        problems = []
        bads = [b for b in BAD_FILTERS if (b.store, b.frame) == ("pbmc", "obs")]
        bads += [Bad("pbmc", "obs", f, None) for f in _junk_filters(80)]
        first_error = where_dir(obs, bads[0].filter) / "error.txt"
        first_text = first_error.read_bytes()
        for bad in bads:
            probs = Problems(f"obs/where/{encode_filter(bad.filter)}")
            check_error_dir(where_dir(obs, bad.filter), bad, probs)
            problems += probs.done()
            if mp.proc.poll() is not None:
                pytest.fail(f"the daemon exited ({mp.proc.returncode}) on {bad.filter!r}")
        assert (obs / "data.csv").read_bytes() == before, "obs/data.csv changed after the bad filters"
        probs = Problems(f"obs/where/{good.filter}")
        check_where_files(where_dir(obs, good.filter), ref, obs, probs)
        problems += probs.done()
        assert first_error.read_bytes() == first_text, "the first bad filter's error.txt changed"
        assert mp.proc.poll() is None, f"the daemon exited ({mp.proc.returncode})"
        fail_if(problems, f"problems after {len(bads)} bad filters")


# --------------------------------------------------------------------------------------
# experiments: cases


@dataclass(frozen=True)
class ExpQ:
    """A where/ query on an experiment: obs_filter selects cells; var_filters are
    (measurement, var filter) pairs checked under ms/<m>/where/<var filter>/."""

    store: str
    obs_filter: str
    var_filters: tuple = ()

    def __str__(self):
        return f"{self.store}:{self.obs_filter}"


# Cells / genes tiledbsoma 2.3.0 selects are in the comments.
EXP_CASES = [
    ExpQ("pbmc", 'louvain == "3"',  # 70 cells; 309 and 2 genes
         (("RNA", "highly_variable == True"), ("raw", 'var_id in ["HES4", "SSU72", "NOPE"]'))),
    ExpQ("pbmc", 'bulk_labels == "CD4+/CD25 T Reg" or n_genes > 1500', (("RNA", "means > 1.5"),)),  # 112; 135
    ExpQ("pbmc", "all", (("RNA", "highly_variable == True"),)),  # 700; 309: genes alone
    ExpQ("hand", 'cell_type == "NK/γδ"', (("RNA", "n_cells >= 100"),)),  # 58; 16
    ExpQ("hand", 'lane in [1, 3] and cell_type == "NK/γδ"'),  # 29
]
EXP_NOTHING = ExpQ("pbmc", "n_genes < 0", (("RNA", 'var_id == "NOPE"'),))
# (store, bad obs filter, measurement, bad var filter)
EXP_BAD = [("pbmc", "nosuch > 1", "RNA", 'highly_variable == "yes"'), ("hand", 'cell_type == "NK', "RNA", "n_cells >")]


def require_experiment_where(mp) -> Path:
    """<experiment>/where/, or a skip while where/ on experiments is not implemented."""
    try:
        os.stat(Path(mp) / "where" / "all" / "obs")
    except (FileNotFoundError, NotADirectoryError):
        pytest.skip("where/ on experiments not implemented")
    return Path(mp) / "where"


# --------------------------------------------------------------------------------------
# experiments: references


@dataclass
class Selection:
    """What tiledbsoma's axis_query selects in one measurement."""

    obs: Ref  # the selected obs rows, by soma_joinid
    var: Ref  # the selected var rows, by soma_joinid (every gene without a var filter)
    obs_j: np.ndarray
    var_j: np.ndarray
    X: dict  # layer (as the mount shows its name) -> Ref of its cells, sorted by (soma_dim_0, soma_dim_1)
    query_adata: object  # the query's own to_anndata (X from `data`), for cross-checks


def axis(value_filter: str | None) -> tiledbsoma.AxisQuery:
    return tiledbsoma.AxisQuery() if value_filter in (None, "all") else tiledbsoma.AxisQuery(value_filter=value_filter)


def sorted_by(t: pa.Table, cols: list[str]) -> pa.Table:
    return t.sort_by([(c, "ascending") for c in cols])


_SEL: dict = {}


def selection(fixtures_dir: Path, store: str, m: str, obs_filter: str, var_filter: str | None) -> Selection:
    key = (str(fixtures_dir), store, m, obs_filter, var_filter)
    if key in _SEL:
        return _SEL[key]
    uri = str(fixtures_dir / store)
    obs_node = frame_node(fixtures_dir, store, "obs")
    var_node = frame_node(fixtures_dir, store, f"ms/{m}/var")
    obs_schema = data_reference.ref_of(obs_node).schema
    var_schema = data_reference.ref_of(var_node).schema
    with tiledbsoma.Experiment.open(uri) as exp:
        layers = sorted(exp.ms[m].X.keys())
        with exp.axis_query(m, obs_query=axis(obs_filter), var_query=axis(var_filter)) as q:
            obs_t = sorted_by(q.obs().concat(), ["soma_joinid"]).select(obs_schema.names)
            var_t = sorted_by(q.var().concat(), ["soma_joinid"]).select(var_schema.names)
            xs = {}
            for layer in layers:
                x_node = frame_node(fixtures_dir, store, f"ms/{m}/X/{tree_reference.encode_name(layer)}")
                x_schema = data_reference.ref_of(x_node).schema
                t = sorted_by(q.X(layer).tables().concat(), ["soma_dim_0", "soma_dim_1"]).select(x_schema.names)
                xs[tree_reference.encode_name(layer)] = make_ref(f"ms/{m}/X/{layer}", "SOMASparseNDArray", t, x_schema)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                qa = q.to_anndata(X_name="data" if "data" in layers else layers[0])
    obs_j = obs_t.column("soma_joinid").to_numpy()
    var_j = var_t.column("soma_joinid").to_numpy()
    # cross-checks: obs() is read(value_filter); X holds the cells of the selected ids only
    if obs_filter != "all":
        direct = sorted_by(soma_rows(obs_node.uri, obs_filter), ["soma_joinid"]).select(obs_schema.names)
        assert values_equal(table_values(direct, obs_schema), table_values(obs_t, obs_schema)), (
            f"reference disagreement: obs of {obs_filter!r}"
        )
    for layer, ref in xs.items():
        whole_x = data_reference.ref_of(frame_node(fixtures_dir, store, f"ms/{m}/X/{layer}")).table
        keep = np.isin(whole_x.column("soma_dim_0").to_numpy(), obs_j)
        keep &= np.isin(whole_x.column("soma_dim_1").to_numpy(), var_j)
        kept = whole_x.filter(pa.array(keep))
        assert values_equal(table_values(kept, ref.schema), table_values(ref.table, ref.schema)), (
            f"reference disagreement: X/{layer} of {obs_filter!r} / {var_filter!r}"
        )
    sel = Selection(
        make_ref("obs", "SOMADataFrame", obs_t, obs_schema),
        make_ref(f"ms/{m}/var", "SOMADataFrame", var_t, var_schema),
        obs_j, var_j, xs, qa,
    )
    _SEL[key] = sel
    return sel


def measurements(fixtures_dir: Path, store: str) -> list[str]:
    with tiledbsoma.Experiment.open(str(fixtures_dir / store)) as exp:
        return sorted(exp.ms.keys())


def obsm_refs(fixtures_dir: Path, store: str, m: str, obs_j: np.ndarray) -> dict:
    """obsm name -> Ref of its cells whose soma_dim_0 is a selected join id (a dense array:
    every cell of those rows), in the whole array's order."""
    out = {}
    for node in data_reference.arrays_of(fixtures_dir, store):
        if node.relpath[:3] != ("ms", m, "obsm") or len(node.relpath) != 4:
            continue
        whole_ref = data_reference.ref_of(node)
        keep = np.isin(whole_ref.table.column("soma_dim_0").to_numpy(), obs_j)
        t = whole_ref.table.filter(pa.array(keep))
        if whole_ref.soma_type == "SOMASparseNDArray" and len(obs_j):
            with tiledbsoma.Experiment.open(str(fixtures_dir / store)) as exp:
                with exp.axis_query(m, obs_query=tiledbsoma.AxisQuery(coords=(pa.array(obs_j, pa.int64()),))) as q:
                    qt = sorted_by(q.obsm(node.relpath[3]).tables().concat(), ["soma_dim_0", "soma_dim_1"])
            assert values_equal(table_values(qt, whole_ref.schema), table_values(t, whole_ref.schema)), (
                f"reference disagreement: obsm/{node.relpath[3]}"
            )
        out[node.relpath[3]] = make_ref("/".join(node.relpath), whole_ref.soma_type, t, whole_ref.schema)
    return out


def tenx_expected(layer: tenx.Layer, obs_j: np.ndarray, var_j: np.ndarray, xref: Ref) -> tenx.TenX:
    """The 10x directory of the selected cells and genes: barcodes and features in join-id
    order, X's cells mapped to their ranks (as tenx.tenx_reference does)."""
    if len(obs_j):
        oj, barcodes, _ = tenx.ids_of(layer.obs_node.uri, tenx.OBS_ID_COLS, joinids=obs_j)
    else:
        oj, barcodes = obs_j, []
    if len(var_j):
        vj, fids, fnames = tenx.ids_of(
            layer.var_uri, tenx.VAR_ID_COLS, tenx.VAR_NAME_COLS, joinids=var_j
        )
    else:
        vj, fids, fnames = var_j, [], []
    assert np.array_equal(oj, obs_j) and np.array_equal(vj, var_j), "reference disagreement: join ids"
    r = xref.table.column("soma_dim_0").to_numpy()
    c = xref.table.column("soma_dim_1").to_numpy()
    v = xref.table.column("soma_data").to_numpy()
    X = sp.csr_matrix((v, (np.searchsorted(obs_j, r), np.searchsorted(var_j, c))),
                      shape=(len(obs_j), len(var_j)), dtype=layer.np_dtype)
    X.sort_indices()
    return tenx.TenX(obs_j, barcodes, var_j, fids, fnames, X)


_WHOLE_ADATA: dict = {}


def expected_h5ad(fixtures_dir: Path, store: str, m: str, sel: Selection):
    """The whole experiment's to_anndata (test_anndata.reference) restricted to the
    selected cells and genes, categories kept whole; its obs and X cross-checked against
    the query's own to_anndata."""
    key = (str(fixtures_dir), store, m)
    if key not in _WHOLE_ADATA:
        with tiledbsoma.open(str(fixtures_dir / store / "obs")) as df:
            obs_order = df.read(column_names=["soma_joinid"]).concat().column("soma_joinid").to_numpy()
        with tiledbsoma.open(str(fixtures_dir / store / "ms" / m / "var")) as df:
            var_order = df.read(column_names=["soma_joinid"]).concat().column("soma_joinid").to_numpy()
        _WHOLE_ADATA[key] = (test_anndata.reference(fixtures_dir / store, m), obs_order, var_order)
    adata, obs_order, var_order = _WHOLE_ADATA[key]
    om = np.isin(obs_order, sel.obs_j)
    vm = np.isin(var_order, sel.var_j)
    import anndata

    want = anndata.AnnData(
        X=adata.X[om][:, vm],
        obs=adata.obs[om],
        var=adata.var[vm],
        layers={k: v[om][:, vm] for k, v in adata.layers.items()},
        obsm={k: v[om] for k, v in adata.obsm.items()},
        varm={k: v[vm] for k, v in adata.varm.items()},
        obsp={k: v[om][:, om] for k, v in adata.obsp.items()},
        varp={k: v[vm][:, vm] for k, v in adata.varp.items()},
        uns=dict(adata.uns),
    )
    qa = sel.query_adata
    assert [str(x) for x in qa.obs_names] == [str(x) for x in want.obs_names], "reference disagreement: h5ad obs names"
    assert [str(x) for x in qa.var_names] == [str(x) for x in want.var_names], "reference disagreement: h5ad var names"
    assert (sp.csr_matrix(qa.X) != sp.csr_matrix(want.X)).nnz == 0, "reference disagreement: h5ad X"
    return want


def check_frame_dir(d: Path, ref: Ref, schema_from: Path, probs: Problems):
    """A data frame directory under where/: data.<fmt> against ref; schema.json (where
    listed) the same bytes as the original frame's."""
    for fmt in FORMATS:
        check_file_against(d / f"data.{fmt}", ref, probs)
    schema = read_data_file(d / "schema.json", probs)
    if schema is not None and schema != (schema_from / "schema.json").read_bytes():
        probs.add(f"{d.name}/schema.json differs from {schema_from.name}/schema.json")


def check_array_dir(d: Path, ref: Ref, probs: Problems):
    for fmt in FORMATS:
        check_file_against(d / f"data.{fmt}", ref, probs)


def tenx_layers_of(fixtures_dir: Path, store: str, m: str) -> list:
    return [layer for layer in tenx.tenx_layers(fixtures_dir, store) if layer.relpath[:2] == ("ms", m)]


# --------------------------------------------------------------------------------------
# experiments: tests


@pytest.mark.parametrize("case", EXP_CASES, ids=str)
def test_exp_where_obs_and_every_gene(case, fixtures_dir, mounts):
    """where/<obs filter>/obs/ holds the selected obs rows (schema.json the experiment's
    obs schema.json); ms/<m>/var/ every gene, the same bytes as ms/<m>/var/."""
    mp = Path(mounts(case.store))
    base = require_experiment_where(mp) / encode_filter(case.obs_filter)
    listing = set(os.listdir(base))
    assert {"obs", "ms", "anndata"} <= listing, f"where/{encode_filter(case.obs_filter)} lists {sorted(listing)}"
    ms = measurements(fixtures_dir, case.store)
    assert set(ms) <= set(os.listdir(base / "ms")), f"where/.../ms lists {sorted(os.listdir(base / 'ms'))}"
    sel = selection(fixtures_dir, case.store, ms[0], case.obs_filter, None)
    probs = Problems(f"where/{encode_filter(case.obs_filter)}")
    check_frame_dir(base / "obs", sel.obs, mp / "obs", probs)
    problems = probs.done()
    for m in ms:
        sel = selection(fixtures_dir, case.store, m, case.obs_filter, None)
        probs = Problems(f"where/{encode_filter(case.obs_filter)}")
        check_frame_dir(base / "ms" / m / "var", sel.var, mp / "ms" / m / "var", probs)
        for name in DATA_FILES:
            got = (base / "ms" / m / "var" / name).read_bytes()
            if got != (mp / "ms" / m / "var" / name).read_bytes():
                probs.add(f"ms/{m}/var/{name} differs from the measurement's own ms/{m}/var/{name}")
        problems += probs.done()
    fail_if(problems, f"problems with {case} ({len(sel.obs_j)} cells expected)")


@pytest.mark.parametrize("case", EXP_CASES, ids=str)
def test_exp_where_x_and_obsm(case, fixtures_dir, mounts):
    """ms/<m>/X/<layer>/data.<fmt>: the X cells of the selected cells, with the store's join
    ids, sorted by the dimensions; ms/<m>/obsm/<name>/data.<fmt>: the rows of those cells."""
    mp = Path(mounts(case.store))
    base = require_experiment_where(mp) / encode_filter(case.obs_filter)
    problems = []
    for m in measurements(fixtures_dir, case.store):
        sel = selection(fixtures_dir, case.store, m, case.obs_filter, None)
        for layer, ref in sel.X.items():
            probs = Problems(f"where/{encode_filter(case.obs_filter)}/ms/{m}/X/{layer}")
            check_array_dir(base / "ms" / m / "X" / layer, ref, probs)
            problems += probs.done()
        for name, ref in obsm_refs(fixtures_dir, case.store, m, sel.obs_j).items():
            probs = Problems(f"where/{encode_filter(case.obs_filter)}/ms/{m}/obsm/{name}")
            check_array_dir(base / "ms" / m / "obsm" / tree_reference.encode_name(name), ref, probs)
            problems += probs.done()
    fail_if(problems, f"X/obsm problems with {case}")


@pytest.mark.parametrize("case", EXP_CASES, ids=str)
def test_exp_where_10x(case, fixtures_dir, mounts):
    """ms/<m>/10x/<layer>/: matrix.mtx, barcodes.tsv, features.tsv and genes.tsv of the
    selected cells and every gene (harness.tenx's strict checks)."""
    mp = Path(mounts(case.store))
    base = require_experiment_where(mp) / encode_filter(case.obs_filter)
    problems = []
    for m in measurements(fixtures_dir, case.store):
        sel = selection(fixtures_dir, case.store, m, case.obs_filter, None)
        for layer in tenx_layers_of(fixtures_dir, case.store, m):
            ref = tenx_expected(layer, sel.obs_j, sel.var_j, sel.X[layer.relpath[3]])
            where = f"where/{encode_filter(case.obs_filter)}/{layer.display}"
            problems += tenx.check_tenx_dir(base.joinpath(*layer.relpath), ref, layer, where)
    fail_if(problems, f"10x problems with {case}")


@pytest.mark.parametrize("case", EXP_CASES, ids=str)
def test_exp_where_h5ad(case, fixtures_dir, mounts):
    """anndata/<m>.h5ad: to_anndata of the whole experiment restricted to the selected
    cells (read with anndata, warnings as errors; sizes by test_data's rules)."""
    mp = Path(mounts(case.store))
    base = require_experiment_where(mp) / encode_filter(case.obs_filter)
    for m in measurements(fixtures_dir, case.store):
        sel = selection(fixtures_dir, case.store, m, case.obs_filter, None)
        path = base / "anndata" / f"{m}.h5ad"
        probs = Problems(f"where/{encode_filter(case.obs_filter)}/anndata")
        read_data_file(path, probs)
        fail_if(probs.done(), f"{m}.h5ad size problems")
        got = test_anndata.read_quietly(path)
        want = expected_h5ad(fixtures_dir, case.store, m, sel)
        test_anndata.assert_anndata_equal(got, want, f"{case} {m}.h5ad")


@pytest.mark.parametrize("case", [c for c in EXP_CASES if c.var_filters], ids=str)
def test_exp_where_var_filter(case, fixtures_dir, mounts):
    """ms/<m>/where/<var filter>/: var/ holds the selected genes; X/<layer>/ the cells of
    the selected cells and genes; 10x/<layer>/ and anndata.h5ad both restricted."""
    mp = Path(mounts(case.store))
    base = require_experiment_where(mp) / encode_filter(case.obs_filter)
    problems = []
    for m, vf in case.var_filters:
        sel = selection(fixtures_dir, case.store, m, case.obs_filter, vf)
        assert 0 < len(sel.var_j), f"fixture changed: {vf!r} selects no gene of {m}"
        d = base / "ms" / m / "where" / encode_filter(vf)
        where = f"where/{encode_filter(case.obs_filter)}/ms/{m}/where/{encode_filter(vf)}"
        probs = Problems(where)
        check_frame_dir(d / "var", sel.var, mp / "ms" / m / "var", probs)
        for layer, ref in sel.X.items():
            check_array_dir(d / "X" / layer, ref, probs)
        problems += probs.done()
        for layer in tenx_layers_of(fixtures_dir, case.store, m):
            ref = tenx_expected(layer, sel.obs_j, sel.var_j, sel.X[layer.relpath[3]])
            problems += tenx.check_tenx_dir(d / "10x" / layer.relpath[3], ref, layer, f"{where}/10x/{layer.relpath[3]}")
        fail_if(problems, f"problems with {case} / {m}: {vf!r}")
        path = d / "anndata.h5ad"
        probs = Problems(where)
        read_data_file(path, probs)
        fail_if(probs.done(), "anndata.h5ad size problems")
        got = test_anndata.read_quietly(path)
        test_anndata.assert_anndata_equal(got, expected_h5ad(fixtures_dir, case.store, m, sel), f"{where}/anndata.h5ad")


@pytest.mark.parametrize("store", ["pbmc", "hand"])
def test_exp_where_all_is_the_whole_experiment(store, fixtures_dir, mounts):
    """where/all/ is the experiment: obs/, var/, X/<layer>/ and 10x/<layer>/ files are the
    bytes of the experiment's own; `ls where/` lists nothing."""
    mp = Path(mounts(store))
    w = require_experiment_where(mp)
    assert os.listdir(w) == [], f"where/ lists {sorted(os.listdir(w))[:10]}, expected nothing"
    pairs = [("obs", n) for n in DATA_FILES]
    for m in measurements(fixtures_dir, store):
        pairs += [(f"ms/{m}/var", n) for n in DATA_FILES]
        with tiledbsoma.Experiment.open(str(fixtures_dir / store)) as exp:
            layers = sorted(exp.ms[m].X.keys())
        pairs += [(f"ms/{m}/X/{tree_reference.encode_name(x)}", n) for x in layers for n in DATA_FILES]
        pairs += [("/".join(layer.relpath), n) for layer in tenx_layers_of(fixtures_dir, store, m)
                  for n in sorted(tenx.TENX_FILES)]
    differ = [f"{rel}/{n}" for rel, n in pairs if (w / "all" / rel / n).read_bytes() != (mp / rel / n).read_bytes()]
    assert not differ, f"where/all/ files that differ from the experiment's own: {differ}"


def test_exp_where_nothing_matches(fixtures_dir, mounts):
    """An obs filter matching no cell: obs/ and X/ header-only, 10x/ without barcodes or
    entries, the h5ad with 0 cells; a var filter matching no gene likewise."""
    case = EXP_NOTHING
    mp = Path(mounts(case.store))
    base = require_experiment_where(mp) / encode_filter(case.obs_filter)
    sel = selection(fixtures_dir, case.store, "RNA", case.obs_filter, None)
    assert len(sel.obs_j) == 0, "fixture changed"
    probs = Problems(f"where/{encode_filter(case.obs_filter)}")
    check_frame_dir(base / "obs", sel.obs, mp / "obs", probs)
    check_array_dir(base / "ms/RNA/X/data", sel.X["data"], probs)
    fail_if(probs.done(), "problems with a filter matching no cell")
    obs_names = sel.obs.names
    assert (base / "obs" / "data.csv").read_bytes() == (",".join(obs_names) + "\n").encode(), "obs/data.csv"
    assert (base / "obs" / "data.jsonl").read_bytes() == b"", "obs/data.jsonl"
    assert (base / "ms/RNA/X/data/data.csv").read_bytes() == b"soma_dim_0,soma_dim_1,soma_data\n", "X/data/data.csv"
    tenx = base / "ms/RNA/10x/data"
    assert (tenx / "barcodes.tsv").read_bytes() == b"", "10x barcodes.tsv"
    mtx = (tenx / "matrix.mtx").read_text().split("\n")
    size_line = next(ln for ln in mtx if not ln.startswith("%"))
    assert size_line.split() == [str(len(sel.var_j)), "0", "0"], f"10x matrix.mtx size line {size_line!r}"
    got = test_anndata.read_quietly(base / "anndata" / "RNA.h5ad")
    assert got.shape == (0, len(sel.var_j)), f"RNA.h5ad shape {got.shape}"
    m, vf = case.var_filters[0]
    d = base / "ms" / m / "where" / encode_filter(vf)
    var_names = sel.var.names
    assert (d / "var" / "data.csv").read_bytes() == (",".join(var_names) + "\n").encode(), "var/data.csv"
    assert (d / "X/data/data.csv").read_bytes() == b"soma_dim_0,soma_dim_1,soma_data\n", "where/<var>/X/data/data.csv"
    assert (d / "10x/data/features.tsv").read_bytes() == b"", "where/<var>/10x features.tsv"


@pytest.mark.parametrize("store,obs_filter,m,var_filter", EXP_BAD, ids=str)
def test_exp_where_bad_filter_holds_only_error_txt(store, obs_filter, m, var_filter, fixtures_dir, mounts):
    """A bad obs filter: where/<filter>/ holds only error.txt; a bad var filter under a
    good obs filter: ms/<m>/where/<filter>/ likewise; the daemon keeps serving."""
    mp = mounts(store)
    w = require_experiment_where(mp)
    problems = []
    probs = Problems(f"where/{encode_filter(obs_filter)}")
    bad_obs = Bad(store, "", obs_filter, whole(obs_filter))
    check_error_dir(w / encode_filter(obs_filter), bad_obs, probs)
    problems += probs.done()
    for name in ("obs", "ms", "anndata"):
        msg = absent(w / encode_filter(obs_filter) / name)
        if msg:
            problems.append(f"where/{encode_filter(obs_filter)}/{name}: {msg}, expected ENOENT")
    d = w / "all" / "ms" / m / "where" / encode_filter(var_filter)
    probs = Problems(f"where/all/ms/{m}/where/{encode_filter(var_filter)}")
    check_error_dir(d, Bad(store, "", var_filter, whole(var_filter)), probs)
    problems += probs.done()
    assert mp.proc.poll() is None, f"the daemon exited ({mp.proc.returncode})"
    assert (Path(mp) / "obs" / "data.csv").read_bytes().count(b"\n") > 1, "obs/data.csv after the bad filters"
    fail_if(problems, "bad experiment filter problems")


@pytest.mark.timeout(240)
def test_exp_where_10x_read_by_seurat(fixtures_dir, mounts):
    """Seurat's Read10X of a query's 10x directory (cells and genes selected), the first
    read of it: the query's X as features x cells, its nonzeros and sum, and the selected
    cells' names in join id order."""
    import test_datasets

    why = test_datasets.seurat_loads()
    if why:
        pytest.skip(f"{why} (scripts/setup installs r-cran-seurat)")
    obs_filter, var_filter = 'louvain == "3"', "highly_variable == True"
    sel = selection(fixtures_dir, "pbmc", "RNA", obs_filter, var_filter)
    mp = Path(mounts("pbmc"))
    base = require_experiment_where(mp) / encode_filter(obs_filter)
    d = base / "ms" / "RNA" / "where" / encode_filter(var_filter) / "10x" / "data"
    r = test_datasets.run(["Rscript", "-e", test_datasets.R_READ10X, str(d)])
    lines = r.stdout.splitlines()
    n_feat, n_cells, nnz, total = lines[0].split()
    values = sel.X["data"].table.column("soma_data").to_numpy().astype(np.float64)
    nz = values != 0
    what = f"Read10X of where/{obs_filter}/ms/RNA/where/{var_filter}/10x/data"
    assert (int(n_feat), int(n_cells), int(nnz)) == (len(sel.var_j), len(sel.obs_j), int(nz.sum())), (
        f"{what}: {n_feat} x {n_cells}, {nnz} nonzeros; tiledbsoma: {len(sel.var_j)} x "
        f"{len(sel.obs_j)}, {int(nz.sum())}\n{r.stderr[-2000:]}"
    )
    assert abs(float(total) - values.sum()) <= 1e-6 * np.abs(values).sum(), f"{what}: sum {total}"
    names = sel.obs.table.column("obs_id").to_pylist()
    assert lines[2:] == names, f"{what}: cell names {lines[2:5]}, tiledbsoma {names[:3]}"


# Seeds of the scattered-cells test: SOMA_WHERE_SEEDS of them (default 8) from
# SOMA_WHERE_FIRST_SEED (default 0); a longer run: SOMA_WHERE_SEEDS=200.
SCATTERED_SEEDS = range(
    int(os.environ.get("SOMA_WHERE_FIRST_SEED", "0")),
    int(os.environ.get("SOMA_WHERE_FIRST_SEED", "0")) + int(os.environ.get("SOMA_WHERE_SEEDS", "8")),
)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", SCATTERED_SEEDS)
def test_exp_where_scattered_cells_of_an_overwritten_x(seed, tmp_path):
    """A query's scattered cells of an X written in several fragments, the later ones
    overwriting cells of the earlier and adding others, over many bands: X/data/ holds the
    latest value of every cell of the selected rows, each once, sorted; as the whole X read
    in one range (then filtered to the selected rows) and the query's own X agree. Each
    seed picks the shape, the tile extents, capacity, cell and tile order (row-major X is
    read in bands, column-major is not), the fragments and how many cells the filter
    selects."""
    uri = tmp_path / "overwritten"
    rng = np.random.default_rng(seed)
    n_obs, n_var = int(rng.integers(500, 4000)), int(rng.integers(5, 60))
    obs_schema = pa.schema([("soma_joinid", pa.int64()), ("group", pa.int64())])
    var_schema = pa.schema([("soma_joinid", pa.int64()), ("var_id", pa.large_string())])
    order = ["row-major", "col-major"][seed % 2 if seed < 6 else 0]
    tiles = tiledbsoma.TileDBCreateOptions(
        dims={"soma_dim_0": {"tile": int(rng.choice([4, 16, 64, 2048]))},
              "soma_dim_1": {"tile": int(rng.choice([2, 8, 64]))}},
        capacity=int(rng.choice([64, 256, 100000])),
        cell_order=order,
        tile_order=order,
    )
    with tiledbsoma.Experiment.create(str(uri)) as exp:
        obs = exp.add_new_dataframe("obs", schema=obs_schema, domain=[(0, n_obs - 1)])
        groups = (np.arange(n_obs) * 7919) % 23  # scattered: row i is in group (7919 i) mod 23
        obs.write(pa.table({"soma_joinid": np.arange(n_obs), "group": groups}, schema=obs_schema))
        rna = exp.add_new_collection("ms").add_new_collection("RNA", tiledbsoma.Measurement)
        var = rna.add_new_dataframe("var", schema=var_schema, domain=[(0, n_var - 1)])
        var.write(pa.table({"soma_joinid": np.arange(n_var), "var_id": [f"g{i}" for i in range(n_var)]}, schema=var_schema))
        rna.add_new_collection("X").add_new_sparse_ndarray(
            "data", type=pa.float32(), shape=(n_obs, n_var), platform_config=tiles
        ).close()
    for fragment in range(int(rng.integers(1, 5))):
        cells = rng.random((n_obs, n_var)) < rng.uniform(0.05, 0.5)
        rows, cols = np.nonzero(cells)
        # Each fragment at a later timestamp: the latest value of a cell is well defined.
        stamp = int(time.time() * 1000) + 10 * fragment
        with tiledbsoma.open(str(uri / "ms" / "RNA" / "X" / "data"), "w", tiledb_timestamp=stamp) as x:
            x.write(pa.table({
                "soma_dim_0": rows.astype(np.int64),
                "soma_dim_1": cols.astype(np.int64),
                "soma_data": (rng.random(len(rows)) + fragment).astype(np.float32),
            }))
    while time.time() * 1000 <= stamp + 1:  # every read below sees the last fragment
        time.sleep(0.005)
    value_filter = f"group in {sorted(rng.choice(23, int(rng.integers(1, 12)), replace=False).tolist())}"
    with tiledbsoma.Experiment.open(str(uri)) as exp:
        x = exp.ms["RNA"].X["data"]
        whole = x.read(result_order="row-major").tables().concat()
        obs_j = exp.obs.read(value_filter=value_filter).concat().column("soma_joinid").to_numpy()
        with exp.axis_query("RNA", obs_query=axis(value_filter)) as q:
            queried = sorted_by(q.X("data").tables().concat(), ["soma_dim_0", "soma_dim_1"])
        schema = x.schema
    kept = whole.filter(pa.array(np.isin(whole.column("soma_dim_0").to_numpy(), obs_j)))
    kept = sorted_by(kept, ["soma_dim_0", "soma_dim_1"])
    assert values_equal(table_values(kept, schema), table_values(queried, schema)), (
        "reference disagreement: the whole X filtered and the query's X"
    )
    ref = make_ref("ms/RNA/X/data", "SOMASparseNDArray", kept, schema)
    with mount_guard(uri) as mp:
        d = Path(mp) / "where" / encode_filter(value_filter) / "ms" / "RNA" / "X" / "data"
        probs = Problems(str(d))
        check_array_dir(d, ref, probs)
        fail_if(probs.done(), f"where/{value_filter} of an overwritten X")


@pytest.mark.timeout(300)
def test_exp_where_matrices_shorter_than_obs(tmp_path):
    """An obsm written for the first half of the cells only (a dense array and a sparse one,
    each of shape (n_obs / 2, 3)), and a query selecting cells of both halves:
    obsm/<name>/ holds the cells of the selected rows that the array has (the whole array
    read by tiledbsoma, filtered to the selected join ids), where a read of every selected
    join id would be outside the arrays' domain; X holds every selected cell's."""
    uri = tmp_path / "short_obsm"
    n_obs, n_var, half, width = 40, 6, 20, 3
    obs_schema = pa.schema([("soma_joinid", pa.int64()), ("group", pa.int64())])
    var_schema = pa.schema([("soma_joinid", pa.int64()), ("var_id", pa.large_string())])
    with tiledbsoma.Experiment.create(str(uri)) as exp:
        obs = exp.add_new_dataframe("obs", schema=obs_schema, domain=[(0, n_obs - 1)])
        obs.write(pa.table({"soma_joinid": np.arange(n_obs), "group": np.arange(n_obs) % 3}, schema=obs_schema))
        rna = exp.add_new_collection("ms").add_new_collection("RNA", tiledbsoma.Measurement)
        var = rna.add_new_dataframe("var", schema=var_schema, domain=[(0, n_var - 1)])
        var.write(pa.table({"soma_joinid": np.arange(n_var), "var_id": [f"g{i}" for i in range(n_var)]}, schema=var_schema))
        x = rna.add_new_collection("X").add_new_sparse_ndarray("data", type=pa.float32(), shape=(n_obs, n_var))
        rows, cols = np.nonzero((np.arange(n_obs * n_var).reshape(n_obs, n_var) % 4) == 0)
        x.write(pa.table({"soma_dim_0": rows.astype(np.int64), "soma_dim_1": cols.astype(np.int64),
                          "soma_data": np.arange(len(rows), dtype=np.float32)}))
        obsm = rna.add_new_collection("obsm")
        dense = obsm.add_new_dense_ndarray("dense", type=pa.float32(), shape=(half, width))
        dense.write((slice(0, half - 1), slice(0, width - 1)),
                    pa.Tensor.from_numpy(np.arange(half * width, dtype=np.float32).reshape(half, width)))
        sparse = obsm.add_new_sparse_ndarray("sparse", type=pa.float64(), shape=(half, width))
        r, c = np.nonzero(np.ones((half, width)))
        sparse.write(pa.table({"soma_dim_0": r.astype(np.int64), "soma_dim_1": c.astype(np.int64),
                               "soma_data": (r * 10 + c).astype(np.float64)}))
    value_filter = "group == 1"
    with tiledbsoma.Experiment.open(str(uri)) as exp:
        obs_j = exp.obs.read(value_filter=value_filter).concat().column("soma_joinid").to_numpy()
        assert obs_j.min() < half <= obs_j.max(), "the test needs cells on both sides of the obsm's end"
        refs = {}
        for name in ("dense", "sparse"):
            array = exp.ms["RNA"].obsm[name]
            whole = array.read().tables().concat() if name == "sparse" else array.read().to_numpy()
            if name == "dense":
                r, c = np.nonzero(np.ones(whole.shape))
                whole = pa.table({"soma_dim_0": r.astype(np.int64), "soma_dim_1": c.astype(np.int64),
                                  "soma_data": whole[r, c]})
            kept = whole.filter(pa.array(np.isin(whole.column("soma_dim_0").to_numpy(), obs_j)))
            kept = sorted_by(kept, ["soma_dim_0", "soma_dim_1"])
            assert kept.num_rows > 0
            kind = "SOMADenseNDArray" if name == "dense" else "SOMASparseNDArray"
            refs[f"ms/RNA/obsm/{name}"] = make_ref(f"ms/RNA/obsm/{name}", kind, kept, array.schema)
        with exp.axis_query("RNA", obs_query=axis(value_filter)) as q:
            queried = sorted_by(q.X("data").tables().concat(), ["soma_dim_0", "soma_dim_1"])
        refs["ms/RNA/X/data"] = make_ref("ms/RNA/X/data", "SOMASparseNDArray", queried, exp.ms["RNA"].X["data"].schema)
    with mount_guard(uri) as mp:
        base = Path(mp) / "where" / encode_filter(value_filter)
        problems = []
        for rel, ref in refs.items():
            probs = Problems(f"where/{value_filter}/{rel}")
            check_array_dir(base / rel, ref, probs)
            problems += probs.done()
        fail_if(problems, f"where/{value_filter} of a store whose obsm is shorter than obs")


def test_exp_where_h5ad_is_served_from_the_cache_by_a_second_daemon(fixtures_dir, tmp_path):
    """A query's h5ad is keyed in two steps (obs, var and X first, every part once they
    open): a daemon started again on the same cache finds the file the first generated
    (its log at -vv says it generated nothing), and serves the same bytes."""
    cache = tmp_path / "cache"
    rel = Path("where", encode_filter("louvain in ['1', '2']"), "anndata", "RNA.h5ad")
    contents, generated = [], []
    for _ in range(2):
        with mount_guard(fixtures_dir / "pbmc", "--cache-dir", cache, "-vv", label="query h5ad cache") as mp:
            contents.append((Path(mp) / rel).read_bytes())
            generated.append("as h5ad" in "".join(l for l in mp.log.read_text().splitlines() if "generated" in l))
    assert generated == [True, False], f"h5ad generated by each daemon: {generated}"
    assert contents[0] == contents[1] and len(contents[0]) > 0
