"""One tiny `make report` per test session, shared by the notebook, chart and report tests.

notebooks/params/tiny.yml (300 jobs, workers 1 and 4, small plans, churn and
bench) runs every harness phase and executes every notebook under papermill,
against the embedded PostgreSQL: about six minutes on a quiet 2-core machine in one
process (2026-12-06: 344 s). Under the suite it is every test's critical path, so its
sections are measured in four processes at once (BESIDE), and then built as `make
report` builds: the build finds the runs stored and executes the notebooks and the page.
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


# The sections measured each by a process of their own beside this one, at once: the build's measuring alone on a
# quiet machine is some 310 s (2026-12-06), mostly spent waiting on sleeps and servers, and these groups hold about
# 80 s each. A kind's sections stay in one group, so that no run is made twice. The build itself then finds every
# run stored and runs what it always runs: every section's lookup, the notebooks and the page.
BESIDE = (("production", "faults"), ("soak", "soak_pg18", "library_soak"),
          ("libraries", "library_faults", "library_probe", "library_poolers"))
_MEASURE = """
import json, sys
from pathlib import Path
from harness import children
from harness.article import build
from harness.experiments import registry
children.die_with_parent(int(sys.argv[4]))
timings = build.Timings()
build.ensure_data(registry.load_params(Path(sys.argv[1])), Path(sys.argv[2]), timings, progress=False,
                  sections=sys.argv[3].split(","))
print(json.dumps(timings.as_dict()["phases"]))
"""


def _build(root: Path) -> TinyBuild:
    """Measure the sections in several processes at once (BESIDE), then build: the build's timings are the
    measuring's, each section's where it was measured, and the build's own for the notebooks and the page."""
    import subprocess
    import sys

    from harness.experiments import registry

    data_dir, report_dir = root / "data", root / "report"
    groups = [[section for section in registry.SECTIONS if section in group] for group in BESIDE]
    here = [section for section in registry.SECTIONS if not any(section in group for group in BESIDE)]
    others = [subprocess.Popen([sys.executable, "-c", _MEASURE, str(TINY_PARAMS), str(data_dir), ",".join(group),
                                str(os.getpid())], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for group in groups]
    measured = {}
    try:
        timings = report.Timings()
        report.ensure_data(registry.load_params(TINY_PARAMS), data_dir, timings, progress=False, sections=here)
        measured |= timings.as_dict()["phases"]
        for group, other in zip(groups, others):
            out, err = other.communicate()
            assert other.returncode == 0, f"measuring {', '.join(group)} failed: {err[-3000:]}"
            measured |= json.loads(out.strip().splitlines()[-1])
    finally:
        for other in others:
            if other.poll() is None:
                other.kill()
                other.wait()
    report.build(TINY_PARAMS, data_dir, report_dir, progress=False)
    built = json.loads((report_dir / "build-timings.json").read_text())
    built["phases"] = {name: measured.get(name, entry) for name, entry in built["phases"].items()}
    (root / FIRST_TIMINGS).write_text(json.dumps(built, indent=2) + "\n")
    return _read(root)


def _read(root: Path) -> TinyBuild:
    report_dir = root / "report"
    return TinyBuild(root, root / "data", report_dir, report_dir / "index.html",
                     json.loads((root / FIRST_TIMINGS).read_text()))
