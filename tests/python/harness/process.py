"""What /proc says about a process: whether it lives, which processes have an argument, its
resident memory (now and at its peak) and its threads. Read from /proc, never through a
FUSE mount, so a hung daemon cannot hang the reader.
"""

from __future__ import annotations

import os
from pathlib import Path


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
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def status_mb(pid: int, field: str) -> float | None:
    """A memory line of /proc/PID/status (`VmRSS:`, `VmHWM:`) in MiB; None if absent."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return None


def rss_mb(pid: int) -> float:
    """The resident memory of the process now, in MiB (0 if /proc does not say)."""
    return status_mb(pid, "VmRSS:") or 0.0


def peak_rss_mb(pid: int) -> float:
    """The peak resident memory (VmHWM) of the process, in MiB (NaN if /proc does not say)."""
    peak = status_mb(pid, "VmHWM:")
    return float("nan") if peak is None else peak


def thread_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))
