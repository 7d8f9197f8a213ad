"""The race sweep as the races section loads it, and what the sections under the race's headings read of it:
its figures over repeats, a point's median and range, the wait for a job, where the backends' time went.
Not a section: sections import it, and it imports no section."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from harness.article.analysis import (at_workers, fewer_repeats, machine, over_repeats, sampler_facts, shares_at,
                                      wait_share_table)
from harness.article.compare import NO_FIGURE, Figure, spearman
from harness.article.formats import number, percent, spread as spread_text
from harness.article.labels import LOCK_WAIT
from harness.article.wording import Sentences
from harness.stats import censored_percentile, censored_waits_ns, time_to_job_ns
from harness.server.activity import CPU_BOUND_NEAR, cpu_bound
from harness.storage import open_runs

RACES = "races"  # the section that loads the sweep; a section reading it names it in UPSTREAM
SENTENCES = "race_sweep"  # its sentences' file
say = Sentences(SENTENCES)


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
    f["fewer_repeats"] = fewer_repeats(by_workers)  # {races: [worker counts]} raced fewer times than the rest

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


def attempt_figures(paths) -> pd.DataFrame:
    """Per race, from its attempts: the winning claim's and the time to get a job's p50 and p99 (ms), and the
    attempts that came back empty while jobs remained."""

    rows = []
    for run in open_runs(paths):
        attempts = run.table("attempts")
        asked = run.parameters
        wins = attempts.loc[attempts["outcome"] == "won", "latency_ns"].to_numpy() / 1e6
        waits = time_to_job_ns(attempts) / 1e6
        cut_off = censored_waits_ns(attempts) / 1e6  # waits the drain's end cut off: counted at their bound
        rows.append({"run_id": run.run_id, "strategy": asked.strategy,
                     "worker_count": int(asked.worker_count), "repeat": int(asked.repeat),
                     **{f"claim_p{q}_ms": float(np.percentile(wins, q)) if len(wins) else math.nan for q in (50, 99)},
                     **{f"wait_p{q}_ms": censored_percentile(waits, cut_off, q)[0] for q in (50, 99)},
                     "wait_p99_is_lower_bound": censored_percentile(waits, cut_off, 99)[1],
                     "censored_waits": int(len(cut_off)),
                     "empty_while_jobs_remained": empty_while_jobs_remained(attempts)})
    return pd.DataFrame(rows, columns=["run_id", "strategy", "worker_count", "repeat", "claim_p50_ms", "claim_p99_ms",
                                       "wait_p50_ms", "wait_p99_ms", "wait_p99_is_lower_bound", "censored_waits",
                                       "empty_while_jobs_remained"])


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


def race_data(loaded: dict) -> Loaded:
    """The sweep as loaded, or an empty one where the build has no race runs (every rule then says not measured)."""
    return loaded.get(RACES) or Loaded(pd.DataFrame())


def at_point(by_workers: pd.DataFrame, strategy: str, worker_count: int, column: str, fmt=number) -> str:
    """A point's median with its min-max over repeats."""
    row = by_workers[(by_workers["strategy"] == strategy) & (by_workers["worker_count"] == worker_count)].iloc[0]
    return spread_text(row[column], row.get(f"{column}_min"), row.get(f"{column}_max"), fmt)


def whole(value) -> str:
    return number(value, 0)


def job_wait_figures(job_waits: pd.DataFrame | None, strategy: str, worker_count: int, column: str) -> Figure:
    """A figure of attempt_figures() over repeats: median [min-max]."""
    if job_waits is None or not len(job_waits):
        return NO_FIGURE
    rows = job_waits[(job_waits["strategy"] == strategy) & (job_waits["worker_count"] == worker_count)][column]
    rows = rows.dropna()
    return Figure(float(rows.median()), float(rows.min()), float(rows.max())) if len(rows) else NO_FIGURE


def waits_workers(job_waits: pd.DataFrame | None, strategies, least: int = 2, cpu_free: bool = True) -> list[int]:
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


def time_spent_sentence(shares: pd.DataFrame | None, worker_count: int) -> str:
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


SHARES = ("client_runnable_share", "client_running_share", "backend_runnable_share")  # what cpu_bound reads


def near_the_line(mine: Loaded | None, below: float = CPU_BOUND_NEAR) -> Loaded | None:
    """The sweep with every race within `below` of the CPU-bound line counted as CPU-bound too, so its points are
    left out as the CPU-bound ones are; None where no race is that close (or the races stored no shares)."""
    if mine is None or not len(mine.summary) or not set(SHARES) <= set(mine.summary):
        return None
    summary = mine.summary.copy()
    near = summary.apply(lambda row: cpu_bound(*(row[c] for c in SHARES), below=below), axis=1)
    before = summary["cpu_bound"].fillna(False).astype(bool) if "cpu_bound" in summary else \
        pd.Series(False, index=summary.index)
    if near.fillna(False).astype(bool).equals(before):
        return None
    summary["cpu_bound"] = near.fillna(False).astype(bool) | before
    return dataclasses.replace(mine, summary=summary, job_waits=with_cpu_bound(mine.job_waits, summary))


def with_cpu_bound(job_waits: pd.DataFrame | None, summary: pd.DataFrame) -> pd.DataFrame | None:
    """Each race's waits (attempt_figures) with its race's cpu_bound mark from the summary, in place of any it had."""
    if job_waits is None or not len(job_waits) or not {"run_id", "cpu_bound"} <= set(summary):
        return job_waits
    return job_waits.drop(columns="cpu_bound", errors="ignore").merge(summary[["run_id", "cpu_bound"]], on="run_id",
                                                                       how="left")
