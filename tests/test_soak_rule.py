"""The soak's verdict rule (harness.experiments.soak.outcomes) on synthetic series, one per outcome: what a hold
did to a queue's claim and backlog, second by second."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.experiments.soak import outcomes as rule

PIN_FROM, PIN_TO = 20.0, 40.0


def series(backlog, p99, arrived=10, claimed=None) -> pd.DataFrame:
    """A run's per-second series: backlog and p99 per second as given; arrivals a steady `arrived` a second, and
    claims what makes the backlog (unless given)."""
    backlog = np.asarray(backlog, dtype=float)
    arrivals = np.full(len(backlog), arrived)
    claims = arrivals - np.diff(np.concatenate([[0.0], backlog])) if claimed is None else np.asarray(claimed)
    return pd.DataFrame({"second": np.arange(len(backlog), dtype=float), "arrived": arrivals, "claimed": claims,
                         "backlog": backlog, "claim_p50_ms": np.asarray(p99) / 2, "claim_p99_ms": p99})


def steady(seconds: int, level: float = 2.0) -> np.ndarray:
    return np.full(seconds, level)


def p99s(seconds: int, before: float = 1.0, during: float = 1.0) -> np.ndarray:
    values = np.full(seconds, before)
    values[int(PIN_FROM):int(PIN_TO)] = during
    return values


def judged(backlog, p99, ended_s=None, **flags):
    frame = series(backlog, p99)
    return rule.judge(frame, PIN_FROM, PIN_TO, ended_s if ended_s is not None else float(len(frame)), **flags)


def test_a_queue_that_keeps_up_with_its_claim_time_at_its_level_is_held_without_failing():
    found = judged(steady(80), p99s(80, before=1.0, during=0.9))
    assert (found["verdict"], found["seconds_to_slow"], found["seconds_to_fall_behind"], found["recovered_s"],
            found["held_without_failing"], found["held_s"]) == (rule.HELD, None, None, 1.0, True, 20.0)


def test_a_claim_at_twice_its_level_for_a_run_of_seconds_slowed_a_queue_that_kept_up():
    found = judged(steady(80), p99s(80, before=1.0, during=9.0))
    assert (found["verdict"], found["seconds_to_slow"], found["seconds_to_fall_behind"], found["claim_level_ms"]) \
        == (rule.SLOWED, 0.0, None, 0.5)


@pytest.mark.parametrize("slow_s, to_slow", [(rule.SLOW_RUN_S - 1, None), (rule.SLOW_RUN_S, 5.0)])
def test_the_claim_is_slow_only_for_a_run_of_seconds_at_the_factor(slow_s, to_slow):
    p99 = p99s(80)
    p99[25:25 + slow_s] = 2.0 * rule.SLOW_FACTOR  # p50 at the factor exactly: slow
    assert judged(steady(80), p99)["seconds_to_slow"] == to_slow


def test_the_claim_level_is_the_median_second_before_the_hold_so_one_slow_second_does_not_raise_it():
    p99 = p99s(80, during=3.0)
    p99[12] = 500.0  # one slow second before the hold: the highest before it would hide the hold's slowing
    found = judged(steady(80), p99)
    assert (found["claim_level_ms"], found["verdict"]) == (0.5, rule.SLOWED)
    none_before = p99s(80, during=9.0)
    none_before[:int(PIN_FROM)] = np.nan  # no claim before the hold: no level, so nothing reads as slow
    assert (judged(steady(80), none_before)["seconds_to_slow"], judged(steady(80), none_before)["verdict"]) == \
        (None, rule.HELD)


def test_a_second_with_no_claim_is_slow_where_jobs_waited_beyond_the_level_and_not_where_none_did():
    p99 = p99s(80)
    p99[int(PIN_FROM):int(PIN_FROM) + 8] = np.nan  # no claim returned in the hold's first 8 seconds
    waiting = steady(80)
    waiting[int(PIN_FROM):int(PIN_FROM) + 8] = 50.0
    assert judged(waiting, p99)["seconds_to_slow"] == 0.0
    assert judged(steady(80), p99)["seconds_to_slow"] is None  # an empty queue's workers had nothing to claim


@pytest.mark.parametrize("above_s, to_behind", [(rule.BEHIND_RUN_S - 1, None), (rule.BEHIND_RUN_S, 3.0)])
def test_the_queue_fell_behind_only_where_its_backlog_stays_above_its_level_for_a_run_of_seconds(above_s, to_behind):
    backlog = steady(80)
    backlog[23:23 + above_s] = 50.0
    assert judged(backlog, p99s(80))["seconds_to_fall_behind"] == to_behind


@pytest.mark.parametrize("backlog, to_behind", [(590.0, None), (610.0, 0.0)])
def test_the_queue_fell_behind_only_beyond_a_second_of_arrivals(backlog, to_behind):
    """600 jobs arrive a second: a backlog of 590 is above the in-flight level (60) but less than a second behind;
    610 is more."""
    held = np.concatenate([steady(20, 8.0), steady(20, backlog), steady(40, 8.0)])
    found = rule.judge(series(held, p99s(80), arrived=600), PIN_FROM, PIN_TO, 80.0)
    assert (found["backlog_level"], found["seconds_to_fall_behind"]) == (60.0, to_behind)


def test_an_onset_is_read_in_whole_seconds_of_the_hold_and_a_short_run_end_is_no_recovery():
    """A release stamped just after a whole second (the live release) leaves the second it falls in out of the
    hold; a backlog back for fewer than HOLD_S seconds when the run ends has not recovered; and a run that ends
    before an onset's run of seconds could be seen is watched only that long (observed_s)."""
    backlog = steady(80)
    backlog[40:] = 50.0  # behind from the second the release falls in
    assert rule.judge(series(backlog, p99s(80)), PIN_FROM, 40.2, 80.0)["seconds_to_fall_behind"] is None
    assert rule.judge(series(backlog, p99s(80)), PIN_FROM, 41.0, 80.0)["seconds_to_fall_behind"] == 20.0
    fell = np.concatenate([steady(20), steady(20, 500.0), steady(3)])  # back for 3 seconds, then the run ended
    found = rule.judge(series(fell, p99s(43, during=9.0)), PIN_FROM, PIN_TO, 43.0)
    assert (found["recovered_s"], found["verdict"]) == (None, rule.CUT_OFF)
    cut = rule.judge(series(steady(45), p99s(45)), PIN_FROM, PIN_TO, 45.0)
    assert (cut["held_s"], cut["observed_s"]) == (20.0, 15.0)  # 45 s of series, 10 s for an onset to be seen


def test_the_in_run_onsets_read_past_an_early_release():
    """A hold the server ended after 5 s: the queue that fell behind after it shows in the in-run onset only."""
    backlog = np.concatenate([steady(30), steady(20, 50.0), steady(30)])
    found = rule.judge(series(backlog, p99s(80)), PIN_FROM, 25.0, 80.0)
    assert (found["seconds_to_fall_behind"], found["seconds_to_fall_behind_in_run"]) == (None, 10.0)


def test_a_backlog_that_grows_during_the_hold_and_drains_after_fell_behind_and_recovered():
    backlog = np.concatenate([steady(20), np.linspace(2, 200, 20), np.linspace(180, 2, 10), steady(30)])
    found = judged(backlog, p99s(80, during=9.0))
    assert (found["verdict"], found["seconds_to_fall_behind"], found["seconds_to_slow"]) == \
        (rule.FELL_BEHIND, 1.0, 0.0)  # the backlog is at its level (2) in the hold's first second, above from the next
    assert found["recovered_s"] == 10.0  # the backlog is back at its level at the end of the 10th second after


def test_a_backlog_that_dips_once_and_grows_again_has_not_recovered():
    backlog = np.concatenate([steady(20), np.linspace(2, 200, 20), [2.0], np.linspace(200, 400, 39)])
    found = judged(backlog, p99s(80, during=5.0))
    assert (found["recovered_s"], found["verdict"]) == (None, rule.SPIRALS)


def test_a_backlog_that_never_comes_back_within_the_time_spirals():
    backlog = np.concatenate([steady(20), np.linspace(2, 200, 20), np.linspace(200, 400, 40)])
    found = judged(backlog, p99s(80, during=5.0))
    assert (found["verdict"], found["recovered_s"], found["held_without_failing"]) == (rule.SPIRALS, None, False)
    # the same, seen for less than RECOVER_WITHIN_S after the release: a lower bound, not a spiral
    short = np.concatenate([steady(20), np.linspace(2, 200, 20), np.linspace(200, 300, 10)])
    assert judged(short, p99s(50, during=5.0))["verdict"] == rule.CUT_OFF


@pytest.mark.parametrize("back_after_s, verdict", [(30, rule.FELL_BEHIND), (31, rule.SPIRALS)])
def test_a_backlog_back_at_the_edge_of_the_time_recovered_and_one_later_spirals(back_after_s, verdict):
    """Back at its level at the end of the 30th second after the release: recovered in time; the 31st: not,
    though recovered_s says when it came back."""
    drain = np.linspace(200, 50, back_after_s - 1)
    backlog = np.concatenate([steady(20), np.linspace(2, 200, 20), drain, steady(20)])
    found = judged(backlog, p99s(len(backlog), during=5.0))
    assert (found["verdict"], found["recovered_s"]) == (verdict, float(back_after_s))


@pytest.mark.parametrize("flags", [{"arrivals_behind": True}, {"cpu_bound": True}])
def test_a_run_that_could_not_carry_its_load_is_not_judged_and_keeps_what_the_rule_said(flags):
    found = judged(steady(80), p99s(80, before=1.0, during=9.0), **flags)
    assert (found["verdict"], found["verdict_if_judged"]) == (rule.NOT_JUDGED, rule.SLOWED)


def test_the_before_hold_window_skips_the_warm_up_and_its_highest_backlog_is_the_level():
    backlog = np.concatenate([[500.0] * int(rule.WARMUP_S), steady(15, 3.0), steady(45, 3.0)])
    found = judged(backlog, p99s(65))
    assert found["backlog_level"] == 3.0 and found["verdict"] == rule.HELD


def test_a_backlog_that_wavers_within_the_slack_after_the_hold_has_recovered_and_one_beyond_has_not():
    """Jobs in flight between polls: where 600 arrive a second, a backlog of 10 to 50 (within 0.1 s of arrivals) is
    a queue keeping up, though above the highest backlog before the hold (8); one of 70 is not."""
    p99 = p99s(80, during=9.0)
    level = 600 * rule.BACKLOG_SLACK_S
    for after, recovered_s, verdict in (([10.0, 50.0, 30.0, 45.0], 1.0, rule.FELL_BEHIND),
                                        ([10.0, 70.0, 30.0, 70.0], None, rule.SPIRALS)):
        backlog = np.concatenate([steady(20, 8.0), steady(20, 1500.0), np.tile(after, 10)])
        found = rule.judge(series(backlog, p99, arrived=600), PIN_FROM, PIN_TO, 80.0)
        assert (found["backlog_level"], found["recovered_s"], found["verdict"]) == (level, recovered_s, verdict)


def test_arrivals_in_steps_widen_the_level_by_a_step_s_jobs_and_only_where_they_come_in_steps():
    """A job library's arrivals, 600 a second in steps 0.2 s apart: a backlog wavering up to 150 after the release
    is a step's jobs in flight (the level is 0.3 s of arrivals, 180); the same series from arrivals that come as
    they fall due has not recovered (0.1 s, 60). A backlog beyond a step's jobs has not recovered either way."""
    p99 = p99s(80, during=9.0)
    for after, step_s, level, recovered_s, verdict in (
            ([10.0, 150.0, 30.0, 120.0], 0.2, 180.0, 1.0, rule.FELL_BEHIND),
            ([10.0, 150.0, 30.0, 120.0], 0.0, 60.0, None, rule.SPIRALS),
            ([10.0, 250.0, 30.0, 220.0], 0.2, 180.0, None, rule.SPIRALS)):
        backlog = np.concatenate([steady(20, 8.0), steady(20, 1500.0), np.tile(after, 10)])
        found = rule.judge(series(backlog, p99, arrived=600), PIN_FROM, PIN_TO, 80.0, step_s=step_s)
        assert (found["backlog_level"], found["recovered_s"], found["verdict"]) == \
            pytest.approx((level, recovered_s, verdict)), (after, step_s, found)


def test_the_row_versions_a_hold_keeps_are_counted_from_its_start_and_only_where_something_held():
    """Each job claimed since the hold began left its claim's UPDATE and its finish: VERSIONS_PER_JOB each, counted
    to the onset second's start."""
    p99 = p99s(80)
    p99[25:40] = 9.0  # slow from the hold's sixth second: the five seconds before it claimed 10 jobs each
    found = rule.judge(series(steady(80), p99, arrived=10), PIN_FROM, PIN_TO, 80.0, held=True)
    assert (found["seconds_to_slow"], found["unremovable_at_slow"]) == (5.0, rule.VERSIONS_PER_JOB * 10 * 5)
    assert rule.judge(series(steady(80), p99, arrived=10), PIN_FROM, PIN_TO, 80.0)["unremovable_at_slow"] is None


def test_arrivals_that_fall_behind_their_schedule_mark_the_run():
    on_time = series(steady(30), np.ones(30), arrived=100)
    assert not rule.arrivals_behind(on_time, 100.0)
    assert rule.arrivals_behind(on_time, 120.0)  # 100 a second arrived where 120 were due


def test_the_series_counts_each_second_and_its_backlog_and_quantiles():
    start = 10 * 10**9
    arrivals = start + np.array([0.1, 0.2, 1.5, 2.5, 2.6]) * 1e9
    claims = start + np.array([0.3, 1.6, 2.7]) * 1e9
    frame = rule.per_second(arrivals.astype(np.int64), claims.astype(np.int64), np.array([1.0, 2.0, 3.0]), start,
                            3.0)
    assert list(frame["arrived"]) == [2, 1, 2] and list(frame["claimed"]) == [1, 1, 1]
    assert list(frame["backlog"]) == [1, 1, 2] and list(frame["claim_p99_ms"]) == [1.0, 2.0, 3.0]


# --------------------------------------------------------------------------- the CPU mark


def cpu_samples(busy) -> pd.DataFrame:
    """The sampler's samples, one a second from 0 s, with this machine's busy share as given (None: not read)."""
    return pd.DataFrame({"t_s": np.arange(len(busy), dtype=float), "cpu_busy_share": pd.array(busy, dtype="Float64")})


def busy_from(seconds: int, start: int, length: int, level: float = 0.95, rest: float = 0.3) -> list:
    values = [rest] * seconds
    values[start:start + length] = [level] * length
    return values


@pytest.mark.parametrize("busy, expected", [
    (busy_from(50, 0, 0), None),  # never full: no mark
    (busy_from(50, 25, 10), 5.0),  # full from 25 s, 5 s into the hold
    (busy_from(50, 12, 5), -8.0),  # full from 12 s, before the hold: below 0
    (busy_from(50, 25, 4), None),  # four seconds in a row are not five
    (busy_from(50, 25, 10, level=0.89), None),  # under the line
    (busy_from(50, 25, 10, level=0.9), 5.0),  # on it
    (busy_from(50, 0, 5), None),  # the warm-up's seconds are not read
    (busy_from(50, 38, 10), None),  # from 38 s: two seconds before the release, the rest after it, not read
])
def test_the_cpu_mark_comes_at_the_first_of_five_seconds_the_machine_was_full(busy, expected):
    mark = rule.cpu_mark(cpu_samples(busy), PIN_FROM, PIN_TO)
    assert mark["cpu_measured"] and mark["cpu_bound_from_s"] == expected, mark


def test_a_missing_sample_breaks_a_run_of_full_seconds():
    """Full from 25 to 34 s, the sample at 27 s not taken: 25 and 26 s are two in a row, the mark waits for 28 s."""
    samples = cpu_samples(busy_from(50, 25, 10))
    assert rule.cpu_mark(samples[samples["t_s"] != 27], PIN_FROM, PIN_TO)["cpu_bound_from_s"] == 8.0


def test_the_cpu_mark_gives_the_busy_shares_before_and_in_the_hold_and_says_when_none_was_read():
    mark = rule.cpu_mark(cpu_samples(busy_from(50, 20, 20, level=0.95, rest=0.3)), PIN_FROM, PIN_TO)
    assert (mark["cpu_busy_before"], mark["cpu_busy_hold"]) == (pytest.approx(0.3), pytest.approx(0.95))
    unread = {"cpu_measured": False, "cpu_bound_from_s": None, "cpu_busy_before": None, "cpu_busy_hold": None}
    assert rule.cpu_mark(cpu_samples([None] * 50), PIN_FROM, PIN_TO) == unread
    assert rule.cpu_mark(pd.DataFrame({"t_s": [1.0, 2.0]}), PIN_FROM, PIN_TO) == unread  # stored before it was read


def test_the_summary_says_the_table_as_the_hold_found_it():
    """Dead tuples at the last sample before the hold, and the seconds since autovacuum's count last rose by then;
    None where it had not risen yet, or nothing was sampled before the hold."""
    from harness.experiments.soak import sampler
    t = np.arange(0.0, 40.0)
    samples = pd.DataFrame({"t_s": t + 0.01, "n_dead_tup": t * 100, "autovacuum_count": np.where(t >= 12, 1, 0)
                            + np.where(t >= 30, 1, 0)})
    assert sampler.at_hold(samples, 20.0) == {"dead_tuples_at_hold": 1900, "autovacuum_before_hold_s": 8.0}
    assert sampler.at_hold(samples, 10.0)["autovacuum_before_hold_s"] is None
    assert sampler.at_hold(samples, 0.0) == {"dead_tuples_at_hold": None, "autovacuum_before_hold_s": None}
    assert sampler.at_hold(pd.DataFrame(columns=sampler.SAMPLE_COLUMNS), 20.0)["dead_tuples_at_hold"] is None


def test_the_claim_s_plan_is_named_by_the_node_that_reads_the_table():
    """EXPLAIN's JSON as PostgreSQL 16 gives it for the claim's read: the table reached by an index or a scan of it
    all, under the limit and a sort, or the first partition's under an append; nothing where no node reads one."""
    from harness.experiments.soak import sampler
    indexed = {"Node Type": "Limit", "Plans": [{"Node Type": "Index Scan", "Relation Name": "jobs",
                                                  "Index Name": "jobs_pkey"}]}
    scanned = {"Node Type": "Limit", "Plans": [{"Node Type": "Sort", "Plans": [
        {"Node Type": "Seq Scan", "Relation Name": "jobs"}]}]}
    appended = {"Node Type": "Limit", "Plans": [{"Node Type": "Merge Append", "Plans": [
        {"Node Type": "Sort", "Plans": []}, {"Node Type": "Index Scan", "Relation Name": "jobs_1",
                                               "Index Name": "jobs_1_pkey"}]}]}
    assert sampler.scan_of(indexed) == "Index Scan using jobs_pkey"
    assert sampler.scan_of(scanned) == "Seq Scan"
    assert sampler.scan_of(appended) == "Index Scan using jobs_1_pkey"
    assert sampler.scan_of({"Node Type": "Result"}) == ""
