"""One tiny `make report` per test session, shared by the notebook, chart and report tests.

notebooks/params/tiny.yml (300 jobs, workers 1 and 4, small plans, churn and
bench) runs every harness phase and executes every notebook under papermill,
against the embedded PostgreSQL, in about four and a half minutes on a quiet 2-core machine.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness import config
from harness.article import build as report

TINY_PARAMS = config.NOTEBOOK_DIR / "params" / "tiny.yml"


@dataclass(frozen=True)
class TinyBuild:
    root: Path
    data_dir: Path
    report_dir: Path
    html: Path
    timings: dict


@functools.lru_cache(maxsize=1)  # test modules import the fixture separately; the build happens once
def build_tiny_report() -> TinyBuild:
    """The build, made once per test session. Under `make test` the worker processes share one: the first to ask
    builds it in the session's folder while the others wait for it, and every worker reads the same files."""
    import atexit
    import fcntl
    import shutil

    from conftest import LOCK_DIR_VARIABLE

    shared = os.environ.get(LOCK_DIR_VARIABLE)
    if not shared:
        root = Path(tempfile.mkdtemp(prefix="claimrace-tiny-report-"))
        atexit.register(shutil.rmtree, root, True)
        return _build(root)
    root = Path(shared) / "tiny-report"
    with open(Path(shared) / "tiny-report.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when this process dies
        if not (root / BUILT).exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            _build(root)
            (root / BUILT).write_text("")
    return _read(root)


BUILT = "built"  # written once the shared build is whole
FIRST_TIMINGS = "first-build-timings.json"  # the first build's timings: tests rebuild into the same folder


def _build(root: Path) -> TinyBuild:
    data_dir, report_dir = root / "data", root / "report"
    report.build(TINY_PARAMS, data_dir, report_dir, progress=False)
    (root / FIRST_TIMINGS).write_bytes((report_dir / "build-timings.json").read_bytes())
    return _read(root)


def _read(root: Path) -> TinyBuild:
    report_dir = root / "report"
    return TinyBuild(root, root / "data", report_dir, report_dir / "index.html",
                     json.loads((root / FIRST_TIMINGS).read_text()))
