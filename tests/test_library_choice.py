"""The table a reader picks a library from (harness.article.sections.library_choice): the wait for a dead worker's
job, per outcome it can say, on synthetic fault runs; the table itself on the tiny store is in tests/test_report.py's
page."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.article.formats import DASH
from harness.article.sections import library_choice as choice


def kills(recovery_s=(2.8, 3.0), stuck=0, failed=0, fault="kill", landed=True) -> pd.DataFrame:
    return pd.DataFrame([{"fault": fault, "fault_landed": landed, "recovery_s": r, "stuck": stuck, "lost": 0,
                          "failed": failed} for r in recovery_s])


@pytest.mark.parametrize("runs, recovery, said", [
    (kills(), {"default_s": 30.0, "raced_s": 2.0}, "about 31 s (its default, plus what the runs took past their setting)"),
    (kills((4.0,)), {"default_s": 3600.0, "raced_s": 3.0}, "about 60 min (its default, plus what the runs took past their setting)"),
    (kills((float("nan"),), stuck=1), {"default_s": 14400.0, "raced_s": 14400.0},
     "4 h (its default, read in its source; longer than a run here)"),
    (kills((float("nan"),), stuck=1), {"default_s": None, "raced_s": None}, "never (stuck; observed)"),
    (kills((1.0,)), {"default_s": None, "raced_s": None}, "about 1 s (nothing to set; observed)"),
    (kills((float("nan"),), failed=1), {"default_s": 300.0, "raced_s": 5.0}, "never (failed for good; observed)"),
    (kills((3.3,)), {"default_s": None, "raced_s": 3.0, "off_by_default": True, "setting": "rescue_after"},
     "never until rescue_after is set (off by default, read in its source)"),
    (kills((2.0,)), {"default_s": 14400.0, "raced_s": 1.0, "after_declared_dead_s": 2.0},
     "about 3 s after you declare the worker dead (plus what the runs took past their setting)"),
    (kills(fault="pause"), {"default_s": 30.0, "raced_s": 2.0}, DASH),  # no worker killed
    (kills(landed=False), {"default_s": 30.0, "raced_s": 2.0}, DASH),  # the kill did not land
])
def test_a_dead_worker_s_wait_is_read_from_the_runs_and_the_setting_s_default(runs, recovery, said):
    assert choice.dead_worker_wait(runs, recovery) == said


def test_in_production_the_wait_is_the_production_runs_where_they_ran_else_the_declared_default():
    raced = kills((3.2,)).assign(library="procrastinate")
    assert choice.production_wait("procrastinate", raced).endswith("(its default, plus what the runs took past their setting)")
    assert choice.production_wait("procrastinate", None).endswith(
        "(its production default, as its docs give it; no fault run under it here)")
    assert choice.production_wait("graphile_worker", None) == \
        "about 2 s after you declare the worker dead (read in its source; no fault run under it here)"
    assert choice.production_wait("river", None) == \
        "up to 39 s at the least it accepts (read in its source; no fault run under it here)"
    assert choice.production_wait("river", kills((21.0,)).assign(library="river")) == \
        "about 21 s at the least it accepts (observed)"
    assert choice.production_wait("pgmq", None) == DASH  # its docs give no production setting beyond the defaults


@pytest.mark.parametrize("seconds, said", [(30.4, "30 s"), (150.0, "2.5 min"), (3604.0, "60 min"), (14400.0, "4 h"),
                                           (9000.0, "2.5 h")])
def test_a_wait_is_said_as_a_reader_plans_for_it(seconds, said):
    assert choice.about(seconds) == said
