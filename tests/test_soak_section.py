"""The soak section's rules on synthetic runs, one per outcome: which arm each arm is read against, the held arm
that fared worst, how a run not judged reads, and C9 per part (the stored runs' path is in tests/test_soak.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.article.findings import (CONFIRMED, CONFIRMED_IN_PART, CORRECTED, NOT_DISTINGUISHABLE, NOT_MEASURED,
                                      NOT_REPRODUCED)
from harness.article.sections import soak as section, soak_arms

BASE = {"shape": "history", "strategy": "skip_locked", "history_rows": 0, "holder": "none", "mitigation": "none",
        "storage": "tmpfs", "synchronous_commit": "on", "rate_asked": "50%", "workers": 4, "job_ms": 5.0,
        "pg_version": 16, "sustained_rate": 700.0, "jobs_arrived": 10_000, "verdict": "held_without_failing",
        "verdict_if_judged": "held_without_failing", "backlog_max": 3, "cpu_bound": False, "seconds": 70.0,
        "pin_from": 20.0, "pin_to": 40.0, "pin_s": 20.0, "held_s": 20.0, "hold_asked": 20.0,
        "hold_until_failure": False, "seconds_to_slow": None, "seconds_to_fall_behind": None, "recovered_s": None,
        "claim_level_ms": 0.5, "claim_p99_ms_during": 1.0, "dead_tuples_max": 100, "unremovable_at_fall_behind": None,
        "ended_s": 70.0, "repeat": 0, "rate": 350.0, "mitigation_setting": None, "observed_s": None,
        "seconds_to_slow_in_run": None, "seconds_to_fall_behind_in_run": None, "analytics_s": 20.0,
        "analytics_sessions": 2}
SLOWED = {"holder": "repeatable_read", "verdict": "slowed", "verdict_if_judged": "slowed", "seconds_to_slow": 3.0}
BEHIND = SLOWED | {"verdict": "fell_behind", "verdict_if_judged": "fell_behind", "seconds_to_fall_behind": 6.0,
                   "recovered_s": 12.0}
HELD = {"holder": "repeatable_read"}


def runs(*arms: dict) -> pd.DataFrame:
    return pd.DataFrame([BASE | arm for arm in arms])


def seconds(p50s) -> pd.DataFrame:
    """A run's series whose claim p50 is `p50s` from the warm-up on."""
    p50s = list(p50s)
    warm = int(section.soak_outcomes.WARMUP_S)
    values = [np.nan] * warm + p50s
    return pd.DataFrame({"second": np.arange(len(values), dtype=float), "claim_p50_ms": values,
                         "arrived": 100})


def loaded(frame: pd.DataFrame, series: dict) -> section.Loaded:
    return section.Loaded((), frame, series, {}, {})


def test_each_arm_is_read_against_the_arm_that_differs_in_one_setting():
    frame = runs({}, {"holder": "repeatable_read"}, {"holder": "repeatable_read", "mitigation": "idle_timeout"},
                 {"holder": "repeatable_read", "storage": "disk"}, {"holder": "repeatable_read", "workers": 8},
                 {"shape": "delete", "holder": "repeatable_read"},
                 {"holder": "repeatable_read", "storage": "disk", "synchronous_commit": "off"},
                 {"holder": "repeatable_read", "repeat": 1}, {"holder": "repeatable_read", "hold_asked": 30.0},
                 {"holder": "repeatable_read", "storage": "not known (a server not started here)"})
    assert section.reference(frame, 0) is None  # a control is read against nothing
    assert section.reference(frame, 1) == 0  # held: its control
    assert section.reference(frame, 2) == 1  # mitigated: the same arm without it
    assert section.reference(frame, 3) == 1  # on disk: the same arm off it
    assert section.reference(frame, 4) is None  # another load has no control stored
    assert section.reference(frame, 5) is None  # another shape neither
    assert section.reference(frame, 6) == 3  # commits off: the same arm on the disk with them on
    assert section.reference(frame, 7) is None  # a repeat against its own control's repeat
    assert section.reference(frame, 8) is None  # judged on other windows
    assert section.reference(frame, 9) is None  # a server's own storage: its control would be there too
    assert soak_arms.control_of(frame, 6) == 0


def test_a_held_arm_on_a_disk_is_read_against_its_control_on_the_disk_where_one_is_stored():
    frame = runs({}, HELD, {"storage": "disk"}, HELD | {"storage": "disk"},
                 HELD | {"storage": "disk", "synchronous_commit": "off"})
    assert section.reference(frame, 3) == 2 and soak_arms.control_of(frame, 3) == 2  # the hold's part on the disk
    assert section.reference(frame, 2) == 0  # the disk's control against the one off it
    assert section.reference(frame, 4) == 3  # commits off: the same held arm with them on
    without = frame.drop(index=2).reset_index(drop=True)  # no control on the disk: the held arm off it
    assert section.reference(without, 2) == 1 and soak_arms.control_of(without, 2) == 0


def test_an_analytics_arm_of_its_own_length_and_sessions_is_its_own_arm_read_against_the_plain_control():
    case = {"holder": "analytics", "analytics_s": 120.0, "analytics_sessions": 3}  # PlanetScale's
    frame = runs({}, {"holder": "analytics"}, case, case | {"mitigation": "one_analytics"},
                 {"holder": "analytics", "mitigation": "one_analytics"})
    assert section.reference(frame, 1) == 0 and section.reference(frame, 2) == 0  # nothing held: no statements
    assert section.reference(frame, 3) == 2 and section.reference(frame, 4) == 1  # each fix against its own case
    assert soak_arms.arm_key(frame.iloc[1]) != soak_arms.arm_key(frame.iloc[2])
    assert soak_arms.held_label(frame.iloc[1]) == "analytics"  # the defaults (a run stored before the settings)
    assert soak_arms.held_label(frame.iloc[2]) == "analytics, 3 sessions of 120 s statements"
    assert soak_arms.held_label(frame.iloc[3]) == "analytics, 3 sessions of 120 s statements, one analytics"
    one = frame.iloc[2].copy()
    one["analytics_sessions"], one["analytics_s"] = 1, 2.5
    assert soak_arms.held_label(one) == "analytics, one session of 2.5 s statements"


def test_an_arm_on_a_newer_server_is_held_against_its_own_control_and_that_control_against_the_oldest_s():
    """soak_pg18: a held arm on 18 reads its control on 18; that control reads the same control on 16; a
    transaction_timeout on 18 reads the same hold on 18 without it; each arm's label names its server."""
    frame = runs({}, {"holder": "repeatable_read"}, {"pg_version": 18}, {"pg_version": 18, "holder": "repeatable_read"},
                 {"pg_version": 18, "holder": "repeatable_read", "mitigation": "transaction_timeout"})
    assert section.reference(frame, 1) == 0 and section.reference(frame, 0) is None
    assert section.reference(frame, 3) == 2  # held on 18: its control on 18
    assert section.reference(frame, 2) == 0  # the control on 18: the same control on 16
    assert section.reference(frame, 4) == 3 and soak_arms.control_of(frame, 4) == 2
    shown = frame.assign(pg_shown=frame["pg_version"])
    assert section.arm_label(shown.iloc[3]) == "history, PostgreSQL 18"
    assert section.arm_label(frame.iloc[3]) == "history"  # one server major in the build: not named


# twenty seconds about 0.6 ms each, interleaved: their medians' ratio is known to within the margin
STEADY, STEADY_TOO = [0.58, 0.6, 0.62, 0.59, 0.61] * 4, [0.59, 0.61, 0.6, 0.62, 0.58] * 4


@pytest.mark.parametrize("without, with_index, cost", [
    ([2.0, 2.5, 3.0], [0.5, 0.6, 0.7], section.SLOWER),
    ([0.5, 0.6, 0.7], [2.0, 2.5, 3.0], section.FASTER),
    ([0.5, 0.9, 0.7], [0.6, 0.8, 0.7], section.OVERLAP),  # three seconds each: the ratio's interval is wide
    (STEADY, STEADY_TOO, section.ALIKE),
    ([0.3, 0.9] * 10, STEADY, section.OVERLAP),  # interleaved, but spread past the margin
    ([], [0.6], None),
])
def test_the_claim_without_the_index_is_slower_faster_or_overlapping_second_by_second(without, with_index, cost):
    assert section.claim_cost(seconds(without), seconds(with_index)) == cost


SLOW, FAST = [2.0, 2.5, 3.0], [0.5, 0.6, 0.7]
MIXED = [0.6, 2.0, 0.7]


@pytest.mark.parametrize("rows, without, with_index, verdict, said", [
    (0, STEADY, STEADY_TOO, CONFIRMED, "alike, the 95 % interval"),
    (0, FAST, FAST, NOT_DISTINGUISHABLE, "the seconds overlap"),  # overlap is not agreement
    (100_000, STEADY, STEADY_TOO, NOT_REPRODUCED, "alike, the 95 % interval"),
    (0, FAST, SLOW, CONFIRMED, "faster without it beyond the spread"),
    (0, SLOW, FAST, CORRECTED, "slower without it beyond the spread"),
    (100_000, SLOW, FAST, CONFIRMED, "slower without it beyond the spread"),
    (100_000, MIXED, FAST, NOT_DISTINGUISHABLE, "the seconds overlap"),
    (100_000, FAST, SLOW, NOT_REPRODUCED, "faster without it beyond the spread"),
])
def test_c9_per_volume_small_tables_take_no_index_and_six_figures_take_it(rows, without, with_index, verdict, said):
    frame = runs({"history_rows": rows}, {"shape": "history_indexed", "history_rows": rows})
    c9, _ = section.findings({"soak": loaded(frame, {0: seconds(without), 1: seconds(with_index)})})
    assert c9.parts[0][1] == verdict and said in c9.ours, c9
    # fillfactor by volume is not varied here: a confirmed volume makes the finding confirmed where measured only
    assert c9.verdict == (CONFIRMED_IN_PART if verdict == CONFIRMED else verdict)


def test_c9_has_a_verdict_per_volume_and_is_not_measured_without_both_controls():
    frame = runs({}, {"shape": "history_indexed"}, {"history_rows": 100_000},
                 {"shape": "history_indexed", "history_rows": 100_000})
    series = {0: seconds(STEADY), 1: seconds(STEADY_TOO), 2: seconds(SLOW), 3: seconds(FAST)}
    c9, _ = section.findings({"soak": loaded(frame, series)})
    assert c9.parts == (("a table starting empty", CONFIRMED), ("100,000 finished jobs at the start", CONFIRMED),
                        ("fillfactor by volume", NOT_MEASURED))
    assert c9.verdict == CONFIRMED_IN_PART
    assert c9.verdict_label.startswith("confirmed where measured, a part not measured (a table starting empty: "
                                       "confirmed; 100,000 finished")
    series[2] = seconds(MIXED)  # the parts disagree: the one the runs cannot tell decides
    c9, _ = section.findings({"soak": loaded(frame, series)})
    assert c9.verdict == NOT_DISTINGUISHABLE and c9.parts[1][1] == NOT_DISTINGUISHABLE
    bound = frame.copy()
    bound.loc[3, "verdict"] = "not_judged"  # a control that could not carry its load decides nothing
    c9, _ = section.findings({"soak": loaded(bound, {0: seconds(STEADY), 1: seconds(STEADY_TOO), 2: seconds(SLOW),
                                                     3: seconds(FAST)})})
    assert c9.parts[1][1] == NOT_MEASURED and "could not carry its load" in c9.ours and c9.verdict == CONFIRMED_IN_PART
    held_only = runs({}, {"shape": "history_indexed", "holder": "repeatable_read"})
    c9, _ = section.findings({"soak": loaded(held_only, {0: seconds(FAST), 1: seconds(FAST)})})
    assert c9.verdict == NOT_MEASURED and c9.note
    other_load = runs({}, {"shape": "history_indexed", "workers": 8})
    c9, _ = section.findings({"soak": loaded(other_load, {0: seconds(FAST), 1: seconds(FAST)})})
    assert c9.verdict == NOT_MEASURED


def test_the_worst_held_arm_is_the_confirmed_one_that_fell_behind_soonest():
    frame = runs({}, SLOWED | {"seconds_to_slow": 1.0},  # slowed soonest, never fell behind
                 {"shape": "delete"}, {"shape": "delete"} | BEHIND | {"seconds_to_fall_behind": 8.0},
                 {"shape": "partitioned"}, {"shape": "partitioned"} | BEHIND,
                 {"shape": "delete"} | BEHIND | {"storage": "disk", "seconds_to_fall_behind": 1.0})
    assert section.worst_held(frame) == 5  # disk arms are the storage table's, not the anchors'
    control_too = frame.copy()  # the control fell behind as soon: the hold's part is not confirmed
    control_too.loc[4, ["seconds_to_slow", "seconds_to_fall_behind"]] = [3.0, 6.0]
    assert section.worst_held(control_too) == 3
    assert section.worst_held(runs({})) is None and section.worst_held(runs({}, HELD)) is None


@pytest.mark.parametrize("flags, said", [
    ({"cpu_bound": True}, "not judged (CPU-bound); the rule says spirals"),
    ({"cpu_bound": False}, "not judged (arrivals behind); the rule says spirals"),
])
def test_a_run_not_judged_says_why_and_what_the_rule_said(flags, said):
    row = pd.Series(BASE | {"verdict": "not_judged", "verdict_if_judged": "spirals"} | flags)
    assert section.verdict_text(row) == said
    assert section.verdict_text(pd.Series(BASE | {"verdict": "cut_off"})) == "cut off"
    assert section.verdict_text(pd.Series(BASE)) == "held 20 s without failing"


@pytest.mark.parametrize("held, control, verdict", [
    ([3.0, 5.0, 9.0], [None, None, None], CONFIRMED),  # every repeat slowed, 10 s or more before the control's 20 s
    ([3.0, 5.0, 11.0], [None, None, None], NOT_DISTINGUISHABLE),  # the latest within the margin of the control's
    ([3.0, 3.0], [12.0, None], NOT_DISTINGUISHABLE),  # a control slowed too, within the margin of the latest
    ([3.0, 3.0], [13.0, None], CONFIRMED),  # a control slowed, but 10 s later: the hold made a difference
    ([None, None, None], [None, None, None], CORRECTED),  # held its 20 s without slowing, every repeat
    ([None, None], [2.0, 2.0], CORRECTED),  # the hold did not slow it, though the table slowed on its own
    ([3.0, None, 4.0], [None, None, None], NOT_DISTINGUISHABLE),  # the repeats disagree
])
def test_a_held_arm_decides_over_its_repeats_against_its_controls_by_a_margin(held, control, verdict):
    frame = runs(*[HELD | {"seconds_to_slow": at, "repeat": i} for i, at in enumerate(held)],
                 *[{"seconds_to_slow": at, "repeat": i} for i, at in enumerate(control)])
    held_at, control_at = list(range(len(held))), list(range(len(held), len(held) + len(control)))
    assert soak_arms.hold_part(frame, held_at, control_at) == verdict
    assert soak_arms.hold_part(frame, held_at, []) == NOT_MEASURED
    not_judged = frame.copy()
    not_judged.loc[0, "verdict"] = "not_judged"
    assert soak_arms.hold_part(not_judged, held_at, control_at) == NOT_MEASURED


@pytest.mark.parametrize("slow, behind, part", [
    ((3.0, 4.0), (None, None), CONFIRMED),  # slowed well before the control
    ((3.0, 12.0), (8.0, 9.0), CONFIRMED),  # slowed within the margin of a control, but fell behind well before
    ((3.0, 12.0), (None, 9.0), NOT_DISTINGUISHABLE),  # neither onset beyond the margin in every repeat
    ((None, None), (None, None), CORRECTED),  # neither within its hold, every repeat
])
def test_a_held_arm_s_part_is_confirmed_on_either_onset_and_corrected_only_on_both(slow, behind, part):
    frame = runs(*[HELD | {"seconds_to_slow": s_, "seconds_to_fall_behind": b, "repeat": i}
                   for i, (s_, b) in enumerate(zip(slow, behind))],
                 {"seconds_to_slow": 14.0}, {"seconds_to_slow": 14.0, "repeat": 1})
    assert soak_arms.held_part(frame, [0, 1], [2, 3]) == part


def test_a_run_without_an_onset_counts_only_the_seconds_of_its_hold_an_onset_could_be_seen_in():
    """A control cut off at the cap could not show an onset begun in its last seconds: it is a lower bound at
    observed_s, not at its whole hold."""
    frame = runs(SLOWED | {"seconds_to_slow": 40.0, "held_s": 60.0},
                 {"held_s": 60.0, "observed_s": 45.0})
    assert soak_arms.onsets(frame, [1], "seconds_to_slow") == [(45.0, True)]
    assert soak_arms.hold_part(frame, [0], [1]) == NOT_DISTINGUISHABLE  # 40 + 10 > 45, though 40 + 10 <= 60
    assert soak_arms.verdict_text(frame.iloc[1]) == "held 45 s without failing"


def test_an_onset_over_repeats_says_its_span_and_the_holds_without_it():
    frame = runs(SLOWED, SLOWED | {"seconds_to_slow": 7.0}, HELD)
    assert soak_arms.onset_text(frame, [0, 1], "seconds_to_slow") == "3 to 7 s"
    assert soak_arms.onset_text(frame, [0, 2], "seconds_to_slow") == "3 s; none in 20 s"
    assert soak_arms.onset_text(frame, [2], "seconds_to_fall_behind") == "none in 20 s"


def test_a11_has_a_part_per_held_arm_the_worst_decides_and_a_timeout_is_read_against_its_arm():
    frame = runs({}, BEHIND,
                 {"shape": "delete"}, {"shape": "delete"} | HELD,
                 HELD | {"mitigation": "idle_timeout", "mitigation_setting": "idle_in_transaction_session_timeout",
                         "pin_ended_early_s": 25.0},
                 BEHIND | {"storage": "disk", "verdict": "spirals"},
                 {"shape": "partitioned"} | BEHIND)  # no control stored
    _, a11 = section.findings({"soak": loaded(frame, {})})
    assert a11.parts == (("history, repeatable read", CONFIRMED), ("delete, repeatable read", CORRECTED),
                         ("partitioned, repeatable read", NOT_MEASURED))
    assert a11.verdict == CORRECTED and "1 of 2 held arms that decide slowed" in a11.ours
    assert a11.values["mitigation_helped"] == "True" and a11.values["mitigated_arm"] == "history"
    assert a11.values["mitigated_hold"] == "5 s" and a11.values["mitigated_verdict"] == "held 20 s without failing"
    assert "50% of the rate" in a11.ours and "350 jobs/s" in a11.ours
    _, a11 = section.findings({"soak": loaded(frame.iloc[:2], {})})
    assert a11.verdict == CONFIRMED and not a11.parts and "mitigation_helped" not in a11.values
    _, a11 = section.findings({"soak": loaded(frame.iloc[[0, 5]].reset_index(drop=True), {})})
    assert a11.verdict == NOT_MEASURED and a11.note  # held on a disk only: the storage's, not A11's
    autovacuum = frame.copy()  # a mitigation that is not a timeout is not the decision's timeout
    autovacuum.loc[4, ["mitigation", "mitigation_setting"]] = ["autovacuum", None]
    assert "mitigation_helped" not in section.findings({"soak": loaded(autovacuum, {})})[1].values
    slowed_alone = frame.copy()  # the timeout's arm must be one the hold slowed, not the table on its own
    slowed_alone.loc[0, ["seconds_to_slow", "seconds_to_fall_behind"]] = [4.0, 7.0]
    assert "mitigation_helped" not in section.findings({"soak": loaded(slowed_alone, {})})[1].values
    hurt = frame.copy()
    hurt.loc[4, "seconds_to_fall_behind_in_run"] = 12.0  # the queue fell behind after the server ended the hold
    assert section.findings({"soak": loaded(hurt, {})})[1].values["mitigation_helped"] == "False"
    not_judged = frame.copy()  # a timeout run that could not carry its load decides nothing: the row is undecided
    not_judged.loc[4, "verdict"] = "not_judged"
    assert "mitigation_helped" not in section.findings({"soak": loaded(not_judged, {})})[1].values
    fixed = frame.iloc[:2].assign(rate_asked=100.0)
    assert "100 jobs/s;" in section.findings({"soak": loaded(fixed, {})})[1].ours


def test_a11_says_how_many_runs_of_each_arm_its_verdict_rests_on():
    once = runs({}, SLOWED)
    assert "; one run of each arm)" in section.findings({"soak": loaded(once, {})})[1].ours
    twice = pd.concat([once, once.assign(repeat=1)], ignore_index=True)
    a11 = section.findings({"soak": loaded(twice, {})})[1]
    assert "; 2 runs of each arm)" in a11.ours and a11.verdict == CONFIRMED and not a11.parts, a11


@pytest.mark.parametrize("second, verdict", [
    (4.0, CONFIRMED),  # both repeats slowed and fell behind well before the control
    (None, NOT_DISTINGUISHABLE),  # one slowed and fell behind, one did neither: the repeats disagree
])
def test_a11_reads_an_arm_over_its_repeats_and_decides_only_where_they_agree(second, verdict):
    frame = runs({}, BEHIND, {"shape": "delete"}, {"shape": "delete"} | HELD)
    again = frame.assign(repeat=1)
    again.loc[1, ["seconds_to_slow", "seconds_to_fall_behind"]] = [second, second]
    a11 = section.findings({"soak": loaded(pd.concat([frame, again], ignore_index=True), {})})[1]
    assert a11.parts == (("history, repeatable read", verdict), ("delete, repeatable read", CORRECTED)), a11.parts
    assert f"{1 if verdict == CONFIRMED else 0} of {2 if verdict == CONFIRMED else 1} held arms" in a11.ours


def test_the_lead_table_has_a_row_per_held_arm_over_its_repeats_beside_its_control():
    frame = runs({}, BEHIND, {"repeat": 1}, BEHIND | {"repeat": 1, "seconds_to_fall_behind": 9.0,
                                                       "recovered_s": None, "verdict": "spirals"})
    rows = section.verdict_rows(loaded(frame, {}))
    assert len(rows) == 1
    row = rows.iloc[0]
    assert (row["slowed at"], row["fell behind at"], row["the hold's part"]) == ("3 s", "6 to 9 s", "confirmed")
    assert row["recovered after the release"] == "12 s; 1 not back by the run's end"
    assert row["its control: slowed at / fell behind at"] == "none in 20 s / none in 20 s"
    assert row["verdict"] == "fell behind (1 of 2); spirals (1 of 2)"


def test_the_timeline_draws_each_held_arm_beside_its_control_and_marks_a_cpu_bound_one():
    from harness.article.sections import soak_charts

    frame = runs({}, {"holder": "repeatable_read"}, {"shape": "delete"},
                 {"shape": "delete", "holder": "repeatable_read", "cpu_bound": True},
                 {"holder": "repeatable_read", "storage": "disk"})
    frame["pin_from"], frame["pin_to"] = 20.0, 40.0
    series = {i: pd.DataFrame({"second": [0.0, 1.0], "backlog": [1, 2], "claim_p99_ms": [0.5, 0.6]}) for i in range(5)}
    samples = {i: pd.DataFrame({"t_s": [0.0, 1.0], "n_dead_tup": [5, 9], "horizon_age_s": [None, 1.0]})
               for i in range(5)}
    mine = section.Loaded((), frame, series, samples, {i: 1.0 for i in range(5)})
    data = soak_charts.timelines(mine)
    assert list(dict.fromkeys(data["arm"])) == ["history: repeatable read", "delete: repeatable read (CPU-bound)"]
    assert set(data["run"]) == {"held", "control"}  # the disk arm is the storage table's, not drawn
    spec = soak_charts.soak_timeline_chart(data).to_dict()
    assert "CPU-bound" in str(spec["title"]) and "every 1 s" in str(spec["title"])
    assert soak_charts.timelines(None).empty


def test_c9_compares_the_seconds_before_the_hold_while_the_table_is_its_starting_size():
    """A table that keeps its history grows all run: its claim at second 30 is another table's. The seconds from
    the hold on (pin_from, 20 s) are left out, and the size says how many jobs the compared seconds reached."""
    frame = runs({}, {"shape": "history_indexed"})
    grown_slow = seconds(FAST + [0.6] * 12 + [50.0] * 20)  # slow only from second 20 on
    c9, _ = section.findings({"soak": loaded(frame, {0: grown_slow, 1: seconds(FAST + [0.6] * 12)})})
    assert c9.parts[0] == ("a table starting empty", CONFIRMED) and "alike, the 95 % interval" in c9.ours
    assert "up to 2,000 jobs, from 5 s to 20 s into the run" in c9.ours  # 100 a second for 20 s


def test_the_timeout_helped_where_its_run_never_fell_behind_and_most_repeats_without_it_did():
    """Changed after runs (docs/soak.md): a timeout run whose claims slowed after the server ended the hold, but
    whose queue kept up, helped; one whose arm did not fall behind in more than half its repeats without it cannot
    show it (every repeat was asked until the cold build of 2026-12-07 at 2a3f4f2)."""
    frame = runs({}, BEHIND, HELD | {"mitigation": "idle_timeout", "pin_ended_early_s": 25.0,
                                     "mitigation_setting": "idle_in_transaction_session_timeout"})
    slowed = frame.copy()
    slowed.loc[2, "seconds_to_slow_in_run"] = 26.0  # 21 s after the release, as one cold build's run did
    values = section.findings({"soak": loaded(slowed, {})})[1].values
    assert values["mitigation_helped"] == "True", values
    assert values["mitigated_outcome"] == "kept up over the 50 s from the hold's start"
    assert values["mitigated_slowed"] == "; its claims slowed 26 s into the run"
    assert values["mitigated_rate"] == "350" and values["unmitigated_behind"] == "6 s"
    kept_up = runs({}, BEHIND, {"repeat": 1}, SLOWED | {"repeat": 1},
                   HELD | {"mitigation": "idle_timeout", "pin_ended_early_s": 25.0,
                           "mitigation_setting": "idle_in_transaction_session_timeout"})
    values = section.findings({"soak": loaded(kept_up, {})})[1].values  # one of two repeats without it kept up
    assert values["mitigation_helped"] == "False" and values["unmitigated_behind"] == "6 s"
    assert values["unmitigated_share"] == " in 1 of 2 runs"
    mostly = runs({}, BEHIND, {"repeat": 1}, BEHIND | {"repeat": 1, "seconds_to_fall_behind": 9.0}, {"repeat": 2},
                  SLOWED | {"repeat": 2}, HELD | {"mitigation": "idle_timeout", "pin_ended_early_s": 25.0,
                                                   "mitigation_setting": "idle_in_transaction_session_timeout"})
    values = section.findings({"soak": loaded(mostly, {})})[1].values  # two of three repeats without it fell
    assert values["mitigation_helped"] == "True" and values["unmitigated_behind"] == "6 to 9 s"
    assert values["unmitigated_share"] == " in 2 of 3 runs"
    assert section.findings({"soak": loaded(slowed, {})})[1].values["unmitigated_share"] == ""  # every one fell


def test_the_lead_table_says_what_each_mitigation_raced_on_a_held_arm_did_over_its_whole_run():
    frame = runs({}, BEHIND, HELD | {"mitigation": "idle_timeout", "pin_ended_early_s": 25.0,
                                     "mitigation_setting": "idle_in_transaction_session_timeout"},
                 BEHIND | {"mitigation": "autovacuum", "seconds_to_fall_behind_in_run": 9.0})
    row = section.verdict_rows(loaded(frame, {})).iloc[0]
    assert row["a mitigation, raced where it fell behind"] == (
        "idle timeout: kept up over the 50 s from the hold's start; "
        "autovacuum: still fell behind 9 s into the run")
    assert section.verdict_rows(loaded(frame.iloc[:2], {})).iloc[0]["a mitigation, raced where it fell behind"] \
        == "—"


@pytest.mark.parametrize("marks, said", [
    ([None], ""),
    ([None, None, None], ""),
    ([12.4], "; CPUs full (from 12 s into the hold)"),
    ([12.0, None, 15.0], "; CPUs full (2 of 3, from 12 to 15 s into the hold)"),
    ([-3.0, 15.0], "; CPUs full (2 of 2, from before the hold to 15 s into it)"),
    ([-3.0, None], "; CPUs full (1 of 2, from before the hold)"),
])
def test_a_verdict_carries_the_cpu_mark_of_the_runs_that_have_it(marks, said):
    assert soak_arms.cpu_text(marks) == said
