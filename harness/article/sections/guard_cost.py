"""What the guard costs: naive looks fastest (F3), guarded's lost races per win (F5) and its slowdown (F6)."""

from __future__ import annotations

import pandas as pd

from harness.article.analysis import race_summary, shares_at
from harness.article.compare import (Figure, OriginalFigure, Races, direction_beyond_noise, free_at, scaled,
                                     separated)
from harness.article.findings import (CONFIRMED, CONFIRMED_DIFFERENT_SIZE, CORRECTED, Finding, NOT_DISTINGUISHABLE,
                                      NOT_MEASURED, NOT_REPRODUCED, ORIGINAL_F3_PEAK, ORIGINAL_F5_LOSSES_PER_WIN,
                                      ORIGINAL_F6_MAX_P99_MS, ORIGINAL_F6_MIN_RATE, ORIGINAL_HIGH_WORKERS, make_finding,
                                      not_measured)
from harness.article.formats import count, missing, ms, number, percent, rate, ratio
from harness.article.prose import cpu_bound_note, listing, workers_phrase
from harness.article.sections.race_sweep import RACES, at_point, race_data, time_spent_sentence, whole
from harness.article.wording import Sentences

NAME = "guard_cost"
READS = ()
UPSTREAM = ("races",)
say = Sentences(NAME)


F3_PARTS = ("looks fastest", "because duplicates count")
F3_LEAST_RACES = 3  # races a side at a worker count before its lead counts: two ranges of two overlap too easily


def _f3_compared(races: Races, others: list[str]) -> list[int]:
    """The worker counts where naive and every other safe strategy raced there were not CPU-bound and had
    F3_LEAST_RACES races or more each."""
    counts = []
    for w in races.workers("naive", cpu_free=True):
        rivals = [s for s in others if w in races.workers(s)]
        if rivals and all(w in races.workers(s, cpu_free=True) for s in rivals) and all(
                races.repeats(s, w) >= F3_LEAST_RACES for s in ["naive", *rivals]):
            counts.append(w)
    return counts


def f3_naive_looks_fastest(races: Races) -> Finding:
    """Two parts, on the worker counts where naive and the safe strategies were not CPU-bound and had
    F3_LEAST_RACES races a side (_f3_compared):

    - naive's counted rate looks fastest: it leads every safe strategy beyond the spread at most of those counts
      (confirmed), one of them leads it at most (not reproduced), else not distinguishable;
    - because duplicates count: at naive's peak among them, counting each job once puts it behind the best safe
      strategy beyond the spread (confirmed: its lead was its duplicates), or it still leads beyond the spread
      (corrected), else not distinguishable. That naive's counted rate exceeds its distinct one decides nothing on
      its own: it does wherever naive hands a job out twice.
    """
    others = [s for s in ("guarded", "skip_locked") if races.has(s)]
    if not races.has("naive") or not others:
        return not_measured("F3", say("F3.too_few", strategies=", ".join(
            s for s in ("naive", "guarded", "skip_locked") if races.has(s))))
    compared = _f3_compared(races, others)
    if not compared:
        return not_measured("F3", say("F3.too_few_races", least=F3_LEAST_RACES,
                                      skipped=cpu_bound_note(races.cpu_bound_workers("naive"))))

    def per_second(strategy, w, column="claims_per_second"):
        return races.figure(strategy, w, column)

    def rivals(w):
        return [s for s in others if w in races.workers(s)]

    ahead = [w for w in compared if all(separated(per_second("naive", w), per_second(s, w)) > 0 for s in rivals(w))]
    behind = [w for w in compared if any(separated(per_second("naive", w), per_second(s, w)) < 0 for s in rivals(w))]
    naive_w = max(compared, key=lambda w: per_second("naive", w).median)
    naive_peak = per_second("naive", naive_w)
    best_other = max(rivals(naive_w), key=lambda s: per_second(s, naive_w).median)
    other_peak = per_second(best_other, naive_w)
    naive_distinct = per_second("naive", naive_w, "unique_jobs_per_second")
    values = {"naive_peak": naive_peak.text(rate), "naive_peak_workers": count(naive_w),
              "naive_distinct_peak": naive_distinct.text(rate), "other_peak": other_peak.text(rate),
              "other_strategy": best_other, "fastest_at": count(len(ahead)), "behind_at": count(len(behind)),
              "worker_counts": count(len(compared))}
    ours = say("F3.ours", naive_peak=naive_peak.text(rate), naive_workers=workers_phrase(naive_w),
               naive_distinct=naive_distinct.text(rate), other=best_other,
               other_peak=other_peak.text(rate), fastest_at=len(ahead), behind_at=len(behind),
               worker_counts=len(compared), least=F3_LEAST_RACES)
    most = len(compared) / 2
    looks_best = CONFIRMED if len(ahead) > most else NOT_REPRODUCED if len(behind) > most else NOT_DISTINGUISHABLE
    because = {1: CORRECTED, -1: CONFIRMED, 0: NOT_DISTINGUISHABLE}[separated(naive_distinct, other_peak)]
    parts = tuple(zip(F3_PARTS, (looks_best, because)))
    notes = [cpu_bound_note(races.cpu_bound_workers("naive"))]
    if looks_best == NOT_REPRODUCED:
        notes.append(say("F3.below", other=best_other))
    elif looks_best == NOT_DISTINGUISHABLE:
        notes.append(say("F3.overlap"))
    if because == CORRECTED:
        notes.append(say("F3.leads_anyway"))
    elif because == CONFIRMED:
        notes.append(say("F3.distinct", naive_distinct=naive_distinct.text(rate), other=best_other))
    else:
        notes.append(say("F3.distinct_overlap", naive_distinct=naive_distinct.text(rate), other=best_other))
    if looks_best != CONFIRMED:
        return make_finding("F3", looks_best, ours, notes, values, compared, parts)
    if because != CONFIRMED:
        return make_finding("F3", because, ours, notes, values, compared, parts)
    if OriginalFigure(ORIGINAL_F3_PEAK, 1_000).met_by(naive_peak):
        return make_finding("F3", CONFIRMED, ours, notes, values, compared, parts)
    notes.append(say("F3.different_size", ratio=ratio(naive_peak.median / ORIGINAL_F3_PEAK),
                     original_peak=count(ORIGINAL_F3_PEAK)))
    return make_finding("F3", CONFIRMED_DIFFERENT_SIZE, ours, notes, values, compared, parts)


# A guarded worker loses a given job at most once: after a loss its next read starts after the winner's
# commit, and the job is no longer pending. So a job costs at most N-1 lost races, one per rival, and that ceiling
# grows as fast as workers do.
ORIGINAL_F5_AT_TWO = OriginalFigure(1, 0.2)  # "about 1" at 2 workers, read off the original's chart to a tenth
ORIGINAL_F5_HIGH = OriginalFigure(ORIGINAL_F5_LOSSES_PER_WIN, 1)  # "about 22" at 100 workers
F5_PARTS = ("much faster than workers", "about 1 at 2 workers", f"about {ORIGINAL_F5_LOSSES_PER_WIN} at "
            f"{ORIGINAL_HIGH_WORKERS} workers")
_GROWTH = {1: CONFIRMED, -1: CORRECTED, 0: NOT_DISTINGUISHABLE}


def _size_at(figure: Figure, original: OriginalFigure) -> str:
    return CONFIRMED if original.met_by(figure) else CONFIRMED_DIFFERENT_SIZE


def f5_lost_races_per_win(races: Races, split: Races | None = None) -> Finding:
    """The original: lost races per win grow "much faster than workers", about 1 at 2 workers and about 22 at 100.
    Three parts, each on points that were not CPU-bound:

    - the growth against workers: N-1 lost races per win is the ceiling and grows as fast as workers do, so lost
      races per win grow faster than workers when their share of the ceiling rises beyond the spread (confirmed),
      slower when it falls beyond it (corrected), and are not distinguishable otherwise. The original's own figures
      fall from 100% of the ceiling to 22%;
    - about 1 at 2 workers: the range over repeats meets 1 +- 0.1;
    - about 22 at 100 workers: the sweep's 100-worker point, else the split-CPU arm's (split), where not
      CPU-bound; not measured here where none is.

    The verdict is the growth's; a confirmed growth with a size that differs is confirmed at a different size."""
    contended = races.workers("guarded", least=2, cpu_free=True)
    bound = races.cpu_bound_workers("guarded", least=2)
    skipped = cpu_bound_note(bound)
    if len(contended) < 2:
        single = (" " + say("F5.single", workers=contended[0], lost_per_win=races.figure(
            "guarded", contended[0], "losses_per_win").text(lambda v: number(v, 2))) if contended else "")
        return not_measured("F5", say("F5.too_few", worker_counts=len(contended), single=single, skipped=skipped))
    lost = [(w, races.figure("guarded", w, "losses_per_win")) for w in contended]
    of_ceiling = [(w, scaled(f, 1 / (w - 1))) for w, f in lost]
    growth = _GROWTH[direction_beyond_noise(of_ceiling)]
    ours = say("F5.ours", lost_per_win=listing(lost, lambda f: f.text(lambda v: number(v, 2))),
               ceiling_shares=listing(of_ceiling, lambda f: f.text(percent)))
    values = {"lost_per_win_low": lost[0][1].text(lambda v: number(v, 2)), "workers_low": count(lost[0][0]),
              "lost_per_win_high": lost[-1][1].text(lambda v: number(v, 2)), "workers_high": count(lost[-1][0]),
              "ceiling_share_low": of_ceiling[0][1].text(percent), "ceiling_share_high": of_ceiling[-1][1].text(percent),
              "growth": {CONFIRMED: say("F5.growth_faster"), CORRECTED: say("F5.growth_slower"),
                         NOT_DISTINGUISHABLE: say("F5.growth_overlap")}[growth]}
    notes = [say("F5.ceiling", share_low=of_ceiling[0][1].text(percent), workers_low=lost[0][0],
                 share_high=of_ceiling[-1][1].text(percent), workers_high=lost[-1][0],
                 original_at_two=format(ORIGINAL_F5_AT_TWO.value, "g"), original_high=ORIGINAL_F5_LOSSES_PER_WIN,
                 original_workers=ORIGINAL_HIGH_WORKERS,
                 original_share=percent(ORIGINAL_F5_LOSSES_PER_WIN / (ORIGINAL_HIGH_WORKERS - 1), 0)),
             values["growth"]]
    if 2 in contended:
        at_two = _size_at(races.figure("guarded", 2, "losses_per_win"), ORIGINAL_F5_AT_TWO)
    else:
        at_two = NOT_MEASURED
        notes.append(say("F5.no_two_workers"))
    # the original's 100 workers: the sweep's point, else the split-CPU arm's, where not CPU-bound
    where, source, raced = free_at({"sweep": races, "split": split}, ("guarded",), ORIGINAL_HIGH_WORKERS)
    if source is not None:
        high = source.figure("guarded", ORIGINAL_HIGH_WORKERS, "losses_per_win")
        at_high = _size_at(high, ORIGINAL_F5_HIGH)
        notes.append(say("F5.high", workers=ORIGINAL_HIGH_WORKERS, lost_per_win=high.text(lambda v: number(v, 2)),
                         where=say("F5.where_sweep") if where == "sweep" else say("F5.where_split"),
                         jobs=count(source.job_count), original_high=ORIGINAL_F5_LOSSES_PER_WIN))
    else:
        at_high = NOT_MEASURED
        notes.append(say("F5.high_bound", workers=ORIGINAL_HIGH_WORKERS) if raced
                     else say("F5.high_not_raced", workers=ORIGINAL_HIGH_WORKERS))
    notes.append(skipped)
    parts = tuple(zip(F5_PARTS, (growth, at_two, at_high)))
    if growth != CONFIRMED:
        return make_finding("F5", growth, ours, notes, values, contended, parts)
    verdict = CONFIRMED_DIFFERENT_SIZE if CONFIRMED_DIFFERENT_SIZE in (at_two, at_high) else CONFIRMED
    return make_finding("F5", verdict, ours, notes, values, contended, parts)


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
    notes.append(time_spent_sentence(shares, workers[-1]))
    notes.append(skipped)
    if fall != CONFIRMED:
        return make_finding("F6", fall, ours, notes, values, workers, parts)
    same = rate_part == CONFIRMED and p99_part == CONFIRMED
    return make_finding("F6", CONFIRMED if same else CONFIRMED_DIFFERENT_SIZE, ours, notes, values, workers, parts)


# --------------------------------------------------------------------------- the section


def load(reads: dict, loaded: dict) -> None:
    """Nothing of its own: it reads the sweep the races section loaded."""
    return None


def findings(loaded: dict) -> list[Finding]:
    """F3, F5 and F6 from the sweep (F6 with where guarded's backends' time went)."""
    mine = race_data(loaded)
    races = Races(mine.summary)
    split = Races(race_summary(list(mine.split_runs))) if mine.split_runs else None
    return [f3_naive_looks_fastest(races), f5_lost_races_per_win(races, split),
            f6_guarded_slows_down(races, mine.shares)]


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    """guarded's lost races and naive's peak the prose names."""
    mine = loaded[RACES]
    by_workers, facts = mine.by_workers, mine.facts
    low, high = facts["low"], facts["high"]
    return {"guarded_total_lost": count(facts["guarded_total_lost"]),
            "guarded_total_wins": count(facts["guarded_total_wins"]),
            "naive_peak": whole(facts["naive_peak_claims_per_second"]), "naive_peak_workers": facts["naive_peak_workers"],
            "naive_unique_high": at_point(by_workers, "naive", high, "unique_jobs_per_second", whole),
            "naive_claims_high": at_point(by_workers, "naive", high, "claims_per_second", whole),
            "guarded_rate_low": at_point(by_workers, "guarded", low, "claims_per_second", whole),
            "guarded_p99_low": at_point(by_workers, "guarded", low, "p99_ms", ms)}
