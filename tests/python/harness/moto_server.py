"""A local S3-compatible server for soma-mount's remote tests: moto's server mode
(`python -m moto.server`) in a child process on 127.0.0.1, plus helpers to upload
local stores to it and to build the libtiledb configuration that reaches it.

The server keeps its state in memory only: `restart()` starts a fresh process on the
same port, and the caller re-uploads what it needs (see `S3Server.upload_tree`).
`pause()` / `resume()` freeze the process with SIGSTOP / SIGCONT: connections stay
open but nothing answers, the way a hung server or a dead network path looks.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"
START_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        try:
            s.connect(("127.0.0.1", port))
            return True
        except OSError:
            return False


class S3Server:
    """moto's S3 server on 127.0.0.1:port, in a child process (always stop() it; it is
    also a context manager)."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.paused = False
        fd, log = tempfile.mkstemp(prefix="moto-server-", suffix=".log")
        os.close(fd)
        self.log = Path(log)

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    def start(self) -> "S3Server":
        assert self.proc is None or self.proc.poll() is not None, "server already running"
        env = dict(os.environ)
        env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_DEFAULT_REGION=REGION)
        # the port may still be in TIME_WAIT after a restart: werkzeug sets SO_REUSEADDR,
        # but retry a few times in case the old process has not released it yet
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            with open(self.log, "ab") as logf:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                    stdin=subprocess.DEVNULL,
                    stdout=logf,
                    stderr=logf,
                    env=env,
                    start_new_session=True,  # a Ctrl-C of pytest does not reach it first
                )
            while time.monotonic() < deadline and self.proc.poll() is None:
                if self._healthy():
                    self.paused = False
                    return self
                time.sleep(0.1)
            if self.proc.poll() is None or time.monotonic() >= deadline:
                self.stop()
                raise RuntimeError(f"moto server did not start on port {self.port}:\n{self.log_tail()}")
            time.sleep(0.5)  # exited (port busy?): try again

    def _healthy(self) -> bool:
        if not _port_accepts(self.port):
            return False
        try:
            with urllib.request.urlopen(self.url + "/moto-api/", timeout=2) as r:
                return r.status == 200
        except Exception:  # noqa: BLE001
            return False

    def stop(self) -> None:
        """Kill the server (SIGKILL: connections are reset, nothing is flushed)."""
        p = self.proc
        if p is None:
            return
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)  # a stopped process must run to die cleanly
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)
        self.paused = False
        # wait until nothing listens (so a restart on the same port is not racing it)
        deadline = time.monotonic() + 5
        while _port_accepts(self.port) and time.monotonic() < deadline:
            time.sleep(0.05)

    def restart(self) -> "S3Server":
        self.stop()
        return self.start()

    def pause(self) -> None:
        assert self.proc is not None and self.proc.poll() is None
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def requests(self) -> list[str]:
        """The HTTP requests the server has logged (its access log), in order, each as
        its method and target ("GET /bucket?list-type=2&prefix=...")."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return []
        # moto (werkzeug) colours some lines with terminal escapes inside the quotes.
        color = r"(?:\x1b\[[0-9;]*m)*"
        return re.findall(rf'"{color}([A-Z]+ \S+) HTTP/1\.[01]{color}"', text)

    def request_count(self) -> int:
        """How many HTTP requests the server has logged."""
        return len(self.requests())

    def log_tail(self, limit: int = 6000) -> str:
        try:
            data = self.log.read_bytes()
        except OSError:
            return "<no log>"
        return data[-limit:].decode("utf-8", "replace")

    def close(self) -> None:
        self.stop()
        with contextlib.suppress(OSError):
            self.log.unlink()

    def __enter__(self) -> "S3Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- clients -----------------------------------------------------------------------

    def client(self):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 2},
                connect_timeout=5,
                read_timeout=30,
            ),
        )

    def create_bucket(self, bucket: str) -> None:
        self.client().create_bucket(Bucket=bucket)

    def upload_tree(self, local_dir, bucket: str, prefix: str) -> int:
        """Put every file under local_dir at s3://bucket/prefix/<relative path>; returns
        the number of objects. (TileDB on S3 needs no directory markers.)"""
        c = self.client()
        root = Path(local_dir)
        n = 0
        for dirpath, _dirnames, filenames in os.walk(root):
            for f in sorted(filenames):
                p = Path(dirpath) / f
                key = f"{prefix.strip('/')}/{p.relative_to(root).as_posix()}"
                with open(p, "rb") as fh:
                    c.put_object(Bucket=bucket, Key=key, Body=fh.read())
                n += 1
        return n

    # -- libtiledb configuration -------------------------------------------------------

    def tiledb_config(self, **overrides) -> dict[str, str]:
        """The libtiledb parameters that reach this server (for --config and for a
        tiledbsoma SOMATileDBContext). Keyword overrides use '__' for '.'."""
        cfg = {
            "vfs.s3.endpoint_override": self.endpoint,
            "vfs.s3.scheme": "http",
            "vfs.s3.use_virtual_addressing": "false",
            "vfs.s3.region": REGION,
            "vfs.s3.aws_access_key_id": ACCESS_KEY,
            "vfs.s3.aws_secret_access_key": SECRET_KEY,
        }
        cfg.update({k.replace("__", "."): str(v) for k, v in overrides.items()})
        return cfg


def config_args(cfg: dict[str, str]) -> list[str]:
    """--config KEY=VALUE arguments for soma-mount."""
    out = []
    for k, v in cfg.items():
        out += ["--config", f"{k}={v}"]
    return out


def soma_context(cfg: dict[str, str]):
    """A tiledbsoma context reading through the same libtiledb configuration."""
    import tiledbsoma

    return tiledbsoma.SOMATileDBContext(tiledb_config=dict(cfg))
