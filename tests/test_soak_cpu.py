"""The soak's CPU mark on a real run (harness.experiments.soak.outcomes.cpu_mark): alone on the machine, a soak at a
light load until one process more than its CPUs spins, then marked from when they began and not before, and the
page says so beside its verdict (the mark's rule on synthetic samples is tests/test_soak_rule.py's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from conftest import PROJECT_ROOT, cpu_spinners, forked_workers
from harness.article.sections import soak_arms
from harness.experiments.soak import outcomes as rule
from harness.storage import Run

RATE = 40
# the run's clock starts a second after its arrivals and workers are forked (measure.measure), once its server is
# up: the spinners start SPIN_AT_S after that, a second into the hold, and the run's stored arrivals say when that
# was on its own clock
SPIN_AT_S = 11.0
SPINNERS = (os.cpu_count() or 2) + 1  # one more than the CPUs, so that every CPU is busy whatever else runs


@pytest.mark.serial  # the machine's CPUs, whoever uses them: nothing else may run beside it
def test_a_soak_is_marked_from_when_its_machine_s_cpus_filled_and_not_before(tmp_path):
    command = [sys.executable, "-m", "harness", "soak", "--holder", "none", "--shape", "delete", "--rate", str(RATE),
               "--workers", "2", "--seconds", "22", "--pin-from", "10", "--pin-to", "20", "--json", "--quiet",
               "--data-dir", str(tmp_path)]
    with subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as soak:
        try:
            harness, deadline = psutil.Process(soak.pid), time.monotonic() + 60
            while len(forked_workers(harness)) < 3 and time.monotonic() < deadline:  # the arrivals and two workers
                time.sleep(0.05)
            time.sleep(1.0 + SPIN_AT_S)
            spun_ns = time.time_ns()
            with cpu_spinners(SPINNERS):
                out, err = soak.communicate(timeout=120)
        finally:
            if soak.poll() is None:
                soak.kill()
    assert soak.returncode == 0, err[-3000:]
    row, stored = json.loads(out), Run(next((tmp_path / "soak").iterdir()))
    # the run's start on the wall clock: its first arrival was due a rate's interval after it
    started_ns = int(stored.table("arrivals")["due_ns"].min()) - int(1e9 / RATE)
    spun_s = (spun_ns - started_ns) / 1e9
    assert row["pin_from"] < spun_s < row["pin_from"] + row["pin_s"] - rule.CPU_BUSY_RUN_S - 2, (spun_s, row)
    # marked from the first whole second of spinning, at most two samples after they began: not before
    assert row["cpu_measured"] and row["cpu_bound_from_s"] is not None, row
    assert spun_s - 1 <= row["pin_from"] + row["cpu_bound_from_s"] <= spun_s + 2.5, (spun_s, row)
    assert row["cpu_busy_before"] < rule.CPU_BUSY_SHARE, row  # the seconds before the hold: nothing spinning
    # the page reads the mark again from the stored samples, and says it beside the verdict and in the caption
    loaded = soak_arms.load_runs([stored])
    said = soak_arms.verdict_text(loaded.summaries.iloc[0])
    marked = row["cpu_bound_from_s"]
    where = "from before the hold" if marked < 0 else f"from {marked:.0f} s into the hold"
    assert said.endswith(f"; CPUs full ({where})"), said
    assert "CPUs full: this machine's CPUs were busy 90%" in soak_arms.cpu_note(loaded.summaries)
