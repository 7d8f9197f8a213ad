"""Every verdict rule on synthetic inputs built here: each rule returns each verdict it can return.

No database: the races are one-row-per-race summaries, the plans and churn are the
facts dicts the rules read, the waits are per-race figures.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from harness.article import contents, findings
from harness.article.sections import (backend_time, bench as bench_rules, churn as churn_rules, faults as fault_rules,
                                      guard_cost, job_wait, library_faults as fault_section,
                                      library_poolers as pooler_section,
                                      libraries as library_rules, plans as plan_rules, production as production_rules,
                                      race_sweep, should_switch, soak as soak_section, strategies as strategy_rules,
                                      without_guard)
from harness.article.compare import Races
from harness.errors import UserError
from harness.article.findings import (ADDED, ADDED_NONE_SEEN, CONFIRMED, CONFIRMED_DIFFERENT_SIZE, CONFIRMED_IN_PART, CORRECTED, NOT_DISTINGUISHABLE,
                                      NOT_MEASURED, NOT_REPRODUCED)

# --------------------------------------------------------------------------- synthetic races


def race(strategy: str, workers: int, repeat: int = 0, jobs: int = 10_000, **figures) -> dict:
    """One race's summary row: a clean drain of `jobs` jobs unless figures say otherwise."""
    row = {"run_id": f"{strategy}-w{workers}-r{repeat}", "strategy": strategy, "worker_count": workers,
           "repeat": repeat, "job_count": jobs, "attempts": jobs, "wins": jobs, "lost": 0, "errors": 0,
           "duplicate_jobs": 0, "extra_claims": 0, "distinct_jobs_claimed": jobs, "losses_per_win": 0.0,
           "claims_per_second": 1000.0, "unique_jobs_per_second": 1000.0, "attempts_per_second": 1000.0,
           "p50_ms": 0.5, "p99_ms": 1.5, "wall_seconds": 10.0, "empty_while_jobs_remained": 0}
    row.update(figures)
    return row


def races(*rows: dict) -> Races:
    return Races(pd.DataFrame(rows))


def sweep(strategy: str, workers, **per_worker) -> list[dict]:
    """One race per worker count; each keyword maps a worker count to a figure (a callable of it)."""
    return [race(strategy, w, **{k: f(w) for k, f in per_worker.items()}) for w in workers]


WORKERS = (1, 2, 4, 8, 16, 32, 100)


def verdict(finding) -> str:
    assert finding.verdict in findings.VERDICTS
    return finding.verdict


# --------------------------------------------------------------------------- F1: a share of the jobs, at 2 workers


def repeated(strategy: str, per_worker: dict, column: str, **fixed) -> list[dict]:
    """One race per repeat and worker count: per_worker maps a worker count to its figure in each repeat."""
    return [race(strategy, w, r, **{column: v}, **fixed) for w, vs in per_worker.items() for r, v in enumerate(vs)]


@pytest.mark.parametrize("per_worker, expected", [
    ({1: [0], 2: [9_700, 9_763, 9_800]}, CONFIRMED),  # the original's 9,763 lies within our repeats
    ({1: [0], 2: [7_500, 7_651, 7_800]}, CONFIRMED_DIFFERENT_SIZE),
    ({1: [0], 4: [9_763]}, CONFIRMED_DIFFERENT_SIZE),  # no 2-worker point: the claim is about 2
    ({1: [0], 2: [1, 3, 2]}, NOT_REPRODUCED),  # under one job in a hundred in every repeat: an accident
    ({1: [0], 2: [50, 150, 90]}, NOT_DISTINGUISHABLE),  # the repeats span 1%
    ({1: [0]}, NOT_MEASURED),
])
def test_f1_needs_a_share_of_the_jobs_at_two_workers_in_every_repeat(per_worker, expected):
    found = without_guard.f1_duplicates_at_two_workers(races(*repeated("naive", per_worker, "duplicate_jobs")))
    assert verdict(found) == expected
    if expected != NOT_MEASURED:
        assert "jobs" in found.ours and found.values["job_count"] == "10,000"


@pytest.mark.parametrize("arm, sweep_rows, expected, note", [
    # the arm at the original's 10,000 jobs decides, whatever the sweep of 5,000 shows
    ([9_700, 9_763, 9_800], [4_000], CONFIRMED, "on 10,000 jobs"),
    ([7_792, 8_854, 9_074], [4_880], CONFIRMED_DIFFERENT_SIZE, "rather than the original's 97.6%"),
    ([10, 30, 20], [4_880], NOT_REPRODUCED, "rare accident"),
    (None, [4_880, 4_881, 4_882], CONFIRMED_DIFFERENT_SIZE, "not the original's 10,000"),  # no arm: the sweep's share
])
def test_f1_is_judged_on_the_original_size_arm_where_it_was_raced(arm, sweep_rows, expected, note):
    sweep = races(*repeated("naive", {1: [0], 2: sweep_rows}, "duplicate_jobs", jobs=5_000))
    original = races(*repeated("naive", {2: arm}, "duplicate_jobs")) if arm else None
    found = without_guard.f1_duplicates_at_two_workers(sweep, original)
    assert verdict(found) == expected and note in found.note + found.ours
    assert found.values["job_count"] == ("10,000" if arm else "5,000")


def test_f1_confirms_only_on_the_original_queue_length():
    # 97.6% of a 300-job queue is the original's share, not its figure of 9,763 of 10,000
    short = races(*repeated("naive", {2: [293]}, "duplicate_jobs", jobs=300))
    found = without_guard.f1_duplicates_at_two_workers(races(), short)
    assert verdict(found) == CONFIRMED_DIFFERENT_SIZE and "not the original's 10,000" in found.note


# --------------------------------------------------------------------------- F2: compounding


@pytest.mark.parametrize("per_worker, expected", [
    ({2: [1_000, 1_200], 4: [3_000, 3_500], 8: [9_000, 9_500]}, CONFIRMED),
    ({2: [1_000, 6_000], 4: [3_000, 5_000], 8: [5_500, 7_000]}, NOT_DISTINGUISHABLE),  # rising medians, ends overlap
    ({2: [9_000, 9_500], 4: [5_000, 5_100], 8: [1_000, 1_200]}, NOT_REPRODUCED),
    ({1: [0], 4: [3_000]}, NOT_MEASURED),  # one contended point is no trend
])
def test_f2_extra_claims_per_job_must_rise_beyond_the_spread(per_worker, expected):
    found = without_guard.f2_duplicates_compound(races(*repeated("naive", per_worker, "extra_claims")))
    assert verdict(found) == expected


# --------------------------------------------------------------------------- F3: naive's counted rate


def _f3(naive_rates, naive_distinct, skip_rates, workers=(4,)):
    """naive against skip_locked at each worker count: one race per rate given."""
    rows = ([race("naive", w, r, claims_per_second=v, unique_jobs_per_second=naive_distinct)
             for w in workers for r, v in enumerate(naive_rates)]
            + [race("skip_locked", w, r, claims_per_second=v, unique_jobs_per_second=v)
               for w in workers for r, v in enumerate(skip_rates)])
    return guard_cost.f3_naive_looks_fastest(races(*rows))


@pytest.mark.parametrize("naive_rates, naive_distinct, skip_rates, expected, parts", [
    ((5_900, 6_000, 6_100), 2_000, (4_000, 4_100, 4_200), CONFIRMED, (CONFIRMED, CONFIRMED)),
    ((12_000, 12_200, 12_500), 2_000, (4_000, 4_100, 4_200), CONFIRMED_DIFFERENT_SIZE, (CONFIRMED, CONFIRMED)),
    ((6_100, 6_200, 6_300), 5_000, (4_000, 4_100, 4_200), CORRECTED, (CONFIRMED, CORRECTED)),  # ahead, once each
    ((3_000, 3_100, 3_200), 2_000, (4_000, 4_100, 4_200), NOT_REPRODUCED, (NOT_REPRODUCED, CONFIRMED)),
    ((3_000, 4_000, 5_000), 2_000, (4_000, 4_100, 4_200), NOT_DISTINGUISHABLE, (NOT_DISTINGUISHABLE, CONFIRMED)),
    # its duplicates lift its counted rate, but counted once it is within skip_locked's spread: not told apart
    ((5_900, 6_000, 6_100), 4_100, (4_000, 4_100, 4_200), NOT_DISTINGUISHABLE, (CONFIRMED, NOT_DISTINGUISHABLE)),
    ((5_900, 6_100), 2_000, (4_000, 4_200), NOT_MEASURED, ()),  # two races a side decide nothing
])
def test_f3_is_judged_per_part_beyond_the_spread(naive_rates, naive_distinct, skip_rates, expected, parts):
    found = _f3(naive_rates, naive_distinct, skip_rates)
    assert verdict(found) == expected
    assert tuple(v for _, v in found.parts) == parts
    if parts:  # the label names every part, so it agrees with the figures beside it
        assert "looks fastest: " in found.verdict_label and "because duplicates count: " in found.verdict_label


def test_f3_needs_a_lead_at_most_worker_counts_not_at_one():
    # ahead beyond the spread at 1 worker only, overlapping at 2 and 4: not distinguishable
    rows = ([race("naive", 1, r, claims_per_second=v, unique_jobs_per_second=v * 0.9)
             for r, v in enumerate((5_000, 5_050, 5_100))]
            + [race("skip_locked", 1, r, claims_per_second=v, unique_jobs_per_second=v)
               for r, v in enumerate((4_900, 4_920, 4_950))]
            + [race(s, w, r, claims_per_second=v, unique_jobs_per_second=v) for s in ("naive", "skip_locked")
               for w in (2, 4) for r, v in enumerate((4_000, 4_500, 5_000))])
    found = guard_cost.f3_naive_looks_fastest(races(*rows))
    assert dict(found.parts)["looks fastest"] == NOT_DISTINGUISHABLE and found.values["fastest_at"] == "1"
    # CPU-bound points are not among the compared ones
    bound = [{**row, "cpu_bound": row["worker_count"] != 1} for row in rows]
    found = guard_cost.f3_naive_looks_fastest(races(*bound))
    assert found.worker_counts_used == (1,) and dict(found.parts)["looks fastest"] == CONFIRMED


def test_f3_is_not_measured_without_naive():
    assert verdict(guard_cost.f3_naive_looks_fastest(races(*sweep("guarded", (1, 4))))) == NOT_MEASURED


# --------------------------------------------------------------------------- F4


@pytest.mark.parametrize("duplicates, expected", [(0, CONFIRMED), (3, NOT_REPRODUCED)])
def test_f4_guarded_never_hands_a_job_out_twice(duplicates, expected):
    rows = sweep("guarded", (1, 4), duplicate_jobs=lambda w: duplicates if w == 4 else 0)
    assert verdict(without_guard.f4_guarded_no_duplicates(races(*rows))) == expected
    assert verdict(without_guard.f4_guarded_no_duplicates(races(*sweep("naive", (1, 4))))) == NOT_MEASURED


# --------------------------------------------------------------------------- F5: against the N-1 ceiling


@pytest.mark.parametrize("per_worker, expected, parts", [
    # the share of the N-1 ceiling rises (0.14 -> 0.16 -> 0.22): faster than workers, and about 22 at 100
    ({4: [0.4, 0.45], 8: [1.1, 1.2], 100: [21.8, 22.3]}, CONFIRMED, (CONFIRMED, NOT_MEASURED, CONFIRMED)),
    ({4: [0.4, 0.45], 8: [1.1, 1.2], 100: [40.0, 41.0]}, CONFIRMED_DIFFERENT_SIZE,
     (CONFIRMED, NOT_MEASURED, CONFIRMED_DIFFERENT_SIZE)),
    # (0.5 -> 0.8 -> 0.9), half the original's about 1 at 2 workers: at 2 the share is at most 100%, so about 1
    # there leaves no room to rise
    ({2: [0.45, 0.5], 4: [2.4, 2.5], 8: [6.3, 6.4]}, CONFIRMED_DIFFERENT_SIZE,
     (CONFIRMED, CONFIRMED_DIFFERENT_SIZE, NOT_MEASURED)),
    ({4: [2.2, 2.5], 8: [6.0, 6.6]}, CONFIRMED, (CONFIRMED, NOT_MEASURED, NOT_MEASURED)),  # no size to compare
    # the share falls (0.95 -> 0.6 -> 0.45): lost races rise, but slower than workers
    ({2: [0.9, 1.0], 4: [1.7, 1.9], 8: [3.0, 3.3]}, CORRECTED, (CORRECTED, CONFIRMED, NOT_MEASURED)),
    ({2: [0.3, 1.0], 4: [1.0, 2.5], 8: [2.0, 6.0]}, NOT_DISTINGUISHABLE,
     (NOT_DISTINGUISHABLE, CONFIRMED, NOT_MEASURED)),
    ({4: [1.4]}, NOT_MEASURED, ()),
])
def test_f5_growth_against_workers_and_both_sizes_each_part_with_each_outcome(per_worker, expected, parts):
    found = guard_cost.f5_lost_races_per_win(races(race("guarded", 1),
                                                   *repeated("guarded", per_worker, "losses_per_win")))
    assert verdict(found) == expected
    assert tuple(v for _, v in found.parts) == parts
    if parts:
        assert "ceiling" in found.note and found.values["ceiling_share_high"] and found.values["growth"] in found.note


def test_f5_the_original_own_figures_grow_slower_than_workers():
    # about 1 at 2 workers (100% of the ceiling) and about 22 at 100 (22%): the original's words do not hold
    rows = repeated("guarded", {2: [1.0, 1.0], 8: [5.0, 5.2], 100: [22.0, 22.0]}, "losses_per_win")
    found = guard_cost.f5_lost_races_per_win(races(*rows))
    assert verdict(found) == CORRECTED
    assert tuple(v for _, v in found.parts) == (CORRECTED, CONFIRMED, CONFIRMED)


def test_f5_reads_100_workers_from_the_split_arm_where_the_sweep_was_cpu_bound():
    sweep_rows = [*repeated("guarded", {2: [0.95, 1.0], 4: [2.4, 2.5]}, "losses_per_win"),
                  *repeated("guarded", {100: [5.0, 6.0]}, "losses_per_win", cpu_bound=True)]
    split = races(*repeated("guarded", {100: [13.0, 13.5]}, "losses_per_win", cpu_bound=False))
    found = guard_cost.f5_lost_races_per_win(races(*sweep_rows), split)
    assert dict(found.parts)["about 22 at 100 workers"] == CONFIRMED_DIFFERENT_SIZE
    assert "separate CPUs" in found.note and "13" in found.note
    bound_split = races(*repeated("guarded", {100: [13.0, 13.5]}, "losses_per_win", cpu_bound=True))
    found = guard_cost.f5_lost_races_per_win(races(*sweep_rows), bound_split)
    assert dict(found.parts)["about 22 at 100 workers"] == NOT_MEASURED and "was CPU-bound" in found.note
    found = guard_cost.f5_lost_races_per_win(races(*sweep_rows[:4]))
    assert dict(found.parts)["about 22 at 100 workers"] == NOT_MEASURED and "No race at 100" in found.note


def test_f5_uses_every_worker_count():
    # the ends alone would look like growth; the middle says otherwise
    rows = [race("guarded", w, losses_per_win=v) for w, v in {2: 1.0, 4: 9.0, 8: 2.0, 16: 1.5, 100: 1.2}.items()]
    found = guard_cost.f5_lost_races_per_win(races(*rows))
    assert verdict(found) == CORRECTED and dict(found.parts)["much faster than workers"] == CORRECTED


# --------------------------------------------------------------------------- F6: against the lower bound


@pytest.mark.parametrize("rate, p99_at_one, expected", [
    (lambda w: 1_300 / w ** 0.5, 1.2, CONFIRMED),
    (lambda w: 1_100 / w ** 0.5, 1.2, CONFIRMED),  # "1,100+" is a lower bound: equal to it is enough
    (lambda w: 900 / w ** 0.5, 1.2, CONFIRMED_DIFFERENT_SIZE),
    (lambda w: 4_000 / w ** 0.5, 3.0, CONFIRMED_DIFFERENT_SIZE),
    (lambda w: 1_000 + w, 1.2, NOT_REPRODUCED),
])
def test_f6_guarded_falls_with_workers_from_at_least_1100_claims_per_second(rate, p99_at_one, expected):
    rows = sweep("guarded", WORKERS, claims_per_second=rate, p99_ms=lambda w: p99_at_one if w == 1 else 10.0)
    assert verdict(guard_cost.f6_guarded_slows_down(races(*rows))) == expected


def test_f6_judges_each_part_beyond_the_spread():
    # the case: p99 2.25 [2.05-4.20] ms at one worker is above 2 ms in every repeat
    rows = (repeated("guarded", {1: [1_500, 1_600, 1_550]}, "claims_per_second", p99_ms=2.25)
            + [race("guarded", 1, 0, claims_per_second=1_500, p99_ms=2.05)][:0]
            + repeated("guarded", {8: [500, 600, 550]}, "claims_per_second"))
    rows[0]["p99_ms"], rows[1]["p99_ms"], rows[2]["p99_ms"] = 2.05, 2.25, 4.20
    found = guard_cost.f6_guarded_slows_down(races(*rows))
    assert dict(found.parts) == {"falls with workers": CONFIRMED, "1,100+ claims/s at 1 worker": CONFIRMED,
                                 "p99 under 2 ms at 1 worker": CONFIRMED_DIFFERENT_SIZE}
    assert verdict(found) == CONFIRMED_DIFFERENT_SIZE
    rows[0]["p99_ms"] = 1.5  # the repeats now span 2 ms
    parts = dict(guard_cost.f6_guarded_slows_down(races(*rows)).parts)
    assert parts["p99 under 2 ms at 1 worker"] == NOT_DISTINGUISHABLE
    overlapping = repeated("guarded", {1: [1_500, 1_600], 8: [1_400, 1_650]}, "claims_per_second", p99_ms=1.0)
    assert verdict(guard_cost.f6_guarded_slows_down(races(*overlapping))) == NOT_DISTINGUISHABLE


def test_f6_falls_when_most_steps_fall_not_only_the_ends():
    rates = {1: 1_500, 2: 1_400, 4: 1_450, 8: 1_300, 16: 1_200, 32: 1_000, 100: 900}
    rows = [race("guarded", w, claims_per_second=r, p99_ms=1.0) for w, r in rates.items()]
    assert verdict(guard_cost.f6_guarded_slows_down(races(*rows))) == CONFIRMED
    rows = [race("guarded", w, claims_per_second=r, p99_ms=1.0)
            for w, r in {1: 1_500, 2: 2_000, 4: 2_100, 8: 2_200, 16: 2_000, 32: 1_900, 100: 1_400}.items()]
    found = guard_cost.f6_guarded_slows_down(races(*rows))  # rises, then falls: most steps do not fall
    assert verdict(found) == NOT_DISTINGUISHABLE and dict(found.parts)["falls with workers"] == NOT_DISTINGUISHABLE
    assert verdict(guard_cost.f6_guarded_slows_down(races(race("guarded", 1)))) == NOT_MEASURED


@pytest.mark.parametrize("lock, runnable, cause, reading", [
    (0.6, 0.1, "is contention on the head of the queue", False),
    (0.01, 0.4, "waited longer for a CPU than on locks", True),
])
def test_f6_states_a_cause_only_when_the_activity_sampling_measured_it(lock, runnable, cause, reading):
    rows = sweep("guarded", (1, 4, 100), claims_per_second=lambda w: 2_000 / w, p99_ms=lambda w: 1.0)
    shares = pd.DataFrame([{"strategy": "guarded", "worker_count": 100, "row or transaction lock": lock,
                            "runnable_share": runnable, "running_share": 0.3}])
    found = guard_cost.f6_guarded_slows_down(races(*rows), shares)
    assert cause in found.note
    assert ("One reading is" in found.note) == reading
    assert "CPUs" not in guard_cost.f6_guarded_slows_down(races(*rows)).note, "no fixed explanation without data"


# --------------------------------------------------------------------------- F7: waste is attempts without a job


def _f7(skip_rate=2_000.0, guarded_rate=100.0, top=100, **skip_figures):
    rows = (sweep("guarded", (1, 4, top), claims_per_second=lambda w: guarded_rate)
            + [race("skip_locked", w, claims_per_second=skip_rate, **skip_figures) for w in (1, 4, top)])
    return should_switch.f7_skip_locked_no_waste(races(*rows))


@pytest.mark.parametrize("kwargs, expected", [
    ({}, CONFIRMED),
    ({"skip_rate": 500.0}, CONFIRMED_DIFFERENT_SIZE),
    # 20x, but not at the original's high concurrency: its size is not measured, so never a bare "confirmed"
    ({"top": 32}, CONFIRMED_IN_PART),
    ({"empty_while_jobs_remained": 2}, CORRECTED),  # empty looks while jobs remained are wasted attempts
    ({"errors": 1}, CORRECTED),
    ({"duplicate_jobs": 1}, NOT_REPRODUCED),
    ({"skip_rate": 90.0}, NOT_REPRODUCED),
])
def test_f7_judges_no_wasted_attempts_by_empty_looks_while_jobs_remained(kwargs, expected):
    found = _f7(**kwargs)
    assert verdict(found) == expected
    assert [p for p, _ in found.parts] == ["no duplicates", "no wasted attempts", "faster under contention",
                                           "about 20x at 100 workers"]
    if kwargs == {"top": 32}:
        assert dict(found.parts)["about 20x at 100 workers"] == NOT_MEASURED and "not raced at 100" in found.note


def test_f7_reads_100_workers_from_the_split_arm_where_the_sweep_was_cpu_bound():
    sweep_rows = ([race(s, w, r, claims_per_second=rate) for s, rate in (("guarded", 100.0), ("skip_locked", 900.0))
                   for w in (1, 4) for r in range(3)]
                  + [race(s, 100, r, claims_per_second=rate, cpu_bound=True)
                     for s, rate in (("guarded", 100.0), ("skip_locked", 2_000.0)) for r in range(3)])
    split = races(*[race(s, 100, r, claims_per_second=rate) for s, rate in (("guarded", 100.0), ("skip_locked", 960.0))
                    for r in range(3)])
    found = should_switch.f7_skip_locked_no_waste(races(*sweep_rows), split)
    assert dict(found.parts)["about 20x at 100 workers"] == CONFIRMED_DIFFERENT_SIZE
    assert verdict(found) == CONFIRMED_DIFFERENT_SIZE and "separate CPUs" in found.note and "9.6x" in found.note
    bound_split = races(*[{**row, "cpu_bound": True} for row in split.summary.to_dict("records")])
    found = should_switch.f7_skip_locked_no_waste(races(*sweep_rows), bound_split)
    assert dict(found.parts)["about 20x at 100 workers"] == NOT_MEASURED and verdict(found) == CONFIRMED_IN_PART
    assert "was CPU-bound" in found.note


def test_f7_is_not_measured_without_skip_locked_or_without_contention():
    assert verdict(should_switch.f7_skip_locked_no_waste(races(race("guarded", 4)))) == NOT_MEASURED
    one_worker = races(race("guarded", 1), race("skip_locked", 1))
    assert verdict(should_switch.f7_skip_locked_no_waste(one_worker)) == NOT_MEASURED


def test_f7_pairs_repeats_for_its_spread():
    rows = [race("guarded", 4, r, claims_per_second=100.0) for r in range(3)] + \
           [race("skip_locked", 4, r, claims_per_second=v) for r, v in enumerate((1_500.0, 2_000.0, 2_500.0))]
    found = should_switch.f7_skip_locked_no_waste(races(*rows))
    assert found.values["speedup"] == "20x [15\u201325]"
    rows = [race("guarded", 4, r, claims_per_second=100.0) for r in range(3)] + \
           [race("skip_locked", 4, r, claims_per_second=v) for r, v in enumerate((90.0, 150.0, 200.0))]
    assert verdict(should_switch.f7_skip_locked_no_waste(races(*rows))) == NOT_DISTINGUISHABLE


def attempts(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["worker_index", "attempt_seq", "start_ns", "latency_ns", "outcome"])


def test_an_empty_look_is_wasted_when_a_later_attempt_still_won_a_job():
    frame = attempts([(0, 0, 0, 10, "won"), (1, 0, 0, 10, "empty"),  # worker 1 gave up early
                      (0, 1, 20, 10, "won"), (0, 2, 40, 10, "empty")])  # the final empty look is not waste
    assert race_sweep.empty_while_jobs_remained(frame) == 1
    assert race_sweep.empty_while_jobs_remained(frame.iloc[[0, 3]]) == 0
    assert race_sweep.empty_while_jobs_remained(attempts([(0, 0, 0, 10, "empty")])) == 0


# --------------------------------------------------------------------------- F8 per statement and per job, C4, A1


def waits(**p99s) -> pd.DataFrame:
    """Per-race wait figures: keys like guarded_100=(claim p99, wait p99), or a list of such pairs, one per repeat."""
    rows = []
    for key, pairs in p99s.items():
        strategy, workers = key.rsplit("_", 1)
        for repeat, (claim, wait) in enumerate(pairs if isinstance(pairs, list) else [pairs]):
            rows.append({"strategy": strategy, "worker_count": int(workers), "repeat": repeat,
                         "claim_p50_ms": claim / 4, "claim_p99_ms": claim, "wait_p50_ms": wait / 4,
                         "wait_p99_ms": wait})
    return pd.DataFrame(rows)


def _f8_races(skip_p99, guarded_p99):
    return races(race("guarded", 8, p99_ms=guarded_p99), race("skip_locked", 8, p99_ms=skip_p99))


@pytest.mark.parametrize("statement, per_job, expected", [
    ((9.0, 3.0), (9.5, 50.0), CONFIRMED),  # higher per statement, as the original says; lower per job: a part
    ((9.0, 3.0), (60.0, 50.0), CONFIRMED),
    ((2.0, 3.0), (9.5, 50.0), NOT_REPRODUCED),
])
def test_f8_is_decided_per_statement_with_the_job_as_a_part_of_its_own(statement, per_job, expected):
    job_waits = waits(skip_locked_8=(statement[0], per_job[0]), guarded_8=(statement[1], per_job[1]))
    found = should_switch.f8_tail_latency(_f8_races(*statement), job_waits)
    assert verdict(found) == expected
    # the per-job part is said in the note: its figures are A1's and C4's, printed once in their own rows
    assert "the time to get one" in found.note and "time to get a job" not in found.ours
    assert dict(found.parts)["per job"] == ADDED
    lower = per_job[0] < per_job[1]
    assert ("lower for skip_locked in every repeat" in found.note) == lower


def test_f8_overlapping_statement_p99s_are_not_distinguishable():
    rows = [race("guarded", 8, r, p99_ms=v) for r, v in enumerate((3.0, 9.0))] + \
           [race("skip_locked", 8, r, p99_ms=v) for r, v in enumerate((5.0, 12.0))]
    assert verdict(should_switch.f8_tail_latency(races(*rows))) == NOT_DISTINGUISHABLE


def _fixed_fill(skip: tuple, guarded: tuple) -> dict:
    """The bench's p99s at a fixed fill as (median, lowest, highest) over its pairs."""
    return {"worker_count": 8, **{f"{name}_p99_ms{end}": value for name, figure in (("skip_locked", skip),
                                                                                  ("guarded", guarded))
                                  for end, value in zip(("", "_min", "_max"), figure)}}


@pytest.mark.parametrize("skip, guarded, expected", [((9.0, 8.0, 10.0), (3.0, 2.5, 3.5), CONFIRMED),
                                                     ((2.0, 1.5, 2.2), (3.0, 2.5, 3.5), NOT_REPRODUCED),
                                                     ((3.2, 2.0, 4.0), (3.0, 2.5, 3.5), NOT_DISTINGUISHABLE)])
def test_f8_per_statement_reads_the_fixed_fill_when_the_bench_measured_it(skip, guarded, expected):
    # the whole drains point the other way on purpose: the fixed fill decides, on its pairs' spread
    found = should_switch.f8_tail_latency(_f8_races(guarded[0], skip[0]), None, _fixed_fill(skip, guarded))
    assert verdict(found) == expected
    assert "fixed fill" in found.ours


def test_f8_without_the_bench_pairs_spread_says_so_rather_than_every_repeat():
    medians_only = {"worker_count": 8, "skip_locked_p99_ms": 9.0, "guarded_p99_ms": 3.0}
    found = should_switch.f8_tail_latency(_f8_races(3.0, 9.0), None, medians_only)
    assert verdict(found) == NOT_DISTINGUISHABLE
    assert "no spread" in found.note and "every repeat" not in found.note


def test_f8_is_not_measured_without_both_strategies_under_contention():
    assert verdict(should_switch.f8_tail_latency(races(race("guarded", 100)))) == NOT_MEASURED


@pytest.mark.parametrize("claim, wait, expected", [
    ([(2.0, 144.0), (2.2, 150.0)], None, CONFIRMED),
    ([(2.0, 2.5), (2.1, 2.6)], None, NOT_REPRODUCED),
    ([(2.0, 3.0), (2.1, 9.0)], None, NOT_DISTINGUISHABLE),  # the repeats span twice the winning claim's p99
])
def test_c4_the_wait_for_a_job_must_be_clearly_fatter_in_every_repeat(claim, wait, expected):
    found = job_wait.c4_wait_for_a_job(waits(guarded_1=(1.0, 1.0), guarded_100=claim))
    assert verdict(found) == expected
    assert found.values["workers"] == "100"
    assert verdict(job_wait.c4_wait_for_a_job(waits(guarded_1=(1.0, 1.0)))) == NOT_MEASURED
    assert verdict(job_wait.c4_wait_for_a_job(None)) == NOT_MEASURED


def test_a1_compares_the_wait_for_a_job_across_strategies():
    found = job_wait.a1_time_to_get_a_job(waits(guarded_100=(3.0, 5_857.0), skip_locked_100=(9.0, 484.0)))
    assert verdict(found) == ADDED
    assert found.values["ratio"] == "12x" and "lower than guarded's in every repeat" in found.note
    overlapping = job_wait.a1_time_to_get_a_job(waits(guarded_100=[(3.0, 400.0), (3.0, 600.0)],
                                                      skip_locked_100=[(9.0, 450.0), (9.0, 500.0)]))
    assert "not distinguishable" in overlapping.note
    assert verdict(job_wait.a1_time_to_get_a_job(waits(guarded_100=(3.0, 5.0)))) == NOT_MEASURED


def test_cpu_bound_points_are_left_out_of_the_contention_verdicts():
    rows = [race("guarded", w, losses_per_win=v, cpu_bound=w >= 32) for w, v in {2: 1.0, 4: 2.4, 8: 4.3, 32: 8.0}.items()]
    found = guard_cost.f5_lost_races_per_win(races(*rows))
    assert found.worker_counts_used == (2, 4, 8) and "Not judged at 32 workers" in found.note
    only_bound = [race("guarded", w, losses_per_win=v, cpu_bound=True) for w, v in {16: 5.0, 32: 8.0}.items()]
    assert verdict(guard_cost.f5_lost_races_per_win(races(*only_bound))) == NOT_MEASURED


def test_a2_reports_where_the_time_went_only_when_sampled():
    rows = races(race("guarded", 1), race("guarded", 100))
    shares = pd.DataFrame([{"strategy": "guarded", "worker_count": 100, "row or transaction lock": 0.02,
                            "runnable_share": 0.5, "running_share": 0.4}])
    found = backend_time.a2_where_the_time_goes(rows, shares)
    assert verdict(found) == ADDED and found.values["bottleneck"] == "cpu" and found.worker_counts_used == (100,)
    assert verdict(backend_time.a2_where_the_time_goes(rows, None)) == NOT_MEASURED


def test_a2_is_read_at_the_most_workers_that_were_not_cpu_bound():
    rows = races(race("guarded", 1), race("guarded", 4, cpu_bound=False), race("guarded", 100, cpu_bound=True))
    shares = pd.DataFrame([{"strategy": "guarded", "worker_count": w, "row or transaction lock": lock,
                            "runnable_share": runnable, "running_share": 0.3}
                           for w, lock, runnable in ((4, 0.3, 0.1), (100, 0.02, 0.7))])
    found = backend_time.a2_where_the_time_goes(rows, shares)
    assert found.values["workers"] == "4" and found.values["bottleneck"] == "locks"
    assert "Not judged at 100 workers" in found.note
    only_bound = races(race("guarded", 1), race("guarded", 100, cpu_bound=True))
    found = backend_time.a2_where_the_time_goes(only_bound, shares)
    assert verdict(found) == NOT_MEASURED and "CPU-bound here (100 workers)" in found.note


@pytest.mark.parametrize("lock, runnable, result", [(0.4, 0.1, "locks"), (0.01, 0.3, "cpu"),
                                                    (0.2, None, "unmeasured"), (0.2, float("nan"), "unmeasured")])
def test_the_bottleneck_is_whichever_wait_was_measured_longer(lock, runnable, result):
    assert race_sweep.bottleneck(lock, runnable) == result


def test_fixed_fill_latency_reads_the_bench_at_its_most_workers():
    bench = pd.DataFrame({"strategy": ["guarded", "skip_locked", "guarded", "skip_locked"],
                          "worker_count": [8, 8, 100, 100], "harness_win_p99_us": [1.0, 2.0, 3000.0, 9000.0]})
    bench = bench.assign(harness_win_p99_us_min=bench["harness_win_p99_us"] * 0.9,
                         harness_win_p99_us_max=bench["harness_win_p99_us"] * 1.2)
    assert bench_rules.fixed_fill_latency(bench) == pytest.approx({
        "worker_count": 100, "skip_locked_p99_ms": 9.0, "guarded_p99_ms": 3.0, "skip_locked_p99_ms_min": 8.1,
        "skip_locked_p99_ms_max": 10.8, "guarded_p99_ms_min": 2.7, "guarded_p99_ms_max": 3.6})
    assert bench_rules.fixed_fill_latency(bench, most_workers=4) is None, "8 is beyond, and 1 worker has no rival"
    assert bench_rules.fixed_fill_latency(bench[bench["worker_count"] == 8].assign(worker_count=1)) is None
    assert bench_rules.fixed_fill_latency(None) is None
    assert bench_rules.fixed_fill_latency(bench[bench["strategy"] == "guarded"]) is None


# --------------------------------------------------------------------------- F9, F10: plans


def plans(jobs=10_000, removed=5_000, without=(10_057, 6_000, 10_100, 60), with_=(14, 13, 16, 12), **extra) -> dict:
    """Plan facts: buffers without and with the index in the states first_scan, steady, held_snapshot, vacuumed."""
    facts = {"job_count": jobs, "consumed_fraction": 0.5, "without_first_scan_removed": removed,
             "without_first_scan_ms": 2.3, "with_first_scan_ms": 0.2, "guarded_node": "Index Scan",
             "guarded_index": "jobs_pkey", "guarded_filter_line": "Filter: (status = 'pending'::text)",
             "guarded_claim_ms": 0.03}
    for label, figures in (("without", without), ("with", with_)):
        for state, value in zip(("first_scan", "steady", "held_snapshot", "vacuumed"), figures):
            facts[f"{label}_{state}_buffers"] = value
    return {**facts, **extra}


@pytest.mark.parametrize("facts, expected", [
    (plans(), CONFIRMED),
    (plans(without=(3_000, 2_000, 3_000, 60)), CONFIRMED_DIFFERENT_SIZE),
    (plans(jobs=1_000, without=(1_013, 618, 1_016, 17), with_=(16, 15, 17, 14)), CONFIRMED_DIFFERENT_SIZE),
    (plans(with_=(9_000, 5_000, 9_000, 12)), CORRECTED),  # the index helps only once vacuumed
    (plans(without=(20, 20, 20, 20)), NOT_REPRODUCED),
    (plans(removed=0), NOT_REPRODUCED),
    (None, NOT_MEASURED),
    ({"job_count": 10_000, "consumed_fraction": 0.5}, NOT_MEASURED),
])
def test_f9_is_judged_right_after_the_drain_and_after_vacuum(facts, expected):
    found = plan_rules.f9_half_drained_walk(facts)
    assert verdict(found) == expected
    if facts and expected != NOT_MEASURED:
        assert "right after a bulk UPDATE" in found.ours and "after VACUUM" in found.ours
        assert dict(found.parts)["after a drain by claims"] == NOT_MEASURED  # no after_claims facts given


@pytest.mark.parametrize("after_claims, removed, part", [
    ((1_820, 25), 5_000, CONFIRMED),  # the state: still walking, the index still cuts it 70-fold
    ((30, 25), 5_000, CORRECTED),  # the claims' own pruning left little for the index to save
    ((1_820, 25), 0, NOT_REPRODUCED),  # no consumed row left to step over
])
def test_f9_has_a_part_for_a_queue_drained_by_claims(after_claims, removed, part):
    race = plans(without_after_race_buffers=after_claims[0], with_after_race_buffers=after_claims[1],
                 without_after_race_removed=removed)
    assert dict(plan_rules.f9_half_drained_walk(race).parts)["after a drain by a race"] == part
    facts = plans(without_after_claims_buffers=after_claims[0], with_after_claims_buffers=after_claims[1],
                  without_after_claims_removed=removed)
    found = plan_rules.f9_half_drained_walk(facts)
    assert dict(found.parts) == {"after a bulk UPDATE": CONFIRMED, "after a drain by claims": part,
                                 "after a drain by a race": NOT_MEASURED}
    assert verdict(found) == CONFIRMED and "drain by claims" in found.ours


@pytest.mark.parametrize("facts, expected", [
    (plans(), CONFIRMED),
    (plans(guarded_node="Seq Scan", guarded_index=None), CONFIRMED_DIFFERENT_SIZE),
    (plans(guarded_filter_line=None), NOT_REPRODUCED),
    (plans(guarded_node=None), NOT_MEASURED),
])
def test_f10_reads_the_node_from_the_plan(facts, expected):
    found = plan_rules.f10_guarded_filter(facts)
    assert verdict(found) == expected
    if facts.get("guarded_node") == "Seq Scan":
        assert "Seq Scan" in found.ours and "primary-key" in found.note


# --------------------------------------------------------------------------- F11-F13, A4: churn


def churn(**figures) -> dict:
    facts = {"pruning_on_settled_dead": 0, "pruning_off_after_read_dead": 2_135, "pruning_on_autovacuum_runs": 1,
             "pruning_on_autoanalyze_runs": 1, "pruning_on_updates": 5_002, "pruning_job_count": 10_000,
             "pruning_on_immediate_dead": 5_002, "pruning_off_immediate_dead": 5_002,
             "default_ff": 100, "low_ff": 70,
             "bulk_default_plain_hot": 0, "bulk_default_plain_updates": 1_000,
             "bulk_low_plain_hot": 448, "bulk_low_plain_updates": 1_000,
             "sequential_default_plain_hot": 600, "sequential_default_plain_updates": 1_000,
             "sequential_low_plain_hot": 1_000, "sequential_low_plain_updates": 1_000,
             "sequential_low_indexed_hot": 0, "sequential_low_indexed_updates": 1_000,
             "bulk_low_indexed_hot": 0, "bulk_low_indexed_updates": 1_000, "max_hot_with_index": 0}
    return {**facts, **figures}


@pytest.mark.parametrize("facts, expected", [
    (churn(), CORRECTED),  # the case: 2,135 dead tuples left with autovacuum off
    (churn(pruning_off_after_read_dead=0), CONFIRMED),
    (churn(pruning_off_after_read_dead=0, pruning_on_updates=502, pruning_job_count=1_000), CONFIRMED_DIFFERENT_SIZE),
    (churn(pruning_on_settled_dead=190, pruning_off_after_read_dead=189), NOT_REPRODUCED),
    (churn(pruning_off_after_read_dead=None), NOT_MEASURED),
    (None, NOT_MEASURED),
])
def test_f11_is_decided_by_the_arm_with_autovacuum_off(facts, expected):
    assert verdict(churn_rules.f11_pruning_alone(facts)) == expected


@pytest.mark.parametrize("off, wording", [
    (2_135, "pruning reclaimed 2,867 of the 5,002 dead versions"),  # the cold build's: more than half, not all
    (5_002, "pruning reclaimed none of the 5,002 dead versions"),
    (0, "pruning alone brought n_dead_tup to zero"),
])
def test_f11_says_how_much_pruning_reclaimed_without_autovacuum(off, wording):
    found = churn_rules.f11_pruning_alone(churn(pruning_off_after_read_dead=off, pruning_off_updates=5_002))
    assert wording in found.note
    assert "does not reclaim" not in found.note
    assert verdict(found) == (CONFIRMED if off == 0 else CORRECTED)


def test_f11_names_autovacuum_as_the_cause_only_when_it_ran():
    ran = churn_rules.f11_pruning_alone(churn())
    assert "the zero was theirs" in ran.note
    idle = churn_rules.f11_pruning_alone(churn(pruning_on_autovacuum_runs=0, pruning_on_autoanalyze_runs=0))
    assert verdict(idle) == CORRECTED and "not measured" in idle.note and "theirs" not in idle.note


@pytest.mark.parametrize("facts, expected", [
    (churn(), CONFIRMED),
    (churn(bulk_low_plain_hot=112, bulk_low_plain_updates=200, bulk_default_plain_updates=200), CONFIRMED),
    (churn(bulk_low_plain_hot=900), CONFIRMED_DIFFERENT_SIZE),  # any HOT is not the original's 448
    (churn(bulk_low_plain_hot=10), CONFIRMED_DIFFERENT_SIZE),
    (churn(bulk_default_plain_hot=300), CONFIRMED_DIFFERENT_SIZE),
    (churn(low_ff=50), CONFIRMED_DIFFERENT_SIZE),
    (churn(bulk_low_plain_hot=0), NOT_REPRODUCED),
    ({"default_ff": 100, "low_ff": 70}, NOT_MEASURED),
])
def test_f12_is_judged_against_448_of_1000_and_says_how_the_updates_were_made(facts, expected):
    found = churn_rules.f12_hot_needs_room(facts)
    assert verdict(found) == expected
    if expected != NOT_MEASURED:
        assert "bulk UPDATE" in found.note and "one at a time" in found.ours


def test_f12_falls_back_to_claims_made_one_at_a_time():
    facts = {k: v for k, v in churn().items() if not k.startswith("bulk_")}
    found = churn_rules.f12_hot_needs_room(facts)
    assert found.values["how"] == "claimed one at a time"


@pytest.mark.parametrize("most, expected", [(0, CONFIRMED), (5, NOT_REPRODUCED), (None, NOT_MEASURED)])
def test_f13_any_hot_update_with_the_partial_index_refutes_it(most, expected):
    assert verdict(churn_rules.f13_partial_index_blocks_hot(churn(max_hot_with_index=most))) == expected


def test_a4_hot_updates_claimed_one_at_a_time():
    assert verdict(churn_rules.a4_hot_claimed_one_at_a_time(churn())) == ADDED
    assert verdict(churn_rules.a4_hot_claimed_one_at_a_time(None)) == NOT_MEASURED


def _bench(verdicts, envelope_ok=(True, True), server_cpu_ok=(True, True)) -> pd.DataFrame:
    return pd.DataFrame({"strategy": ["guarded", "skip_locked"], "worker_count": [8, 32], "ratio": [0.97, 0.8],
                         "ratio_min": [0.95, 0.7], "ratio_max": [0.99, 0.9], "verdict": list(verdicts),
                         "envelope_ok": list(envelope_ok), "server_cpu_ok": list(server_cpu_ok),
                         "predicted_ok": [None, None]})


def test_a3_is_confirmed_only_when_every_point_passes_its_gates():
    found = bench_rules.a3_harness_against_pgbench(_bench(("pass", "pass")), (0.85, 1.15))
    assert verdict(found) == CONFIRMED and found.values["inside"] == "1"
    failed = bench_rules.a3_harness_against_pgbench(_bench(("pass", "fail"), envelope_ok=(True, False)), (0.85, 1.15))
    assert verdict(failed) == CORRECTED and "skip_locked at 32 workers (lost-race envelope)" in failed.note
    old = _bench(("pass", "pass")).drop(columns=["verdict"])  # a run stored before the gates
    assert verdict(bench_rules.a3_harness_against_pgbench(old, (0.85, 1.15))) == NOT_MEASURED
    assert verdict(bench_rules.a3_harness_against_pgbench(None)) == NOT_MEASURED


def test_a_finding_decided_at_a_failing_bench_point_says_so():
    failed = bench_rules.bench_failures(_bench(("pass", "fail")))
    assert failed == {32: ["skip_locked"]}
    f5 = guard_cost.f5_lost_races_per_win(races(*[race("guarded", w, losses_per_win=v)
                                                for w, v in {2: 1.0, 8: 4.0, 32: 8.0}.items()]))
    assert "skip_locked at 32 workers" in bench_rules.bench_note(f5, failed)
    assert bench_rules.bench_note(f5, {}) == ""


# --------------------------------------------------------------------------- the whole set


def test_nothing_stored_leaves_every_finding_not_measured():
    found = contents.from_runs({})
    assert [f.id for f in found] == [*(f"F{i}" for i in range(1, 14)), *(f"C{i}" for i in range(1, 10)),
                                     *(f"A{i}" for i in range(1, 13))]
    assert {f.verdict for f in found} == {NOT_MEASURED}
    assert all(f.note for f in found), "a finding that is not measured says why"


def test_c9_unmeasured_says_why():
    c9, _ = soak_section.findings({})
    assert c9.id == "C9" and c9.verdict == NOT_MEASURED and c9.note


# --------------------------------------------------------------------------- C7: leases, fences and the ledger


def fault_run(protocol: str, fault: str, **counts) -> dict:
    """One faults run's summary row: every run completed once unless counts say otherwise."""
    row = {"protocol": protocol, "fault": fault, "runs": 12, "completed_once": 12, "completed_twice": 0,
           "executed_twice": 0, "stale_completion": 0, "stuck": 0, "lost": 0, "in_progress_at_timeout": 0}
    row.update(counts)
    return row


HEALTHY_LEASES = [fault_run("lease", "kill", executed_twice=1), fault_run("lease_fenced", "kill", executed_twice=1),
                  fault_run("lease_fenced", "pause", executed_twice=1)]


@pytest.mark.parametrize("rows, expected, parts", [
    # both of the original's statements hold, and a lease alone let a stale holder complete: confirmed, with that added
    ([fault_run("none", "kill", stuck=1, completed_once=11), *HEALTHY_LEASES,
      fault_run("lease", "pause", stale_completion=1, executed_twice=1)], CONFIRMED, (CONFIRMED, CONFIRMED, ADDED)),
    # a pause that landed and saw no stale completion: the addition was looked for and not seen
    ([fault_run("none", "kill", stuck=1, completed_once=11), *HEALTHY_LEASES,
      fault_run("lease", "pause", executed_twice=1)], CONFIRMED, (CONFIRMED, CONFIRMED, ADDED_NONE_SEEN)),
    # no pause raced under a lease alone: the addition is not measured
    ([fault_run("none", "kill", stuck=1, completed_once=11), *HEALTHY_LEASES], CONFIRMED,
     (CONFIRMED, CONFIRMED, NOT_MEASURED)),
    # the pause missed its window: not measured either
    ([fault_run("none", "kill", stuck=1, completed_once=11), *HEALTHY_LEASES,
      {**fault_run("lease", "pause", stale_completion=1), "fault_landed": False}], CONFIRMED,
     (CONFIRMED, CONFIRMED, NOT_MEASURED)),
    ([fault_run("none", "kill", stuck=1, completed_once=11), fault_run("lease", "kill", stuck=1)], NOT_REPRODUCED,
     (CONFIRMED, NOT_REPRODUCED, NOT_MEASURED)),
    ([fault_run("none", "kill", stuck=1, completed_once=11)], NOT_MEASURED, (CONFIRMED, NOT_MEASURED, NOT_MEASURED)),
    ([fault_run("none", "kill"), *HEALTHY_LEASES], NOT_REPRODUCED,  # the negative control saw nothing
     (NOT_REPRODUCED, CONFIRMED, NOT_MEASURED)),
    ([fault_run("lease", "kill")], NOT_MEASURED, ()),
    ([], NOT_MEASURED, ()),
])
def test_c7_a_claim_is_not_a_completion(rows, expected, parts):
    faults = pd.DataFrame(rows) if rows else None
    found = fault_rules.c7_claim_is_not_completion(faults)
    assert verdict(found) == expected
    assert tuple(v for _, v in found.parts) == parts


def test_c7_says_when_even_the_fence_lost_a_run():
    rows = [fault_run("none", "kill", stuck=1, completed_once=11), *HEALTHY_LEASES,
            fault_run("lease_fenced", "restart", lost=1, completed_once=11)]
    found = fault_rules.c7_claim_is_not_completion(pd.DataFrame(rows))
    assert verdict(found) == CONFIRMED and "Even with the fencing token" in found.note
    assert found.values["fenced_bad"] == "1"


def test_c7_counts_only_faults_seen_to_land_and_not_a_run_still_worked_on_at_the_bound():
    # the kill under none left nothing stuck, but it was not seen to land: the rule must not read it
    missed = {**fault_run("none", "kill"), "fault_landed": False}
    rows = [missed, {**fault_run("none", "kill", stuck=1, completed_once=11), "fault_landed": True}]
    assert dict(fault_rules.c7_claim_is_not_completion(pd.DataFrame(rows)).parts)[
        "a dead runner's run stays running"] == CONFIRMED
    assert verdict(fault_rules.c7_claim_is_not_completion(pd.DataFrame([missed]))) == NOT_MEASURED
    # a fenced run still in progress when the drain's bound came is not a run the fence lost
    at_bound = [fault_run("none", "kill", stuck=1, completed_once=11), *HEALTHY_LEASES,
                fault_run("lease", "pause", executed_twice=1),
                fault_run("lease_fenced", "restart", in_progress_at_timeout=1, completed_once=11)]
    assert verdict(fault_rules.c7_claim_is_not_completion(pd.DataFrame(at_bound))) == CONFIRMED


def test_c7_says_what_the_attempt_counter_adds_over_checking_the_holder():
    rows = [fault_run("none", "kill", stuck=1, completed_once=11), *HEALTHY_LEASES,
            fault_run("lease", "pause", stale_completion=1, executed_twice=1),
            fault_run("lease_holder", "pause", executed_twice=1)]
    found = fault_rules.c7_claim_is_not_completion(pd.DataFrame(rows))
    assert "the counter adds nothing over it" in found.note
    rows[-1] = fault_run("lease_holder", "pause", stale_completion=1)
    assert "Checking the holder by name let 1 run go wrong" in fault_rules.c7_claim_is_not_completion(
        pd.DataFrame(rows)).note


def test_c7_ledger_says_why_one_protocol_counts_fewer_faults():
    rows = [fault_run("none", "kill", stuck=1, completed_once=11), *HEALTHY_LEASES,
            fault_run("lease_holder", "kill"), fault_run("lease_holder", "pause"),
            fault_run("lease_holder", "none"), fault_run("lease_fenced", "none")]  # baselines: no fault to count
    every = fault_rules.c7_claim_is_not_completion(pd.DataFrame(rows)).values["ledger"]
    assert every == ("Runs lost, stuck or completed by a stale holder: 0 over the 2 faults that landed checking the "
                     "holder by name, 0 over the 2 faults that landed with the fence.")
    rows[3] = {**rows[3], "fault_landed": False}  # the fenced pause missed its window
    missed = fault_rules.c7_claim_is_not_completion(pd.DataFrame(rows)).values["ledger"]
    assert "0 over the 1 fault that landed with the fence" in missed
    assert "Not counted: `pause` with the fence, where the fault missed its window" in missed


# --------------------------------------------------------------------------- C1-C3: the other strategies


@pytest.mark.parametrize("rows, expected", [
    ([race("naive_serializable", 4, aborts=300, aborts_per_win=1.5)], CONFIRMED),
    ([race("naive_serializable", 4, aborts=300, aborts_per_win=1.5, duplicate_jobs=3)], CORRECTED),
    ([race("naive_serializable", 4, aborts=0, aborts_per_win=0.0)], NOT_REPRODUCED),
    ([race("naive_serializable", 1, aborts=0, aborts_per_win=0.0)], NOT_MEASURED),
    ([], NOT_MEASURED),
])
def test_c1_serializable_turns_duplicates_into_aborts(rows, expected):
    assert verdict(strategy_rules.c1_serializable_aborts(races(*rows))) == expected


@pytest.mark.parametrize("rows, expected", [
    ([race("naive_transaction", 2, duplicate_jobs=0), race("naive_transaction", 8, duplicate_jobs=700)], CONFIRMED),
    ([race("naive_transaction", 2), race("naive_transaction", 8)], NOT_REPRODUCED),
    ([race("naive_transaction", 1, duplicate_jobs=0)], NOT_MEASURED),
])
def test_c2_one_transaction_is_still_racy(rows, expected):
    assert verdict(strategy_rules.c2_one_transaction_still_racy(races(*rows))) == expected


def for_update_shares(lock):
    return pd.DataFrame([{"strategy": "for_update", "worker_count": 8, "row or transaction lock": lock}])


@pytest.mark.parametrize("rows, lock, expected", [
    ([race("for_update", 8)], 0.25, CONFIRMED),
    ([race("for_update", 8)], 0.02, NOT_REPRODUCED),
    ([race("for_update", 8, duplicate_jobs=2)], 0.25, CORRECTED),
    ([race("for_update", 8)], None, NOT_MEASURED),
    ([race("for_update", 1)], 0.25, NOT_MEASURED),
])
def test_c3_for_update_is_correct_and_queues_on_the_lock(rows, lock, expected):
    shares = for_update_shares(lock) if lock is not None else None
    assert verdict(strategy_rules.c3_for_update_queues(races(*rows), shares)) == expected


def test_a_finding_is_a_value_with_a_fixed_vocabulary():
    found = without_guard.f4_guarded_no_duplicates(races(race("guarded", 4)))
    with pytest.raises(AttributeError):
        found.verdict = CORRECTED
    with pytest.raises(ValueError):
        findings.Finding("F4", "", "", "", "agrees", "", "")
    record = json.loads(json.dumps(found.as_dict()))
    assert {"id", "verdict", "original", "ours", "note", "section", "values"} <= set(record)
    assert found.original == findings.ORIGINAL["F4"].figure
    assert found.section == "What-happens-without-the-guard?"


def test_the_table_has_one_row_per_finding_in_order():
    found = contents.evaluate({"races": race_sweep.Loaded(pd.DataFrame([race("guarded", 1), race("guarded", 4)]))})
    frame = findings.table(found)
    ids = [re.sub(r"<[^>]+>", "", cell) for cell in frame["finding"]]  # each id links to its section
    assert ids[:3] == ["F1", "F2", "F3"] and ids[-1] == "A12"
    assert frame["finding"].iloc[0] == '<a href="#What-happens-without-the-guard?">F1</a>'
    # "overall (part: verdict; part: verdict)" where a finding has parts, else its verdict
    labels = set()
    for cell in frame["verdict"]:
        cell = cell.split("<br>")[0]  # the worker counts it was decided at, a line under it
        overall, _, parts = cell.partition(" (")  # a part's name may hold parentheses too: "que (model)"
        labels |= {overall} | ({part.rsplit(": ", 1)[-1] for part in parts[:-1].split("; ")} if parts else set())
    assert labels <= set(findings.VERDICT_LABELS.values())
    decided = {f.id: f.worker_counts_used for f in found}
    for finding_id, cell in zip(ids, frame["verdict"]):
        assert ('<br><span class="decided-at">decided at ' in cell) == bool(decided[finding_id]), finding_id
    assert frame.columns[1].startswith("the original's") and frame.columns[2].startswith("the original's")


def test_lost_per_win_is_a_dash_for_a_strategy_that_cannot_lose():
    assert findings.lost_per_win("naive", 0.0) == findings.DASH
    assert findings.lost_per_win("skip_locked", 0.0) == findings.DASH
    assert findings.lost_per_win("guarded", 2.2) == "2.20"


@pytest.mark.parametrize("most, phrase", [(5, "no attempt went over k"), (7, "the hazard showed here")])
def test_a5_says_whether_a_batch_claimed_more_than_it_asked_for(most, phrase):
    found = strategy_rules.a5_batch_over_claims(races(race("skip_locked_batch_in", 4, batch_size=5,
                                                     max_rows_per_attempt=most)))
    assert verdict(found) == ADDED and phrase in found.values["phrase"]
    assert verdict(strategy_rules.a5_batch_over_claims(races(race("guarded", 4)))) == NOT_MEASURED


@pytest.mark.parametrize("leaked, phrase", [(0, "took no lock"), (6050, "left 6,050 advisory locks")])
def test_a6_counts_the_advisory_locks_a_pick_leaves(leaked, phrase):
    found = strategy_rules.a6_advisory_locks_leak(races(race("advisory_lock", 4, advisory_locks_leaked=leaked)))
    assert verdict(found) == ADDED and phrase in found.values["phrase"]
    assert verdict(strategy_rules.a6_advisory_locks_leak(races(race("guarded", 4)))) == NOT_MEASURED


# --------------------------------------------------------------------------- C6: a network round trip


def behind(rtt_ms: float, naive_extra: float, guarded_waste: float, guarded_lost: float = 2.0, repeat: int = 0,
           workers: int = 4, jobs: int = 1_000) -> list[dict]:
    """naive's and guarded's race at one round trip: naive's claims beyond each job's first, per job, and the
    time guarded's lost races took per job claimed (ms)."""
    return [race("naive", workers, repeat, jobs, rtt_ms=rtt_ms, extra_claims=int(naive_extra * jobs),
                 extra_claims_per_job=naive_extra),
            race("guarded", workers, repeat, jobs, rtt_ms=rtt_ms, losses_per_win=guarded_lost,
                 lost=int(guarded_lost * jobs), wasted_ms_per_win=guarded_waste,
                 wasted_attempt_p50_ms=guarded_waste / max(guarded_lost, 0.01))]


def c6(*points) -> str:
    return verdict(strategy_rules.c6_network_round_trip(pd.DataFrame([row for point in points for row in point])))


def test_c6_a_network_must_raise_naives_claims_per_job_and_guardeds_wasted_time_against_localhost():
    # saturation is allowed: every longer round trip above localhost, not a rise from one round trip to the next
    assert c6(behind(0, 1.4, 0.5), behind(1, 2.3, 4.0), behind(5, 2.3, 20.0), behind(20, 2.2, 80.0)) == CONFIRMED
    # naive no worse with a network than on localhost
    assert c6(behind(0, 2.3, 0.5), behind(1, 2.3, 4.0), behind(20, 2.4, 80.0)) == NOT_REPRODUCED
    # guarded's lost races cost less with a network
    assert c6(behind(0, 1.4, 9.0), behind(5, 2.3, 4.0), behind(20, 2.2, 3.0)) == CORRECTED
    assert c6(behind(0, 2.8, 0.5), behind(5, 1.0, 4.0)) == CORRECTED
    # the spread over repeats at localhost must be cleared
    assert c6(behind(0, 1.4, 0.5), behind(0, 2.5, 0.5, repeat=1), behind(5, 2.3, 20.0)) == NOT_REPRODUCED
    assert c6(behind(0, 1.4, 0.5), behind(0, 1.5, 0.6, repeat=1), behind(5, 2.3, 20.0),
              behind(5, 2.4, 21.0, repeat=1)) == CONFIRMED


def test_c6_is_not_measured_without_both_strategies_at_two_round_trips():
    assert verdict(strategy_rules.c6_network_round_trip(None)) == NOT_MEASURED
    assert c6(behind(0, 1.4, 0.5)) == NOT_MEASURED
    only_naive = [row for point in (behind(0, 1.4, 0.5), behind(5, 2.3, 20.0)) for row in point
                  if row["strategy"] == "naive"]
    assert verdict(strategy_rules.c6_network_round_trip(pd.DataFrame(only_naive))) == NOT_MEASURED
    apart = [row for point in (behind(0, 1.4, 0.5), behind(5, 2.3, 20.0), behind(20, 2.3, 80.0)) for row in point
             if (row["strategy"], row["rtt_ms"]) not in (("naive", 20), ("guarded", 5))]
    assert verdict(strategy_rules.c6_network_round_trip(pd.DataFrame(apart))) == NOT_MEASURED, "one shared round trip"


def test_c6_reads_the_most_workers_raced_at_every_round_trip_and_says_what_it_read():
    found = strategy_rules.c6_network_round_trip(pd.DataFrame([
        *behind(0, 1.4, 0.5), *behind(20, 2.2, 80.0), *behind(0, 9.0, 0.5, workers=16)]))
    assert found.verdict == CONFIRMED and found.values["workers"] == "4"
    assert found.values["rtt_low"] == "0 ms" and found.values["rtt_high"] == "20 ms"
    assert "4 workers" in found.ours and found.section == findings.LATENCY
def test_c6_is_judged_against_a_baseline_through_the_proxy_and_says_what_the_proxy_alone_adds():
    def via(rows, proxy):
        return [{**row, "proxy": proxy} for row in rows]

    straight = via(behind(0, 1.0, 0.5), False)
    proxied = via(behind(0, 1.4, 1.5), True)  # the proxy alone already widens naive and slows guarded
    rows = straight + proxied + via(behind(1, 1.8, 2.5), True) + via(behind(5, 2.3, 20.0), True)
    found = strategy_rules.c6_network_round_trip(pd.DataFrame(rows))
    assert found.verdict == CONFIRMED
    # against the proxied baseline: 1.4 -> 1.8 and 1.5 -> 2.5, not against the straight 1.0 and 0.5
    assert found.values["naive_extra_low"] == "1.40"
    assert "went 50% of the way to the figure at a 1 ms round trip" in found.note and "guarded" in found.note  # (1.4-1.0)/(1.8-1.0), (1.5-.5)/2
    # a proxied baseline as high as a real round trip: a network adds nothing beyond the proxy
    flat = straight + via(behind(0, 1.8, 2.5), True) + via(behind(1, 1.8, 2.5), True)
    assert strategy_rules.c6_network_round_trip(pd.DataFrame(flat)).verdict == NOT_REPRODUCED
    # without a proxied baseline (runs stored before it), the note says what the baseline lacks
    assert "without the proxy" in strategy_rules.c6_network_round_trip(
        pd.DataFrame(straight + via(behind(5, 2.3, 20.0), True))).note


# --------------------------------------------------------------------------- C5, C8: the production shape


def production_run(endpoint: str, runners: int, poll_s: float, polls: int, conflicts: int, burst: int = 0,
                   duplicates: int = 0, p99_ms: float = 1000.0, loser_bytes: int = 0, met: int | None = None,
                   empty: int = 0, rounds: list | None = None, pickups: int = 200) -> dict:
    """A production run's summary row. Its listing polls come in rounds of one poll per runner, the polls that
    met a 409 spread one per round unless `rounds` says otherwise."""
    met = conflicts if met is None else met
    listing = polls - empty
    if rounds is None:
        sizes = [runners] * (listing // runners) + ([listing % runners] if listing % runners else [])
        each, extra = divmod(met, len(sizes)) if sizes else (0, 0)
        rounds = [[size, min(size, each + int(i < extra))] for i, size in enumerate(sizes)]
    return {"endpoint": endpoint, "runner_count": runners, "poll_s": poll_s, "burst": burst, "polls": polls,
            "listing_polls": listing, "conflicts": conflicts, "polls_with_a_conflict": met,
            "conflict_rounds": rounds, "duplicate_jobs": duplicates, "pickup_p99_ms": p99_ms,
            # pickups evenly spread up to about the p99 given (200: a tail that rests on enough values to compare)
            "pickups_ms": list(np.linspace(p99_ms / 100, p99_ms * 1.005, pickups)),
            "loser_payload_bytes": loser_bytes}


def production(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


@pytest.mark.parametrize("rows, expected", [
    # a handful of runners every 5 s: the whole 95 % interval of 409s per poll below 10 %: confirmed
    ([production_run("pending", 3, 5, 200, 0), production_run("pending", 10, 5, 300, 4)], CONFIRMED),
    # the whole interval above 10 %: corrected
    ([production_run("pending", 3, 5, 200, 60)], CORRECTED),
    # too few polls: the interval straddles 10 %
    ([production_run("pending", 3, 5, 12, 1)], NOT_MEASURED),
    # judged by the polls that met a 409, not by the 409s (one poll can meet five)
    ([production_run("pending", 10, 5, 100, 150, met=60)], CORRECTED),
    ([production_run("pending", 10, 5, 400, 30, met=6)], CONFIRMED),
    # empty polls cannot meet a 409 and are not counted: 6 of 60 listing polls is not rare enough to say
    ([production_run("pending", 3, 5, 400, 6, empty=340)], NOT_MEASURED),
    # the polls that met a 409 all in the same rounds: the interval over whole rounds is wider
    ([production_run("pending", 10, 5, 300, 15, rounds=[[10, 8], [10, 7]] + [[10, 0]] * 28)], NOT_MEASURED),
    ([production_run("pending", 10, 5, 300, 15)], CONFIRMED),  # the same 15 spread over 15 rounds
    # no poll listed a run
    ([production_run("pending", 3, 5, 50, 0, empty=50)], NOT_MEASURED),
    # no point at production polling (faster polls, or more than a handful, or only /claim, or only bursts)
    ([production_run("pending", 3, 1, 500, 0), production_run("pending", 50, 5, 500, 0),
      production_run("claim", 3, 5, 500, 0), production_run("pending", 3, 5, 500, 0, burst=40)], NOT_MEASURED),
    ([], NOT_MEASURED),
])
def test_c5_conflicts_at_production_polling_are_judged_by_their_interval(rows, expected):
    found = production_rules.c5_conflicts_at_production_polling(production(*rows) if rows else None)
    assert found.verdict == expected
    assert found.note


def c5_round(number: int, polls: int, met: int) -> dict:
    return {**production_run("pending", 10, 5, polls, met), "seed": number}


# the sweep's points at 5 s: 2 of 60 listing polls met a 409, an interval that holds 10 %
UNDECIDED = [production_run("pending", 3, 5, 20, 0), production_run("pending", 10, 5, 40, 2)]


@pytest.mark.parametrize("rounds, max_rounds, expected, said", [
    # the rounds the build ran on for pool with the sweep's points and decide the interval: below 10 %
    ([c5_round(1, 60, 1)], 2, CONFIRMED, "ran on for 1 round of 36 s"),
    # ... or above it
    ([c5_round(1, 60, 20), c5_round(2, 60, 20)], 2, CORRECTED, "ran on for 2 rounds"),
    # the bound reached with the interval still holding the line: not measured, and the note says so
    ([c5_round(1, 10, 3)], 1, NOT_MEASURED, "its bound of 36 s, and stopped with the interval undecided"),
    # no rounds allowed by the params
    ([], 0, NOT_MEASURED, "allowed no more rounds"),
    # fewer rounds stored than the bound allows (a build cut short): not measured, not "bound reached"
    ([], 2, NOT_MEASURED, "not all stored"),
])
def test_c5_runs_on_until_decided_and_says_where_the_bound_left_it_undecided(rounds, max_rounds, expected, said):
    found = production_rules.c5_conflicts_at_production_polling(production(*UNDECIDED),
                                                                 production(*rounds) if rounds else None, max_rounds)
    assert found.verdict == expected
    assert said in found.note
    assert found.values["rounds"] == str(len(rounds))


def test_the_sweep_asks_for_a_c5_round_only_while_the_interval_is_undecided_and_within_its_bound():
    from harness.experiments.production.measure import ProductionSweep

    sweep = ProductionSweep(c5_extra_seconds=72)  # two rounds of 36 s
    assert sweep.c5_max_rounds == 2
    [first] = sweep.follow_up(UNDECIDED)
    assert (first.runner_count, first.poll_s, first.endpoint, first.seed, first.seconds) == (10, 5.0, "pending", 1, 36)
    assert sweep.follow_up(UNDECIDED + [c5_round(1, 10, 1)])[0].seed == 2
    assert sweep.follow_up(UNDECIDED + [c5_round(1, 10, 1), c5_round(2, 10, 1)]) == [], "the bound is reached"
    assert sweep.follow_up(UNDECIDED + [c5_round(1, 60, 1)]) == [], "decided below the line"
    assert sweep.follow_up([production_run("pending", 3, 5, 200, 60)]) == [], "decided above it"
    assert ProductionSweep(c5_extra_seconds=0).follow_up(UNDECIDED) == []
    assert sweep.follow_up([]) and sweep.follow_up([])[0].seed == 1, "no run at the point yet: undecided"


@pytest.mark.parametrize("seconds", [-1, 10, 5000, float("nan")])
def test_a_bad_c5_bound_is_refused_in_one_line(seconds):
    from harness.experiments.production.measure import ProductionSweep

    with pytest.raises(UserError) as refused:
        ProductionSweep(c5_extra_seconds=seconds)
    assert "c5_extra_seconds" in str(refused.value) and len(str(refused.value).splitlines()) == 1


def test_c5_pools_the_production_points_and_names_the_busiest():
    found = production_rules.c5_conflicts_at_production_polling(production(
        production_run("pending", 3, 5, 100, 0), production_run("pending", 10, 5, 100, 2),
        production_run("pending", 50, 0.2, 900, 300)))
    assert found.values["conflicts"] == "2" and found.values["polls"] == "200" and found.values["met"] == "2"
    assert found.values["listing"] == "200"
    assert "50 runners every 0.2 s" in found.note


def c8_rows(claim_conflicts=0, claim_duplicates=0, claim_p99=1000.0, pickups=200, single_p99=3000.0):
    """/pending and the batch claim (equal capacity) at two points, the single claim beside them."""
    return [production_run("pending", 3, 5, 100, 5, p99_ms=1000.0, loser_bytes=5000, pickups=pickups),
            production_run("claim_batch", 3, 5, 100, claim_conflicts, duplicates=claim_duplicates, p99_ms=claim_p99,
                           pickups=pickups),
            production_run("pending", 10, 1, 300, 40, p99_ms=800.0, loser_bytes=9000, pickups=pickups),
            production_run("claim_batch", 10, 1, 300, 0, p99_ms=claim_p99 * 0.7, pickups=pickups),
            production_run("claim", 3, 5, 100, 0, p99_ms=single_p99, pickups=pickups),
            production_run("claim", 10, 1, 300, 0, p99_ms=single_p99, pickups=pickups)]


@pytest.mark.parametrize("rows, expected", [
    (c8_rows(), CONFIRMED),
    (c8_rows(claim_conflicts=2), NOT_REPRODUCED),
    (c8_rows(claim_duplicates=1), NOT_REPRODUCED),
    (c8_rows(claim_p99=2000.0), CORRECTED),  # runners would see a later pickup at most points
    # later beyond the margin at one point of three: not every point alike or earlier, so not decided
    (c8_rows()[:2] + [production_run("pending", 10, 1, 300, 40, p99_ms=800.0),
                      production_run("claim_batch", 10, 1, 300, 0, p99_ms=5000.0),
                      production_run("pending", 50, 1, 300, 40, p99_ms=800.0),
                      production_run("claim_batch", 50, 1, 300, 0, p99_ms=700.0)], NOT_DISTINGUISHABLE),
    # 12 pickups a point: the intervals hold parity and reach past the margin: overlap is not agreement
    (c8_rows(pickups=12), NOT_DISTINGUISHABLE),
    (c8_rows()[:1] + c8_rows()[2:3], NOT_MEASURED),  # no point with both endpoints
    # only the single claim beside /pending: runners of unequal capacity decide nothing
    ([row for row in c8_rows() if row["endpoint"] != "claim_batch"], NOT_MEASURED),
    ([production_run("pending", 3, 5, 100, 5, burst=40), production_run("claim_batch", 3, 5, 100, 0, burst=40)],
     NOT_MEASURED),  # bursts are not the steady comparison
])
def test_c8_the_skip_locked_endpoint_must_remove_409s_without_a_later_pickup(rows, expected):
    found = production_rules.c8_skip_locked_endpoint(production(*rows))
    assert found.verdict == expected
    assert found.note


@pytest.mark.parametrize("claim_p99, pickups, alike, later, earlier, unclear, verdict", [
    # the batch claim's tail against /pending's 1000 ms at the first point and 800 ms at the second
    (1150.0, 200, "2", "0", "0", "0", CONFIRMED),  # 15 % later and 20 % shorter, both inside the margin on 200 each
    (1300.0, 200, "1", "1", "0", "0", NOT_DISTINGUISHABLE),  # 30 % later at the first: beyond the margin
    (1150.0, 12, "0", "0", "0", "2", NOT_DISTINGUISHABLE),  # on 12 pickups the intervals reach past the margin
    (500.0, 200, "0", "0", "2", "0", CONFIRMED),  # half /pending's: earlier at both
])
def test_c8_counts_a_point_alike_only_where_its_interval_lies_inside_the_margin(claim_p99, pickups, alike, later,
                                                                              earlier, unclear, verdict):
    found = production_rules.c8_skip_locked_endpoint(production(*c8_rows(claim_p99=claim_p99, pickups=pickups)))
    assert found.verdict == verdict
    assert (found.values["alike_points"], found.values["later_points"], found.values["earlier_points"],
            found.values["unclear_points"]) == (alike, later, earlier, unclear)
    assert ("not decided whether runners would notice" in found.note) is (verdict == NOT_DISTINGUISHABLE)
    assert found.values["alike_margin"] == "0.80 to 1.25"


def test_c8_says_what_the_single_claim_shows_and_whether_capacity_made_the_gap():
    gap = production_rules.c8_skip_locked_endpoint(production(*c8_rows(single_p99=3000.0)))
    assert "The single claim, one run per poll where a /pending runner takes up to 5, was later at 2 of 2" in gap.note
    assert "capacity made that gap" in gap.note
    no_gap = production_rules.c8_skip_locked_endpoint(production(*c8_rows(single_p99=700.0)))
    assert "was later at 0 of 2" in no_gap.note and "capacity made that gap" not in no_gap.note


def test_c5_and_c8_read_the_production_section():
    measured = {"production": production_rules.Loaded((), production(*c8_rows()))}
    by = findings.by_id(contents.evaluate(measured))
    assert by["C8"].verdict == CONFIRMED
    # 5 of 100 polls: the interval (2.2%-11.2%) straddles the 10% that "rare" means, so undecided, but read
    assert by["C5"].verdict == NOT_MEASURED and by["C5"].ours.startswith("5 of 100 polls that listed a run met a 409")


# --------------------------------------------------------------------------- A7: the job libraries


def library_run(library: str, workers: int, executed_twice: int = 0, duplicate_claims: int = 0,
                not_executed: int = 0, repeat: int = 0) -> dict:
    return {"library": library, "version": "1.0", "worker_count": workers, "repeat": repeat, "jobs": 100,
            "executed_twice": executed_twice, "duplicate_claims": duplicate_claims, "not_executed": not_executed,
            "run_id": f"{library}-{workers}-{repeat}", "cpu_bound": False}


def test_a7_confirms_each_library_that_ran_every_job_once_and_corrects_one_that_did_not():
    clean = library_rules.a7_each_job_runs_once(pd.DataFrame([library_run("procrastinate", w) for w in (1, 4)]
                                                             + [library_run("pgqueuer", w) for w in (1, 4)]))
    assert clean.verdict == CONFIRMED and clean.parts == (("procrastinate", CONFIRMED), ("pgqueuer", CONFIRMED))
    assert clean.note == "" and clean.ours == ("Jobs run twice and claimed twice, over 2 runs per library: "
                                               "procrastinate 1.0 0 and 0; pgqueuer 1.0 0 and 0")
    broken = library_rules.a7_each_job_runs_once(pd.DataFrame(
        [library_run("procrastinate", 1), library_run("procrastinate", 4, executed_twice=2, duplicate_claims=3),
         library_run("pgqueuer", 4, not_executed=5)]))
    assert broken.verdict == CORRECTED
    assert broken.parts == (("procrastinate", CORRECTED), ("pgqueuer", CONFIRMED))
    assert "procrastinate handed jobs to more than one worker: 2 run twice and 3 claimed twice" in broken.note
    assert "procrastinate-4-0 at 4 workers" in broken.note and "pgqueuer left 5 jobs unexecuted" in broken.note
    assert library_rules.a7_each_job_runs_once(None).verdict == NOT_MEASURED


# --------------------------------------------------------------------------- A9 and A10: when a worker dies


def library_fault_run(library: str, fault: str = "kill", landed: bool = True, jobs: int = 6, hit: int = 1, **ledger) -> dict:
    counts = {"completed_once": jobs, "completed_twice": 0, "stuck": 0, "lost": 0, "in_progress_at_timeout": 0,
              "executed_twice": 0, "completed_by_stale_holder": 0} | ledger
    return {"library": library, "fault": fault, "fault_landed": landed, "jobs": jobs, "worker_count": 3,
            "jobs_hit": hit, "jobs_hit_recovered": hit if counts["executed_twice"] else 0,
            "recovery_s": 3.0 if counts["executed_twice"] else None, "recovery_setting_s": 3.0,
            "recovery_default_s": 30.0, "worker_exits": 1, "run_id": f"{library}-{fault}", "waited_s": 20.0,
            "recovery": {"default_s": 30.0}, **counts}


@pytest.mark.parametrize("runs, expected", [
    ([library_fault_run("pgmq", executed_twice=1)], CONFIRMED),  # run twice is at-least-once, not a failure
    ([library_fault_run("procrastinate", completed_once=5, stuck=1)], CORRECTED),
    ([library_fault_run("graphile_worker", completed_once=5, lost=1)], CORRECTED),
    ([library_fault_run("chancy", completed_once=5, failed=1)], CORRECTED),  # failed for good
    ([library_fault_run("procrastinate", completed_once=5, stuck=1, failed=None)], CORRECTED),  # stored before it
    ([library_fault_run("pgqueuer", "pause", executed_twice=2, completed_by_stale_holder=1)], CORRECTED),
    ([library_fault_run("pgqueuer", "pause", completed_once=5, completed_twice=1)], CORRECTED),
    ([library_fault_run("pgmq", landed=False, completed_once=5, stuck=1)], NOT_MEASURED),  # a fault not seen to land
    ([library_fault_run("pgmq", completed_once=5, in_progress_at_timeout=1)], NOT_MEASURED),  # still running at the bound
    ([library_fault_run("pgmq", hit=0)], NOT_MEASURED),  # no job was running when it landed
    # stuck at the end, but the library's recovery is set past the time the run waited: it may yet come
    ([library_fault_run("graphile_worker", completed_once=5, stuck=1, recovery_setting_s=14400.0)], NOT_MEASURED),
    # stuck, but never started by the bound: the fault did not hold it up
    ([library_fault_run("pgmq", completed_once=5, stuck=1, stuck_unstarted=1)], NOT_MEASURED),
    # nothing recovers it: stuck for good
    ([library_fault_run("procrastinate", completed_once=5, stuck=1, recovery_setting_s=None)], CORRECTED),
    # River: its setting passed, but not the retry's backoff and the scheduler's pass after it: it may yet come
    ([library_fault_run("river", completed_once=5, stuck=1, waited_s=5.0, recovery_then_s=6.1)], NOT_MEASURED),
    ([library_fault_run("river", completed_once=5, stuck=1, waited_s=10.0, recovery_then_s=6.1)], CORRECTED),
])
def test_a9_decides_each_library_from_the_faults_that_landed(runs, expected):
    found = fault_section.a9_a_dead_workers_job_completes_once(pd.DataFrame(runs))
    label = runs[0]["library"] + (" (model)" if runs[0]["library"] == "river" else "")
    assert found.verdict == expected and found.parts == ((label, expected),)


def test_a9_gives_each_library_its_part_and_counts_jobs_run_twice_apart():
    found = fault_section.a9_a_dead_workers_job_completes_once(pd.DataFrame([
        library_fault_run("procrastinate", completed_once=5, stuck=1), library_fault_run("pgmq", executed_twice=1),
        library_fault_run("pgmq", "pause", executed_twice=1)]))
    assert found.parts == (("procrastinate", CORRECTED), ("pgmq", CONFIRMED)) and found.verdict == CORRECTED
    assert "procrastinate: after kill, 1 stuck." in found.note
    assert "2 jobs ran twice: recovery runs a job again, so its side effects must be safe to repeat." in found.note
    assert found.ours == ("1 of 2 libraries whose runs decide left a job stuck, failed or lost, or completed one twice "
                          "or by a worker that had lost it (3 jobs hit by kill and pause in 3 runs)")
    assert fault_section.a9_a_dead_workers_job_completes_once(None).verdict == NOT_MEASURED


def drain(library: str, pooler: str, executed: int = 40, twice: int = 0, claimed: int = 0, errors: int = 0,
          workers: int = 4, setting: str | None = None) -> dict:
    """setting None: a drain stored before the pooler setting was (its defaults)."""
    return {"library": library, "pooler": pooler, "worker_count": workers, "jobs": 40, "executed": executed,
            "executed_twice": twice, "duplicate_claims": claimed, "advisory_locks_left": 0,
            "workers_with_errors": errors, "jobs_per_s": 100.0,
            **({} if setting is None else {"pooler_setting": setting})}


def pooled_race(strategy: str, pooler: str, twice: int = 0, unclaimed: int = 0, locks: int = 0) -> dict:
    return {"strategy": strategy, "pooler": pooler, "worker_count": 4, "job_count": 200, "unclaimed_jobs": unclaimed,
            "duplicate_jobs": twice, "advisory_locks_at_end": locks, "claims_per_second": 1000.0}


@pytest.mark.parametrize("session, transaction, expected", [
    ({}, {}, CONFIRMED),
    ({}, {"twice": 3}, CORRECTED),
    ({}, {"executed": 10}, CORRECTED),  # jobs not run
    ({}, {"errors": 2}, CORRECTED),  # workers that failed, though every job ran
    ({}, {"claimed": 5}, CORRECTED),
    ({"executed": 2}, {"twice": 3}, NOT_MEASURED),  # the control went wrong: transaction mode is not to blame
    (None, {}, NOT_MEASURED),  # no control
])
def test_a10_sets_transaction_mode_against_session_mode_per_library(session, transaction, expected):
    runs = ([drain("pgmq", "session", **session)] if session is not None else []) + [
        drain("pgmq", "transaction", **transaction)]
    found = pooler_section.a10_through_a_transaction_pooler(pd.DataFrame(runs), None)
    assert found.verdict == expected and found.parts == (("pgmq", expected),)


def test_a10_gives_each_claim_its_part_and_says_what_went_wrong():
    claims = pd.DataFrame([pooled_race("skip_locked", "session"), pooled_race("skip_locked", "transaction"),
                           pooled_race("que", "session"), pooled_race("que", "transaction", twice=48, locks=157)])
    found = pooler_section.a10_through_a_transaction_pooler(None, claims)
    assert found.parts == (("skip_locked (claim)", CONFIRMED), ("que (claim)", CORRECTED)) and found.verdict == CORRECTED
    assert found.ours == ("1 of 2 went wrong through the transaction pooler where session mode ran clean (the table "
                          "says how).")
    locks = pooler_section.a10_through_a_transaction_pooler(None, pd.DataFrame(
        [pooled_race("advisory_lock", "session"), pooled_race("advisory_lock", "transaction", locks=441)]))
    assert locks.parts == (("advisory_lock (claim)", CORRECTED),)
    assert pooler_section.a10_through_a_transaction_pooler(None, None).verdict == NOT_MEASURED


def test_the_worker_dies_tables_read_the_stored_summaries():
    loaded = {fault_section.NAME: fault_section.Loaded(
        (), pd.DataFrame([library_fault_run("procrastinate", completed_once=5, stuck=1), library_fault_run("pgmq", executed_twice=1)]),
        (), pd.DataFrame([drain("pgmq", "session"), drain("pgmq", "transaction", executed=10, errors=2)]))}
    ledger = fault_section.ledger_table(loaded)
    assert '<td class="">procrastinate</td><td class="">kill</td><td class="">1/1</td>' in ledger
    assert "3.0 / 3 s (30 s)" in ledger and "— / 3 s (30 s)" in ledger
    pooled = pooler_section.pooler_table(loaded)
    assert "30 of 40 not run and 2 workers failed with an error" in pooled and "corrected" in pooled
    advice = fault_section.advice_table(loaded)
    assert "<code>get_stalled_jobs</code>" in advice and "1 job left stuck or lost after kill." in advice
    assert "session mode; transaction mode went wrong" in advice


def test_the_ledger_gives_completions_sent_and_applied_or_says_the_sending_cannot_be_seen():
    seen = library_fault_run("pgmq", "pause", executed_twice=1, completions_sent=7, completions_applied=6,
                             completions_not_applied=1)
    clean = library_fault_run("pgmq", executed_twice=1, completions_sent=6, completions_applied=6,
                              completions_not_applied=0)
    unseen = library_fault_run("pgboss", executed_twice=1, completions_sent=None, completions_applied=6,
                               completions_not_applied=None)
    loaded = {fault_section.NAME: fault_section.Loaded((), pd.DataFrame([seen, clean, unseen]))}
    ledger = fault_section.ledger_table(loaded)
    assert ">7 / 6</td>" in ledger and ">6 / 6</td>" in ledger
    assert ">cannot be seen / 6</td>" in ledger
    advice = fault_section.advice_table(loaded)
    assert "2 jobs ran twice. Of 13 completions sent, 1 changed nothing: refused, or cut off with its" in advice
    # nothing refused, or nothing seen: no such sentence
    for run in (clean, unseen):
        alone = fault_section.advice_table({fault_section.NAME: fault_section.Loaded((), pd.DataFrame([run]))})
        assert "changed nothing" not in alone and "1 job ran twice.</td>" in alone
    # a run stored before completions were sent-counted cannot say: never 0
    old = fault_section.ledger_table({fault_section.NAME: fault_section.Loaded((), pd.DataFrame(
        [library_fault_run("pgmq")]))})
    assert "cannot be seen / —" in old


def test_a_short_pause_that_kept_its_job_counts_as_a_fault_that_landed_and_reads_as_words():
    found = fault_section.a9_a_dead_workers_job_completes_once(pd.DataFrame([
        library_fault_run("pgmq", executed_twice=1), library_fault_run("pgmq", "short_pause")]))
    assert found.parts == (("pgmq", CONFIRMED),)
    assert "(2 jobs hit by kill and short pause in 2 runs)" in found.ours


def test_a_recovery_with_a_wait_after_its_setting_says_what_it_waits_for():
    river = library_fault_run("river", executed_twice=1, recovery_then_s=6.1,
                              recovery={"default_s": 3600.0, "then": "its first retry's backoff, then a pass"})
    advice = fault_section.advice_table({fault_section.NAME: fault_section.Loaded((), pd.DataFrame([river]))})
    assert ("A hit job started again 3.0 s after the fault, with the setting at 3 s and after it its first retry&#x27;s "
            "backoff, then a pass; 1 job ran twice.") in advice


def test_the_worker_dies_tables_name_models_and_take_a_model_pooler_advice_from_its_claim():
    que = library_fault_run("que", executed_twice=1, recovery_setting_s=None, recovery_default_s=None,
                            recovery={"default_s": None})
    oban = library_fault_run("oban", "pause", completed_once=5, completed_twice=1, executed_twice=1,
                             recovery_default_s=None,
                             recovery={"default_s": None, "off_by_default": True, "enabled_default_s": 3600.0})
    claims = pd.DataFrame([pooled_race("que", "session"), pooled_race("que", "transaction", twice=3)])
    loaded = {fault_section.NAME: fault_section.Loaded((), pd.DataFrame([que, oban]), (), None, (), claims)}
    ledger = fault_section.ledger_table(loaded)
    assert '<td class="">que (model)</td>' in ledger and "(model): a library that does not run here" in ledger
    assert "3.0 / — (—)" in ledger and "3.0 / 3 s (off)" in ledger  # Oban's Lifeline: off unless turned on
    found = fault_section.a9_a_dead_workers_job_completes_once(loaded[fault_section.NAME].faults)
    assert found.parts == (("que (model)", CONFIRMED), ("oban (model)", CORRECTED))
    assert "oban (model): after pause, 1 completed twice." in found.note
    advice = fault_section.advice_table(loaded)
    # no setting to name: the sentence says so; the pooler advice comes from the claim's races
    assert ("A hit job started again 3.0 s after the fault, with nothing to set: its lock dropped at once" in advice
            and "own jobs still ran before one polled; 1 job ran twice." in advice)
    assert "session mode; transaction mode went wrong (its claim, in the tight loop)" in advice
    # and what its claim cannot show, read in its source: que's session state, oban's driver (its claim not pooled)
    assert "measured: session mode; transaction mode went wrong (its claim, in the tight loop). Read in its source, " \
           "not run: with its defaults, its locker holds session advisory locks" in advice
    assert "not run through a pooler. Read in its source: with its defaults, Postgrex prepares named statements " \
           "(<code>prepare: :named</code>" in advice
    assert "(60 min once on)" in advice  # Oban: rescue_after's default once Lifeline is on
    # what each library's own documentation says about poolers, a model's named as one
    docs = pooler_section.pooler_docs_table(loaded)
    assert "que (model)" in docs and "<code>connection-url</code>" in docs and "@ 17fb2c3" in docs
    assert pooler_section.pooler_docs_table({}) == ""
    assert fault_section._models_caveat(loaded[fault_section.NAME].faults).startswith("**que and oban are models**")
    # without models, the caption says nothing of them
    plain = {fault_section.NAME: fault_section.Loaded((), pd.DataFrame([library_fault_run("pgmq")]))}
    assert "(model)" not in fault_section.ledger_table(plain)
    assert fault_section._models_caveat(plain[fault_section.NAME].faults) == "**Every library ran its own code.**"


def test_the_worker_dies_ledger_counts_only_faults_that_landed_and_says_what_is_undecided():
    runs = pd.DataFrame([library_fault_run("pgmq", landed=False, completed_once=5, stuck=1),
                         library_fault_run("graphile_worker", completed_once=5, stuck=1, recovery_setting_s=14400.0)])
    loaded = {fault_section.NAME: fault_section.Loaded((), runs)}
    ledger = fault_section.ledger_table(loaded)
    assert '<td class="">pgmq</td><td class="">kill</td><td class="">0/1</td><td class="">—</td>' in ledger
    advice = fault_section.advice_table(loaded)
    assert "No fault was seen to land on its workers." in advice
    assert "1 job still stuck or running when the run ended" in advice  # graphile_worker: its 4 h had not come
    assert pooler_section.pooler_table(loaded) == "" and fault_section.ledger_table({}) == ""


def test_a10_names_a_part_per_worker_count_and_a_claim_apart_from_a_library():
    pooled = pd.DataFrame([drain("pgmq", mode, workers=w) for w in (4, 16) for mode in ("session", "transaction")])
    claims = pd.DataFrame([pooled_race("pgmq", "session"), pooled_race("pgmq", "transaction", twice=2)])
    found = pooler_section.a10_through_a_transaction_pooler(pooled, claims)
    assert found.parts == (("pgmq at 4 workers", CONFIRMED), ("pgmq at 16 workers", CONFIRMED),
                           ("pgmq (claim)", CORRECTED))
    assert pooler_section.library_pooler_verdicts(pooled) == {"pgmq": CONFIRMED}  # the claim's is its own


@pytest.mark.parametrize("transaction, documented, expected, reads", [
    # defaults wrong, the documented setting clean: the library works as its documentation says to set it
    ({"errors": 4, "executed": 10}, {}, CONFIRMED,
     "defaults: went wrong (30 of 40 not run and 4 workers failed with an error); with the documented setting "
     "(`prepare_threshold=None`): ran clean (the verdict is the documented setting's)."),
    ({"errors": 4}, {"twice": 2}, CORRECTED,  # both wrong
     "defaults: went wrong (4 workers failed with an error); with the documented setting (`prepare_threshold=None`): "
     "went wrong (2 run twice) (the verdict is the documented setting's)."),
    ({}, {}, CONFIRMED,  # both clean
     "defaults: ran clean; with the documented setting (`prepare_threshold=None`): ran clean (the verdict is the "
     "documented setting's)."),
    ({"errors": 4}, None, CORRECTED,  # the documented setting not raced: the defaults decide
     "defaults: went wrong (4 workers failed with an error); with the documented setting (`prepare_threshold=None`): "
     "not raced (the verdict is the defaults')."),
])
def test_a10_reads_each_library_with_its_defaults_and_its_documented_setting(transaction, documented, expected, reads):
    runs = [drain("procrastinate", "session", setting="default"),
            drain("procrastinate", "transaction", setting="default", **transaction)]
    if documented is not None:
        runs.append(drain("procrastinate", "transaction", setting="documented", **documented))
    found = pooler_section.a10_through_a_transaction_pooler(pd.DataFrame(runs), None, "1.18.0")
    assert found.verdict == expected and found.parts == (("procrastinate", expected),)
    assert f"procrastinate: {reads}" in found.note
    assert "PgBouncer 1.18.0; 1.21 and later carry prepared statements" in found.note
    assert "where `max_prepared_statements` is set (read in PgBouncer's changelog, not run here)" in found.note
    # the defaults' count is said apart only where a documented arm ran
    assert ("with their defaults, 1 went wrong" in found.ours) == (documented is not None and "errors" in transaction)


def test_a10_reads_a_stored_drain_without_the_setting_as_defaults_and_names_a_library_without_one():
    old = pd.DataFrame([drain("chancy", "session"), drain("chancy", "transaction", errors=4)])  # stored before it
    found = pooler_section.a10_through_a_transaction_pooler(old, None, "1.18.0")
    assert found.parts == (("chancy", CORRECTED),)
    assert ("chancy: defaults: went wrong (4 workers failed with an error); neither it nor its driver documents a "
            "setting it passes through for a transaction pooler (the verdict is the defaults').") in found.note


def test_the_pooler_table_and_advice_show_the_documented_setting_beside_the_defaults():
    pooled = pd.DataFrame([drain("procrastinate", "session", setting="default"),
                           drain("procrastinate", "transaction", setting="default", executed=10, errors=4),
                           drain("procrastinate", "transaction", setting="documented")])
    loaded = {fault_section.NAME: fault_section.Loaded((), pd.DataFrame(), (), pooled)}
    shown = pooler_section.pooler_table(loaded)
    assert "went wrong with its documented setting" in shown and "jobs/s: session / transaction / documented" in shown
    assert "30 of 40 not run and 4 workers failed with an error" in shown and "confirmed" in shown
    advice = fault_section.advice_table(loaded)
    assert "transaction mode with prepare_threshold=None (documented for a pooler by it or its driver); with its defaults, session" in advice
    assert pooler_section.libraries_fixed_by_their_setting(pooled) == {"procrastinate"}


def test_the_pooler_setup_names_each_documented_setting_raced():
    from harness.experiments.libraries.drain import LibrarySweep
    pooled = pd.DataFrame([drain("procrastinate", "session", setting="default"),
                           drain("procrastinate", "transaction", setting="default"),
                           drain("procrastinate", "transaction", setting="documented")])
    asked = LibrarySweep(libraries=("procrastinate",), worker_counts=(4,), job_count=40,
                         poolers=("session", "transaction"), pooler_settings=("default", "documented"))
    mine = fault_section.Loaded((), pd.DataFrame(), (), pooled, requests={"library_poolers": asked})
    said = pooler_section.pooler_setup(mine)
    assert ("drained them a third time, in transaction mode with it (procrastinate: `prepare_threshold=None`)"
            in said)
    old = fault_section.Loaded((), pd.DataFrame(), (), pooled.drop(columns="pooler_setting"),
                               requests={"library_poolers": asked})
    assert "third time" not in pooler_section.pooler_setup(old)  # a build stored before the setting raced none


# --------------------------------------------------------------------------- verdicts near the CPU-bound line


def _near_line_sweep(share: float) -> list[dict]:
    """guarded at 1 to 8 workers, three races each, its clients waiting for a CPU `share` of their window at 4 and
    8 workers (0.2 elsewhere); none past the line."""
    rows = [race("guarded", w, r, claims_per_second=v - 20 * r, p99_ms=1.0, client_runnable_share=0.2,
                 client_running_share=0.3, backend_runnable_share=0.2, cpu_bound=False)
            for w, v in {1: 1_500, 2: 1_400, 4: 1_300, 8: 1_200}.items() for r in range(3)]
    return [{**row, "client_runnable_share": share} if row["worker_count"] in (4, 8) else row for row in rows]


def test_a_verdict_that_rests_on_points_near_the_cpu_bound_line_says_what_it_reads_without_them():
    near = findings.by_id(contents.evaluate({"races": race_sweep.Loaded(pd.DataFrame(_near_line_sweep(0.45)))}))
    assert near["F5"].verdict == NOT_DISTINGUISHABLE and near["F5"].near_line == NOT_MEASURED
    assert near["F6"].verdict == CONFIRMED and near["F6"].near_line == ""  # decided by the points far from it
    cell = findings.table([near["F5"]])["verdict"].iloc[0]
    assert "without the points near the CPU-bound line: not measured" in cell
    assert near["F5"].as_dict()["near_line"] == NOT_MEASURED
    far = findings.by_id(contents.evaluate({"races": race_sweep.Loaded(pd.DataFrame(_near_line_sweep(0.3)))}))
    assert all(f.near_line == "" for f in far.values())
    assert race_sweep.near_the_line(race_sweep.Loaded(pd.DataFrame(_near_line_sweep(0.3)))) is None


def test_the_line_moved_down_counts_the_points_near_it():
    from harness.server.activity import cpu_bound

    assert cpu_bound(0.45) is False and cpu_bound(0.45, below=0.1) is True
    assert cpu_bound(0.2, 0.6) is False and cpu_bound(0.2, 0.62, below=0.1) is True  # busy 0.82 against 0.8
    assert cpu_bound(0.1, backend_runnable_share=0.41, below=0.1) is True and cpu_bound(None) is None
