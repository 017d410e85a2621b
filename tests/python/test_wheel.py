"""The wheel of scripts/wheel, installed and run as its users do: `pip install` into a new
venv that has no tiledbsoma, by a user who is not root, with the clone (and its `.venv`)
hidden and no LD_LIBRARY_PATH. What the wheel's binary serves is compared byte for byte
with what the clone's binary serves from the same store, written by tiledbsoma.

Each run as the test user happens in a mount namespace of its own (`unshare --mount`), in
which an empty tmpfs covers the clone and its `.venv`, so that nothing the binary loads can
come from there; its FUSE mounts live and die in that namespace. /dev/fuse is made 0666 for
the module's run (as on a stock Debian system) and its mode restored afterwards.

SOMA_WHEEL names an already built wheel (scripts/test builds it just before); otherwise
scripts/wheel builds one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from harness.mount import mount_guard, wait_until
from harness.settings import REPO, binary_path

TEST_USER = "soma-mount-test"
# A store written by tiledbsoma, and the files compared: the obs CSV, X's Parquet, an h5ad.
STORE = "pbmc"
FILES = ("obs/data.csv", "ms/RNA/X/data/data.parquet", "anndata/RNA.h5ad")
DEV_FUSE = "/dev/fuse"
FUSERMOUNTS = ("/usr/bin/fusermount3", "/usr/bin/fusermount")
RUN_TIMEOUT = 120
# The Python the test user makes its venv with: the system's (scripts/setup installs its venv
# module), as a user of a shared machine has it.
USER_PYTHON = "/usr/bin/python3"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="makes a user and a mount namespace: needs root"),
    pytest.mark.timeout(900),
]


def sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@pytest.fixture(scope="module")
def wheel() -> Path:
    given = os.environ.get("SOMA_WHEEL")
    if given:
        return Path(given).resolve()
    built = subprocess.run(
        [str(REPO / "scripts" / "wheel")], capture_output=True, text=True, timeout=1200, cwd=REPO
    )
    assert built.returncode == 0, f"scripts/wheel failed:\n{built.stdout}\n{built.stderr}"
    return (REPO / built.stdout.strip().splitlines()[-1]).resolve()


@pytest.fixture(scope="module")
def test_user() -> pwd.struct_passwd:
    """The unprivileged user the wheel runs as, made once (useradd) and kept."""
    try:
        return pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
             "--shell", "/usr/sbin/nologin", TEST_USER],
            check=True, capture_output=True, timeout=30,
        )
        return pwd.getpwnam(TEST_USER)


@pytest.fixture(scope="module")
def dev_fuse_for_everyone():
    """/dev/fuse at 0666, as a stock system has it, for the module's run; restored after."""
    mode = os.stat(DEV_FUSE).st_mode & 0o7777
    os.chmod(DEV_FUSE, 0o666)
    try:
        yield
    finally:
        os.chmod(DEV_FUSE, mode)


def hidden_paths() -> list[str]:
    """The clone, and its `.venv` wherever it really is (a link to another clone's)."""
    paths = [str(REPO.resolve())]
    venv = (REPO / ".venv").resolve()
    if not str(venv).startswith(paths[0] + os.sep):
        paths.append(str(venv))
    return paths


class UserSpace:
    """A temporary home owned by the test user, with the wheel installed in a venv there and
    a copy of the store; `run` runs a command as that user, in a namespace without the clone."""

    def __init__(self, user: pwd.struct_passwd, root: Path):
        self.user = user
        self.root = root
        self.home = root / "home"
        self.venv = self.home / "venv"
        self.store = self.home / STORE
        self.mountpoint = self.home / "mnt"
        self.not_executable = root / "no-fusermount"

    def env(self) -> list[str]:
        return [
            f"HOME={self.home}",
            f"PATH={self.venv}/bin:/usr/local/bin:/usr/bin:/bin",
            f"USER={self.user.pw_name}",
        ]

    def run(self, argv: list[str], *, hide_fusermount: bool = False, timeout: float = RUN_TIMEOUT):
        setup = [f"mount -t tmpfs -o ro,size=4k soma-mount-test-hidden {shlex.quote(p)}"
                 for p in hidden_paths()]
        if hide_fusermount:
            setup += [f"mount --bind {shlex.quote(str(self.not_executable))} {p}"
                      for p in FUSERMOUNTS if os.path.exists(p)]
        command = ["runuser", "-u", self.user.pw_name, "--", "env", "-i", *self.env(), *argv]
        script = " && ".join(setup + ["exec " + shlex.join(command)])
        return subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            capture_output=True, text=True, timeout=timeout, cwd=self.home,
        )

    def processes(self) -> list[int]:
        """The test user's processes still running (a daemon left behind would be one)."""
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == self.user.pw_uid:
                    pids.append(int(entry))
        return pids


@pytest.fixture(scope="module")
def space(wheel, test_user, dev_fuse_for_everyone, fixtures_dir):
    root = Path(tempfile.mkdtemp(prefix="soma-mount-wheel-"))
    space = UserSpace(test_user, root)
    try:
        root.chmod(0o755)
        space.home.mkdir()
        shutil.copytree(fixtures_dir / STORE, space.store)
        space.mountpoint.mkdir()
        space.not_executable.write_bytes(b"")
        local_wheel = root / wheel.name
        shutil.copy(wheel, local_wheel)
        local_wheel.chmod(0o644)
        subprocess.run(["chown", "-R", f"{test_user.pw_uid}:{test_user.pw_gid}", str(space.home)],
                       check=True, timeout=60)
        made = space.run([USER_PYTHON, "-m", "venv", str(space.venv)])
        assert made.returncode == 0, made.stderr
        installed = space.run([f"{space.venv}/bin/pip", "install", "-q", "--no-index",
                               "--disable-pip-version-check", str(local_wheel)])
        assert installed.returncode == 0, installed.stderr
        yield space
    finally:
        for pid in space.processes():
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        # The mounts lived in the namespaces, gone with their processes: nothing is mounted here.
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def served_by_clone(fixtures_dir) -> dict[str, str]:
    """The files' digests as the clone's binary serves them."""
    with mount_guard(fixtures_dir / STORE) as mp:
        return {name: sha256(Path(mp) / name) for name in FILES}


def no_process_left(space: UserSpace) -> bool:
    return wait_until(lambda: not space.processes(), 15.0)


def test_the_venv_has_no_tiledbsoma(space):
    imported = space.run([f"{space.venv}/bin/python", "-c", "import tiledbsoma"])
    assert imported.returncode != 0 and "No module named 'tiledbsoma'" in imported.stderr


def test_an_unprivileged_user_mounts_reads_and_unmounts(space, served_by_clone):
    mp = shlex.quote(str(space.mountpoint))
    script = "\n".join([
        "set -eu",
        f"soma-mount {shlex.quote(str(space.store))} {mp}",
        f"soma-mount status {mp} >&2",
        *[f"sha256sum {shlex.quote(str(space.mountpoint / name))}" for name in FILES],
        f"fusermount3 -u {mp}",
        f"if grep -qF ' {space.mountpoint} ' /proc/self/mountinfo; then echo still mounted >&2; exit 1; fi",
    ])
    ran = space.run(["sh", "-c", script])
    assert ran.returncode == 0, ran.stderr
    served = {line.split(None, 1)[1]: line.split(None, 1)[0] for line in ran.stdout.splitlines()}
    assert {str(Path(p).relative_to(space.mountpoint)): h for p, h in served.items()} == served_by_clone
    assert no_process_left(space), "the daemon outlived its unmount"


def test_sigterm_unmounts_an_unprivileged_mount(space):
    """SIGTERM (or Ctrl-C) of the user's daemon takes its mount away, as `umount` does root's."""
    mp = str(space.mountpoint)
    listed = f"grep -qF ' {mp} ' /proc/self/mountinfo"
    script = "\n".join([
        "set -u",
        f"soma-mount -f {shlex.quote(str(space.store))} {shlex.quote(mp)} 2>daemon.err &",
        "pid=$!",
        "tries=0",
        f"until {listed}; do",
        "  tries=$((tries + 1))",
        '  if [ "$tries" -gt 300 ]; then cat daemon.err >&2; exit 1; fi',
        "  sleep 0.1",
        "done",
        'kill -TERM "$pid"',
        'wait "$pid"',
        f"if {listed}; then echo still mounted; else echo unmounted; fi",
    ])
    ran = space.run(["sh", "-c", script])
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "unmounted"
    assert no_process_left(space)


def test_without_fusermount3_one_line_says_so(space):
    ran = space.run(["soma-mount", str(space.store), str(space.mountpoint)], hide_fusermount=True)
    assert ran.returncode != 0
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    assert "fusermount3" in lines[0] and "fuse3" in lines[0], lines[0]
    assert no_process_left(space)


def test_without_access_to_dev_fuse_one_line_says_so(space):
    os.chmod(DEV_FUSE, 0o600)
    try:
        ran = space.run(["soma-mount", str(space.store), str(space.mountpoint)])
    finally:
        os.chmod(DEV_FUSE, 0o666)
    assert ran.returncode != 0
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and DEV_FUSE in lines[0], ran.stderr
    assert no_process_left(space)


def test_allow_other_without_user_allow_other_one_line_says_so(space):
    conf = Path("/etc/fuse.conf")
    text = conf.read_text() if conf.exists() else ""
    if any(line.split("#")[0].strip() == "user_allow_other" for line in text.splitlines()):
        pytest.skip("this machine's /etc/fuse.conf allows allow_other")
    ran = space.run(["soma-mount", "-o", "allow_other", str(space.store), str(space.mountpoint)])
    assert ran.returncode != 0
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "user_allow_other" in lines[0], ran.stderr
    assert no_process_left(space)


# What each case of `soma_mount.mounted` prints, as JSON, run by the wheel's Python.
MOUNTED_CASES = r"""
import hashlib, json, sys
from pathlib import Path
import soma_mount

def in_mount_table(path):
    with open("/proc/self/mountinfo") as table:
        return any(line.split(" ")[4] == str(path) for line in table)

case, uri = sys.argv[1], sys.argv[2]
out = {}
if case == "ready":
    with soma_mount.mounted(uri) as root:
        out["mounted_inside"] = in_mount_table(root)
        out["csv"] = hashlib.sha256((root / "obs/data.csv").read_bytes()).hexdigest()
    out["mounted_after"] = in_mount_table(root)
elif case == "raises":
    try:
        with soma_mount.mounted(uri) as root:
            out["mounted_inside"] = in_mount_table(root)
            raise KeyError("raised in the block")
    except KeyError as e:
        out["raised"] = e.args[0]
    out["mounted_after"] = in_mount_table(root)
elif case == "bad":
    try:
        with soma_mount.mounted(uri):
            out["mounted"] = True
    except soma_mount.MountError as e:
        out["error"] = str(e)
print(json.dumps(out))
"""


def run_mounted_case(space: UserSpace, case: str, uri: str) -> dict:
    ran = space.run([f"{space.venv}/bin/python", "-c", MOUNTED_CASES, case, uri])
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


def test_mounted_yields_a_ready_mount(space, served_by_clone):
    out = run_mounted_case(space, "ready", str(space.store))
    assert out == {"mounted_inside": True, "csv": served_by_clone["obs/data.csv"],
                   "mounted_after": False}
    assert no_process_left(space), "mounted() left its daemon behind"


def test_mounted_unmounts_when_the_block_raises(space):
    out = run_mounted_case(space, "raises", str(space.store))
    assert out == {"mounted_inside": True, "raised": "raised in the block", "mounted_after": False}
    assert no_process_left(space), "mounted() left its daemon behind"


def test_mounted_raises_the_daemons_message_for_a_bad_uri(space, tmp_path):
    missing = str(space.home / "no-such-store")
    out = run_mounted_case(space, "bad", missing)
    # The clone's binary, given the same URI, says why in its own words.
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    clone = subprocess.run([str(binary_path()), "-f", missing, str(mountpoint)],
                           capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert clone.returncode != 0 and clone.stderr.strip()
    assert out == {"error": clone.stderr.strip()}
    assert no_process_left(space), "mounted() left its daemon behind"
