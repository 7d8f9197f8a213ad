"""So should we switch to SKIP LOCKED: no duplicates and no waste (F7), the tail latency (F8)."""

from __future__ import annotations

import math

import pandas as pd

from harness.article.analysis import race_summary
from harness.article.compare import Figure, NO_FIGURE, OriginalFigure, Races, free_at, separated
from harness.article.findings import (ADDED, CONFIRMED, CONFIRMED_DIFFERENT_SIZE, CONFIRMED_IN_PART, CORRECTED, Finding,
                                      NOT_DISTINGUISHABLE, NOT_MEASURED, NOT_REPRODUCED, ORIGINAL_F7_RATIO,
                                      ORIGINAL_HIGH_WORKERS, make_finding, not_measured)
from harness.article.formats import DASH, count, missing, ms, ratio
from harness.article.prose import cpu_bound_note, worker_list
from harness.article.sections.race_sweep import job_wait_figures, race_data, waits_workers
from harness.article.wording import Sentences

NAME = "should_switch"
READS = ()
UPSTREAM = ("races", "bench")
say = Sentences(NAME)


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


F7_PARTS = ("no duplicates", "no wasted attempts", "faster under contention",
            f"about {ORIGINAL_F7_RATIO}x at {ORIGINAL_HIGH_WORKERS} workers")


def f7_skip_locked_no_waste(races: Races, split: Races | None = None) -> Finding:
    """Four parts: no duplicates (the audit), no wasted attempts, a higher rate than guarded under contention
    (per repeat, at the most workers both raced without being CPU-bound), and the original's about 20x at 100
    workers, read where both were raced there without being CPU-bound (the sweep, else the split-CPU arm: split)
    and not measured where none was. The verdict is the first of the first three that is not confirmed, else
    the size's."""
    runs = races.runs("skip_locked")
    if not len(runs):
        return not_measured("F7", say("F7.not_raced"))
    duplicates, attempts = int(runs["duplicate_jobs"].sum()), int(runs["attempts"].sum())
    lost = int(runs["lost"].sum()) + int(runs["errors"].sum() if "errors" in runs else 0)
    early = (int(runs["empty_while_jobs_remained"].sum()) if "empty_while_jobs_remained" in runs else None)
    wasted = lost + (early or 0)
    both = [w for w in races.workers("skip_locked", least=2, cpu_free=True)
            if w in races.workers("guarded", cpu_free=True)]
    bound = sorted(set(races.cpu_bound_workers("skip_locked", least=2))
                   | set(races.cpu_bound_workers("guarded", least=2)))
    skipped = cpu_bound_note(bound)
    top = both[-1] if both else None
    speedup = _paired_ratio(races, "skip_locked", "guarded", top, "claims_per_second") if top else NO_FIGURE
    values = {"duplicate_jobs": count(duplicates), "attempts": count(attempts), "wasted": count(wasted),
              "empty_while_jobs_remained": count(early), "speedup": speedup.text(ratio),
              "workers": count(top) if top else DASH, "bound_workers": worker_list(bound) if bound else ""}
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
    # the original's 100 workers: the sweep's point, else the split-CPU arm's, where neither was CPU-bound
    where, source, raced = free_at({"sweep": races, "split": split}, ("skip_locked", "guarded"),
                                   ORIGINAL_HIGH_WORKERS)
    if source is None:
        size = NOT_MEASURED
        notes.append(say("F7.high_bound", workers=ORIGINAL_HIGH_WORKERS) if raced
                     else say("F7.high_not_raced", workers=ORIGINAL_HIGH_WORKERS))
    else:
        high = _paired_ratio(source, "skip_locked", "guarded", ORIGINAL_HIGH_WORKERS, "claims_per_second")
        size = CONFIRMED if OriginalFigure(ORIGINAL_F7_RATIO, 10).met_by(high) else CONFIRMED_DIFFERENT_SIZE
        notes.append(say("F7.high", workers=ORIGINAL_HIGH_WORKERS, speedup=high.text(ratio),
                         jobs=count(source.job_count), original_ratio=ORIGINAL_F7_RATIO,
                         where=say("F7.where_sweep") if where == "sweep" else say("F7.where_split")))
    parts = (*parts, (F7_PARTS[3], size))
    notes.append(skipped)
    for part_verdict in (no_duplicates, no_waste, faster):
        if part_verdict != CONFIRMED:
            return make_finding("F7", part_verdict, ours, notes, values, used, parts)
    # the original gives a size (about 20x at 100 workers): where it was not measured, never a bare "confirmed"
    return make_finding("F7", {CONFIRMED_DIFFERENT_SIZE: CONFIRMED_DIFFERENT_SIZE, NOT_MEASURED: CONFIRMED_IN_PART}.get(
        size, CONFIRMED), ours, notes, values, used, parts)


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
        def over_pairs(strategy):  # median, lowest, highest over the bench's pairs; no spread: NaN ends
            return Figure(*(fixed_fill.get(f"{strategy}_p99_ms{end}", math.nan) for end in ("", "_min", "_max")))

        skip_stmt, guarded_stmt = over_pairs("skip_locked"), over_pairs("guarded")
        where = say("F8.at_fixed_fill", workers=statement_w)
    elif both:
        statement_w = both[-1]
        skip_stmt = races.figure("skip_locked", statement_w, "p99_ms")
        guarded_stmt = races.figure("guarded", statement_w, "p99_ms")
        where = say("F8.over_drains", workers=statement_w)
    else:
        return not_measured("F8", say("F8.none", skipped=skipped))
    job_w = waits_workers(job_waits, ("skip_locked", "guarded"))
    per_job = None
    if job_w:
        w = job_w[-1]
        per_job = (w, job_wait_figures(job_waits, "skip_locked", w, "wait_p99_ms"),
                   job_wait_figures(job_waits, "guarded", w, "wait_p99_ms"))
    ours = say("F8.ours", where=where, skip_locked_p99=skip_stmt.text(ms), guarded_p99=guarded_stmt.text(ms))
    values = {"statement_skip_p99": skip_stmt.text(ms), "statement_guarded_p99": guarded_stmt.text(ms),
              "statement_workers": count(statement_w), "statement_where": where}
    # no spread (a bench stored before it kept one): the p99s cannot be compared beyond the noise
    no_spread = any(missing(f.low) or missing(f.high) for f in (skip_stmt, guarded_stmt))
    statement = {1: CONFIRMED, -1: NOT_REPRODUCED, 0: NOT_DISTINGUISHABLE}[separated(skip_stmt, guarded_stmt)]
    notes = [say("F8.no_spread") if no_spread else
             {CONFIRMED: say("F8.higher"), NOT_REPRODUCED: say("F8.lower"), NOT_DISTINGUISHABLE: say("F8.overlap")}[
                 statement]]
    job_part = NOT_MEASURED
    if per_job:
        w, skip_job, guarded_job = per_job
        values.update(job_skip_p99=skip_job.text(ms), job_guarded_p99=guarded_job.text(ms), job_workers=count(w),
                      job_ratio=ratio(guarded_job.median / skip_job.median))
        order = separated(skip_job, guarded_job)
        values["job_order"] = {1: "higher", -1: "lower", 0: "overlap"}[order]  # skip_locked's, over every repeat
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


# --------------------------------------------------------------------------- the section


def load(reads: dict, loaded: dict) -> None:
    """Nothing of its own: it reads the sweep the races section loaded."""
    return None


def findings(loaded: dict) -> list[Finding]:
    """F7 and F8 from the sweep (F8 also reads the bench's fixed-fill latency)."""
    mine = race_data(loaded)
    bench = loaded.get("bench")
    races = Races(mine.summary)
    split = Races(race_summary(list(mine.split_runs))) if mine.split_runs else None
    return [f7_skip_locked_no_waste(races, split),
            f8_tail_latency(races, mine.job_waits, bench.fixed_fill if bench else None)]


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    """None beyond its findings' own: the prose under its heading names the findings' figures."""
    return {}
