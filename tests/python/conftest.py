"""pytest's fixtures and hooks for soma-mount's integration tests, built on `harness`.

Environment (see harness/settings.py):
  SOMA_MOUNT_BIN  the daemon binary (default: <repo>/target/release/soma-mount)
  SOMA_FIXTURES   the fixtures directory (default: <repo>/fixtures); built with
                  scripts/make-fixtures.py once per session if it does not exist.

Every mount goes through `harness.mount.mount_guard` (also the `mount` fixture), which
always unmounts and reaps the daemon, so no test leaves a stale mount behind. A failed
test's report holds the stderr of every daemon started during it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.fixtures import ensure_fixtures
from harness.mount import DAEMON_LOGS, lazy_mounts, mount_guard, tail, unmount_everything
from harness.settings import binary_path

# Nothing the tests start probes EC2's instance metadata (a link-local address, not this
# machine): the AWS SDK's credential chain, in the daemon and in libtiledb, asks it last.
# A test of that source points AWS_EC2_METADATA_SERVICE_ENDPOINT at a fake on loopback.
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")


# --------------------------------------------------------------------------------------
# hooks: the daemons' logs in a failed test's report, nothing mounted after the session


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    DAEMON_LOGS.test.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        seen = set()
        logs = [(label, path, 16000) for label, path in DAEMON_LOGS.test]
        logs += [(label, path, 6000) for label, path in DAEMON_LOGS.session]
        for label, path, limit in logs:
            if path in seen:
                continue
            seen.add(path)
            rep.sections.append((f"soma-mount stderr: {label}", tail(path, limit)))


def pytest_sessionfinish(session, exitstatus):
    # Last resort: nothing we mounted may survive the session.
    unmount_everything()
    # Daemon logs are kept only when something failed (their tails are in the report).
    if exitstatus == 0:
        DAEMON_LOGS.remove()


# --------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return ensure_fixtures()


@pytest.fixture(scope="session")
def soma_mount_bin() -> Path:
    b = binary_path()
    if not (b.is_file() and os.access(b, os.X_OK)):
        pytest.fail(f"soma-mount binary not found at {b} (build it, or set SOMA_MOUNT_BIN)")
    return b


@pytest.fixture
def mount():
    """`with mount(uri, *extra_args) as path:` -- see harness.mount.mount_guard."""
    return mount_guard


@pytest.fixture(scope="session")
def mounted(fixtures_dir, soma_mount_bin):
    """Session-wide read-only mounts of the fixture stores: mounted(name) -> path.

    Lazily mounted on first use, unmounted at the end of the session."""
    with lazy_mounts(fixtures_dir, lambda name: f"session mount of {name}") as get:
        yield get


@pytest.fixture(scope="module")
def mounts(request, fixtures_dir, soma_mount_bin):
    """mounts(store) -> mountpoint: one daemon per fixture store for the module, mounted
    on first use and unmounted when the module's tests are done (a module's daemons start
    with an empty cache, whatever other modules generated)."""
    module = request.module.__name__
    with lazy_mounts(fixtures_dir, lambda store: f"{store} ({module})") as get:
        yield get
