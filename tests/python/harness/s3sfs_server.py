"""A local S3 server that verifies every signature, for the tests of the daemon's S3 front:
s3s-fs (the `s3s-fs` binary of the crate of that name, which `scripts/setup` installs) in a
child process on 127.0.0.1, serving a directory of its own, one bucket per subdirectory.

moto (moto_server.py) checks no signature at all; s3s-fs recomputes each request's AWS
Signature Version 4 with the one key pair it is given and refuses a request signed with
anything else (403 SignatureDoesNotMatch / InvalidAccessKeyId), so a mount that reads
through it has signed every request exactly as S3 wants, odd keys and ranges included.

Objects are plain files: `put_tree` copies a local store into the served directory (and
`keys` lists what the server says it holds, through a signed boto3 listing, so a test can
check the copy is served). With `domain` the server answers virtual-hosted-style requests
(`Host: BUCKET.DOMAIN:PORT`); it then takes any other Host for a bucket's name, so a
path-style request must name DOMAIN:PORT as its Host, and one to 127.0.0.1 fails.

    with S3sFsServer() as server:
        server.put_tree(fixtures_dir / "pbmc", "somabucket", "pbmc")
        cfg = server.tiledb_config()            # for --config and for tiledbsoma
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from harness.moto_server import REGION, _port_accepts, free_port

# The user's keys in these tests: the only pair s3s-fs accepts. Shaped like AWS's own (the
# secret with '/' and '+'), and distinctive, so a test can search files for them.
ACCESS_KEY = "AKIASOMAMOUNTUSERKEY"
SECRET_KEY = "SomaMountUser/Secret+Key0123456789abcdefG"
START_TIMEOUT = 20.0


def s3s_fs_binary() -> str | None:
    """The s3s-fs executable (on PATH, or in cargo's bin directory), None if not installed."""
    found = shutil.which("s3s-fs")
    if found:
        return found
    cargo_bin = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo")) / "bin" / "s3s-fs"
    return str(cargo_bin) if cargo_bin.is_file() else None


class S3sFsServer:
    """s3s-fs on 127.0.0.1:port serving `root` (a fresh temporary directory unless given),
    with the key pair ACCESS_KEY / SECRET_KEY, virtual-hosted-style under `domain` (e.g.
    "s3.test") if given. Always close() it (it is also a context manager)."""

    def __init__(self, root: str | os.PathLike | None = None, port: int | None = None, domain: str | None = None):
        self.port = port or free_port()
        self.domain = domain
        self._own_root = root is None
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="s3s-fs-root-"))
        self.proc: subprocess.Popen | None = None
        fd, log = tempfile.mkstemp(prefix="s3s-fs-", suffix=".log")
        os.close(fd)
        self.log = Path(log)

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def host(self) -> str:
        """The name clients reach the server by: 127.0.0.1, or the domain (virtual-hosted)."""
        return self.domain or "127.0.0.1"

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    def start(self) -> "S3sFsServer":
        binary = s3s_fs_binary()
        if binary is None:
            raise RuntimeError("s3s-fs is not installed (scripts/setup installs it)")
        args = [binary, "--host", "127.0.0.1", "--port", str(self.port),
                "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY]
        if self.domain:
            # The Host header carries the port, and s3s-fs matches it whole.
            args += ["--domain", f"{self.domain}:{self.port}"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env["RUST_LOG"] = "warn"
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen(
                [*args, str(self.root)], stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                env=env, start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while not _port_accepts(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"s3s-fs did not start on port {self.port}:\n{self.log_tail()}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        p = self.proc
        if p is not None and p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)

    def close(self) -> None:
        self.stop()
        with contextlib.suppress(OSError):
            self.log.unlink()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "S3sFsServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def log_tail(self, limit: int = 6000) -> str:
        try:
            return self.log.read_bytes()[-limit:].decode("utf-8", "replace")
        except OSError:
            return "<no log>"

    # -- content -----------------------------------------------------------------------

    def make_bucket(self, bucket: str) -> Path:
        d = self.root / bucket
        d.mkdir(parents=True, exist_ok=True)
        return d

    def put_tree(self, local_dir, bucket: str, prefix: str) -> int:
        """Copy every file under local_dir to s3://bucket/prefix/<relative path> (a plain
        copy into the served directory); returns the number of objects."""
        dest = self.make_bucket(bucket) / prefix.strip("/")
        shutil.copytree(local_dir, dest, dirs_exist_ok=True)
        return sum(len(files) for _d, _s, files in os.walk(dest))

    def client(self):
        """A boto3 client of the server, signing with its keys (addressed as the server is)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3", endpoint_url=self.url, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
            config=Config(s3={"addressing_style": "virtual" if self.domain else "path"},
                          retries={"max_attempts": 1}, connect_timeout=5, read_timeout=30),
        )

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every key under prefix, as the server lists them (all pages). (s3s-fs answers
        keys as stored even when asked for encoding-type=url; boto3 decodes them only when
        it asked for that encoding itself, so asking explicitly gets them as stored.)"""
        pages = self.client().get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix, EncodingType="url")
        return [o["Key"] for page in pages for o in page.get("Contents", [])]

    # -- libtiledb configuration -------------------------------------------------------

    def tiledb_config(self, **overrides) -> dict[str, str]:
        """The libtiledb parameters that reach this server with its keys (for --config and
        for a tiledbsoma SOMATileDBContext). Keyword overrides use '__' for '.'; an
        override of None drops the parameter."""
        cfg = {
            "vfs.s3.endpoint_override": self.endpoint,
            "vfs.s3.scheme": "http",
            "vfs.s3.use_virtual_addressing": "true" if self.domain else "false",
            "vfs.s3.region": REGION,
            "vfs.s3.aws_access_key_id": ACCESS_KEY,
            "vfs.s3.aws_secret_access_key": SECRET_KEY,
        }
        for k, v in overrides.items():
            k = k.replace("__", ".")
            if v is None:
                cfg.pop(k, None)
            else:
                cfg[k] = str(v)
        return cfg


def local_files(local_dir) -> list[str]:
    """The relative paths of the files under local_dir, '/'-separated (what put_tree makes
    into keys under its prefix)."""
    root = Path(local_dir)
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
