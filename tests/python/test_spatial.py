"""Integration tests for the files of spatial objects (docs/REFERENCE.md "Extra files for
spatial objects"): coordinate_space.json, transforms.json, image.json and level_<n>.png of
the scene store against tiledbsoma's decoded objects and pixels; malformed spatial metadata
(legacy/bad_space, legacy/bad_transforms) gives EIO plus a log line, and the daemon keeps
serving.

Run: .venv/bin/python -m pytest tests/python/test_spatial.py -q
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tiledbsoma

import test_tree
from harness import tree_reference
from harness.formats import fail_if
from harness.tree_reference import json_equal, load_json_strict

pytestmark = pytest.mark.timeout(300)


# --------------------------------------------------------------------------------------
# spatial JSON


def space_json(cs) -> list:
    return [{"name": a.name, "unit": a.unit} for a in cs.axes]


def _read_json(path: Path):
    return test_tree.read_json(path)


def scene_objects(fixtures_dir):
    """(relpath, kind, tiledbsoma-open URI) of the scene store's spatial objects."""
    return [(n.relpath, n.soma_type, n.uri) for n in tree_reference.walk_store(fixtures_dir, "scene")
            if n.soma_type in ("SOMAScene", "SOMAPointCloudDataFrame", "SOMAMultiscaleImage")]


def test_coordinate_space_json(fixtures_dir, mounts):
    """coordinate_space.json of the scene, the point cloud and every image equals
    tiledbsoma's coordinate_space, axis by axis."""
    mp = Path(mounts("scene"))
    problems = []
    objs = scene_objects(fixtures_dir)
    assert {k for _, k, _ in objs} == {"SOMAScene", "SOMAPointCloudDataFrame", "SOMAMultiscaleImage"}
    for rel, kind, uri in objs:
        with tiledbsoma.open(uri) as o:
            want = space_json(o.coordinate_space)
        got = _read_json(mp.joinpath(*rel) / "coordinate_space.json")
        if not json_equal(got, want):
            problems.append(f"{'/'.join(rel) or '<root>'} ({kind}): {got!r}, expected {want!r}")
    fail_if(problems, "coordinate_space.json problems")


TRANSFORM_KEYS = {"transform_type", "input_axes", "output_axes", "matrix", "scale_factors", "scale"}


def check_transform(got, t, where) -> list[str]:
    p = []
    if not isinstance(got, dict):
        return [f"{where}: not a JSON object: {got!r}"]
    if set(got) - TRANSFORM_KEYS:
        p.append(f"{where}: unexpected keys {sorted(set(got) - TRANSFORM_KEYS)}")
    name = type(t).__name__
    if got.get("transform_type") != name:
        p.append(f"{where}: transform_type {got.get('transform_type')!r}, expected {name!r}")
    for k in ("input_axes", "output_axes"):
        if got.get(k) != list(getattr(t, k)):
            p.append(f"{where}: {k} {got.get(k)!r}, expected {list(getattr(t, k))!r}")
    if name == "AffineTransform":
        m = np.asarray(t.augmented_matrix, dtype=np.float64)
        g = got.get("matrix")
        try:
            g = np.asarray(g, dtype=np.float64)
        except (TypeError, ValueError):
            g = None
        # the augmented matrix, or its affine rows without the last [0 ... 0 1]
        if g is None or g.ndim != 2 or g.shape[1] != m.shape[1] or g.shape[0] not in (m.shape[0], m.shape[0] - 1) \
                or not np.array_equal(g, m[: g.shape[0]]):
            p.append(f"{where}: matrix {got.get('matrix')!r}, expected rows of {m.tolist()!r}")
    elif name == "ScaleTransform":
        if got.get("scale_factors") != [float(x) for x in t.scale_factors]:
            p.append(f"{where}: scale_factors {got.get('scale_factors')!r}, expected {list(t.scale_factors)!r}")
    elif name == "UniformScaleTransform":
        if not json_equal(got.get("scale"), float(t.scale)):
            p.append(f"{where}: scale {got.get('scale')!r}, expected {t.scale!r}")
    elif name == "IdentityTransform":
        extra = {"matrix", "scale_factors", "scale"} & set(got)
        if extra:
            p.append(f"{where}: an IdentityTransform with {sorted(extra)}")
    return p


def registered(uri) -> set:
    """Names registered in a collection's metadata (both key spellings)."""
    out = set()
    for k in tree_reference.raw_metadata(uri, True):
        for pre in ("soma_scene_registry_", "somascene_registry"):
            if k.startswith(pre):
                out.add(k[len(pre):])
    return out


def test_transforms_json(fixtures_dir, mounts):
    """obsl/transforms.json and img/transforms.json have exactly the registered members,
    each equal to scene.get_transform_to_point_cloud_dataframe / _multiscale_image."""
    mp = Path(mounts("scene"))
    root = str(fixtures_dir / "scene")
    problems = []
    with tiledbsoma.open(root) as scene:
        for coll, getter in (("obsl", scene.get_transform_to_point_cloud_dataframe),
                             ("img", scene.get_transform_to_multiscale_image)):
            names = registered(scene[coll].uri)
            assert names, f"fixture: nothing registered in {coll}"
            got = _read_json(mp / coll / "transforms.json")
            if set(got) != names:
                problems.append(f"{coll}/transforms.json: keys {sorted(got)}, registered {sorted(names)}")
            for name in sorted(names & set(got)):
                problems += check_transform(got[name], getter(name), f"{coll}/transforms.json[{name!r}]")
        assert not (mp / "varl" / "transforms.json").exists(), "varl has no registry: no transforms.json"
    fail_if(problems, "transforms.json problems")


def image_nodes(fixtures_dir):
    return [n for n in tree_reference.walk_store(fixtures_dir, "scene") if n.soma_type == "SOMAMultiscaleImage"]


def test_image_json(fixtures_dir, mounts):
    """image.json: the decoded soma_multiscale_image_schema (every field) plus "levels",
    [{name, shape}] largest first, equal to tiledbsoma's levels(), level_count and
    level_shape; its has_channel_axis agrees with tiledbsoma."""
    mp = Path(mounts("scene"))
    problems = []
    imgs = image_nodes(fixtures_dir)
    assert len(imgs) == 4
    for node in imgs:
        where = node.display
        got = _read_json(mp.joinpath(*node.relpath) / "image.json")
        with tiledbsoma.open(node.uri) as img:
            schema = load_json_strict(img.metadata["soma_multiscale_image_schema"])
            levels = [{"name": k, "shape": list(v[1])} for k, v in img.levels().items()]
            assert len(levels) == img.level_count
            for i, lv in enumerate(levels):
                assert tuple(lv["shape"]) == tuple(img.level_shape(i))
            has_channel = img.has_channel_axis
            perm = list(img._data_axis_permutation)
        want = dict(schema, levels=levels)
        if not isinstance(got, dict):
            problems.append(f"{where}: image.json is not an object")
            continue
        if set(got) != set(want):
            problems.append(f"{where}: keys {sorted(got)}, expected {sorted(want)}")
        for k in want:
            if k in got and not json_equal(got[k], want[k]):
                problems.append(f"{where}: {k} is {got[k]!r}, expected {want[k]!r}")
        if got.get("has_channel_axis") is not has_channel:
            problems.append(f"{where}: has_channel_axis {got.get('has_channel_axis')!r}, tiledbsoma says {has_channel}")
        if got.get("data_axis_permutation") != perm:
            problems.append(f"{where}: data_axis_permutation {got.get('data_axis_permutation')!r}, tiledbsoma {perm}")
        shapes = [lv["shape"] for lv in got.get("levels", [])]
        if shapes != sorted(shapes, key=lambda s: -int(np.prod(s))):
            problems.append(f"{where}: levels are not largest first: {shapes}")
    fail_if(problems, "image.json problems")


# --------------------------------------------------------------------------------------
# level_<n>.png


def level_pixels(img, i) -> np.ndarray:
    """Level i as (Y, X, C) (C = 1 without a channel axis), from tiledbsoma."""
    name = list(img.levels())[i]
    data = img[name].read().to_numpy()
    order = list(img.data_axis_order)
    axes = [order.index("y"), order.index("x")]
    if "soma_channel" in order:
        axes.append(order.index("soma_channel"))
        return np.transpose(data, axes)
    return np.transpose(data, axes)[:, :, None]


def expected_png_pixels(px: np.ndarray) -> list[np.ndarray]:
    """The pixel arrays a PNG of px may hold: uint8 and uint16 as they are; any other
    type scaled min..max to 8 bits (over the whole level, or channel by channel)."""
    if px.dtype in (np.uint8, np.uint16):
        return [px]
    f = px.astype(np.float64)

    def scale(a, lo, hi):
        return np.zeros(a.shape) if hi == lo else (a - lo) * 255.0 / (hi - lo)

    whole = scale(f, f.min(), f.max())
    per = np.stack([scale(f[..., c], f[..., c].min(), f[..., c].max()) for c in range(f.shape[2])], axis=2)
    return [whole, per]


PNG_MODES = {(1, 8): "L", (2, 8): "LA", (3, 8): "RGB", (4, 8): "RGBA", (1, 16): ("I;16", "I;16B", "I")}


def test_level_pngs(fixtures_dir, mount):
    """On a fresh mount: level_<n>.png's stat size equals its length before any read;
    `file` says PNG; Pillow decodes it to the level's pixels, transposed to (y, x,
    channel) as data_axis_order says: 1-4 channels as L/LA/RGB/RGBA, uint8 and uint16 as
    stored, float scaled min..max to 8 bits (within 1)."""
    from PIL import Image

    problems = []
    n_png = 0
    with mount(fixtures_dir / "scene") as mp:
        for node in image_nodes(fixtures_dir):
            d = Path(mp).joinpath(*node.relpath)
            with tiledbsoma.open(node.uri) as img:
                count = img.level_count
                pixels = [level_pixels(img, i) for i in range(count)]
            listed = sorted(n for n in os.listdir(d) if n.startswith("level_"))
            if listed != sorted(f"level_{i}.png" for i in range(count)):
                problems.append(f"{node.display}: lists {listed}, expected level_0..{count - 1}.png")
            for i, px in enumerate(pixels):
                n_png += 1
                where = f"{node.display}/level_{i}.png"
                path = d / f"level_{i}.png"
                st0 = os.stat(path).st_size
                data = path.read_bytes()
                if st0 != len(data):
                    problems.append(f"{where}: stat before any read says {st0}, content is {len(data)} bytes")
                if not data.startswith(b"\x89PNG\r\n\x1a\n"):
                    problems.append(f"{where}: no PNG signature")
                    continue
                if shutil.which("file"):
                    out = subprocess.run(["file", "-b", str(path)], capture_output=True, text=True, timeout=30).stdout
                    if "PNG image data" not in out:
                        problems.append(f"{where}: file(1) says {out.strip()!r}")
                try:
                    im = Image.open(io.BytesIO(data))
                    im.load()
                except Exception as e:  # noqa: BLE001
                    problems.append(f"{where}: Pillow cannot decode it: {type(e).__name__}: {e}")
                    continue
                h, w, c = px.shape
                bits = 16 if px.dtype == np.uint16 else 8
                mode = PNG_MODES.get((c, bits))
                if im.size != (w, h):
                    problems.append(f"{where}: {im.size[0]}x{im.size[1]} pixels, expected {w}x{h}")
                    continue
                if im.mode not in (mode if isinstance(mode, tuple) else (mode,)):
                    problems.append(f"{where}: mode {im.mode}, expected {mode} ({c} channels, {px.dtype})")
                    continue
                got = np.asarray(im)
                if got.ndim == 2:
                    got = got[:, :, None]
                if px.dtype in (np.uint8, np.uint16):
                    if not np.array_equal(got.astype(px.dtype), px):
                        problems.append(f"{where}: pixels differ from the level's ({int((got != px).sum())} values)")
                else:
                    cands = expected_png_pixels(px)
                    ok = any(
                        np.abs(got.astype(np.float64) - cand).max() <= 1.0
                        and got.min() == 0 and got.max() == 255
                        for cand in cands
                    )
                    if not ok:
                        err = min(np.abs(got.astype(np.float64) - cand).max() for cand in cands)
                        problems.append(f"{where}: {px.dtype} pixels not scaled min..max to 8 bits (max error {err:.2f})")
    assert n_png >= 6
    fail_if(problems, f"level PNG problems ({n_png} files)")


# --------------------------------------------------------------------------------------
# malformed spatial metadata


def _errno_of(fn):
    try:
        r = fn()
    except OSError as e:
        return e.errno
    if hasattr(r, "close"):
        r.close()
    return None


def test_malformed_spatial_json_is_eio(fixtures_dir, mount):
    """coordinate_space.json of a collection whose soma_coordinate_space is not JSON,
    and transforms.json of one whose registry entry is not JSON: stat, open and read
    give EIO, each with a log line naming the key; everything else keeps working (the
    same directories' metadata.json, other members' files), and the daemon lives."""
    with mount(fixtures_dir / "legacy") as mp:
        root = Path(mp)
        cases = [
            (root / "bad_space" / "coordinate_space.json", "soma_coordinate_space"),
            (root / "bad_transforms" / "transforms.json", "soma_scene_registry_points"),
        ]
        problems = []
        for path, key in cases:
            rel = path.relative_to(root)
            if path.name not in os.listdir(path.parent):
                problems.append(f"{rel}: not listed")
            for what, fn in (
                ("stat", lambda: os.stat(path)),
                ("open+read", lambda: open(path, "rb").read()),
                ("stat again", lambda: os.stat(path)),
            ):
                e = _errno_of(fn)
                if e != errno.EIO:
                    problems.append(f"{rel}: {what} gives {errno.errorcode.get(e, e) if e else 'success'}, expected EIO")
            md = test_tree.read_json(path.parent / "metadata.json")
            if key not in md:
                problems.append(f"{rel.parent}/metadata.json lacks {key!r}")
        # The rest of the mount still serves.
        assert mp.proc.poll() is None, "the daemon exited"
        assert (root / "noncontig" / "ms" / "RNA" / "10x" / "data" / "barcodes.tsv").read_bytes()
        assert test_tree.read_json(root / "metadata.json")["soma_object_type"] == "SOMACollection"
        log = Path(mp.log).read_text(errors="replace")
        for _, key in cases:
            if not any(key in line for line in log.splitlines()):
                problems.append(f"no log line names {key!r}:\n{log[-2000:]}")
        fail_if(problems, "malformed spatial metadata problems")

