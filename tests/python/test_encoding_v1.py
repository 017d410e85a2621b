"""Integration tests for stores of SOMA encoding 1.0.0: the v1 store (encoding "1", written by
tiledbsoma 1.14.5) and the legacy store: listings, metadata.json, schema.json and data files
by the same checks as test_tree / test_data, by/ label directories against
tiledbsoma's value filter, and the core domains shown for shapes.

Run: .venv/bin/python -m pytest tests/python/test_encoding_v1.py -q
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import tiledb
import tiledbsoma

import test_data
import test_slices
import test_tree
from harness import formats, tree_reference
from harness.formats import fail_if
from harness.tree_reference import encode_name

pytestmark = pytest.mark.timeout(300)


# --------------------------------------------------------------------------------------
# the v1 store (encoding 1.0.0), by test_tree's and test_data's checks


def test_v1_fixture_is_encoding_1(fixtures_dir):
    """Every object of fixtures/v1 says soma_encoding_version "1" and its arrays have
    no current domain (what the old tiledbsoma writes), and tiledbsoma 2.3.0 reads it."""
    nodes = tree_reference.walk_store(fixtures_dir, "v1")
    assert len(nodes) == 10, [n.display for n in nodes]
    for n in nodes:
        md = tree_reference.raw_metadata(n.uri, n.is_group)
        assert md["soma_encoding_version"][1] == "1", (n.display, md["soma_encoding_version"])
        if n.is_array:
            with tiledb.open(n.uri) as A:
                assert all(A.schema.domain.dim(i).domain is not None for i in range(A.schema.domain.ndim))
            with tiledbsoma.open(n.uri) as a:
                if n.soma_type == "SOMADataFrame":
                    assert a.tiledbsoma_has_upgraded_domain is False, n.display
                else:
                    assert a.tiledbsoma_has_upgraded_shape is False, n.display


@pytest.mark.parametrize("store", ["v1", "legacy"])
def test_listings_like_test_tree(store, fixtures_dir, mounted):
    test_tree.test_group_directories_list_exactly_their_members(store, fixtures_dir, mounted)


@pytest.mark.parametrize("store", ["v1", "legacy"])
def test_metadata_json_like_test_tree(store, fixtures_dir, mounted):
    test_tree.test_metadata_json_matches_tiledbsoma(store, fixtures_dir, mounted)


@pytest.mark.parametrize("store", ["v1", "legacy"])
def test_schema_json_like_test_tree(store, fixtures_dir, mounted):
    test_tree.test_schema_json_matches_tiledbsoma(store, fixtures_dir, mounted)


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
@pytest.mark.parametrize("store", ["v1", "legacy"])
def test_data_csv_like_test_data(store, fmt, fixtures_dir, mounted):
    test_data.test_csv_tsv_match_tiledbsoma(store, fmt, fixtures_dir, mounted)


@pytest.mark.parametrize("store", ["v1", "legacy"])
def test_data_files_like_test_data(store, fixtures_dir, mounted):
    """data.jsonl, data.parquet, data.npy and the data-file listing."""
    test_data.test_array_directories_have_data_files(store, fixtures_dir, mounted)
    test_data.test_jsonl_matches_tiledbsoma(store, fixtures_dir, mounted)
    test_data.test_parquet_matches_tiledbsoma(store, fixtures_dir, mounted)
    if store == "v1":
        test_data.test_npy_matches_tiledbsoma(store, fixtures_dir, mounted)


@pytest.mark.parametrize("store", ["v1", "legacy"])
def test_obs_by_matches_value_filter(store, fixtures_dir, mounted):
    """by/<column>/<label>/data.csv of every DataFrame with enumerated columns (obs of
    the encoding-1 store, and of legacy's experiments) equals tiledbsoma's
    read(value_filter=...), as test_slices checks it for the other stores."""
    mp = Path(mounted(store))
    problems = []
    n = 0
    for node in test_slices.dataframes_of(fixtures_dir, store):
        d = mp.joinpath(*node.relpath)
        for f, labels in test_slices.enum_columns(node):
            cd = d / "by" / encode_name(f.name)
            lp = formats.Problems(f"{node.display}/by/{encode_name(f.name)}")
            shown = test_slices.match_listing(set(os.listdir(cd)), labels, test_slices.label_kind(f), f.nullable, "ls", lp)
            problems += lp.done()
            targets = [(labels[i], False, name) for i, name in shown.items()]
            if f.nullable:
                targets.append((None, True, "__null__"))
            for label, is_null, name in targets:
                n += 1
                want = test_slices.expected_by(node, f, label, is_null)
                probs = formats.Problems(f"{node.display}/by/{encode_name(f.name)}/{name}")
                test_slices.check_file_against(cd / name / "data.csv", want, probs)
                problems += probs.done()
    assert n > 0
    fail_if(problems, f"by/ problems in {store} ({n} label directories)")


def test_v1_shapes_are_core_domains(fixtures_dir, mounted):
    """Spelled out: an encoding-1 ND array's shape is its core domain (hi + 1), and its
    DataFrames' soma_joinid domain is the core domain."""
    mp = Path(mounted("v1"))
    x = test_tree.read_json(mp / "ms" / "RNA" / "X" / "data" / "schema.json")
    assert x["shape"] == [24, 10] and x["non_empty_domain"] == [[0, 23], [0, 9]]
    d = test_tree.read_json(mp / "ms" / "RNA" / "obsm" / "X_pca" / "schema.json")
    assert d["shape"] == [24, 4]
    with tiledb.open(str(fixtures_dir / "v1" / "obs")) as A:
        lo, hi = A.schema.domain.dim(0).domain
    obs = test_tree.read_json(mp / "obs" / "schema.json")
    col = next(c for c in obs["columns"] if c["name"] == "soma_joinid")
    assert col["domain"] == [int(lo), int(hi)]


