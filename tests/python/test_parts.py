"""Parts sized like wholes: a category's files (`by/<column>/<label>/`) and a query's
(`where/<filter>/`) have their exact size at their first `stat` when they are below
--materialize-limit, however large the whole array is (docs/SEMANTICS.md, "Sizes").

The store (written here with tiledbsoma.io.from_anndata, once per module) has 24,000 cells
of 24 cell types, each cell's type drawn at random (so a category's join ids are scattered
over the whole of obs), and an integer X of about 770,000 entries. The mounts get a
--materialize-limit of 2 MiB: the whole layer's `matrix.mtx` and `.h5ad` are above it,
a category's and the query's files far below it.

1. On a fresh mount, the first `stat` of every file of a category's and a query's `10x/`
   directory and `.h5ad` (before anything reads it) gives the size a plain read of the file
   returns afterwards, for every file whose real size is below the limit; and the matrix's
   and the barcodes' counts are tiledbsoma's (the cells of the category or the query, and
   the X entries in them).
2. tar and rsync -a of those directories, each from a fresh mount and the first to stat
   them, copy every byte of every file: the copy equals a plain read of the mount.

Run: .venv/bin/python -m pytest tests/python/test_parts.py -q
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse

from harness import tree_reference  # noqa: F401  (quiets tiledbsoma's warnings)
import tiledbsoma
import tiledbsoma.io
from harness.mount import mount_guard

N_CELLS = 24_000
N_GENES = 400
N_TYPES = 24
DENSITY = 0.08
LIMIT = 2 << 20  # --materialize-limit: the whole layer is above it, a category's files below
TOOL_TIMEOUT = 120  # seconds for one tar or rsync
LABELS = ("celltype_03", "celltype_17")
QUERY = "cell_type in ['celltype_05', 'celltype_11']"
QUERY_LABELS = ("celltype_05", "celltype_11")


def build_store(uri: Path) -> None:
    import anndata

    rng = np.random.default_rng(54)
    types = [f"celltype_{i:02d}" for i in range(N_TYPES)]
    obs = pd.DataFrame(
        {"cell_type": pd.Categorical(rng.choice(types, N_CELLS), categories=types),
         "n_counts": rng.integers(100, 5000, N_CELLS)},
        index=[f"AAAC{i:012d}-1" for i in range(N_CELLS)],
    )
    var = pd.DataFrame({"feature_name": [f"GENE{i}" for i in range(N_GENES)]},
                       index=[f"ENSG{i:011d}" for i in range(N_GENES)])
    x = scipy.sparse.random(N_CELLS, N_GENES, density=DENSITY, format="csr", random_state=54,
                            data_rvs=lambda n: rng.integers(1, 300, n)).astype(np.int32)
    tiledbsoma.io.from_anndata(str(uri), anndata.AnnData(X=x, obs=obs, var=var), measurement_name="RNA")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    uri = tmp_path_factory.mktemp("parts") / "exp"
    build_store(uri)
    return uri


def selected(store: Path, labels) -> tuple[int, int]:
    """tiledbsoma's count of the cells whose type is one of `labels`, and of X's entries in
    them."""
    with tiledbsoma.open(str(store)) as exp:
        obs = exp.obs.read(column_names=["soma_joinid", "cell_type"]).concat().to_pandas()
        ids = obs.soma_joinid[obs.cell_type.isin(labels)].to_numpy()
        x = exp.ms["RNA"].X["data"].read((ids,)).tables().concat()
    return len(ids), x.num_rows


def category_dirs(label: str) -> list[str]:
    return [f"ms/RNA/10x/data/by/cell_type/{label}", f"anndata/by/cell_type/{label}"]


def query_dirs() -> list[str]:
    return [f"where/{QUERY}/ms/RNA/10x/data", f"where/{QUERY}/anndata"]


def part_dirs() -> list[tuple[str, tuple[str, ...]]]:
    """Each directory of a part, with the labels whose cells it holds."""
    dirs = [(d, (label,)) for label in LABELS for d in category_dirs(label)]
    return dirs + [(d, QUERY_LABELS) for d in query_dirs()]


def mtx_counts(data: bytes) -> tuple[int, int, int]:
    """(rows, columns, entries) of a Matrix Market file's size line."""
    lines = (line for line in data.split(b"\n") if not line.startswith(b"%"))
    rows, cols, entries = next(lines).split()
    return int(rows), int(cols), int(entries)


@pytest.mark.timeout(300)
def test_whole_layer_is_above_the_limit(store):
    """The premise: the whole layer's matrix.mtx and h5ad are larger than the limit (so only
    a part's own estimate can put its files below it)."""
    with mount_guard(store, "--materialize-limit", str(LIMIT)) as mp:
        sizes = {p: len((Path(mp) / p).read_bytes()) for p in ("ms/RNA/10x/data/matrix.mtx", "anndata/RNA.h5ad")}
    assert all(size > LIMIT for size in sizes.values()), f"not above {LIMIT}: {sizes}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("part, labels", part_dirs(), ids=[d for d, _ in part_dirs()])
def test_first_stat_of_a_part_gives_its_size(part, labels, store):
    cells, entries = selected(store, labels)
    with mount_guard(store, "--materialize-limit", str(LIMIT)) as mp:
        directory = Path(mp) / part
        names = sorted(os.listdir(directory))
        first = {n: os.stat(directory / n).st_size for n in names}
        served = {n: (directory / n).read_bytes() for n in names}
    below = [n for n in names if len(served[n]) < LIMIT]
    wrong = [f"{n}: first stat {first[n]}, {len(served[n])} bytes read" for n in below if first[n] != len(served[n])]
    assert not wrong, f"{part} (limit {LIMIT}):\n" + "\n".join(wrong)
    if "10x" in part:
        assert {"matrix.mtx", "barcodes.tsv", "features.tsv"} <= set(below), f"{part}: above the limit: {names}"
        assert mtx_counts(served["matrix.mtx"]) == (N_GENES, cells, entries), (
            f"{part}/matrix.mtx: {mtx_counts(served['matrix.mtx'])}; tiledbsoma: {N_GENES} genes, {cells} cells, {entries} entries")
        assert served["barcodes.tsv"].count(b"\n") == cells, f"{part}/barcodes.tsv: not tiledbsoma's {cells} cells"
    else:
        assert names == ["RNA.h5ad"] and below == names, f"{part}: {names}, {[len(served[n]) for n in names]} bytes"


def files_of(root: Path) -> dict[str, bytes]:
    """Every file under `root`, by its path relative to it, with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def tar_copy(src: Path, dst: Path) -> None:
    archive = dst.parent / "part.tar"
    subprocess.run(["tar", "-cf", str(archive), "-C", str(src.parent), src.name],
                   check=True, capture_output=True, timeout=TOOL_TIMEOUT)
    with tarfile.open(archive) as tf:
        tf.extractall(dst, filter="data")


def rsync_copy(src: Path, dst: Path) -> None:
    subprocess.run(["rsync", "-a", str(src), str(dst)], check=True, capture_output=True, timeout=TOOL_TIMEOUT)


COPIERS = {"tar": tar_copy, "rsync": rsync_copy}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("copier", COPIERS)
@pytest.mark.parametrize("part", [d for d, _ in part_dirs()])
def test_copy_of_a_part_has_every_byte(copier, part, store, tmp_path):
    """tar or rsync -a of a part's directory, the first to stat its files on a fresh mount,
    copies every byte of each (the directory's files are all below the limit: checked by
    test_first_stat_of_a_part_gives_its_size)."""
    if shutil.which(copier) is None:
        pytest.skip(f"{copier} is not installed (scripts/setup installs it)")
    dst = tmp_path / "copy"
    dst.mkdir()
    with mount_guard(store, "--materialize-limit", str(LIMIT)) as mp:
        src = Path(mp) / part
        COPIERS[copier](src, dst)
        served = files_of(src)
    copied = files_of(dst / src.name)
    assert served, f"{part}: no file served"
    differ = [f"{n}: copied {len(copied.get(n, b''))} bytes, served {len(data)}"
              for n, data in served.items() if copied.get(n) != data]
    assert not differ and copied.keys() == served.keys(), f"{copier} of {part}:\n" + "\n".join(differ)
