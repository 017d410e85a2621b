"""pytest harness for soma-mount's integration tests.

Environment:
  SOMA_MOUNT_BIN  the daemon binary (default: <repo>/target/release/soma-mount)
  SOMA_FIXTURES   the fixtures directory (default: <repo>/fixtures); built with
                  scripts/make-fixtures.py once per session if it does not exist.

Every mount goes through `mount_guard` (also the `mount` fixture), which always
unmounts and reaps the daemon, so no test leaves a stale mount behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAKE_FIXTURES = REPO / "scripts" / "make-fixtures.py"
# make-fixtures.py runs this one with .venv-old's Python for the v1 store.
MAKE_FIXTURE_V1 = REPO / "scripts" / "make-fixture-v1.py"
STORES = ("hand", "pbmc", "scene", "big", "v1", "legacy")
MOUNT_TIMEOUT = 15.0
# Times the contract states ("head answers within a second") are checked with a margin, so
# that a slow or busy machine (CI shares two cores with everything it runs) does not fail
# them: SOMA_TEST_TIME_MARGIN (default 3) multiplies each bound.
TIME_MARGIN = float(os.environ.get("SOMA_TEST_TIME_MARGIN", "3"))

# Nothing the tests start probes EC2's instance metadata (a link-local address, not this
# machine): the AWS SDK's credential chain, in the daemon and in libtiledb, asks it last.
# A test of that source points AWS_EC2_METADATA_SERVICE_ENDPOINT at a fake on loopback.
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
EXIT_TIMEOUT = 10.0
STAMP = ".fixtures-stamp"


def within(seconds: float) -> float:
    """A stated time bound, with the margin for slow machines."""
    return seconds * TIME_MARGIN


def binary_path() -> Path:
    env = os.environ.get("SOMA_MOUNT_BIN")
    return Path(env).resolve() if env else REPO / "target" / "release" / "soma-mount"


def fixtures_path() -> Path:
    env = os.environ.get("SOMA_FIXTURES")
    return Path(env).resolve() if env else REPO / "fixtures"


# --------------------------------------------------------------------------------------
# mount table (read from /proc, never through the FUSE mount itself, so a hung daemon
# cannot hang the check)


def _unescape_mount_field(s: str) -> str:
    # /proc/mounts escapes space, tab, newline and backslash as \ooo
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 4 <= len(s) and s[i + 1 : i + 4].isdigit():
            out.append(chr(int(s[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def mount_entries() -> list[tuple[str, str, str]]:
    """(source, mountpoint, fstype) of every mount, from /proc/self/mounts."""
    out = []
    with open("/proc/self/mounts", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3:
                out.append((_unescape_mount_field(parts[0]), _unescape_mount_field(parts[1]), parts[2]))
    return out


def is_mounted(path) -> bool:
    # abspath, not realpath: resolving the mountpoint would stat it through FUSE.
    p = os.path.abspath(os.fspath(path))
    return any(mp == p for _, mp, _ in mount_entries())


def wait_until(pred, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def unmount(path, quiet: bool = True) -> None:
    """`umount DIR`, falling back to `umount -l DIR`; no-op if not mounted."""
    path = os.fspath(path)
    for cmd in (["umount", path], ["umount", "-l", path]):
        if not is_mounted(path):
            return
        try:
            subprocess.run(cmd, capture_output=True, timeout=EXIT_TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            pass
        wait_until(lambda: not is_mounted(path), 2.0)
    if is_mounted(path) and not quiet:
        raise RuntimeError(f"could not unmount {path}")


def pids_with_arg(arg: str) -> list[int]:
    """PIDs of processes whose command line has `arg` as one argument (used to find
    a daemonized soma-mount by its unique temporary mountpoint)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if os.fsencode(arg) in argv and int(d) != os.getpid():
            pids.append(int(d))
    return pids


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


# --------------------------------------------------------------------------------------
# logs of every daemon started during a test, printed when the test fails

_SESSION_LOGS: list[tuple[str, Path]] = []  # session-scoped mounts
_TEST_LOGS: list[tuple[str, Path]] = []  # mounts started during the current test
_LIVE: dict[str, subprocess.Popen | None] = {}  # mountpoint -> process, for last-resort cleanup
_LOG_DIR: Path | None = None


def _log_dir() -> Path:
    global _LOG_DIR
    if _LOG_DIR is None:
        _LOG_DIR = Path(tempfile.mkdtemp(prefix="soma-mount-logs-"))
    return _LOG_DIR


def _tail(path: Path, limit: int = 16000) -> str:
    try:
        data = path.read_bytes()
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    if len(data) > limit:
        data = b"...\n" + data[-limit:]
    return data.decode("utf-8", "replace") or "<empty>"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _TEST_LOGS.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        seen = set()
        logs = [(label, path, 16000) for label, path in _TEST_LOGS]
        logs += [(label, path, 6000) for label, path in _SESSION_LOGS]
        for label, path, limit in logs:
            if path in seen:
                continue
            seen.add(path)
            rep.sections.append((f"soma-mount stderr: {label}", _tail(path, limit)))


def pytest_sessionfinish(session, exitstatus):
    # Last resort: nothing we mounted may survive the session.
    for mp, proc in list(_LIVE.items()):
        unmount(mp)
        if proc is not None and proc.poll() is None:
            proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(5)
        with contextlib.suppress(OSError):
            os.rmdir(mp)
        _LIVE.pop(mp, None)
    # Daemon logs are kept only when something failed (their tails are in the report).
    if _LOG_DIR is not None and exitstatus == 0:
        shutil.rmtree(_LOG_DIR, ignore_errors=True)


# --------------------------------------------------------------------------------------
# fixtures


def _script_hash() -> str:
    """The stamp make-fixtures.py writes: sha256 over both fixture scripts (see its
    stamp_digest)."""
    h = hashlib.sha256()
    for path in (MAKE_FIXTURES, MAKE_FIXTURE_V1):
        h.update(path.read_bytes())
    return h.hexdigest()


def ensure_fixtures() -> Path:
    """Build the fixtures if the directory is missing, or if it was built by another
    version of make-fixtures.py or make-fixture-v1.py (the stamp it writes no longer
    matches). A directory without a stamp is used as it is."""
    d = fixtures_path()
    stamp = d / STAMP
    stale = stamp.exists() and stamp.read_text().strip() != _script_hash()
    if not d.exists() or stale:
        r = subprocess.run(
            [sys.executable, str(MAKE_FIXTURES), str(d)], capture_output=True, text=True, timeout=600
        )
        if r.returncode != 0:
            raise RuntimeError(f"make-fixtures.py failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    missing = [s for s in STORES if not (d / s).is_dir()]
    if missing:
        raise RuntimeError(f"fixtures dir {d} lacks {missing}; delete it to rebuild")
    return d


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return ensure_fixtures()


@pytest.fixture(scope="session")
def soma_mount_bin() -> Path:
    b = binary_path()
    if not (b.is_file() and os.access(b, os.X_OK)):
        pytest.fail(f"soma-mount binary not found at {b} (build it, or set SOMA_MOUNT_BIN)")
    return b


class MountPath(str):
    """The mountpoint path (a str), carrying the daemon process and its log."""

    proc: subprocess.Popen
    log: Path
    mountpoint: str
    cache_dir: str | None  # the temporary --cache-dir mount_guard made, if it made one


def _has_option(args, name: str) -> bool:
    return any(a == name or a.startswith(name + "=") for a in args)


@contextlib.contextmanager
def mount_guard(uri, *extra_args, label: str | None = None, session: bool = False):
    """Mount `uri` with `soma-mount -f` on a fresh temporary directory; yield its path.

    Unless extra_args has a --cache-dir, the daemon gets a fresh temporary cache
    directory of its own (removed afterwards), so tests never share generated files
    with each other or with the user's cache; its path is `.cache_dir` of the result.

    Always unmounts (`umount DIR`, then `umount -l DIR`), waits for the daemon to exit
    (killing it after EXIT_TIMEOUT), and removes the directory -- whatever happens."""
    binary = binary_path()
    if not binary.is_file():
        pytest.fail(f"soma-mount binary not found at {binary} (build it, or set SOMA_MOUNT_BIN)")
    extra_args = tuple(map(str, extra_args))
    own_cache = None
    if not _has_option(extra_args, "--cache-dir"):
        own_cache = tempfile.mkdtemp(prefix="soma-mount-cache-")
        extra_args = ("--cache-dir", own_cache) + extra_args
    mp = os.path.realpath(tempfile.mkdtemp(prefix="soma-mount-mp-"))
    label = label or f"{uri} on {mp}"
    log = _log_dir() / (os.path.basename(mp) + ".log")
    (_SESSION_LOGS if session else _TEST_LOGS).append((label, log))
    env = dict(os.environ)
    env.setdefault("RUST_BACKTRACE", "1")
    proc = None
    try:
        with open(log, "wb") as logf:
            proc = subprocess.Popen(
                [str(binary), "-f", *extra_args, os.fspath(uri), mp],
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=logf,
                env=env,
            )
        _LIVE[mp] = proc
        ok = wait_until(lambda: is_mounted(mp) or proc.poll() is not None, MOUNT_TIMEOUT)
        if not (ok and is_mounted(mp)):
            status = f"exited with {proc.returncode} before mounting" if proc.poll() is not None else "still running"
            raise AssertionError(
                f"soma-mount did not mount {uri} on {mp} within {MOUNT_TIMEOUT}s ({status}); stderr:\n{_tail(log)}"
            )
        assert os.path.ismount(mp), f"{mp} is in /proc/mounts but os.path.ismount() is false"
        p = MountPath(mp)
        p.proc, p.log, p.mountpoint = proc, log, mp
        p.cache_dir = own_cache
        yield p
    finally:
        unmount(mp)
        if proc is not None:
            try:
                proc.wait(EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(EXIT_TIMEOUT)
        if is_mounted(mp):  # daemon died without unmounting, or umount failed
            unmount(mp)
        _LIVE.pop(mp, None)
        # rmdir, never rmtree: if the mount somehow survived we must not recurse into it.
        with contextlib.suppress(OSError):
            os.rmdir(mp)
        if own_cache is not None and not is_mounted(mp):
            shutil.rmtree(own_cache, ignore_errors=True)


@pytest.fixture
def mount():
    """`with mount(uri, *extra_args) as path:` -- see mount_guard."""
    return mount_guard


@contextlib.contextmanager
def lazy_mounts(fixtures_dir, label, args=lambda store: ()):
    """`with lazy_mounts(fixtures_dir, label) as get:` get(store) -> the mountpoint of the
    fixture store `store`, mounted through mount_guard on first use (with `args(store)`,
    labelled `label(store)`), one daemon per store, all unmounted when the block ends."""
    stack = contextlib.ExitStack()
    cache: dict[str, MountPath] = {}

    def get(store: str) -> MountPath:
        if store not in cache:
            cache[store] = stack.enter_context(
                mount_guard(fixtures_dir / store, *args(store), label=label(store), session=True)
            )
        p = cache[store]
        if p.proc.poll() is not None:
            pytest.fail(f"the soma-mount daemon for {store} has exited ({p.proc.returncode}):\n{_tail(p.log)}")
        return p

    with stack:
        yield get


@pytest.fixture(scope="session")
def mounted(fixtures_dir, soma_mount_bin):
    """Session-wide read-only mounts of the fixture stores: mounted(name) -> path.

    Lazily mounted on first use, unmounted at the end of the session."""
    with lazy_mounts(fixtures_dir, lambda name: f"session mount of {name}") as get:
        yield get


def hash_tree(root) -> dict[str, str]:
    """relative path -> sha256 of every file under root (and '<dir>' for directories)."""
    out = {}
    root = os.fspath(root)
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = "<dir>"
        for f in filenames:
            p = os.path.join(dirpath, f)
            h = hashlib.sha256()
            with open(p, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            out[os.path.relpath(p, root)] = h.hexdigest()
    return out


__all__ = [
    "MountPath",
    "binary_path",
    "ensure_fixtures",
    "fixtures_path",
    "hash_tree",
    "is_mounted",
    "mount_guard",
    "pid_alive",
    "pids_with_arg",
    "unmount",
    "wait_until",
]
