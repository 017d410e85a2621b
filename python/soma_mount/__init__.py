"""Mount a TileDB-SOMA store for the length of a ``with`` block.

The wheel that holds this module also holds the ``soma-mount`` binary, which does all the
work; this module only starts it, waits for its mount, and takes the mount away again::

    import anndata, soma_mount

    with soma_mount.mounted("s3://bucket/atlas", timestamp=1_700_000_000_000) as root:
        adata = anndata.read_h5ad(root / "anndata/RNA.h5ad")

The daemon runs in the foreground as a child of this process, with its options taken from
the arguments (``soma-mount --help`` tells them). Whether the mount is up is read from
``/proc/self/mountinfo``, never by looking through the mount.
"""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator, Mapping, Optional, Sequence, Union

__all__ = ["MountError", "mounted", "executable"]

EXECUTABLE_NAME = "soma-mount"
"""The binary's file name."""

POLL_SECONDS = 0.05
"""How often the mount table and the daemon are looked at while waiting."""

EXIT_SECONDS = 30.0
"""How long the daemon may take to exit once unmounted before it is killed."""

Timestamp = Union[int, str, datetime.datetime]


class MountError(RuntimeError):
    """The daemon did not mount: its message (what it wrote on stderr) is the error's text."""


def executable() -> Path:
    """The ``soma-mount`` binary installed with this package.

    The wheel puts it in ``soma_mount.scripts/`` beside this package (its shared libraries
    in ``soma_mount.libs/``; the command on the ``PATH`` is a launcher that runs it). Outside
    a wheel it is looked for in the scripts directory of this interpreter's install scheme,
    then in the user scheme's, then on the ``PATH``.
    """
    bundled = Path(__file__).resolve().parent.parent / "soma_mount.scripts" / EXECUTABLE_NAME
    if os.access(bundled, os.X_OK):
        return bundled
    directories = [sysconfig.get_path("scripts")]
    if f"{os.name}_user" in sysconfig.get_scheme_names():
        directories.append(sysconfig.get_path("scripts", f"{os.name}_user"))
    for directory in directories:
        candidate = Path(directory) / EXECUTABLE_NAME
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(EXECUTABLE_NAME)
    if found is None:
        raise MountError(f"{EXECUTABLE_NAME} is not installed beside this module nor on the PATH")
    return Path(found)


@contextmanager
def mounted(
    uri: Union[str, "os.PathLike[str]"],
    mountpoint: Optional[Union[str, "os.PathLike[str]"]] = None,
    *,
    timestamp: Optional[Timestamp] = None,
    config: Optional[Mapping[str, str]] = None,
    extra_args: Sequence[str] = (),
    timeout: float = 60.0,
) -> Iterator[Path]:
    """Mounts the store at ``uri`` and yields the mount point; unmounts when the block ends,
    however it ends.

    Args:
        uri: the store: a path, a ``file://`` or ``s3://`` URI, or any URI libtiledb reads.
        mountpoint: an existing empty directory; by default a new temporary directory, which
            is removed afterwards.
        timestamp: show the store as of this time: milliseconds since the epoch, an RFC 3339
            string, or a ``datetime`` (a naive one is taken as local time).
        config: libtiledb configuration parameters, e.g. ``{"vfs.s3.region": "us-west-2"}``.
        extra_args: more ``soma-mount`` options, e.g. ``["--cache-size", "2G"]``.
        timeout: seconds to wait for the mount to come up.

    Raises:
        MountError: the daemon exited before mounting (the error holds its message), or had
            not mounted after ``timeout`` seconds.
    """
    made_dir = mountpoint is None
    target = Path(tempfile.mkdtemp(prefix="soma-mount-")) if made_dir else Path(mountpoint)
    target = target.resolve()
    command = [str(executable()), os.fspath(uri), str(target), "--foreground"]
    if timestamp is not None:
        command += ["--timestamp", _timestamp_arg(timestamp)]
    for key, value in (config or {}).items():
        command += ["--config", f"{key}={value}"]
    command += list(extra_args)
    try:
        with tempfile.TemporaryFile() as stderr:
            daemon = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
            )
            try:
                _wait_until_mounted(daemon, target, timeout, stderr)
                yield target
            finally:
                _unmount(daemon, target)
    finally:
        if made_dir:
            try:
                target.rmdir()
            except OSError:
                pass


def _timestamp_arg(timestamp: Timestamp) -> str:
    if isinstance(timestamp, datetime.datetime):
        return str(int(timestamp.timestamp() * 1000))
    return str(timestamp)


def _wait_until_mounted(
    daemon: "subprocess.Popen[bytes]", target: Path, timeout: float, stderr: IO[bytes]
) -> None:
    deadline = time.monotonic() + timeout
    while not _is_mounted(target):
        if daemon.poll() is not None:
            raise MountError(_message(stderr) or f"soma-mount exited with {daemon.returncode}")
        if time.monotonic() > deadline:
            raise MountError(f"soma-mount had not mounted {target} after {timeout:g}s")
        time.sleep(POLL_SECONDS)


def _message(stderr: IO[bytes]) -> str:
    stderr.seek(0)
    return stderr.read().decode(errors="replace").strip()


def _is_mounted(target: Path) -> bool:
    """Whether ``target`` is a mount point in this process's mount table."""
    wanted = str(target)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as table:
        for line in table:
            fields = line.split(" ")
            if len(fields) > 4 and _unescape(fields[4]) == wanted:
                return True
    return False


def _unescape(field: str) -> str:
    """A mountinfo path: space, tab, newline and backslash are written as octal escapes."""
    for escaped, plain in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(escaped, plain)
    return field


def _unmount(daemon: "subprocess.Popen[bytes]", target: Path) -> None:
    """Unmounts ``target`` from outside, as a user would, so that the daemon sees its mount go
    and exits; a busy mount is detached instead. A daemon that has not mounted is stopped with
    SIGTERM. A daemon that does not exit is killed."""
    if daemon.poll() is None:
        if _is_mounted(target):
            for command in _unmount_commands(target):
                if subprocess.run(command, capture_output=True).returncode == 0:
                    break
        else:
            daemon.terminate()
    try:
        daemon.wait(timeout=EXIT_SECONDS)
    except subprocess.TimeoutExpired:
        daemon.send_signal(signal.SIGKILL)
        daemon.wait()


def _unmount_commands(target: Path) -> list[list[str]]:
    """``umount`` for root, ``fusermount3 -u`` otherwise; then the same, detaching."""
    if os.geteuid() == 0:
        return [["umount", str(target)], ["umount", "--lazy", str(target)]]
    helper = shutil.which("fusermount3") or shutil.which("fusermount") or "fusermount3"
    return [[helper, "-u", str(target)], [helper, "-u", "-z", str(target)]]

