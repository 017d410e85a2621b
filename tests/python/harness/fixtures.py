"""The fixture stores: built by scripts/make-fixtures.py (which runs
scripts/make-fixture-v1.py with .venv-old's Python for the encoding-1.0.0 store) when the
directory is missing or was built by other versions of those scripts.
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from harness.settings import REPO, fixtures_path

MAKE_FIXTURES = REPO / "scripts" / "make-fixtures.py"
MAKE_FIXTURE_V1 = REPO / "scripts" / "make-fixture-v1.py"
STORES = ("hand", "pbmc", "scene", "big", "v1", "legacy")
STAMP = ".fixtures-stamp"


def script_hash() -> str:
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
    stale = stamp.exists() and stamp.read_text().strip() != script_hash()
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


def make_fixtures_module() -> ModuleType:
    """scripts/make-fixtures.py as a module (loaded once), for the values it writes."""
    mod = sys.modules.get("make_fixtures")
    if mod is None:
        spec = importlib.util.spec_from_file_location("make_fixtures", MAKE_FIXTURES)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules["make_fixtures"] = mod
    return mod
