"""Mounting a store with the daemon (`soma-mount -f`), always unmounting it, and the mount
table, read from /proc so that a hung daemon cannot hang the check.

`mount_guard` mounts on a fresh temporary directory with a fresh cache directory, waits for
the mount within a timeout, and whatever happens unmounts (`umount`, then `umount -l`), reaps
the daemon (killing it after EXIT_TIMEOUT) and removes both directories. `lazy_mounts` keeps
one such mount per fixture store, mounted on first use.

Each daemon's stderr goes to a log file under one temporary directory; `DAEMON_LOGS` says
which logs belong to the running test and which to the session, so that a failed test can
show them, and `LIVE` holds every daemon still running, for a last-resort cleanup.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from harness import process
from harness.settings import EXIT_TIMEOUT, MOUNT_TIMEOUT, binary_path


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
    """Polls `pred` until it is true (True) or `timeout` seconds have passed (False)."""
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


class DaemonLogs:
    """The log file of every daemon started: those of the running test, those of mounts
    that outlive a test (session), all under one temporary directory."""

    def __init__(self):
        self.session: list[tuple[str, Path]] = []
        self.test: list[tuple[str, Path]] = []
        self._dir: Path | None = None

    def new(self, name: str, label: str, session: bool) -> Path:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="soma-mount-logs-"))
        log = self._dir / (name + ".log")
        (self.session if session else self.test).append((label, log))
        return log

    def remove(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


DAEMON_LOGS = DaemonLogs()
LIVE: dict[str, subprocess.Popen | None] = {}  # mountpoint -> daemon, for last-resort cleanup


def tail(path: Path, limit: int = 16000) -> str:
    """The last `limit` bytes of a log, as text."""
    try:
        data = path.read_bytes()
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    if len(data) > limit:
        data = b"...\n" + data[-limit:]
    return data.decode("utf-8", "replace") or "<empty>"


def unmount_everything() -> None:
    """Unmounts every mount still live, kills its daemon and removes its directory."""
    for mp, proc in list(LIVE.items()):
        unmount(mp)
        if proc is not None and proc.poll() is None:
            proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(5)
        with contextlib.suppress(OSError):
            os.rmdir(mp)
        LIVE.pop(mp, None)


class MountPath(str):
    """The mountpoint path (a str), carrying the daemon process and its log."""

    proc: subprocess.Popen
    log: Path
    mountpoint: str
    cache_dir: str | None  # the temporary --cache-dir mount_guard made, if it made one

    def rss_mb(self) -> float:
        """The daemon's resident memory now, in MiB."""
        return process.rss_mb(self.proc.pid)

    def peak_rss_mb(self) -> float:
        """The daemon's peak resident memory (VmHWM), in MiB."""
        return process.peak_rss_mb(self.proc.pid)


def _has_option(args, name: str) -> bool:
    return any(a == name or a.startswith(name + "=") for a in args)


@contextlib.contextmanager
def mount_guard(
    uri,
    *extra_args,
    label: str | None = None,
    session: bool = False,
    timeout: float = MOUNT_TIMEOUT,
    poll: float = 0.05,
    log: str | os.PathLike | None = None,
):
    """Mount `uri` with `soma-mount -f` on a fresh temporary directory; yield its path.

    Unless extra_args has a --cache-dir, the daemon gets a fresh temporary cache
    directory of its own (removed afterwards), so tests never share generated files
    with each other or with the user's cache; its path is `.cache_dir` of the result.

    The mount must appear within `timeout` seconds (looked for every `poll` seconds). The
    daemon's output goes to `log`, else to a new file of DAEMON_LOGS (the test's, or with
    `session` the session's, labelled `label`).

    Always unmounts (`umount DIR`, then `umount -l DIR`), waits for the daemon to exit
    (killing it after EXIT_TIMEOUT), and removes the directory -- whatever happens."""
    binary = binary_path()
    if not binary.is_file():
        raise FileNotFoundError(f"soma-mount binary not found at {binary} (build it, or set SOMA_MOUNT_BIN)")
    extra_args = tuple(map(str, extra_args))
    own_cache = None
    if not _has_option(extra_args, "--cache-dir"):
        own_cache = tempfile.mkdtemp(prefix="soma-mount-cache-")
        extra_args = ("--cache-dir", own_cache) + extra_args
    mp = os.path.realpath(tempfile.mkdtemp(prefix="soma-mount-mp-"))
    label = label or f"{uri} on {mp}"
    log = Path(log) if log is not None else DAEMON_LOGS.new(os.path.basename(mp), label, session)
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
        LIVE[mp] = proc
        ok = wait_until(lambda: is_mounted(mp) or proc.poll() is not None, timeout, poll)
        if not (ok and is_mounted(mp)):
            status = f"exited with {proc.returncode} before mounting" if proc.poll() is not None else "still running"
            raise AssertionError(
                f"soma-mount did not mount {uri} on {mp} within {timeout}s ({status}); stderr:\n{tail(log)}"
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
        LIVE.pop(mp, None)
        # rmdir, never rmtree: if the mount somehow survived we must not recurse into it.
        with contextlib.suppress(OSError):
            os.rmdir(mp)
        if own_cache is not None and not is_mounted(mp):
            shutil.rmtree(own_cache, ignore_errors=True)


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
            raise AssertionError(f"the soma-mount daemon for {store} has exited ({p.proc.returncode}):\n{tail(p.log)}")
        return p

    with stack:
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
