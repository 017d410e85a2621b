"""Integration tests for soma-mount's tree, metadata.json, schema.json, read-only
behaviour and daemon lifecycle. The expected values come from
tiledbsoma (and tiledb-py for plain TileDB objects), see tree_reference.py.

Run: .venv/bin/python -m pytest tests/python -q
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from harness import tree_reference
from harness.mount import hash_tree, is_mounted, unmount, wait_until
from harness.process import pid_alive, pids_with_arg
from harness.settings import EXIT_TIMEOUT, MOUNT_TIMEOUT
from harness.formats import fail_if
from harness.tree_reference import encode_name, json_equal, load_json_strict

STORES = ["hand", "pbmc", "scene"]

# Names soma-mount itself puts in every directory / every array directory. Later
# issues add more (data.csv, slices/, coordinate_space.json, ...): extend these sets
# (per object type) rather than loosening the exact-listing test.
GENERATED_GROUP_NAMES = {"metadata.json"}


def generated_group_names(node, by_relpath) -> set:
    """The names soma-mount adds to a group's directory (docs/REFERENCE.md): metadata.json always;
    coordinate_space.json, transforms.json, image.json and level_<n>.png for spatial
    objects; 10x/ in a measurement under an experiment's ms; anndata/ and where/ in an
    experiment with obs and ms."""
    names = set(GENERATED_GROUP_NAMES)
    md = tree_reference.expected_metadata(node)
    if "soma_coordinate_space" in md:
        names.add("coordinate_space.json")
    if any(k.startswith(("soma_scene_registry_", "somascene_registry")) for k in md):
        names.add("transforms.json")
    if node.soma_type == "SOMAMultiscaleImage" and "soma_multiscale_image_schema" in md:
        names.add("image.json")
        levels = [k for k in md if k.startswith("soma_level_")]
        names.update(f"level_{i}.png" for i in range(len(levels)))
    if node.soma_type == "SOMAMeasurement" and len(node.relpath) >= 2 and node.relpath[-2] == "ms":
        experiment = by_relpath.get(node.relpath[:-2])
        if experiment is not None and experiment.soma_type == "SOMAExperiment" and "obs" in experiment.members:
            names.add("10x")
    if node.soma_type == "SOMAExperiment" and {"obs", "ms"} <= set(node.members):
        names.update(("anndata", "where"))
    return names
REQUIRED_ARRAY_NAMES = {"metadata.json", "schema.json"}


# --------------------------------------------------------------------------------------
# helpers


def node_path(mp, node: tree_reference.Node) -> Path:
    return Path(mp).joinpath(*node.relpath)


def read_generated(path: Path) -> bytes:
    """Read a generated file; its reported size must equal its content's length."""
    st = os.stat(path)
    with open(path, "rb") as f:
        data = f.read()
    assert st.st_size == len(data), f"{path}: st_size {st.st_size} but {len(data)} bytes read"
    return data


def read_json(path: Path):
    data = read_generated(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AssertionError(f"{path} is not UTF-8: {e}") from None
    try:
        return load_json_strict(text)
    except ValueError as e:
        raise AssertionError(f"{path} is not valid strict JSON ({e}):\n{text[:2000]}") from None


def has_clash(node: tree_reference.Node) -> bool:
    """A member whose encoded name equals a generated name (the member wins)."""
    return any(encode_name(n) in GENERATED_GROUP_NAMES for n in node.members)


def expect_errno(fn, code) -> str | None:
    """None if fn() raises OSError with errno `code`, else a description."""
    try:
        r = fn()
    except OSError as e:
        if e.errno == code:
            return None
        return f"errno {errno.errorcode.get(e.errno, e.errno)} ({e})"
    else:
        if hasattr(r, "close"):
            r.close()
        return "succeeded"


# --------------------------------------------------------------------------------------
# 1. listings


@pytest.mark.parametrize("store", STORES)
def test_group_directories_list_exactly_their_members(store, fixtures_dir, mounted):
    mp = mounted(store)
    nodes = tree_reference.walk_store(fixtures_dir, store)
    by_relpath = {n.relpath: n for n in nodes}
    problems = []
    assert nodes[0].kind in ("soma_group", "soma_array"), nodes[0]
    for node in nodes:
        path = node_path(mp, node)
        if node.kind == "broken":
            continue  # test_broken_member_shows_error_txt
        try:
            listing = os.listdir(path)
        except OSError as e:
            problems.append(f"{node.display}: listdir failed: {e}")
            continue
        if len(listing) != len(set(listing)):
            dupes = sorted({n for n in listing if listing.count(n) > 1})
            problems.append(f"{node.display}: duplicate entries {dupes}")
        if node.is_group:
            expected = {encode_name(n) for n in node.members} | generated_group_names(node, by_relpath)
            if set(listing) != expected:
                problems.append(
                    f"{node.display} ({node.soma_type or node.kind}): "
                    f"missing {sorted(expected - set(listing))}, unexpected {sorted(set(listing) - expected)}"
                )
            for name in node.members:
                p = path / encode_name(name)
                if not p.is_dir():
                    problems.append(f"{node.display}: member {name!r} ({encode_name(name)!r}) is not a directory")
            if not has_clash(node) and not (path / "metadata.json").is_file():
                problems.append(f"{node.display}: metadata.json is not a regular file")
        else:
            missing = REQUIRED_ARRAY_NAMES - set(listing)
            if missing:
                problems.append(f"{node.display} ({node.soma_type or node.kind}): missing {sorted(missing)}")
            for n in REQUIRED_ARRAY_NAMES & set(listing):
                if not (path / n).is_file():
                    problems.append(f"{node.display}: {n} is not a regular file")
    fail_if(problems, f"listing problems in {store}")


def test_odd_member_names_are_percent_encoded(fixtures_dir, mounted):
    """The README's encoding, spelled out by example on the hand store's members: each shown
    name leads to the member whose metadata records its name, and "a/b" and "a%2Fb" both
    appear, each under its own name."""
    mp = Path(mounted("hand"))
    cases = {
        "a/b": "a%2Fb",
        "a%/b": "a%25%2Fb",
        ".": "%2E",
        "..": "%2E%2E",
        "": "%00",
        "my data": "my data",
        "données-ß-細胞": "données-ß-細胞",
        "50%": "50%",
        "pct%41": "pct%2541",
        "a%2Fb": "a%252Fb",
    }
    listing = set(os.listdir(mp))
    problems = []
    for name, shown in cases.items():
        if shown not in listing:
            problems.append(f"{name!r}: {shown!r} not listed")
            continue
        if name == "données-ß-細胞":
            continue  # a DataFrame, no member_name key
        md = read_json(mp / shown / "metadata.json")
        if md.get("member_name") != name:
            problems.append(f"{shown!r}/metadata.json member_name is {md.get('member_name')!r}, expected {name!r}")
    fail_if(problems, "odd-name problems")


def test_member_named_like_a_generated_file_wins(mounted):
    """docs/REFERENCE.md: generated names never shadow a member; on a clash the member wins."""
    mp = Path(mounted("hand"))
    clash = mp / "clash"
    assert sorted(os.listdir(clash)) == ["metadata.json"]
    assert (clash / "metadata.json").is_dir(), "the member 'metadata.json' must win over the generated file"
    inner = read_json(clash / "metadata.json" / "metadata.json")
    assert inner.get("soma_object_type") == "SOMACollection"


def test_lone_array_mounts_as_array_directory(fixtures_dir, mount):
    node = next(n for n in tree_reference.walk_store(fixtures_dir, "hand") if n.relpath == ("obs",))
    for uri in (fixtures_dir / "hand" / "obs", "file://" + str(fixtures_dir / "hand" / "obs")):
        with mount(uri) as mp:
            listing = set(os.listdir(mp))
            assert REQUIRED_ARRAY_NAMES <= listing, (uri, sorted(listing))
            md = read_json(Path(mp) / "metadata.json")
            assert json_equal(md, tree_reference.expected_metadata(node)), uri
            sch = read_json(Path(mp) / "schema.json")
            assert sch["soma_object_type"] == "SOMADataFrame"


# --------------------------------------------------------------------------------------
# 2. metadata.json


@pytest.mark.parametrize("store", STORES)
def test_metadata_json_matches_tiledbsoma(store, fixtures_dir, mounted):
    mp = mounted(store)
    problems = []
    checked = 0
    for node in tree_reference.walk_store(fixtures_dir, store):
        if node.kind == "broken" or has_clash(node):
            continue
        path = node_path(mp, node) / "metadata.json"
        try:
            md = read_json(path)
        except (OSError, AssertionError) as e:
            problems.append(f"{node.display}: {e}")
            continue
        if not isinstance(md, dict):
            problems.append(f"{node.display}: metadata.json is not a JSON object")
            continue
        expected = tree_reference.expected_metadata(node)
        keys = list(md)
        if keys != sorted(keys):
            problems.append(f"{node.display}: keys not sorted: {keys}")
        if set(keys) != set(expected):
            problems.append(
                f"{node.display}: missing keys {sorted(set(expected) - set(keys))}, "
                f"unexpected keys {sorted(set(keys) - set(expected))}"
            )
        for k in sorted(set(keys) & set(expected)):
            if not json_equal(md[k], expected[k]):
                problems.append(f"{node.display}: {k!r} is {md[k]!r}, expected {expected[k]!r}")
        checked += 1
    assert checked > 0
    fail_if(problems, f"metadata.json mismatches in {store}")


# --------------------------------------------------------------------------------------
# 3. schema.json


def _compare_schema(display: str, got, exp: dict) -> list[str]:
    p = []
    if not isinstance(got, dict):
        return [f"{display}: schema.json is not a JSON object"]
    required = {"soma_object_type", "index_column_names", "columns", "cell_count"}
    is_nd = exp["soma_object_type"] in tree_reference.ND_TYPES
    if is_nd:
        required |= {"shape", "non_empty_domain"}
    missing = required - set(got)
    if missing:
        p.append(f"{display}: missing keys {sorted(missing)}")
    if not is_nd:
        for k in ("shape", "non_empty_domain"):
            if k in got:
                p.append(f"{display}: {k!r} present on a {exp['soma_object_type']} (ND arrays only)")
    for k in ("soma_object_type", "index_column_names"):
        if k in got and got[k] != exp[k]:
            p.append(f"{display}: {k} is {got[k]!r}, expected {exp[k]!r}")
    if is_nd:
        for k in ("shape", "non_empty_domain"):
            if k in got and not json_equal(got[k], exp[k]):
                p.append(f"{display}: {k} is {got[k]!r}, expected {exp[k]!r}")
    if "cell_count" in got:
        cc = got["cell_count"]
        if exp["cell_count"] is None:  # DenseNDArray: any count of stored cells
            if not (isinstance(cc, int) and not isinstance(cc, bool) and cc >= 0):
                p.append(f"{display}: cell_count is {cc!r}, expected an integer >= 0")
        elif not json_equal(cc, exp["cell_count"]):
            p.append(f"{display}: cell_count is {cc!r}, expected {exp['cell_count']!r}")
    cols = got.get("columns")
    if not isinstance(cols, list):
        return p + [f"{display}: columns is not a list"]
    got_names = [c.get("name") if isinstance(c, dict) else c for c in cols]
    exp_names = [c["name"] for c in exp["columns"]]
    if got_names != exp_names:
        return p + [f"{display}: columns {got_names}, expected (in order) {exp_names}"]
    for gc, ec in zip(cols, exp["columns"]):
        where = f"{display}: column {ec['name']!r}"
        if set(gc) != set(ec):
            p.append(f"{where}: keys {sorted(gc)}, expected {sorted(ec)}")
        for k in ("type", "nullable", "index"):
            if k in gc and not (gc[k] == ec[k] and type(gc[k]) is type(ec[k])):
                p.append(f"{where}: {k} is {gc[k]!r}, expected {ec[k]!r}")
        if "domain" in ec and "domain" in gc:
            d = gc["domain"]
            if not (
                isinstance(d, list)
                and len(d) == 2
                and all(tree_reference.domain_value_equal(a, e) for a, e in zip(d, ec["domain"]))
            ):
                p.append(f"{where}: domain is {d!r}, expected {ec['domain']!r}")
        if "enumeration" in ec and "enumeration" in gc:
            if not json_equal(gc["enumeration"], ec["enumeration"]):
                p.append(f"{where}: enumeration is {gc['enumeration']!r}, expected {ec['enumeration']!r}")
    return p


@pytest.mark.parametrize("store", STORES)
def test_schema_json_matches_tiledbsoma(store, fixtures_dir, mounted):
    mp = mounted(store)
    problems = []
    checked = 0
    for node in tree_reference.walk_store(fixtures_dir, store):
        if not node.is_array:
            continue
        path = node_path(mp, node) / "schema.json"
        try:
            got = read_json(path)
        except (OSError, AssertionError) as e:
            problems.append(f"{node.display}: {e}")
            continue
        if node.kind == "soma_array":
            problems += _compare_schema(node.display, got, tree_reference.expected_schema(node.uri))
        else:
            # Plain TileDB array: docs/REFERENCE.md fixes no soma_object_type; check the columns.
            dims, attrs = tree_reference.plain_array_columns(node.uri)
            cols = got.get("columns") if isinstance(got, dict) else None
            if not isinstance(cols, list):
                problems.append(f"{node.display}: plain array schema.json has no columns list")
                continue
            names = [c.get("name") for c in cols]
            if names != dims + attrs:
                problems.append(f"{node.display}: columns {names}, expected {dims + attrs}")
            if got.get("index_column_names") != dims:
                problems.append(f"{node.display}: index_column_names {got.get('index_column_names')!r}, expected {dims}")
            for c in cols:
                if c.get("index") is not (c.get("name") in dims):
                    problems.append(f"{node.display}: column {c.get('name')!r} index is {c.get('index')!r}")
        checked += 1
    assert checked > 0
    fail_if(problems, f"schema.json mismatches in {store}")


# --------------------------------------------------------------------------------------
# 4. broken member


def test_broken_member_shows_error_txt(fixtures_dir, mounted):
    mp = Path(mounted("hand"))
    broken = [n for n in tree_reference.walk_store(fixtures_dir, "hand") if n.kind == "broken"]
    assert [n.member_name for n in broken] == ["gone"], "fixture should have exactly one broken member"
    d = node_path(mp, broken[0])
    assert d.is_dir(), f"{d} should be a directory"
    assert os.listdir(d) == ["error.txt"]
    data = read_generated(d / "error.txt")
    text = data.decode("utf-8")
    assert text.strip(), "error.txt is empty"
    with pytest.raises(FileNotFoundError):
        os.stat(d / "metadata.json")


# --------------------------------------------------------------------------------------
# 5. read-only


def test_writes_fail_with_erofs_and_store_is_unchanged(fixtures_dir, mount):
    store = fixtures_dir / "hand"
    before = hash_tree(store)
    with mount(store) as mp:
        root = Path(mp)
        md = root / "metadata.json"
        arr = root / "obs"
        group = root / "nested"
        assert md.is_file() and (arr / "schema.json").is_file() and group.is_dir()
        ops = {
            "create a file at the root": lambda: open(root / "new.txt", "w"),
            "create with O_CREAT|O_EXCL": lambda: os.close(os.open(root / "new2", os.O_CREAT | os.O_EXCL | os.O_WRONLY)),
            "create a file in a group dir": lambda: open(group / "new.txt", "x"),
            "create a file in an array dir": lambda: open(arr / "data.new", "w"),
            "mkfifo": lambda: os.mkfifo(root / "fifo"),
            "open metadata.json 'w'": lambda: open(md, "w"),
            "open metadata.json 'a'": lambda: open(md, "a"),
            "open metadata.json 'r+'": lambda: open(md, "r+"),
            "open schema.json 'w'": lambda: open(arr / "schema.json", "w"),
            "mkdir at the root": lambda: os.mkdir(root / "newdir"),
            "mkdir in a group": lambda: os.mkdir(group / "newdir"),
            "mkdir in an array dir": lambda: os.mkdir(arr / "newdir"),
            "unlink metadata.json": lambda: os.unlink(md),
            "unlink schema.json": lambda: os.unlink(arr / "schema.json"),
            "rmdir a member group": lambda: os.rmdir(group),
            "rmdir an array dir": lambda: os.rmdir(arr),
            "rename metadata.json": lambda: os.rename(md, root / "renamed.json"),
            "rename a member": lambda: os.rename(group, root / "renamed"),
            "rename schema.json within its dir": lambda: os.rename(arr / "schema.json", arr / "s.json"),
            "chmod a file": lambda: os.chmod(md, 0o666),
            "chmod a directory": lambda: os.chmod(group, 0o777),
            "chown a file": lambda: os.chown(md, 1, 1),
            "utime a file": lambda: os.utime(md, (0, 0)),
            "truncate metadata.json to 0": lambda: os.truncate(md, 0),
            "truncate schema.json larger": lambda: os.truncate(arr / "schema.json", 1 << 20),
            "symlink": lambda: os.symlink("metadata.json", root / "link"),
            "hard link": lambda: os.link(md, root / "hardlink"),
        }
        problems = []
        for what, fn in ops.items():
            r = expect_errno(fn, errno.EROFS)
            if r is not None:
                problems.append(f"{what}: expected EROFS, got {r}")
        # Still serving, and nothing changed.
        assert md.is_file()
        read_json(md)
        assert not (root / "new.txt").exists()
        fail_if(problems, "write operations did not fail with EROFS")
    after = hash_tree(store)
    assert before == after, "the store changed: " + repr(
        sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    )


# --------------------------------------------------------------------------------------
# 6. unknown names


def test_unknown_names_are_enoent(mounted):
    mp = Path(mounted("hand"))
    assert (mp / "obs" / "schema.json").is_file()
    problems = []
    probes = [
        mp / "no-such-member",
        mp / "obs" / "no-such-file.csv",
        mp / "obs" / "no-such-dir" / "x",
        mp / "nested" / "no-such-member",
        mp / "nested" / "level2" / "level3" / "nope",
        mp / "gone" / "nope",
        mp / "a%2Fc",  # looks encoded, names nothing
        mp / "a%2fb",  # not the canonical (upper-case) encoding of "a/b"
        mp / "a",  # first half of the member "a/b"
    ]
    for p in probes:
        r = expect_errno(lambda: os.stat(p), errno.ENOENT)
        if r is not None:
            problems.append(f"stat {p.relative_to(mp)}: expected ENOENT, got {r}")
        r = expect_errno(lambda: open(p, "rb"), errno.ENOENT)
        if r is not None:
            problems.append(f"open {p.relative_to(mp)}: expected ENOENT, got {r}")
    r = expect_errno(lambda: os.listdir(mp / "no-such-dir"), errno.ENOENT)
    if r is not None:
        problems.append(f"listdir no-such-dir: expected ENOENT, got {r}")
    fail_if(problems, "unknown-name problems")


def test_ls_l_looks_up_each_name_once(fixtures_dir, mount):
    """`ls -l` stats every entry and asks for two extended attributes of each (SELinux
    label, ACL). The kernel keeps a name for the TTL even when its size is not known yet,
    so a listing's names are looked up once each, and the first getxattr tells the kernel
    there are none: it asks no more. Counted from the daemon's debug log of FUSE requests."""
    with mount(fixtures_dir / "pbmc", "-vv") as mp:
        d = Path(mp) / "ms" / "RNA" / "X" / "data"
        names = os.listdir(d)
        log = Path(mp.log)
        mark = len(log.read_bytes())
        subprocess.run(["ls", "-l", str(d)], check=True, capture_output=True, timeout=30)
        requests = log.read_bytes()[mark:].decode(errors="replace")
    ops = collections.Counter(re.findall(r"FUSE\(\s*\d+\) ino 0x[0-9a-f]+ ([A-Z]+)", requests))
    assert ops["READDIR"], f"the log shows no FUSE requests of ls -l: {ops}"
    assert ops["LOOKUP"] <= len(names), f"{len(names)} entries, {ops}"
    assert ops["GETXATTR"] <= 1, f"{len(names)} entries, {ops}"


# --------------------------------------------------------------------------------------
# 7. lifecycle


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "umount"])
def test_daemon_ends_and_unmounts(how, fixtures_dir, mount):
    with mount(fixtures_dir / "hand") as mp:
        proc = mp.proc
        assert "metadata.json" in os.listdir(mp)
        if how == "umount":
            r = subprocess.run(["umount", mp], capture_output=True, text=True, timeout=EXIT_TIMEOUT)
            assert r.returncode == 0, f"umount failed: {r.stderr}"
        else:
            proc.send_signal(getattr(signal, how))
        try:
            rc = proc.wait(EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"soma-mount still running {EXIT_TIMEOUT}s after {how}")
        assert wait_until(lambda: not is_mounted(mp), 1.0), (
            f"soma-mount exited ({rc}) after {how} but left {mp} mounted"
        )


def test_umount_just_after_mounting_never_finds_the_mount_busy(fixtures_dir, mount):
    """`umount DIR` 0-60 ms after the mount appears, 30 times: the daemon, which starts
    serving meanwhile, never holds its own mount (it once `stat`ed its mount point, and an
    `umount` in that moment failed, "target is busy", about once in 70)."""
    for i in range(30):
        with mount(fixtures_dir / "hand") as mp:
            time.sleep(0.002 * i)
            r = subprocess.run(["umount", mp], capture_output=True, text=True, timeout=EXIT_TIMEOUT)
            assert r.returncode == 0, f"umount {0.002 * i:.3f} s after mounting failed: {r.stderr}"
            assert mp.proc.wait(EXIT_TIMEOUT) == 0


def test_restart_after_sigkill_recovers_the_mount(fixtures_dir, mount, soma_mount_bin):
    """SIGKILL leaves a dead mount; starting soma-mount again on it detaches it and mounts."""
    with mount(fixtures_dir / "hand") as mp:
        mp.proc.kill()
        mp.proc.wait(EXIT_TIMEOUT)
        with pytest.raises(OSError) as dead:
            os.listdir(mp)
        assert dead.value.errno == errno.ENOTCONN, dead.value
        assert is_mounted(mp), "a killed daemon leaves its mount behind"
        again = subprocess.Popen(
            [str(soma_mount_bin), "-f", str(fixtures_dir / "hand"), str(mp)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

        def shows_the_store():
            # Listable is not enough: between detaching the dead mount and mounting, the
            # directory lists as the empty directory under it.
            try:
                return "metadata.json" in os.listdir(mp)
            except OSError:
                return False

        try:
            assert wait_until(shows_the_store, MOUNT_TIMEOUT), "no working mount after restart"
        finally:
            subprocess.run(["umount", mp], capture_output=True, timeout=EXIT_TIMEOUT)
            try:
                again.wait(EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                again.kill()
                again.wait()
        assert "dead mount" in again.stderr.read()


@pytest.mark.timeout(120)
def test_an_ending_daemon_leaves_a_new_mount_on_its_directory_alone(fixtures_dir, mount, soma_mount_bin):
    """A script that remounts: read files, `umount`, and at once mount the store again on the
    same directory. The first daemon, ending meanwhile, must not unmount the second mount
    (it used to, now and then, 17 ms after the second came up). Several rounds."""
    with mount(fixtures_dir / "hand") as mp:
        first = mp.proc
        for _ in range(4):
            with open(Path(mp) / "obs" / "data.csv", "rb") as f:  # a file open across the umount
                f.read(100)
                subprocess.run(["umount", "-l", mp], capture_output=True, timeout=EXIT_TIMEOUT, check=True)
            second = subprocess.Popen(
                [str(soma_mount_bin), "-f", "--cache-dir", mp.cache_dir, str(fixtures_dir / "hand"), str(mp)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                assert wait_until(lambda: is_mounted(mp), MOUNT_TIMEOUT), "the second mount did not come up"
                first.wait(EXIT_TIMEOUT)
                time.sleep(0.2)  # what the first daemon did on its way out has been done
                assert is_mounted(mp), "the ending daemon unmounted the new mount"
                assert "metadata.json" in os.listdir(mp)
            except BaseException:
                second.kill()
                raise
            first = second
        mp.proc = first  # the harness unmounts and reaps the last one


def test_live_mount_is_not_mounted_over(fixtures_dir, mount, soma_mount_bin):
    with mount(fixtures_dir / "hand") as mp:
        r = subprocess.run(
            [str(soma_mount_bin), "-f", str(fixtures_dir / "pbmc"), str(mp)],
            capture_output=True,
            text=True,
            timeout=EXIT_TIMEOUT,
        )
        assert r.returncode != 0
        assert f"umount {mp}" in r.stderr, r.stderr
        assert "metadata.json" in os.listdir(mp), "the first mount keeps serving"


# --------------------------------------------------------------------------------------
# 8. bad URI


@contextlib.contextmanager
def _scratch_dir():
    d = os.path.realpath(tempfile.mkdtemp(prefix="soma-mount-mp-"))
    try:
        yield d
    finally:
        unmount(d)
        for pid in pids_with_arg(d):  # a daemon we started on this unique directory
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.rmdir(d)


@pytest.mark.parametrize("mode", ["foreground", "daemon"])
@pytest.mark.parametrize("kind", ["missing", "not-tiledb"])
def test_unopenable_uri_fails_fast(kind, mode, soma_mount_bin):
    with _scratch_dir() as mp, tempfile.TemporaryDirectory(prefix="soma-mount-empty-") as empty:
        uri = "/nonexistent-soma-mount-test/store" if kind == "missing" else empty
        args = [str(soma_mount_bin)] + (["-f"] if mode == "foreground" else []) + [uri, mp]
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
            try:
                rc = proc.wait(EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                pytest.fail(f"soma-mount {mode} with unopenable URI {uri!r} still running after {EXIT_TIMEOUT}s")
            err.seek(0)
            stderr = err.read().decode("utf-8", "replace")
        assert rc != 0, f"exit status 0 for unopenable URI {uri!r}"
        assert stderr.strip(), "no message on stderr"
        assert uri in stderr, f"stderr does not name the URI {uri!r}:\n{stderr}"
        assert not is_mounted(mp), f"{mp} was left mounted"


# --------------------------------------------------------------------------------------
# 9. daemon mode


def test_daemon_mode_returns_once_mounted(fixtures_dir, soma_mount_bin, tmp_path):
    with _scratch_dir() as mp:
        log = tmp_path / "daemon.log"
        with open(log, "wb") as logf:
            proc = subprocess.Popen(
                [str(soma_mount_bin), str(fixtures_dir / "hand"), mp],
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=logf,
            )
            try:
                rc = proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                pytest.fail("soma-mount (daemon mode) did not return within 20 s")
        assert rc == 0, f"exit status {rc}:\n{log.read_text(errors='replace')}"
        assert is_mounted(mp), "soma-mount returned but the directory is not mounted (yet)"
        assert os.path.ismount(mp)
        assert "metadata.json" in os.listdir(mp)
        daemons = pids_with_arg(mp)
        assert daemons, "no daemon process found after soma-mount returned"
        r = subprocess.run(["umount", mp], capture_output=True, text=True, timeout=EXIT_TIMEOUT)
        assert r.returncode == 0, f"umount failed: {r.stderr}"
        assert wait_until(lambda: not any(pid_alive(p) for p in daemons), EXIT_TIMEOUT), (
            f"daemon {daemons} still running {EXIT_TIMEOUT}s after umount"
        )
        assert not is_mounted(mp)


def test_daemon_mode_releases_stdout_and_stderr(fixtures_dir, soma_mount_bin):
    """`out=$(soma-mount URI DIR)` or `soma-mount URI DIR | tee log` must not hang: the
    daemon must not keep the caller's stdout/stderr open after the command returns."""
    with _scratch_dir() as mp:
        proc = subprocess.Popen(
            [str(soma_mount_bin), str(fixtures_dir / "hand"), mp],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            returned = proc.poll()
            proc.kill()
            with contextlib.suppress(Exception):
                proc.communicate(timeout=5)
            if returned is None:
                pytest.fail("soma-mount (daemon mode) did not return within 20 s")
            pytest.fail(
                f"soma-mount returned {returned}, but the daemon kept its stdout/stderr pipes open "
                "(output never reached EOF): redirect them to /dev/null when daemonizing"
            )
        assert proc.returncode == 0, err.decode(errors="replace")
        assert is_mounted(mp)
