"""The soak's model (harness.experiments.soak.outcomes: claim_slope, predict_fall_behind, model_check, fitted) and
its table (harness.article.sections.soak_model), on synthetic series and runs: one test per outcome each rule can
return. A real hold's slope is read in tests/test_soak.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.article.formats import wait
from harness.article.sections import soak as section, soak_arms, soak_model
from harness.experiments.soak import outcomes as rule

from tests.test_soak_section import BASE, BEHIND, loaded, runs


def held_series(ms_per_100k: float, rate: int = 500, seconds: int = 60, pin_from: int = 20,
                noise: float = 0.0) -> pd.DataFrame:
    """Jobs claimed at `rate` a second; from pin_from each second's mean claim grows by ms_per_100k per 100,000
    versions kept (two per job claimed since then)."""
    second = np.arange(seconds, dtype=float)
    claimed = np.full(seconds, rate)
    kept = np.where(second >= pin_from, 2 * rate * (second - pin_from) + rate, 0)
    mean = 0.2 + ms_per_100k * kept / 100_000 + noise * np.random.default_rng(1).standard_normal(seconds)
    return pd.DataFrame({"second": second, "arrived": claimed, "claimed": claimed, "backlog": 0,
                         "claim_p50_ms": mean, "claim_p99_ms": mean * 2, "claim_mean_ms": mean})


def test_the_slope_is_what_a_claim_gains_per_version_kept_over_the_hold_before_the_fall():
    assert rule.claim_slope(held_series(5.0), 20, 60) * rule.PER_VERSIONS == pytest.approx(5.0)
    # a slow second or two moves a median of slopes little
    spiky = held_series(5.0)
    spiky.loc[[30, 45], "claim_mean_ms"] = 40.0
    assert rule.claim_slope(spiky, 20, 60) * rule.PER_VERSIONS == pytest.approx(5.0, rel=0.05)
    # only the seconds before until_s: after the fall, waiting workers are not the claim's cost
    late = held_series(5.0)
    late.loc[late["second"] >= 40, "claim_mean_ms"] = 50.0
    assert rule.claim_slope(late, 20, 40) * rule.PER_VERSIONS == pytest.approx(5.0)
    assert rule.claim_slope(held_series(5.0), 20, 20 + rule.FIT_MIN_S - 1) is None  # too few seconds
    assert rule.claim_slope(held_series(5.0).drop(columns="claim_mean_ms"), 20, 60) is None  # stored before


def test_judge_gives_a_held_run_its_slope_and_a_control_none():
    series = held_series(5.0)
    assert rule.judge(series, 20, 60, 60, held=True)["claim_ms_per_100k"] == pytest.approx(5.0)
    assert rule.judge(series, 20, 60, 60, held=False)["claim_ms_per_100k"] is None


def test_the_prediction_comes_sooner_with_a_steeper_slope_a_faster_rate_or_a_longer_job():
    at = {"workers": 4, "sustained_rate": 800.0}
    base = rule.predict_fall_behind(5.0, 640, **at)  # 80 %: 1.25 ms of headroom per job
    # the capacity crosses the arrivals where 5 ms per 100,000 versions reach the headroom (25,000 versions, kept
    # at 1,280 a second: 19.5 s); the shortfall then grows about 6.5 jobs/s each second, and a second of arrivals
    # has piled up about 14 s later
    assert 31 <= base <= 36
    assert rule.predict_fall_behind(10.0, 640, **at) < base
    assert rule.predict_fall_behind(5.0, 400, **at) > base
    assert rule.predict_fall_behind(5.0, 640, job_ms_more=0.5, **at) < base
    assert rule.predict_fall_behind(5.0, 900, **at) is None  # behind with nothing held: not the hold's doing
    assert rule.predict_fall_behind(0.0, 640, **at) is None  # a claim that does not grow: never
    assert rule.predict_fall_behind(5.0, 20, **at) is None  # beyond the horizon


@pytest.mark.parametrize("predicted, measured, observed, word", [
    (30.0, 40.0, 60.0, rule.MODEL_HOLDS),  # within 1.5 times
    (30.0, 20.0, 60.0, rule.MODEL_HOLDS),
    (30.0, 50.0, 60.0, rule.MODEL_OFF),  # later than 1.5 times
    (30.0, 15.0, 60.0, rule.MODEL_OFF),  # sooner
    (None, 40.0, 60.0, rule.MODEL_OFF),  # it fell behind where the model said it would not
    (30.0, None, 60.0, rule.MODEL_OFF),  # held twice the prediction without falling behind
    (50.0, None, 60.0, rule.MODEL_UNTESTED),  # held a little past it: too soon to tell
    (90.0, None, 60.0, rule.MODEL_UNTESTED),  # the run ended first
    (None, None, 60.0, rule.MODEL_UNTESTED),
])
def test_a_prediction_holds_only_within_its_factor_and_a_run_that_ended_first_does_not_test_it(
        predicted, measured, observed, word):
    assert rule.model_check(predicted, measured, observed) == word


HELD_RUN = BASE | BEHIND | {"shape": "delete", "hold_until_failure": True, "hold_asked": 60.0, "held_s": 60.0,
                     "observed_s": 60.0, "rate_asked": "80%", "rate": 560.0, "sustained_rate": 700.0}


def test_a_fit_takes_only_held_judged_runs_alike_and_not_the_run_it_predicts():
    summaries = [HELD_RUN | {"claim_ms_per_100k": 4.0}, HELD_RUN | {"claim_ms_per_100k": 6.0},
                 HELD_RUN | {"claim_ms_per_100k": 100.0, "workers": 8},  # another load's
                 HELD_RUN | {"claim_ms_per_100k": 100.0, "mitigation": "idle_timeout"},
                 HELD_RUN | {"claim_ms_per_100k": 100.0, "verdict": "not_judged"},
                 BASE | {"shape": "delete", "claim_ms_per_100k": None}]
    assert rule.fitted(summaries, HELD_RUN) == (5.0, 4.0, 6.0, 2)
    assert rule.fitted(summaries[2:], HELD_RUN) is None
    assert rule.predicted_for(summaries, HELD_RUN) == rule.predict_fall_behind(5.0, 560.0, 4, 700.0)
    assert rule.predicted_for(summaries, HELD_RUN | {"sustained_rate": None}) is None  # a fixed rate: no headroom


def model_runs(slopes_and_onsets, other=None) -> pd.DataFrame:
    """Held runs of one arm at 80 % with these (slope, fell behind at), one at 70 % where `other` is given, and a
    control."""
    arms = [HELD_RUN | {"claim_ms_per_100k": slope, "seconds_to_fall_behind": onset, "repeat": i}
            for i, (slope, onset) in enumerate(slopes_and_onsets)]
    if other is not None:
        arms.append(HELD_RUN | {"rate_asked": "70%", "rate": 490.0, "claim_ms_per_100k": other[0],
                                "seconds_to_fall_behind": other[1], "hold_asked": 120.0, "held_s": 120.0,
                                "observed_s": 120.0})
    return runs(*arms, {"shape": "delete", "rate_asked": "80%", "hold_asked": 60.0, "hold_until_failure": True})


def test_each_run_is_predicted_from_the_others_and_the_other_rate_from_all_of_them():
    at_80 = rule.predict_fall_behind(5.0, 560.0, 4, 700.0)
    at_70 = rule.predict_fall_behind(5.0, 490.0, 4, 700.0)
    frame = model_runs([(5.0, at_80), (5.0, at_80 + 1), (5.0, None)], other=(5.0, at_70 * 3))
    frame.loc[2, ["observed_s", "held_s"]] = [100.0, 100.0]  # held past 1.5 times its prediction
    found = {f["position"]: f for f in soak_model.checked(frame)}
    assert [found[p]["check"] for p in range(4)] == [rule.MODEL_HOLDS, rule.MODEL_HOLDS, rule.MODEL_OFF,
                                                    rule.MODEL_OFF]
    assert found[0]["fit"][3] == 2 and found[3]["fit"][3] == 3 and not found[3]["in_fit_arm"]
    table = soak_model.rows(frame)
    assert list(table["the model"]) == ["holds", "holds", "off", "off"]
    assert table["fitted on"].iloc[3] == "3 at 560 jobs/s (every one of them)"
    assert table["measured / predicted"].iloc[2].startswith("at least")
    said = soak_model.values(loaded(frame, {}))
    assert "held on 2 of the 4 runs" in said["model_outcome"]
    assert said["model_reader"] == (
        "For the delete table it was off: its queue fell behind at 1.00 to 3.00 times the second the model "
        f"predicted (at 490 jobs/s, predicted {at_70:.0f} s, measured {wait(at_70 * 3)}), so it gives no hold to plan "
        "by here.")


def test_without_a_slope_the_model_says_so_and_draws_no_table():
    frame = model_runs([(None, 30.0), (None, 31.0)])
    assert soak_model.checked(frame) == [] and soak_model.model_table(loaded(frame, {})) == ""
    assert "No held run" in soak_model.values(loaded(frame, {}))["model_outcome"]
    assert "No held run" in soak_model.values(None)["model_outcome"]


def test_a_held_arm_at_another_rate_without_its_own_control_checks_the_model_and_is_not_a_part():
    frame = model_runs([(5.0, 30.0), (5.0, 31.0)], other=(5.0, 60.0))
    assert soak_arms.held_groups(frame) == [([0, 1], [3])]
    alone = frame.iloc[[0, 1, 2]].reset_index(drop=True)  # no arm has a control: each stays, to be not measured
    assert soak_arms.held_groups(alone) == [([0, 1], []), ([2], [])]


def test_the_write_ups_are_set_in_this_page_s_units_beside_this_build_s_slope():
    assert section.their_slope(section.PLANETSCALE) == pytest.approx((300 - 2) / 383_000 * 100_000)
    assert section.their_slope(section.BRANDUR) is None  # he gives no claim time
    table = section.anchors_table({})
    assert "at least 78" in table and "about 180,000 (estimated: 1 h at its rate, a dead tuple a job)" in table
    assert "60,000 behind; about 15 min from onset to hopeless" in table
    frame = model_runs([(5.0, 30.0), (6.0, 31.0)])
    said = section.anchors_said(loaded(frame, {}))
    assert "at least 78 ms per 100,000 dead tuples, at least 14 times this build's 5.5" in said, said
    # no run at another rate tested the model: no hold at Brandur's rate (the parametrised test above has the rest)
    assert said.endswith("At Brandur's 50 jobs/s his queue was 60,000 jobs behind an hour into a hold; this build's "
                         "model gives no hold to set beside it, as it did not hold on its checks here.")
    assert section.anchors_said(None) == section.anchors_said(loaded(model_runs([(None, 30.0)]), {})) \
        == "No held run in this build had a slope to set beside the write-ups'."


def test_the_timeline_draws_the_model_s_backlog_over_a_held_run_it_was_not_fitted_on():
    from harness.article.sections import soak_charts
    frame = model_runs([(5.0, 30.0), (6.0, 31.0)])
    series = {i: pd.DataFrame({"second": [0.0, 1.0], "backlog": [1, 2], "claim_p99_ms": [0.5, 0.6]}) for i in range(3)}
    samples = {i: pd.DataFrame({"t_s": [0.0, 1.0], "horizon_age_s": [None, 1.0]}) for i in range(3)}
    drawn = soak_charts.timelines(soak_arms.Loaded((), frame, series, samples, {i: 1.0 for i in range(3)}))
    model = drawn[drawn["run"] == "model"]
    # the first repeat, predicted from the second's slope, over its 20 s hold, backlog only
    assert set(model["measure"]) == {"backlog (jobs)"} and len(model) == 20 and model["second"].min() == 20.0
    expected = rule.predicted_backlog(6.0, 560.0, 4, 700.0, 20)
    assert list(model["value"]) == pytest.approx(list(expected))
    assert "ochre: the backlog the model predicts" in str(soak_charts.soak_timeline_chart(drawn).to_dict())
    unfitted = soak_charts.timelines(soak_arms.Loaded((), model_runs([(None, 30.0)]), series, samples, {}))
    assert "model" not in set(unfitted["run"])


def test_an_arm_raced_at_two_rates_draws_two_panels_each_named_by_its_rate():
    from harness.article.sections import soak_charts
    frame = model_runs([(5.0, 30.0)], other=(5.0, 60.0))
    series = {i: pd.DataFrame({"second": [0.0, 1.0], "backlog": [1, 2], "claim_p99_ms": [0.5, 0.6]}) for i in range(3)}
    samples = {i: pd.DataFrame({"t_s": [0.0, 1.0], "horizon_age_s": [None, 1.0]}) for i in range(3)}
    drawn = soak_charts.timelines(soak_arms.Loaded((), frame, series, samples, {i: 1.0 for i in range(3)}))
    assert list(dict.fromkeys(drawn["arm"])) == ["delete: repeatable read at 80%", "delete: repeatable read at 70%"]


@pytest.mark.parametrize("other, word", [
    ((5.0, "at_70"), rule.MODEL_HOLDS),  # the run at another rate fell where the model said
    ((5.0, "thrice"), rule.MODEL_OFF),  # it fell three times later
    (None, rule.MODEL_UNTESTED),  # no run at another rate
])
def test_the_model_is_planned_by_only_where_a_run_at_another_rate_held_it_and_none_was_off(other, word):
    at_80 = rule.predict_fall_behind(5.0, 560.0, 4, 700.0)
    at_70 = rule.predict_fall_behind(5.0, 490.0, 4, 700.0)
    onset = {"at_70": at_70, "thrice": at_70 * 3}
    frame = model_runs([(5.0, at_80), (5.0, at_80 + 1)], None if other is None else (5.0, onset[other[1]]))
    mine = loaded(frame, {})
    found = soak_model.checked(frame)
    assert soak_model.standing(found) == word and soak_model.plans_by(mine, 0) == (word == rule.MODEL_HOLDS)
    decided = soak_model.at_share(mine, 0, 0.25)
    reader = soak_model.values(mine)["model_reader"]
    said = section.anchors_said(mine)
    if word == rule.MODEL_HOLDS:
        assert decided == {"model_at": "140 jobs/s (25% of that rate)", "model_hold": decided["model_hold"]}
        assert decided["model_hold"].startswith("at ") and "10% (70 jobs/s)" in reader
        assert "this build's model, with 4 workers that sustain 700 jobs/s, puts the fall" in said
    elif word == rule.MODEL_OFF:
        assert list(decided) == ["model_off"] and "predicted," in decided["model_off"]
        assert reader.startswith("For the delete table it was off") and "gives no hold to set beside" in said
    else:
        assert decided == {} and reader.startswith("No run of the delete table at a rate")


# --------------------------------------------------------------------------- the CPUs' limit (outcomes' CPU note)

def busy_samples(series: pd.DataFrame, cpu_ms_per_100k: float, busy_before: float = 0.4, cpus: int = 2,
                 empty: float = 0.0, pin_from: int = 20) -> pd.DataFrame:
    """One sample a second, 0.02 s after it as the sampler takes them, each the share of `cpus` busy over the
    second before: busy_before cores, and from pin_from cpu_ms_per_100k CPU ms more a statement (the second's claims
    and `empty` statements a second that claimed none) per 100,000 versions kept."""
    kept = rule.kept_versions(series, pin_from)
    statements = series["claimed"].to_numpy(float) + empty
    cores = busy_before + statements * cpu_ms_per_100k * kept / rule.PER_VERSIONS / 1000
    return pd.DataFrame({"t_s": series["second"] + 1.02, "cpu_busy_share": cores / cpus})


def test_the_cpu_slope_is_the_cpu_a_statement_gains_per_version_kept_from_the_level_before_the_hold():
    series = held_series(5.0)
    found = rule.cpu_slope(series, busy_samples(series, 2.0, empty=30.0), 20, 60, 2, empty=30.0)
    assert found["cpu_ms_per_100k"] == pytest.approx(2.0) and found["busy_cores_before"] == pytest.approx(0.4)
    # statements that claimed nothing read the kept versions too: left uncounted, each claim seems to cost more
    assert rule.cpu_slope(series, busy_samples(series, 2.0, empty=30.0), 20, 60, 2)["cpu_ms_per_100k"] \
        == pytest.approx(2.0 * 530 / 500)
    # only the seconds before until_s, as the claim's slope
    late = busy_samples(series, 2.0)
    late.loc[late["t_s"] > 41, "cpu_busy_share"] = 1.0
    assert rule.cpu_slope(series, late, 20, 40, 2)["cpu_ms_per_100k"] == pytest.approx(2.0)
    # a sample taken after a missed one spans both seconds: left out, not read as one second's
    gap = busy_samples(series, 2.0).drop(index=30)
    gap.loc[31, "cpu_busy_share"] = 1.0
    assert rule.cpu_slope(series, gap, 20, 60, 2)["cpu_ms_per_100k"] == pytest.approx(2.0)
    assert rule.cpu_slope(series, late, 20, 20 + rule.FIT_MIN_S - 1, 2)["cpu_ms_per_100k"] is None  # too few
    unread = {"cpu_ms_per_100k": None, "busy_cores_before": None}
    assert rule.cpu_slope(series, late.drop(columns="cpu_busy_share"), 20, 60, 2) == unread  # stored before
    assert rule.cpu_slope(series, late, 20, 60, 0) == unread  # the machine's CPUs not known
    assert rule.cpu_slope(series, late[late["t_s"] > 20], 20, 60, 2) == unread  # no second before the hold


def test_a_held_run_gets_its_cpu_figures_fitted_before_its_fall_and_a_control_or_a_library_s_run_none():
    series = held_series(5.0)
    held = HELD_RUN | {"seconds_to_fall_behind": None, "pin_from": 20.0, "pin_to": 60.0, "empty_polls": 1500,
                       "lost_races": 300, "claim_errors": 0, "ended_s": 60.0}
    found = rule.with_cpu(held, series, busy_samples(series, 2.0, empty=30.0), 2)
    assert found["cpu_ms_per_100k"] == pytest.approx(2.0) and found["empty_per_s"] == 30.0 and found["cpus"] == 2
    fell = busy_samples(series, 2.0, empty=30.0)
    fell.loc[fell["t_s"] > 36, "cpu_busy_share"] = 1.0  # after its fall 15 s in, the CPUs wait on each other
    assert rule.with_cpu(held | {"seconds_to_fall_behind": 15.0}, series, fell, 2)["cpu_ms_per_100k"] \
        == pytest.approx(2.0)
    for other in ({"holder": "none"}, {"latency": "pickup"}):
        assert rule.with_cpu(held | other, series, busy_samples(series, 2.0), 2)["cpu_ms_per_100k"] is None
    assert rule.empty_per_s(BASE) == 0.0  # a run stored without the counts


def test_the_cpus_limit_comes_first_where_the_workers_have_headroom_to_spare():
    at = {"workers": 4, "sustained_rate": 700.0}
    cpu = (3.0, 0.2, 40.0, 2)  # 3 CPU ms a statement per 100,000 versions, 0.2 cores busy before, 40 polls/s, 2 CPUs
    # at 18 % the workers' headroom lasts about 35 minutes; the CPUs fill about 21 minutes in
    assert rule.limit_met(5.0, 126.0, **at)[1] == rule.WORKERS_LIMIT
    workers_only = rule.predict_fall_behind(5.0, 126.0, **at)
    assert 2000 <= workers_only <= 2300
    second, limit = rule.limit_met(5.0, 126.0, **at, cpu=cpu)
    assert 1200 <= second <= 1450 and limit == rule.CPUS_LIMIT
    # at 80 % the workers' headroom runs out first: the CPUs change nothing
    assert rule.limit_met(5.0, 560.0, **at, cpu=cpu) == (rule.predict_fall_behind(5.0, 560.0, **at),
                                                         rule.WORKERS_LIMIT)
    assert rule.predict_fall_behind(5.0, 126.0, **at, cpu=(0.0, 0.2, 40.0, 2)) == workers_only  # one that does not grow
    assert rule.predict_fall_behind(5.0, 126.0, **at, cpu=(3.0, 0.0, 40.0, 2)) is not None  # nothing busy before
    assert rule.predict_fall_behind(5.0, 126.0, **at, cpu=(3.0, 1.8, 40.0, 2)) is None  # CPUs full with nothing held
    assert rule.cpu_inputs((3.0, 2), {"busy_cores_before": 0.2, "empty_per_s": 40.0, "cpus": None}) is None
    assert rule.cpu_inputs(None, {"busy_cores_before": 0.2, "empty_per_s": 40.0, "cpus": 2}) is None


def test_the_command_s_prediction_takes_the_cpus_limit_where_the_runs_beside_carry_it():
    cpu = {"cpu_ms_per_100k": 3.0, "busy_cores_before": 0.2, "empty_per_s": 40.0, "cpus": 2}
    summaries = [HELD_RUN | {"claim_ms_per_100k": 5.0} | cpu, HELD_RUN | {"claim_ms_per_100k": 5.0}]
    run = HELD_RUN | cpu | {"rate": 126.0}
    assert rule.predicted_for(summaries, run) == rule.predict_fall_behind(5.0, 126.0, 4, 700.0, cpu=(3.0, 0.2, 40.0, 2))
    assert rule.predicted_for(summaries[1:], run) == rule.predict_fall_behind(5.0, 126.0, 4, 700.0)  # none beside


# a run's CPU figures, and its workers' wait between polls as its procedure records it
CPU_FIGURES = {"cpu_ms_per_100k": 3.0, "busy_cores_before": 0.2, "empty_per_s": 40.0, "cpus": 2, "poll_s": 0.05}


@pytest.mark.parametrize("rate, figures, limit", [(126.0, CPU_FIGURES, "the CPUs"),
                                                   (490.0, CPU_FIGURES, "the workers' time"),
                                                   (126.0, {}, "—")])  # the CPUs not sampled: not modelled
def test_the_table_says_which_limit_the_model_met_first(rate, figures, limit):
    frame = model_runs([(5.0, 30.0), (5.0, 31.0)], other=(5.0, 60.0))
    for column, value in figures.items():
        frame[column] = value
    frame.loc[2, "rate"] = rate
    found = {f["position"]: f for f in soak_model.checked(frame)}
    table = soak_model.rows(frame)
    assert table["the limit met first"].iloc[2] == limit
    if figures:
        assert found[2]["cpu_fit"] == (3.0, 2) and found[2]["cpu"] == (3.0, 0.2, 40.0, 2)
        assert table["CPU ms a statement per 100,000: fitted; its own"].iloc[2] == "3.0 (2 runs); 3.0"
        # at a reader's rate: every worker's every poll empty, the CPUs as busy before as in the run
        assert soak_model.cpu_at(frame.iloc[0], (3.0, 2), 140.0) == pytest.approx((3.0, 0.2, 80.0, 2))
        assert soak_model.cpu_at(frame.iloc[0].drop("poll_s"), (3.0, 2), 140.0) is None  # stored without it
    else:
        assert found[2]["cpu"] is None
        assert table["CPU ms a statement per 100,000: fitted; its own"].iloc[2] == "— (no run sampled the CPUs); —"


@pytest.mark.parametrize("figures, said", [(CPU_FIGURES, "5.0 ms more a claim and 3.0 CPU ms more a statement"),
                                           ({}, "by the workers' time alone (no run of it sampled the CPUs)")])
def test_a_reader_s_holds_say_the_cpus_limit_only_where_it_was_modelled(figures, said):
    at_80 = rule.predict_fall_behind(5.0, 560.0, 4, 700.0)
    at_70 = rule.predict_fall_behind(5.0, 490.0, 4, 700.0, cpu=rule.cpu_inputs((3.0, 2), CPU_FIGURES) if figures
                                     else None)
    frame = model_runs([(5.0, at_80), (5.0, at_80 + 1)], other=(5.0, at_70))
    for column, value in figures.items():
        frame[column] = value
    reader = soak_model.values(loaded(frame, {}))["model_reader"]
    assert said in reader, reader
