"""The races section: the sweep of naive, guarded and skip_locked (F1-F8, C4, A1, A2), with the client
layouts' notes on F1, F2, F5 and F7."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import pandas as pd

from harness.article.analysis import (at_workers, cpu_bound_facts, machine, over_repeats, race_summary, runs_of, sampler_facts,
                                      setup_comparison,
                                      shares_at, timeline, timeline_counts, wait_share_table)
from harness.article.compare import (NO_FIGURE, direction_beyond_noise, Figure, OriginalFigure, Races, scaled,
                                     separated, spearman)
from harness.article.findings import (ADDED, CONFIRMED, CONFIRMED_DIFFERENT_SIZE, CORRECTED, NOT_DISTINGUISHABLE,
                                      NOT_MEASURED, NOT_REPRODUCED, ORIGINAL_F1_DUPLICATE_JOBS, ORIGINAL_F3_PEAK,
                                      ORIGINAL_F4_ATTEMPTS, ORIGINAL_F5_LOSSES_PER_WIN, ORIGINAL_F6_MAX_P99_MS,
                                      ORIGINAL_F6_MIN_RATE, ORIGINAL_F7_RATIO, ORIGINAL_HIGH_WORKERS,
                                      ORIGINAL_JOB_COUNT, Finding, lost_per_win, make_finding, not_measured)
from harness.article.formats import (DASH, MISSING, count, missing, ms, number, percent, rate, ratio, spread as
                                     spread_text)
from harness.article.labels import LOCK_WAIT
from harness.article.prose import (counted, cpu_bound_note, cpu_bound_shown, join, listing, strategy_sql, table,
                                   workers_phrase)
from harness.article.wording import Sentences
from harness.stats import censored_percentile, censored_waits_ns, time_to_job_ns
from harness.storage import open_runs
from harness.server.activity import CPU_BOUND_CLIENT_RUNNABLE_SHARE, SAMPLE_INTERVAL_SECONDS
from harness.strategies import STRATEGIES

NAME = "races"
READS = ("races", "client_layouts", "slow_race", "split_cpus", "indexed_race", "no_sampler")
say = Sentences(NAME)

CPU_FREE_FINDINGS = ("F5", "F6", "F7", "F8", "C4", "A1")

# --------------------------------------------------------------------------- facts for the prose


def race_facts(summary: pd.DataFrame, by_workers: pd.DataFrame) -> dict:
    """The race figures the article's prose uses, all from stored runs."""
    workers = sorted(int(w) for w in by_workers["worker_count"].unique())
    low, high = workers[0], workers[-1]
    contended = [w for w in workers if w > 1]
    two = 2 if 2 in workers else (contended[0] if contended else low)
    strategies = set(by_workers["strategy"].astype(str))
    f: dict = {"workers": workers, "low": low, "high": high, "two": two,
               "job_count": int(summary["job_count"].iloc[0]), "repeats": int(by_workers["repeats"].max()),
               "strategies": [s for s in ("naive", "guarded", "skip_locked") if s in strategies]}

    def get(strategy, worker_count, column):
        return at_workers(by_workers, strategy, worker_count, column)

    for strategy in f["strategies"]:
        rows = summary[summary["strategy"] == strategy]
        f[f"{strategy}_total_attempts"] = int(rows["attempts"].sum())
        f[f"{strategy}_total_duplicates"] = int(rows["duplicate_jobs"].sum())
        f[f"{strategy}_total_lost"] = int(rows["lost"].sum())
        f[f"{strategy}_total_wins"] = int(rows["wins"].sum())
        for label, w in (("low", low), ("two", two), ("high", high)):
            for column in ("duplicate_jobs", "extra_claims", "claims_per_second", "unique_jobs_per_second",
                           "losses_per_win", "p50_ms", "p99_ms", "attempts", "wins", "lost",
                           "attempts_per_second"):
                f[f"{strategy}_{column}_{label}"] = get(strategy, w, column)
        series = by_workers[by_workers["strategy"] == strategy].sort_values("worker_count")
        peak = series.loc[series["claims_per_second"].idxmax()] if len(series) else None
        f[f"{strategy}_peak_claims_per_second"] = float(peak["claims_per_second"]) if peak is not None else math.nan
        f[f"{strategy}_peak_workers"] = int(peak["worker_count"]) if peak is not None else None
        f[f"{strategy}_max_claims_per_job"] = int(rows["max_claims_per_job"].max()) if len(rows) else 0
    if "naive" in strategies:
        naive = by_workers[by_workers["strategy"] == "naive"].sort_values("worker_count")
        f["naive_duplicate_share_two"] = f["naive_duplicate_jobs_two"] / f["job_count"]
        f["naive_duplicate_share_high"] = f["naive_duplicate_jobs_high"] / f["job_count"]
        f["naive_extra_claims_rho"] = spearman(naive["worker_count"], naive["extra_claims"])
        # at how many worker counts naive's counted rate beats both safe strategies
        wide = by_workers.pivot_table(index="worker_count", columns="strategy", values="claims_per_second",
                                      observed=True)
        f["naive_fastest_at"] = [int(w) for w, row in wide.iterrows() if row.idxmax() == "naive"]
    if {"guarded", "skip_locked"} <= strategies:
        f["skip_over_guarded_high"] = f["skip_locked_claims_per_second_high"] / f["guarded_claims_per_second_high"]
        f["skip_p99_over_guarded_high"] = f["skip_locked_p99_ms_high"] / f["guarded_p99_ms_high"]
    if "guarded" in strategies:
        guarded = by_workers[by_workers["strategy"] == "guarded"].sort_values("worker_count")
        f["guarded_throughput_rho"] = spearman(guarded["worker_count"], guarded["claims_per_second"])
        f["guarded_slowdown"] = f["guarded_claims_per_second_low"] / f["guarded_claims_per_second_high"]
    return f


# --------------------------------------------------------------------------- the race rules (F1-F8, C4, A1, A2)

# F1 needs a share of the jobs, not one duplicate: the original's point is that two workers already collide on
# nearly every job (98%), that is, the race window is hit as a matter of course. Below one job in a hundred,
# duplicates would be a rare accident; from 1% up they are routine whatever their exact rate, and the size
# is then compared with the original's.
F1_ROUTINE_SHARE = 0.01


def f1_duplicates_at_two_workers(races: Races) -> Finding:
    contended = races.workers("naive", least=2)
    if not contended:
        return not_measured("F1", say("F1.not_raced"))
    workers = 2 if 2 in contended else contended[0]
    duplicates = races.figure("naive", workers, "duplicate_jobs")
    share = scaled(duplicates, 1 / races.job_count)
    values = {"workers": count(workers), "duplicate_jobs": duplicates.text(count), "job_count": count(races.job_count),
              "share": share.text(percent)}
    ours = say("F1.ours", duplicate_jobs=duplicates.text(count), job_count=count(races.job_count),
               share=share.text(percent), workers=workers)
    notes = [] if workers == 2 else [say("F1.no_two_workers", workers=workers)]
    routine = separated(share, Figure(*[F1_ROUTINE_SHARE] * 3))
    if routine < 0:
        notes.append(say("F1.rare", routine_share=percent(F1_ROUTINE_SHARE, 0)))
        return make_finding("F1", NOT_REPRODUCED, ours, notes, values)
    if routine == 0:
        notes.append(say("F1.spans", routine_share=percent(F1_ROUTINE_SHARE, 0)))
        return make_finding("F1", NOT_DISTINGUISHABLE, ours, notes, values)
    original = OriginalFigure(ORIGINAL_F1_DUPLICATE_JOBS / ORIGINAL_JOB_COUNT, 1 / ORIGINAL_JOB_COUNT)
    if workers == 2 and original.met_by(share):
        return make_finding("F1", CONFIRMED, ours, notes, values)
    notes.append(say("F1.different_size", share=share.text(percent), original_share=percent(original.value)))
    return make_finding("F1", CONFIRMED_DIFFERENT_SIZE, ours, notes, values)


def f2_duplicates_compound(races: Races) -> Finding:
    contended = races.workers("naive", least=2)
    if len(contended) < 2:
        return not_measured("F2", say("F2.too_few", worker_counts=len(contended)))
    # claims beyond the first, per job: keeps growing after nearly every job has a duplicate
    per_job = [(w, scaled(races.figure("naive", w, "extra_claims"), 1 / races.job_count)) for w in contended]
    direction = direction_beyond_noise(per_job)
    ours = say("F2.ours", per_job=listing(per_job, lambda f: f.text(lambda v: number(v, 2))))
    values = {"extra_per_job_low": number(per_job[0][1].median, 2), "extra_per_job_high": number(per_job[-1][1].median, 2),
              "workers_low": count(contended[0]), "workers_high": count(contended[-1])}
    shown = cpu_bound_shown(races.cpu_bound_workers("naive", least=2))
    if direction > 0:
        return make_finding("F2", CONFIRMED, ours, shown, values)
    if direction == 0:
        return make_finding("F2", NOT_DISTINGUISHABLE, ours,
                        [say("F2.overlap", workers_high=contended[-1], workers_low=contended[0]), shown], values)
    return make_finding("F2", NOT_REPRODUCED, ours,
                    [say("F2.falls", worker_counts=len(contended)), shown], values)


F3_PARTS = ("looks fastest", "because duplicates count")


def f3_naive_looks_fastest(races: Races) -> Finding:
    others = [s for s in ("guarded", "skip_locked") if races.has(s)]
    if not races.has("naive") or not others:
        return not_measured("F3", say("F3.too_few", strategies=", ".join(
            s for s in ("naive", "guarded", "skip_locked") if races.has(s))))

    def peak(strategy, column="claims_per_second"):
        pairs = [(w, races.figure(strategy, w, column)) for w in races.workers(strategy)]
        return max(pairs, key=lambda p: p[1].median)

    naive_w, naive_peak = peak("naive")
    best_other = max(others, key=lambda s: peak(s)[1].median)
    other_w, other_peak = peak(best_other)
    naive_distinct = races.figure("naive", naive_w, "unique_jobs_per_second")
    fastest_at = [w for w in races.workers("naive")
                  if all(separated(races.figure("naive", w, "claims_per_second"),
                                   races.figure(s, w, "claims_per_second")) > 0
                         for s in others if w in races.workers(s))]
    values = {"naive_peak": naive_peak.text(rate), "naive_peak_workers": count(naive_w),
              "naive_distinct_peak": naive_distinct.text(rate), "other_peak": other_peak.text(rate),
              "other_strategy": best_other, "fastest_at": count(len(fastest_at)),
              "worker_counts": count(len(races.workers("naive")))}
    ours = say("F3.ours", naive_peak=naive_peak.text(rate), naive_workers=workers_phrase(naive_w),
               naive_distinct=naive_distinct.text(rate), other=best_other, other_peak=other_peak.text(rate),
               other_workers=workers_phrase(other_w), fastest_at=len(fastest_at),
               worker_counts=len(races.workers("naive")))
    # two parts: naive's counted rate looks best, and its lead is duplicate work counted as work
    looks_best = {1: CONFIRMED, -1: NOT_REPRODUCED, 0: NOT_DISTINGUISHABLE}[separated(naive_peak, other_peak)]
    inflated = separated(naive_peak, naive_distinct)
    lead_without = separated(naive_distinct, other_peak)
    if lead_without > 0:
        because = CORRECTED  # naive leads even counting each job once
    else:
        because = {1: CONFIRMED, -1: NOT_REPRODUCED, 0: NOT_DISTINGUISHABLE}[inflated]
    parts = tuple(zip(F3_PARTS, (looks_best, because)))
    peaks_bound = set(races.cpu_bound_workers("naive")) | set(races.cpu_bound_workers(best_other))
    notes = [cpu_bound_shown([w for w in {naive_w, other_w} if w in peaks_bound])]
    if looks_best == NOT_REPRODUCED:
        notes.append(say("F3.below", other=best_other))
    elif looks_best == NOT_DISTINGUISHABLE:
        notes.append(say("F3.overlap", other=best_other))
    if because == CORRECTED:
        notes.append(say("F3.leads_anyway"))
    elif because == CONFIRMED:
        notes.append(say("F3.distinct", naive_distinct=naive_distinct.text(rate)))
    if looks_best != CONFIRMED:
        return make_finding("F3", looks_best, ours, notes, values, parts=parts)
    if because != CONFIRMED:
        return make_finding("F3", because, ours, notes, values, parts=parts)
    original = OriginalFigure(ORIGINAL_F3_PEAK, 1_000)
    if original.met_by(naive_peak):
        return make_finding("F3", CONFIRMED, ours, notes, values, parts=parts)
    notes.append(say("F3.different_size", ratio=ratio(naive_peak.median / ORIGINAL_F3_PEAK),
                     original_peak=count(ORIGINAL_F3_PEAK)))
    return make_finding("F3", CONFIRMED_DIFFERENT_SIZE, ours, notes, values, parts=parts)


def f4_guarded_no_duplicates(races: Races) -> Finding:
    runs = races.runs("guarded")
    if not len(runs):
        return not_measured("F4", say("F4.not_raced"))
    duplicates, attempts = int(runs["duplicate_jobs"].sum()), int(runs["attempts"].sum())
    values = {"duplicate_jobs": count(duplicates), "attempts": count(attempts), "runs": count(len(runs))}
    ours = say("F4.ours", duplicate_jobs=count(duplicates), attempts=count(attempts), races=count(len(runs)))
    if duplicates:
        worst = runs.loc[runs["duplicate_jobs"].idxmax()]
        return make_finding("F4", NOT_REPRODUCED, ours,
                        say("F4.duplicates", duplicate_jobs=count(duplicates),
                            worst_duplicates=count(worst["duplicate_jobs"]), worst_workers=int(worst["worker_count"])),
                        values)
    fewer = attempts < ORIGINAL_F4_ATTEMPTS - 50_000  # "about 700,000": rounded to hundred thousands
    return make_finding("F4", CONFIRMED, ours,
                    say("F4.fewer_attempts", original_attempts=count(ORIGINAL_F4_ATTEMPTS)) if fewer else "",
                    values)


# A guarded worker loses a given job at most once: after a loss its next read starts after the winner's
# commit, and the job is no longer pending. So a job costs at most N-1 lost races, one per rival.
ORIGINAL_F5_AT_TWO = OriginalFigure(1, 1)  # "about 1" lost race per win at 2 workers, read off the original's chart
F5_PARTS = ("rise with workers", "size at 2 workers")


def f5_lost_races_per_win(races: Races) -> Finding:
    """Against the N-1 ceiling: a guarded worker loses a given job at most once, so a win costs at most N-1 lost
    races. Lost races per win cannot grow "much faster than workers" for long, and the original's own figures
    (about 1 at 2 workers, about 22 at 100) grow slower than the rivals too; what both can show is that they rise,
    and how much of the ceiling they reach. Two parts: the rise (beyond the spread, on points that are not
    CPU-bound), and the size at 2 workers against the original's about 1."""
    contended = races.workers("guarded", least=2, cpu_free=True)
    bound = races.cpu_bound_workers("guarded", least=2)
    skipped = cpu_bound_note(bound)
    if len(contended) < 2:
        single = (" " + say("F5.single", workers=contended[0], lost_per_win=races.figure(
            "guarded", contended[0], "losses_per_win").text(lambda v: number(v, 2))) if contended else "")
        return not_measured("F5", say("F5.too_few", worker_counts=len(contended), single=single, skipped=skipped))
    lost = [(w, races.figure("guarded", w, "losses_per_win")) for w in contended]
    of_ceiling = [(w, scaled(f, 1 / (w - 1))) for w, f in lost]
    ours = say("F5.ours", lost_per_win=listing(lost, lambda f: f.text(lambda v: number(v, 2))),
               ceiling_shares=listing(of_ceiling, lambda f: f.text(percent)))
    values = {"lost_per_win_low": lost[0][1].text(lambda v: number(v, 2)), "workers_low": count(lost[0][0]),
              "lost_per_win_high": lost[-1][1].text(lambda v: number(v, 2)), "workers_high": count(lost[-1][0]),
              "ceiling_share_low": of_ceiling[0][1].text(percent), "ceiling_share_high": of_ceiling[-1][1].text(percent)}
    rise = {1: CONFIRMED, -1: NOT_REPRODUCED, 0: NOT_DISTINGUISHABLE}[direction_beyond_noise(lost)]
    notes = [say("F5.ceiling", share_low=of_ceiling[0][1].text(percent), workers_low=lost[0][0],
                 share_high=of_ceiling[-1][1].text(percent), workers_high=lost[-1][0],
                 original_at_two=format(ORIGINAL_F5_AT_TWO.value, "g"), original_high=ORIGINAL_F5_LOSSES_PER_WIN,
                 original_workers=ORIGINAL_HIGH_WORKERS,
                 original_share=percent(ORIGINAL_F5_LOSSES_PER_WIN / (ORIGINAL_HIGH_WORKERS - 1), 0))]
    if 2 in contended:
        size = CONFIRMED if ORIGINAL_F5_AT_TWO.met_by(races.figure("guarded", 2, "losses_per_win")) \
            else CONFIRMED_DIFFERENT_SIZE
    else:
        size = NOT_MEASURED
        notes.append(say("F5.no_two_workers"))
    notes.append(skipped)
    parts = tuple(zip(F5_PARTS, (rise, size)))
    if rise != CONFIRMED:
        if rise == NOT_DISTINGUISHABLE:
            notes.insert(0, say("F5.overlap", workers_high=lost[-1][0], workers_low=lost[0][0]))
        return make_finding("F5", rise, ours, notes, values, contended, parts)
    verdict = CONFIRMED if size == CONFIRMED else CONFIRMED_DIFFERENT_SIZE
    return make_finding("F5", verdict, ours, notes, values, contended, parts)


def bottleneck(lock_share: float, runnable_share: float | None) -> str:
    """What the backends waited on more, by measurement: "locks" (sampled row/transaction lock waits) or
    "cpu" (schedstat's runnable time); "unmeasured" without schedstat (a server on another host)."""
    if runnable_share is None or pd.isna(runnable_share) or lock_share is None or pd.isna(lock_share):
        return "unmeasured"
    return "locks" if lock_share > runnable_share else "cpu"


BOTTLENECK_PHRASES = {"cpu": "they waited longer for a CPU than on locks",
                      "locks": "they waited longer on locks than for a CPU",
                      "unmeasured": "their time waiting for a CPU is not measured (the server is not a process of this "
                                    "machine)"}

def _time_spent_sentence(shares: pd.DataFrame | None, worker_count: int) -> str:
    """Where guarded's backends' time went at one worker count, stated as a cause only when measured."""
    at = shares_at(shares, "guarded", worker_count)
    if not at:
        return ""
    lock, runnable = at.get(LOCK_WAIT), at.get("runnable_share")
    found = bottleneck(lock, runnable)
    if found == "unmeasured":
        return say("time_spent.unmeasured", workers=worker_count, lock_share=percent(lock),
                   bottleneck=BOTTLENECK_PHRASES[found])
    if found == "locks":
        return say("time_spent.locks", workers=worker_count, lock_share=percent(lock),
                   runnable_share=percent(runnable), bottleneck=BOTTLENECK_PHRASES[found])
    return say("time_spent.cpu", workers=worker_count, lock_share=percent(lock), runnable_share=percent(runnable),
               bottleneck=BOTTLENECK_PHRASES[found])


F6_PARTS = ("falls with workers", "1,100+ claims/s at 1 worker", "p99 under 2 ms at 1 worker")


def f6_guarded_slows_down(races: Races, shares: pd.DataFrame | None = None) -> Finding:
    """Three parts: the rate falls with workers (beyond the spread, on points that are not CPU-bound); at one
    worker it is 1,100 claims/s or more; and its p99 is under 2 ms."""
    workers = races.workers("guarded", cpu_free=True)
    skipped = cpu_bound_note(races.cpu_bound_workers("guarded"))
    if len(workers) < 2:
        return not_measured("F6", say("F6.too_few", worker_counts=len(workers), skipped=skipped))
    rates = [(w, races.figure("guarded", w, "claims_per_second")) for w in workers]
    falls = sum(b.median < a.median for (_, a), (_, b) in zip(rates, rates[1:]))
    low = workers[0]
    low_rate, low_p99 = rates[0][1], races.figure("guarded", low, "p99_ms")
    ours = say("F6.ours", rates=listing(rates, lambda f: f.text(rate)), p99_low=low_p99.text(ms),
               workers_low=workers_phrase(low), falls=falls, steps=len(rates) - 1)
    values = {"rate_low": low_rate.text(rate), "p99_low": low_p99.text(ms), "workers_low": count(low),
              "rate_high": rates[-1][1].text(rate), "workers_high": count(workers[-1]),
              "slowdown": ratio(low_rate.median / rates[-1][1].median), "falls": count(falls),
              "steps": count(len(rates) - 1)}
    fall = {-1: CONFIRMED, 1: NOT_REPRODUCED, 0: NOT_DISTINGUISHABLE}[direction_beyond_noise(rates)]
    # the original's low-concurrency figures are bounds: "1,100+" claims/s and "sub-2 ms" p99
    rate_part = {1: CONFIRMED, -1: CONFIRMED_DIFFERENT_SIZE, 0: NOT_DISTINGUISHABLE}[
        separated(low_rate, Figure(*[ORIGINAL_F6_MIN_RATE - 0.5] * 3))]
    p99_part = {-1: CONFIRMED, 1: CONFIRMED_DIFFERENT_SIZE, 0: NOT_DISTINGUISHABLE}[
        separated(low_p99, Figure(*[ORIGINAL_F6_MAX_P99_MS] * 3))]
    if low != 1:
        rate_part = p99_part = NOT_MEASURED
    parts = tuple(zip(F6_PARTS, (fall, rate_part, p99_part)))
    notes = []
    if fall == NOT_REPRODUCED:
        notes.append(say("F6.rises"))
    elif fall == NOT_DISTINGUISHABLE:
        notes.append(say("F6.overlap", workers_high=workers[-1], workers_low=low))
    if low != 1:
        notes.append(say("F6.fewest", workers_low=low))
    if rate_part == CONFIRMED_DIFFERENT_SIZE:
        notes.append(say("F6.rate_below", workers_low=workers_phrase(low), original_rate=count(ORIGINAL_F6_MIN_RATE)))
    if p99_part == CONFIRMED_DIFFERENT_SIZE:
        note = say("F6.p99_above", workers_low=workers_phrase(low), p99_low=low_p99.text(ms),
                   original_p99=ms(ORIGINAL_F6_MAX_P99_MS))
        runnable = shares_at(shares, "guarded", low).get("runnable_share")
        if not missing(runnable):
            note += " " + say("F6.runnable", runnable_share=percent(runnable))
        notes.append(note)
    notes.append(_time_spent_sentence(shares, workers[-1]))
    notes.append(skipped)
    if fall != CONFIRMED:
        return make_finding("F6", fall, ours, notes, values, workers, parts)
    same = rate_part == CONFIRMED and p99_part == CONFIRMED
    return make_finding("F6", CONFIRMED if same else CONFIRMED_DIFFERENT_SIZE, ours, notes, values, workers, parts)


def empty_while_jobs_remained(attempts: pd.DataFrame) -> int:
    """Attempts that came back without a job although a job was still claimed after them.

    A drain's skip_locked worker stops at its first empty answer; an empty answer is
    wasted (and the worker lost) when a later attempt, started after it ended, still
    won a job: that job was pending and unlocked while the empty attempt looked.
    """
    won = attempts["outcome"] == "won"
    if not won.any():
        return 0
    last_win_start = attempts.loc[won, "start_ns"].max()
    empty = attempts[attempts["outcome"] == "empty"]
    return int((empty["start_ns"] + empty["latency_ns"] < last_win_start).sum())


def _paired_ratio(races: Races, numerator: str, denominator: str, worker_count: int, column: str) -> Figure:
    """numerator/denominator of one figure per repeat (repeat k with repeat k), over repeats."""
    def by_repeat(strategy):
        runs = races.runs(strategy)
        runs = runs[runs["worker_count"] == worker_count]
        return runs.set_index("repeat")[column].astype(float)

    ratios = (by_repeat(numerator) / by_repeat(denominator)).dropna()
    if not len(ratios):
        return NO_FIGURE
    return Figure(float(ratios.median()), float(ratios.min()), float(ratios.max()))


F7_PARTS = ("no duplicates", "no wasted attempts", "faster under contention")


def f7_skip_locked_no_waste(races: Races) -> Finding:
    """Three parts: no duplicates (the audit), no wasted attempts, and a higher rate than guarded under contention
    (per repeat, at the most workers both raced without being CPU-bound)."""
    runs = races.runs("skip_locked")
    if not len(runs):
        return not_measured("F7", say("F7.not_raced"))
    duplicates, attempts = int(runs["duplicate_jobs"].sum()), int(runs["attempts"].sum())
    lost = int(runs["lost"].sum()) + int(runs["errors"].sum() if "errors" in runs else 0)
    early = (int(runs["empty_while_jobs_remained"].sum()) if "empty_while_jobs_remained" in runs else None)
    wasted = lost + (early or 0)
    both = [w for w in races.workers("skip_locked", least=2, cpu_free=True)
            if w in races.workers("guarded", cpu_free=True)]
    skipped = cpu_bound_note(sorted(set(races.cpu_bound_workers("skip_locked", least=2))
                                    | set(races.cpu_bound_workers("guarded", least=2))))
    top = both[-1] if both else None
    speedup = _paired_ratio(races, "skip_locked", "guarded", top, "claims_per_second") if top else NO_FIGURE
    values = {"duplicate_jobs": count(duplicates), "attempts": count(attempts), "wasted": count(wasted),
              "empty_while_jobs_remained": count(early), "speedup": speedup.text(ratio),
              "workers": count(top) if top else DASH}
    ours = (say("F7.ours", duplicate_jobs=count(duplicates), wasted=count(wasted), attempts=count(attempts),
                lost=count(lost), early=count(early))
            + ("; " + say("F7.ours_speedup", speedup=speedup.text(ratio), workers=top) if top else ""))
    used = [top] if top else []
    no_duplicates = NOT_REPRODUCED if duplicates else CONFIRMED
    no_waste = CORRECTED if wasted else CONFIRMED
    if top is None:
        faster = NOT_MEASURED
    else:
        faster = {1: CONFIRMED, -1: NOT_REPRODUCED, 0: NOT_DISTINGUISHABLE}[separated(speedup, Figure(1.0, 1.0, 1.0))]
    parts = tuple(zip(F7_PARTS, (no_duplicates, no_waste, faster)))
    notes = []
    if duplicates:
        notes.append(say("F7.duplicates", duplicate_jobs=count(duplicates)))
    if wasted:
        kinds = [say("F7.early", early=count(early)) if early else "",
                 say("F7.lost", lost=count(lost)) if lost else ""]
        notes.append(say("F7.wasted", kinds=" and ".join(k for k in kinds if k)))
        if early:
            notes.append(say("F7.early_stops"))
    if early is None:
        notes.append(say("F7.empty_unchecked"))
    if faster == NOT_MEASURED:
        notes.append(say("F7.not_compared"))
    elif faster == NOT_REPRODUCED:
        notes.append(say("F7.slower", workers=top))
    elif faster == NOT_DISTINGUISHABLE:
        notes.append(say("F7.spans", workers=top))
    notes.append(skipped)
    for part_verdict in (no_duplicates, no_waste, faster):
        if part_verdict != CONFIRMED:
            return make_finding("F7", part_verdict, ours, notes, values, used, parts)
    original = OriginalFigure(ORIGINAL_F7_RATIO, 10)  # "about 20x": rounded to tens
    if top == ORIGINAL_HIGH_WORKERS and original.met_by(speedup):
        return make_finding("F7", CONFIRMED, ours, notes, values, used, parts)
    notes.insert(0, say("F7.different_size", speedup=speedup.text(ratio), workers=top,
                        original_ratio=ORIGINAL_F7_RATIO))
    return make_finding("F7", CONFIRMED_DIFFERENT_SIZE, ours, notes, values, used, parts)


def job_wait_figures(job_waits: pd.DataFrame | None, strategy: str, worker_count: int, column: str) -> Figure:
    """A figure of attempt_figures() over repeats: median [min-max]."""
    if job_waits is None or not len(job_waits):
        return NO_FIGURE
    rows = job_waits[(job_waits["strategy"] == strategy) & (job_waits["worker_count"] == worker_count)][column]
    rows = rows.dropna()
    return Figure(float(rows.median()), float(rows.min()), float(rows.max())) if len(rows) else NO_FIGURE


def _waits_workers(job_waits: pd.DataFrame | None, strategies, least: int = 2, cpu_free: bool = True) -> list[int]:
    """The worker counts every strategy's waits were measured at, from `least` up; cpu_free: only those none of
    whose races was CPU-bound."""
    if job_waits is None or not len(job_waits):
        return []
    sets = [set(job_waits.loc[job_waits["strategy"] == s, "worker_count"].astype(int)) for s in strategies]
    common = set.intersection(*sets)
    if cpu_free and "cpu_bound" in job_waits:
        picked = job_waits[job_waits["strategy"].isin(list(strategies))]
        common -= set(picked.loc[picked["cpu_bound"].fillna(False).astype(bool), "worker_count"].astype(int))
    return sorted(w for w in common if w >= least)


def _waits_cpu_bound(job_waits: pd.DataFrame | None, strategies, least: int = 2) -> list[int]:
    """The worker counts _waits_workers leaves out because a race there was CPU-bound."""
    every = set(_waits_workers(job_waits, strategies, least, cpu_free=False))
    return sorted(every - set(_waits_workers(job_waits, strategies, least)))


F8_PARTS = ("per winning statement", "per job")


def f8_tail_latency(races: Races, job_waits: pd.DataFrame | None = None, fixed_fill: dict | None = None) -> Finding:
    """Per statement (a winning claim's p99: at a fixed fill where the bench measured it, else over whole
    drains), the original's claim; and per job (the time to get a job, lost races included), an added part."""
    both = [w for w in races.workers("skip_locked", least=2, cpu_free=True)
            if w in races.workers("guarded", cpu_free=True)]
    skipped = cpu_bound_note(sorted(set(races.cpu_bound_workers("skip_locked", least=2))
                                    | set(races.cpu_bound_workers("guarded", least=2))))
    if fixed_fill is not None:
        statement_w = fixed_fill["worker_count"]
        skip_stmt = Figure(*[fixed_fill["skip_locked_p99_ms"]] * 3)
        guarded_stmt = Figure(*[fixed_fill["guarded_p99_ms"]] * 3)
        where = say("F8.at_fixed_fill", workers=statement_w)
    elif both:
        statement_w = both[-1]
        skip_stmt = races.figure("skip_locked", statement_w, "p99_ms")
        guarded_stmt = races.figure("guarded", statement_w, "p99_ms")
        where = say("F8.over_drains", workers=statement_w)
    else:
        return not_measured("F8", say("F8.none", skipped=skipped))
    job_w = _waits_workers(job_waits, ("skip_locked", "guarded"))
    per_job = None
    if job_w:
        w = job_w[-1]
        per_job = (w, job_wait_figures(job_waits, "skip_locked", w, "wait_p99_ms"),
                   job_wait_figures(job_waits, "guarded", w, "wait_p99_ms"))
    ours = say("F8.ours", where=where, skip_locked_p99=skip_stmt.text(ms), guarded_p99=guarded_stmt.text(ms))
    values = {"statement_skip_p99": skip_stmt.text(ms), "statement_guarded_p99": guarded_stmt.text(ms),
              "statement_workers": count(statement_w), "statement_where": where}
    statement = {1: CONFIRMED, -1: NOT_REPRODUCED, 0: NOT_DISTINGUISHABLE}[separated(skip_stmt, guarded_stmt)]
    notes = [{CONFIRMED: say("F8.higher"), NOT_REPRODUCED: say("F8.lower"),
              NOT_DISTINGUISHABLE: say("F8.overlap")}[statement]]
    job_part = NOT_MEASURED
    if per_job:
        w, skip_job, guarded_job = per_job
        ours += "; " + say("F8.ours_per_job", workers=w, skip_locked_p99=skip_job.text(ms),
                           guarded_p99=guarded_job.text(ms))
        values.update(job_skip_p99=skip_job.text(ms), job_guarded_p99=guarded_job.text(ms), job_workers=count(w),
                      job_ratio=ratio(guarded_job.median / skip_job.median))
        order = separated(skip_job, guarded_job)
        job_part = ADDED
        notes.append(say("F8.per_job", workers=w, skip_locked_p99=skip_job.text(ms), guarded_p99=guarded_job.text(ms),
                         order={1: say("F8.per_job_higher"), -1: say("F8.per_job_lower"),
                                0: say("F8.per_job_overlap")}[order]))
    else:
        notes.append(say("F8.per_job_unmeasured"))
    notes.append(skipped)
    used = sorted({statement_w} | ({per_job[0]} if per_job else set())) if fixed_fill is None else \
        ([per_job[0]] if per_job else [])
    parts = tuple(zip(F8_PARTS, (statement, job_part)))
    return make_finding("F8", statement, ours, notes, values, used, parts)


C4_FATTER = 2.0


def c4_wait_for_a_job(job_waits: pd.DataFrame | None) -> Finding:
    contended = _waits_workers(job_waits, ("guarded",))
    skipped = cpu_bound_note(_waits_cpu_bound(job_waits, ("guarded",)))
    if not contended:
        return not_measured("C4", say("C4.none", skipped=skipped))
    w = contended[-1]
    wait, claim = (job_wait_figures(job_waits, "guarded", w, c) for c in ("wait_p99_ms", "claim_p99_ms"))
    fatter = wait.median / claim.median
    values = {"workers": count(w), "wait_p99": wait.text(ms), "claim_p99": claim.text(ms), "ratio": ratio(fatter),
              "wait_p50": job_wait_figures(job_waits, "guarded", w, "wait_p50_ms").text(ms),
              "claim_p50": job_wait_figures(job_waits, "guarded", w, "claim_p50_ms").text(ms)}
    ours = say("C4.ours", workers=w, wait_p99=wait.text(ms), claim_p99=claim.text(ms), ratio=ratio(fatter))
    # every repeat's wait against C4_FATTER times every repeat's winning claim
    beyond = separated(wait, scaled(claim, C4_FATTER))
    if beyond > 0:
        return make_finding("C4", CONFIRMED, ours, skipped, values, [w])
    if beyond == 0:
        return make_finding("C4", NOT_DISTINGUISHABLE, ours,
                        [say("C4.spans", fatter=number(C4_FATTER, 0)), skipped], values, [w])
    return make_finding("C4", NOT_REPRODUCED, ours,
                    [say("C4.within", fatter=number(C4_FATTER, 0), workers=w), skipped], values, [w])


def a1_time_to_get_a_job(job_waits: pd.DataFrame | None) -> Finding:
    contended = _waits_workers(job_waits, ("guarded", "skip_locked"))
    skipped = cpu_bound_note(_waits_cpu_bound(job_waits, ("guarded", "skip_locked")))
    if not contended:
        return not_measured("A1", say("A1.none", skipped=skipped))
    pairs = [(w, job_wait_figures(job_waits, "guarded", w, "wait_p99_ms"),
              job_wait_figures(job_waits, "skip_locked", w, "wait_p99_ms")) for w in contended]
    ours = say("A1.ours", points=", ".join(
        say("A1.point", guarded_p99=g.text(ms), skip_locked_p99=s.text(ms), workers=w) for w, g, s in pairs))
    w, guarded, skip = pairs[-1]
    values = {"workers": count(w), "guarded_p99": guarded.text(ms), "skip_locked_p99": skip.text(ms),
              "ratio": ratio(guarded.median / skip.median)}
    order = {-1: say("A1.lower"), 1: say("A1.higher"), 0: say("A1.overlap")}[separated(skip, guarded)]
    return make_finding("A1", ADDED, ours,
                    [say("A1.note", workers=w, order=order, ratio=ratio(guarded.median / skip.median)), skipped],
                    values, contended)


def a2_where_the_time_goes(races: Races, shares: pd.DataFrame | None) -> Finding:
    contended = races.workers("guarded", least=2)
    at = shares_at(shares, "guarded", contended[-1]) if contended else {}
    if not at:
        return not_measured("A2", say("A2.none"))
    w = contended[-1]
    lock, runnable, running = at.get(LOCK_WAIT), at.get("runnable_share"), at.get("running_share")
    ours = say("A2.ours", workers=w, lock_share=percent(lock), running_share=percent(running),
               runnable_share=percent(runnable))
    values = {"workers": count(w), "lock_share": percent(lock), "runnable_share": percent(runnable),
              "running_share": percent(running), "bottleneck": bottleneck(lock, runnable)}
    shown = cpu_bound_shown([w] if w in races.cpu_bound_workers("guarded") else [])
    return make_finding("A2", ADDED, ours, [_time_spent_sentence(shares, w), shown], values)

# --------------------------------------------------------------------------- the client layout (F1, F2, F5, F7)

PROCESSES, ASYNCIO = "one process per worker", "one asyncio process"
# (finding, figure, workers, the original's figure or None): what the layouts are compared on
LAYOUT_FIGURES = (
    ("F1", "naive's share of the jobs claimed more than once", 2, ORIGINAL_F1_DUPLICATE_JOBS / ORIGINAL_JOB_COUNT),
    ("F2", "naive's claims beyond each job's first, per job", ORIGINAL_HIGH_WORKERS, None),
    ("F5", "guarded's lost races per win", 2, 1.0),
    ("F5", "guarded's lost races per win", 8, None),
    ("F5", "guarded's lost races per win", 32, None),
    ("F5", "guarded's lost races per win", ORIGINAL_HIGH_WORKERS, float(ORIGINAL_F5_LOSSES_PER_WIN)),
    ("F7", "skip_locked's claims/s over guarded's", 8, None),
    ("F7", "skip_locked's claims/s over guarded's", ORIGINAL_HIGH_WORKERS, float(ORIGINAL_F7_RATIO)),
)


def _layout_value(points: pd.DataFrame, figure: str, workers: int) -> float:
    def at(strategy, column):
        rows = points[(points["strategy"].astype(str) == strategy) & (points["worker_count"] == workers)]
        return float(rows[column].median()) if len(rows) else math.nan

    if figure.startswith("naive's share"):
        return at("naive", "duplicate_jobs") / at("naive", "job_count")
    if figure.startswith("naive's claims beyond"):
        return at("naive", "extra_claims") / at("naive", "job_count")
    if figure.startswith("guarded's lost"):
        return at("guarded", "losses_per_win")
    return at("skip_locked", "claims_per_second") / at("guarded", "claims_per_second")


def layout_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The client-layout races: per figure the original's findings rest on, its value under each layout (median
    over repeats), the original's where it gives one, and which layout lies nearer it (on a log scale)."""
    rows = []
    for finding_id, figure, workers, original in LAYOUT_FIGURES:
        values = {}
        for layout, label in (("processes", PROCESSES), ("asyncio", ASYNCIO)):
            picked = summary[summary["client_layout"] == layout] if "client_layout" in summary else summary.iloc[0:0]
            values[label] = _layout_value(picked, figure, workers)
            if layout == "asyncio":
                at_point = picked[picked["worker_count"] == workers]
                bound = bool(len(at_point) and "cpu_bound" in at_point
                             and at_point["cpu_bound"].fillna(False).astype(bool).all())
        if all(missing(v) for v in values.values()):
            continue
        nearer = None
        if original and all(not missing(v) and v > 0 for v in values.values()):
            nearer = min(values, key=lambda label: abs(math.log(values[label] / original)))
        rows.append({"finding": finding_id, "figure": figure, "workers": workers, **values,
                     "the original": original if original is not None else math.nan, "nearer the original": nearer,
                     "asyncio CPU-bound": bound})
    return pd.DataFrame(rows, columns=["finding", "figure", "workers", PROCESSES, ASYNCIO, "the original",
                                       "nearer the original", "asyncio CPU-bound"])


def layout_note(table: pd.DataFrame, finding_id: str) -> str:
    """One sentence per finding: its figures under the original's client layout, and which layout is nearer."""
    rows = table[table["finding"] == finding_id]
    rows = rows[~rows[ASYNCIO].map(missing)]
    if not len(rows):
        return ""
    fmt = percent if finding_id == "F1" else (ratio if finding_id == "F7" else (lambda v: number(v, 2)))
    listed = ", ".join(say("layout.point", asyncio=fmt(row[ASYNCIO]), processes=fmt(row[PROCESSES]),
                           workers=row["workers"]) for _, row in rows.iterrows())
    nearer = [say("layout.nearer", workers=row["workers"], original=fmt(row["the original"]),
                  layout=say("layout.nearer_asyncio") if row["nearer the original"] == ASYNCIO
                  else say("layout.nearer_processes"))
              for _, row in rows.iterrows() if isinstance(row["nearer the original"], str)]
    bound = bool(rows["asyncio CPU-bound"].all())
    return (say("layout.note", figure=rows.iloc[0]["figure"], figures=listed,
                nearer="; " + "; ".join(nearer) if nearer else "")
            + (" " + say("layout.cpu_bound") if bound else ""))


def attempt_figures(paths) -> pd.DataFrame:
    """Per race, from its attempts: the winning claim's and the time to get a job's p50 and p99 (ms), and the
    attempts that came back empty while jobs remained."""

    rows = []
    for run in open_runs(paths):
        attempts = run.table("attempts")
        manifest = run.manifest
        config = manifest["parameters"]
        wins = attempts.loc[attempts["outcome"] == "won", "latency_ns"].to_numpy() / 1e6
        waits = time_to_job_ns(attempts) / 1e6
        cut_off = censored_waits_ns(attempts) / 1e6  # waits the drain's end cut off: counted at their bound
        rows.append({"run_id": manifest["run_id"], "strategy": config["strategy"],
                     "worker_count": int(config["worker_count"]), "repeat": int(config["repeat"]),
                     **{f"claim_p{q}_ms": float(np.percentile(wins, q)) if len(wins) else math.nan for q in (50, 99)},
                     **{f"wait_p{q}_ms": censored_percentile(waits, cut_off, q)[0] for q in (50, 99)},
                     "wait_p99_is_lower_bound": censored_percentile(waits, cut_off, 99)[1],
                     "censored_waits": int(len(cut_off)),
                     "empty_while_jobs_remained": empty_while_jobs_remained(attempts)})
    return pd.DataFrame(rows, columns=["run_id", "strategy", "worker_count", "repeat", "claim_p50_ms", "claim_p99_ms",
                                       "wait_p50_ms", "wait_p99_ms", "wait_p99_is_lower_bound", "censored_waits",
                                       "empty_while_jobs_remained"])


# --------------------------------------------------------------------------- the section


@dataclass(frozen=True)
class Loaded:
    """The race sweep as the rules and the prose read it, loaded once from its stored runs."""

    summary: pd.DataFrame  # one row per race (analysis.race_summary), with empty_while_jobs_remained
    job_waits: pd.DataFrame | None = None  # attempt_figures(): per race, winning claim's and wait's p50/p99
    layouts: pd.DataFrame | None = None  # analysis.race_summary of the client-layout races (notes on F1, F2, F5, F7)
    runs: tuple = ()  # the race runs (storage.Run)
    slow_runs: tuple = ()  # the slowed-down race's runs
    split_runs: tuple = ()  # the races with client and server on separate CPUs
    slow_request: object = None  # what the params file's slow_race section asked (a RaceSweep)
    setup_runs: dict = field(default_factory=dict)  # the sweep's setup and its variants: {section: [Run, ...]}

    # derived once, on first use: the rules, the prose's figures, the tables and the notebook's charts share them

    @cached_property
    def shares(self) -> pd.DataFrame | None:
        return wait_share_table(self.summary) if len(self.summary) else None

    @cached_property
    def by_workers(self) -> pd.DataFrame:
        return over_repeats(self.summary)

    @cached_property
    def facts(self) -> dict:
        return race_facts(self.summary, self.by_workers)

    @cached_property
    def site(self) -> dict:
        """The machine the races ran on (analysis.machine)."""
        return machine(list(self.runs))

    @cached_property
    def sampler(self) -> dict:
        return sampler_facts(list(self.runs), self.summary)


def load(reads: dict, loaded: dict) -> Loaded:
    paths = runs_of(reads, "races")
    summary = race_summary(paths) if paths else pd.DataFrame()
    job_waits = attempt_figures(paths) if paths else None
    if job_waits is not None and len(summary):
        summary = summary.merge(job_waits[["run_id", "empty_while_jobs_remained"]], on="run_id", how="left")
        if "cpu_bound" in summary:
            job_waits = job_waits.merge(summary[["run_id", "cpu_bound"]], on="run_id", how="left")
    layouts = race_summary(runs_of(reads, "client_layouts")) if runs_of(reads, "client_layouts") else None
    return Loaded(summary, job_waits, layouts, tuple(paths), tuple(runs_of(reads, "slow_race")),
                  tuple(runs_of(reads, "split_cpus")), reads["slow_race"].request if "slow_race" in reads else None,
                  {name: runs_of(reads, name) for name in ("indexed_race", "split_cpus", "no_sampler")})


def findings(loaded: dict) -> list[Finding]:
    """F1-F8, C4, A1 and A2 from the sweep (F8 also reads the bench's fixed-fill latency), with the client
    layouts' notes."""
    mine = loaded.get(NAME) or Loaded(pd.DataFrame())
    bench = loaded.get("bench")
    races, shares = Races(mine.summary), mine.shares
    found = [
        f1_duplicates_at_two_workers(races), f2_duplicates_compound(races), f3_naive_looks_fastest(races),
        f4_guarded_no_duplicates(races), f5_lost_races_per_win(races), f6_guarded_slows_down(races, shares),
        f7_skip_locked_no_waste(races), f8_tail_latency(races, mine.job_waits, bench.fixed_fill if bench else None),
        c4_wait_for_a_job(mine.job_waits), a1_time_to_get_a_job(mine.job_waits), a2_where_the_time_goes(races, shares),
    ]
    if mine.layouts is not None and len(mine.layouts):
        layouts = layout_table(mine.layouts)
        found = [replace(f, note=" ".join(n for n in (f.note, layout_note(layouts, f.id)) if n)) for f in found]
    return found


# the wait table's columns the prose names at the sweep's top worker count, and their short names
WAIT_SHARES = ((LOCK_WAIT, "lock"), ("waiting for the client", "client"), ("running_share", "running"),
               ("runnable_share", "runnable"))


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    """The sweep's figures the prose names, formatted once."""
    mine = loaded[NAME]
    summary, by_workers, facts = mine.summary, mine.by_workers, mine.facts
    low, high, two = facts["low"], facts["high"], facts["two"]

    def at(strategy, worker_count, column, fmt=number):
        """A point's median with its min-max over repeats."""
        row = by_workers[(by_workers["strategy"] == strategy) & (by_workers["worker_count"] == worker_count)].iloc[0]
        return spread_text(row[column], row.get(f"{column}_min"), row.get(f"{column}_max"), fmt)

    def whole(value):
        return number(value, 0)

    site = mine.site
    out = {"job_count": count(facts["job_count"]), "worker_list": join([str(w) for w in facts["workers"]]),
           "repeats_phrase": counted(facts["repeats"], "race"),
           "repeats_phrase_capital": counted(facts["repeats"], "race").capitalize(),
           "server_version": site["server_version"], "low": low, "two": two, "high": high}
    for name in ("naive", "guarded", "skip_locked"):
        strategy = STRATEGIES[name]
        out |= {f"{name}_title": strategy.title, f"{name}_summary": strategy.summary, f"{name}_sql": strategy_sql(name),
                f"{name}_total_duplicates": count(facts[f"{name}_total_duplicates"]),
                f"{name}_total_attempts": count(facts[f"{name}_total_attempts"])}

    # what happens without the guard
    out |= {"naive_duplicates_two": at("naive", two, "duplicate_jobs", count),
            "naive_duplicate_share_two": percent(facts["naive_duplicate_share_two"]),
            "naive_duplicates_high": at("naive", high, "duplicate_jobs", count),
            "naive_extra_claims_high": at("naive", high, "extra_claims", count),
            "naive_max_claims_per_job": count(facts["naive_max_claims_per_job"])}
    slow = mine.slow_request
    slow_counts = timeline_counts(timeline(list(mine.slow_runs))).set_index("strategy")
    out |= {"slow_workers": slow.worker_counts[0], "slow_jobs": count(slow.job_count), "slow_pause": ms(slow.pause_ms),
            "slow_jitter": ms(slow.jitter_ms), "slow_naive_wins": count(slow_counts.loc["naive", "wins"]),
            "slow_naive_duplicates": count(slow_counts.loc["naive", "duplicate_jobs"]),
            "slow_guarded_wins": count(slow_counts.loc["guarded", "wins"]),
            "slow_guarded_lost": count(slow_counts.loc["guarded", "lost"]),
            "slow_skip_locked_wins": count(slow_counts.loc["skip_locked", "wins"]),
            "slow_skip_locked_lost": count(slow_counts.loc["skip_locked", "lost"])}

    # what the guard costs
    out |= {"guarded_total_lost": count(facts["guarded_total_lost"]),
            "guarded_total_wins": count(facts["guarded_total_wins"]),
            "naive_peak": whole(facts["naive_peak_claims_per_second"]), "naive_peak_workers": facts["naive_peak_workers"],
            "naive_unique_high": at("naive", high, "unique_jobs_per_second", whole),
            "naive_claims_high": at("naive", high, "claims_per_second", whole),
            "guarded_rate_low": at("guarded", low, "claims_per_second", whole),
            "guarded_p99_low": at("guarded", low, "p99_ms", ms)}

    # how the backends were sampled, and where a point was CPU-bound
    sampler = mine.sampler
    out |= {"sampler_interval": ms(sampler.get("interval_ms")),
            "sampler_interval_high": ms(sampler.get("interval_ms_high")),
            "sampler_slowest_workers": (counted(sampler["slowest_workers"], "worker")
                                        if sampler.get("slowest_workers") else MISSING),
            "sampler_asked": ms(SAMPLE_INTERVAL_SECONDS * 1e3), "cpu_free_findings": join(CPU_FREE_FINDINGS)}
    split = race_summary(list(mine.split_runs))
    out |= {"split_job_count": count(split["job_count"].max()) if len(split) else "no",
            "split_client_runnable_max": percent(split["client_runnable_share"].max() if len(split) else None),
            "split_backend_runnable_min": percent(split["backend_runnable_share"].min() if len(split) else None)}
    bound = cpu_bound_facts(summary)
    bound_workers = bound.get("bound_workers") or []
    out |= {"cpu_bound_threshold": percent(CPU_BOUND_CLIENT_RUNNABLE_SHARE, 0),
            "bound_clause": (say("bound_clause", bound_share=percent(bound["bound_share_min"]),
                                 bound_workers=join([str(w) for w in bound_workers]))
                             if bound_workers else say("bound_clause_none")),
            "cpu_free_workers": join([str(w) for w in bound.get("free_workers", [])]) or "none",
            "bound_workers_phrase": f"{join([str(w) for w in bound_workers])} workers" if bound_workers else "none",
            # a figure read at the sweep's top worker count says so where that point is CPU-bound
            "high_mark": " (CPU-bound here)" if high in bound_workers else "",
            "free_client_runnable_max": percent(bound.get("free_share_max")),
            "free_backend_runnable_max": percent(bound.get("free_backend_max")),
            "cpu_count": count(site.get("cpu_count"))}
    wait_table = mine.shares
    for name in ("guarded", "skip_locked"):
        for column, label in WAIT_SHARES:
            out[f"{name}_{label}_share_high"] = percent(at_workers(wait_table, name, high, column))
    # what the "other lock" is under SKIP LOCKED: the lightweight lock on one shared page's contents
    content_workers = (bound.get("free_workers") or [high])[-1]
    out |= {"content_workers": count(content_workers),
            "skip_locked_buffer_content": percent(at_workers(wait_table, "skip_locked", content_workers,
                                                             "buffer_content_share")),
            "skip_locked_other_lock": percent(at_workers(wait_table, "skip_locked", content_workers, "other lock")),
            "skip_locked_buffer_content_high": percent(at_workers(wait_table, "skip_locked", high,
                                                                  "buffer_content_share")),
            "bottleneck_phrase": BOTTLENECK_PHRASES[found["A2"].values.get("bottleneck", "unmeasured")]}

    layouts = mine.layouts if mine.layouts is not None else pd.DataFrame()
    out |= {"layout_job_count": count(layouts["job_count"].max()) if len(layouts) else "no",
            "layout_worker_list": join([str(w) for w in sorted(layouts["worker_count"].unique())])
            if len(layouts) else "no"}
    return out


def ends_table(loaded: dict) -> str:
    """The two ends of the worker range, one row per strategy and end."""
    mine = loaded[NAME]
    by_workers, facts = mine.by_workers, mine.facts
    ends = by_workers[by_workers["worker_count"].isin([facts["low"], facts["high"]])].copy()
    ends["strategy"] = ends["strategy"].astype(str)
    ends["lost per win"] = [lost_per_win(s, v) for s, v in zip(ends["strategy"], ends["losses_per_win"])]

    def whole(value):
        return number(value, 0)

    return table(
        ends[["strategy", "worker_count", "claims_per_second", "unique_jobs_per_second", "duplicate_jobs",
              "lost per win", "p50_ms", "p99_ms"]].rename(columns={
            "worker_count": "workers", "claims_per_second": "claims/s", "unique_jobs_per_second": "distinct jobs/s",
            "duplicate_jobs": "jobs claimed twice+", "p50_ms": "p50", "p99_ms": "p99"}),
        caption=say("ends_caption", job_count=count(facts["job_count"]), races=counted(facts["repeats"], "race")),
        formats={"claims/s": whole, "distinct jobs/s": whole, "jobs claimed twice+": count, "p50": ms, "p99": ms})


# how the setup table shows its columns (analysis.SETUP_COLUMNS)
SETUP_FORMATS = {"claims/s": lambda v: number(v, 0),
                 "lost races per win": lambda v: DASH if missing(v) else number(v, 2),
                 "workers waiting for a CPU": percent, "backends waiting for a CPU": percent}


def setup_table(loaded: dict) -> str:
    """The sweep's setup against its variants (CPUs split between client and server, no sampler), at the indexed
    race's points."""
    runs = loaded[NAME].setup_runs
    frame = setup_comparison(race_summary(runs.get("indexed_race", [])),
                             {"CPUs split": race_summary(runs.get("split_cpus", [])),
                              "no sampler": race_summary(runs.get("no_sampler", []))})
    return table(frame, formats=SETUP_FORMATS)


def layouts_html(loaded: dict) -> str:
    """The client-layout races beside the sweep's, per figure the original's findings rest on; '' without them."""
    layouts = loaded[NAME].layouts
    frame = layout_table(layouts) if layouts is not None else pd.DataFrame()
    if not len(frame):
        return ""

    def shown(row, column):
        value = row[column]
        if missing(value):
            return DASH
        return percent(value) if row["finding"] == "F1" else ratio(value) if row["finding"] == "F7" else number(value, 2)

    return table(pd.DataFrame({
        "finding": frame["finding"], "figure": frame["figure"], "workers": frame["workers"],
        PROCESSES: [shown(r, PROCESSES) for _, r in frame.iterrows()],
        ASYNCIO: [shown(r, ASYNCIO) for _, r in frame.iterrows()],
        "the original": [shown(r, "the original") for _, r in frame.iterrows()]}))
