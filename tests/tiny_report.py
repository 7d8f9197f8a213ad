"""One tiny `make report` per test session, shared by the notebook, chart and report tests.

notebooks/params/tiny.yml (300 jobs, workers 1 and 4, small plans, churn and
bench) runs every harness phase and executes every notebook under papermill,
against the embedded PostgreSQL, in under a minute on a quiet 2-core machine.
"""

from __future__ import annotations

import functools
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
    import atexit
    import json
    import shutil

    root = Path(tempfile.mkdtemp(prefix="claimrace-tiny-report-"))
    atexit.register(shutil.rmtree, root, True)
    data_dir, report_dir = root / "data", root / "report"
    html = report.build(TINY_PARAMS, data_dir, report_dir, progress=False)
    timings = json.loads((report_dir / "build-timings.json").read_text())
    return TinyBuild(root, data_dir, report_dir, html, timings)
