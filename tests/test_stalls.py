"""A stall shorter than the recovery (--fault stall): a worker frozen with its connections kept, a chosen time into
its job for a chosen time, against what its library's heartbeat schedule (its STALL) predicts; the rule with each
outcome, real runs of PgQueuer on both sides of the line, a misread schedule the runs contradict, and refusals."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import handed, run_cli
from harness import libraries
from harness.article import contents
from harness.article.sections import stalls as stall_section
from harness.errors import UserError
from harness.experiments import registry
from harness.experiments.libraries import drain as library_runs
from harness.experiments.libraries import outcomes
from harness.storage import Run


@pytest.mark.parametrize("age, stall, expected", [
    (2.5, 0.0, False),  # nothing stalled: the beat at 3 s is written by 4 s, before 6 s
    (2.5, 1.5, False),  # queued at 4 s once resumed, written by 5 s
    (0.5, 4.0, False),  # longer than half the setting, begun early in the beat: written by 5.5 s
    (2.5, 5.0, True),  # queued at 7.5 s: stale from 6 s, a whole wait and more before it can be written
    (2.5, 3.0, None),  # queued at 5.5 s: written before 6 s or after, either can happen
    (2.5, 2.4, None),  # written by 5.9 s: within the margin of the setting
])
def test_the_schedule_predicts_kept_handed_on_or_nothing(age, stall, expected):
    """PgQueuer's schedule as raced: heartbeat_timeout 6 s, a beat every 3 s, written within 1 s."""
    assert outcomes.predicted_handed_on(age, stall, 6.0, 3.0, 1.0) is expected


def test_the_longest_stall_kept_wherever_it_begins_is_the_setting_less_a_beat_and_the_wait():
    assert outcomes.longest_safe_stall_s(6.0, 0.5, 1.0) == 2.0
    assert outcomes.longest_safe_stall_s(30.0, 0.5, 1.0) == 14.0  # PgQueuer's default heartbeat_timeout
    assert outcomes.longest_safe_stall_s(2.0, 0.5, 1.0) == 0.0  # the fault runs' 2 s: not even no stall


@pytest.mark.parametrize("runs, expected", [
    ([(False, False)] * 5 + [(True, True)] * 3, outcomes.BORNE_OUT),  # 0 to 43 % against 44 to 100 %: apart
    ([(False, False)] * 5 + [(None, True)] + [(True, True)] * 3, outcomes.BORNE_OUT),  # at the line: not counted
    ([(False, False)] * 4 + [(True, True)] * 3, outcomes.TOO_FEW),  # 0 to 49 % against 44 to 100 %: they overlap
    ([(False, False), (True, True)], outcomes.TOO_FEW),  # one run a side: 0 to 79 % against 21 to 100 %
    ([(False, True), (True, True)], outcomes.CONTRADICTED),
    ([(True, False)], outcomes.CONTRADICTED),
    ([(False, False), (False, False)], outcomes.ONE_SIDE),
    ([(True, True)], outcomes.ONE_SIDE),
    ([(None, True)], outcomes.NOT_MEASURED),
    ([], outcomes.NOT_MEASURED),
])
def test_each_outcome_of_the_rule_against_the_runs(runs, expected):
    assert outcomes.stall_outcome(runs) == expected


def _stall_runs(tmp_path, stalls: str) -> dict:
    done = run_cli("libraries", "--library", "pgqueuer", "--fault", "stall", "--stall", stalls, "--workers", "3",
                   "--jobs", "3", "--json", "--quiet", "--data-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    return {f"{row['stall_s']:g}@{row['stall_at_s']:g}": row for row in map(json.loads, done.stdout.splitlines())}


def test_pgqueuer_hands_a_stalled_job_on_where_its_heartbeat_schedule_says_and_only_there(tmp_path):
    """heartbeat_timeout 6 s, a beat every 3 s written within 1 s: 4 s from 0.5 s into the job keeps it (the beat,
    queued at 4.5 s, is written by 5.5 s); 5 s from 2.5 s hands it on, though shorter than the setting (queued at
    7.5 s: stale from 6 s); the control stops nothing. The page reads them."""
    rows = _stall_runs(tmp_path, "0@2.5,4@0.5,5@2.5")
    control, early, late = rows["0@2.5"], rows["4@0.5"], rows["5@2.5"]
    for row in rows.values():
        assert row["fault_landed"] and row["recovery_setting_s"] == 6.0 and row["stall_beat_s"] == 3.0, row
        assert row["stall_at_s"] <= row["stall_hold_age_s"] <= row["stall_at_s"] + 0.2, row
    assert control["fault_effects"] == {"stall_control": 1} and not control["stall_handed_on"], control
    assert (early["stall_predicted_handed_on"], early["stall_handed_on"]) == (False, False), early
    assert (late["stall_predicted_handed_on"], late["stall_handed_on"]) == (True, True), late
    assert late["executed_twice"] >= 1 and late["fault_effects"]["process_stopped_s"] >= 5, late
    loaded = contents.load(handed("library_stalls", sorted((tmp_path / "libraries").iterdir())))
    mine = loaded[stall_section.NAME]
    # two runs kept and one handed on agree with the schedule, but 0 to 66 % and 21 to 100 % overlap
    assert stall_section.outcome(mine.summaries, "pgqueuer") == outcomes.TOO_FEW
    said = stall_section.values(loaded, {})["st_said"]
    assert "only a stall shorter than 2.0 s is kept wherever it begins" in said, said
    assert said.startswith("Set `heartbeat_timeout` above 2.0 times the longest stall") and "plus 2.0 s" in said
    assert "psycopg.py:114-115" in said
    assert "no stall (the control) at 2.5 s into the job, 0 of 1 runs" in said and "too few to tell" in said, said
    shown = stall_section.stall_table(loaded)
    assert shown.count("<tr>") == 4 and "5.0 s" in shown and "none (the control)" in shown, shown


def test_a_misread_schedule_is_contradicted_by_the_runs(db, tmp_path, monkeypatch):
    """Declared as a beat every 9 s (a misreading), the 4 s stall 0.5 s into the job is predicted to hand the job
    on: PgQueuer's own beat, every 3 s, keeps it, and the page says the runs and the source disagree."""
    pgqueuer = libraries.get("pgqueuer")
    monkeypatch.setattr(pgqueuer, "STALL", {**pgqueuer.STALL, "beat_share": 1.5})
    [run] = registry.measure("libraries", library_runs.LibraryParameters(
        "pgqueuer", 3, 3, fault="stall", stall="4@0.5"), tmp_path, db, progress=False)
    summary = Run(run).summary
    assert (summary["stall_predicted_handed_on"], summary["stall_handed_on"]) == (True, False), summary
    frame = pd.DataFrame([summary])
    assert stall_section.outcome(frame, "pgqueuer") == outcomes.CONTRADICTED
    assert "the runs and the source disagree" in stall_section.library_said(frame, "pgqueuer")


@pytest.mark.parametrize("asked, said", [
    (dict(fault="stall"), "a stall run takes --fault stall and --stall SECONDS@OFFSET"),
    (dict(fault="kill", stall="1@0.5"), "a stall run takes --fault stall and --stall SECONDS@OFFSET"),
    (dict(fault="stall", stall="1.5"), "a stall is SECONDS@OFFSET"),
    (dict(fault="stall", stall="11@0.5"), "a stall lasts 0 to 10 s and begins 0 to 3 s into its 4 s job"),
    (dict(fault="stall", stall="1@3.5"), "a stall lasts 0 to 10 s and begins 0 to 3 s into its 4 s job"),
    (dict(library="pgmq", fault="stall", stall="1@0.5"), "pgmq declares no heartbeat schedule to stall against"),
    (dict(fault="stall", stall="2@3"), "begins within its job's first beat, before 3 s"),
])
def test_a_stall_the_run_cannot_make_is_one_line(asked, said):
    with pytest.raises(UserError, match=said.replace("(", r"\(")):
        library_runs.LibraryParameters(**({"library": "pgqueuer", "worker_count": 3, "job_count": 3} | asked))


def test_the_command_refuses_a_stall_without_its_fault_in_one_line(tmp_path):
    done = run_cli("libraries", "--library", "pgqueuer", "--stall", "1@0.5", "--data-dir", str(tmp_path))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "--fault stall takes --stall" in done.stderr and not (tmp_path / "libraries").exists()


def test_without_runs_the_page_says_so():
    assert stall_section.values({}, {}) == {"st_said": "No stall was raced in this build."}
