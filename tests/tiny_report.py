"""One tiny `make report` per test session, shared by the notebook, chart and report tests.

notebooks/params/tiny.yml (300 jobs, workers 1 and 4, small plans, churn and
bench) runs every harness phase and executes every notebook under papermill,
against the embedded PostgreSQL: 135 s alone on a quiet 2-core machine in its lanes
(2026-12-07), most of it waiting (a fault's lease, a soak's hold).

Every later test that reads the page waits for it, so the test build makes its
runs in four lanes side by side: the sections of each of LANES (those that
mostly wait, and the libraries' drains) in a child process with its own servers
and data folder, and the rest here; their runs then join one data folder, and the
build proper finds every run stored and executes the notebooks and renders the
page, as `make report` does. Its timings give each section's making as the lane
that made it timed it.
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


# the sections made in lanes of their own, beside the rest (the sections took 296 s one after another, 2026-12-06):
# the wait-heavy ones (faults 66 s, soak 53, the libraries' soak 22, wake-ups 18, the production service 21, the
# libraries' faults 22 and stalls 15) and the libraries' drains (42) in three lanes of 83 to 94 s each, longer than
# what is left here (63 s): alone, 135 s for the build where two lanes took 172 s (2026-12-07). Each lane begins
# with what mostly waits, so the races made here first are not beside a drain or a soak's sustained-rate pass. The
# races' 4-worker points were CPU-bound either way, alone (the report test reads the page with that in mind)
LANES = (("faults", "library_probe", "production"), ("library_stalls", "library_faults", "libraries"),
         ("wakeups", "soak", "library_soak"))
BESIDE = tuple(section for lane in LANES for section in lane)


def make_sections(data_dir: Path, sections) -> dict:
    """The tiny params' runs of `sections` made in data_dir, each timed as a build times it: {section: entry}."""
    from harness.experiments import registry

    timings = report.Timings()
    report.ensure_data(registry.load_params(TINY_PARAMS), data_dir, timings, progress=False, sections=sections)
    return timings.phases


def _lane(parent: int, data_dir: str, sections: tuple[str, ...]) -> None:
    """A lane beside the build, run in a child: its sections' runs, their timings printed as JSON."""
    from harness.children import die_with_parent

    die_with_parent(parent)
    print(json.dumps(make_sections(Path(data_dir), sections)))


def _build(root: Path) -> TinyBuild:
    import shutil
    import subprocess
    import sys

    from harness.experiments import registry

    data_dir, report_dir = root / "data", root / "report"
    lanes = []
    for number, sections in enumerate(LANES):
        folder = root / f"lane-{number}"
        out, err = root / f"lane-{number}.out", root / f"lane-{number}.err"  # files: nobody reads a pipe meanwhile
        with open(out, "w") as stdout, open(err, "w") as stderr:
            lanes.append((folder, out, err, subprocess.Popen(
                [sys.executable, "-c", f"import tiny_report; tiny_report._lane({os.getpid()}, {str(folder)!r}, "
                                       f"{sections!r})"], cwd=Path(__file__).parent, stdout=stdout, stderr=stderr)))
    try:
        made = make_sections(data_dir, [s for s in registry.SECTIONS if s not in BESIDE])
        for *_, lane in lanes:
            lane.wait(timeout=1800)
    finally:
        for *_, lane in lanes:
            if lane.poll() is None:
                lane.kill()
                lane.wait(30)
    for folder, out, err, lane in lanes:
        if lane.returncode != 0:
            raise RuntimeError(f"a lane of the tiny build failed: {err.read_text()[-3000:]}")
        made |= json.loads(out.read_text().strip().splitlines()[-1])
        for run in sorted(folder.glob("*/*")):  # its runs join the data folder, kind by kind
            (data_dir / run.parent.name).mkdir(parents=True, exist_ok=True)
            shutil.move(str(run), str(data_dir / run.parent.name / run.name))
    report.build(TINY_PARAMS, data_dir, report_dir, progress=False)
    timings = json.loads((report_dir / "build-timings.json").read_text())
    timings["phases"] |= {section: made[section] for section in registry.SECTIONS}
    timings["lanes"] = [list(lane) for lane in LANES]
    (root / FIRST_TIMINGS).write_text(json.dumps(timings, indent=2) + "\n")
    return _read(root)


def _read(root: Path) -> TinyBuild:
    report_dir = root / "report"
    return TinyBuild(root, root / "data", report_dir, report_dir / "index.html",
                     json.loads((root / FIRST_TIMINGS).read_text()))
