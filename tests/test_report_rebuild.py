"""A rebuild after one sweep changed reruns only what reads it: apart from tests/test_report.py, so that its half
minute runs beside that module's tests rather than after them."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from harness.article import build as report
from tiny_report import TINY_PARAMS, build_tiny_report


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_report()


@pytest.mark.slow
@pytest.mark.long  # about half a minute: handed out first of the groups that read the tiny build
def test_changing_one_sweep_reruns_only_what_reads_it(tiny, tmp_path):
    params = yaml.safe_load(TINY_PARAMS.read_text())
    params["slow_race"]["pause_ms"] = params["slow_race"]["pause_ms"] + 1
    changed = tmp_path / "changed.yml"
    changed.write_text(yaml.safe_dump(params))
    report_dir = tmp_path / "report"
    shutil.copytree(tiny.report_dir, report_dir)
    report.build(changed, tiny.data_dir, report_dir, progress=False)
    timings = json.loads((report_dir / "build-timings.json").read_text())["phases"]
    assert timings["slow_race"]["runs_made"] == len(params["slow_race"]["strategies"])
    assert timings["races"]["runs_made"] == 0
    assert timings["notebooks"]["executed"] == [report.ARTICLE], "only the article reads the slowed-down race"
