"""Where the daemon and the fixtures are, and how long a test waits: read from the environment.

  SOMA_MOUNT_BIN          the daemon binary (default: <repo>/target/release/soma-mount)
  SOMA_FIXTURES           the fixtures directory (default: <repo>/fixtures)
  SOMA_TEST_TIME_MARGIN   the factor each time bound the contract states is checked with
                          (default 3), so that a slow or busy machine does not fail them
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
# How long the daemon has to mount, and to exit once unmounted.
MOUNT_TIMEOUT = 15.0
EXIT_TIMEOUT = 10.0
# Times the contract states ("head answers within a second") are checked with a margin: CI
# shares two cores with everything it runs.
TIME_MARGIN = float(os.environ.get("SOMA_TEST_TIME_MARGIN", "3"))


def within(seconds: float) -> float:
    """A stated time bound, with the margin for slow machines."""
    return seconds * TIME_MARGIN


def binary_path() -> Path:
    """The daemon binary: SOMA_MOUNT_BIN, else the release build."""
    env = os.environ.get("SOMA_MOUNT_BIN")
    return Path(env).resolve() if env else REPO / "target" / "release" / "soma-mount"


def fixtures_path() -> Path:
    """The fixtures directory: SOMA_FIXTURES, else <repo>/fixtures."""
    env = os.environ.get("SOMA_FIXTURES")
    return Path(env).resolve() if env else REPO / "fixtures"
