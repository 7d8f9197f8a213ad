"""The races section: the sweep of naive, guarded and skip_locked, loaded once (with its client layouts, the
slowed-down race and the setup's variants) for the sections under the race's headings, which decide F1-F8, C4, A1
and A2 from it; its own are the opening's figures and the table of the worker range's two ends."""

from __future__ import annotations

import pandas as pd

from harness.article.analysis import race_summary, runs_of
from harness.article.findings import Finding, lost_per_win
from harness.article.formats import count, ms
from harness.article.prose import counted, join, strategy_sql, table
from harness.article.wording import Sentences
from harness.article.sections.race_sweep import Loaded, attempt_figures, whole, with_cpu_bound
from harness.claims.strategies import STRATEGIES

NAME = "races"
READS = ("races", "client_layouts", "slow_race", "split_cpus", "indexed_race", "no_sampler")
UPSTREAM = ()
say = Sentences(NAME)


# --------------------------------------------------------------------------- the section


def load(reads: dict, loaded: dict) -> Loaded:
    paths = runs_of(reads, "races")
    summary = race_summary(paths) if paths else pd.DataFrame()
    job_waits = attempt_figures(paths) if paths else None
    if job_waits is not None and len(summary):
        summary = summary.merge(job_waits[["run_id", "empty_while_jobs_remained"]], on="run_id", how="left")
        job_waits = with_cpu_bound(job_waits, summary)
    layouts = race_summary(runs_of(reads, "client_layouts")) if runs_of(reads, "client_layouts") else None
    return Loaded(summary, job_waits, layouts, tuple(paths), tuple(runs_of(reads, "slow_race")),
                  tuple(runs_of(reads, "split_cpus")), reads["slow_race"].request if "slow_race" in reads else None,
                  {name: runs_of(reads, name) for name in ("indexed_race", "split_cpus", "no_sampler")})


def findings(loaded: dict) -> list[Finding]:
    """None of its own: the sections under the race's headings decide F1-F8, C4, A1 and A2 from this sweep."""
    return []


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    """The sweep's figures the opening prose names, formatted once."""
    mine = loaded[NAME]
    facts = mine.facts
    low, high, two = facts["low"], facts["high"], facts["two"]
    site = mine.site
    out = {"job_count": count(facts["job_count"]), "worker_list": join([str(w) for w in facts["workers"]]),
           "repeats_phrase": counted(facts["repeats"], "race"),
           "repeats_phrase_capital": counted(facts["repeats"], "race").capitalize(),
           "repeats_fewer": fewer_repeats_said(facts["fewer_repeats"]),
           "server_version": site["server_version"], "low": low, "two": two, "high": high}
    for name in ("naive", "guarded", "skip_locked"):
        strategy = STRATEGIES[name]
        out |= {f"{name}_title": strategy.title, f"{name}_summary": strategy.summary, f"{name}_sql": strategy_sql(name),
                f"{name}_total_duplicates": count(facts[f"{name}_total_duplicates"]),
                f"{name}_total_attempts": count(facts[f"{name}_total_attempts"])}
    return out


def fewer_repeats_said(fewer: dict[int, list[int]]) -> str:
    """' (one race at 32 and 100 workers)' for the worker counts raced fewer times than the rest; '' where none."""
    if not fewer:
        return ""
    return " (" + "; ".join(say("fewer_repeats", races=counted(races, "race"), workers=join([str(w) for w in counts]))
                            for races, counts in fewer.items()) + ")"


def ends_table(loaded: dict) -> str:
    """The two ends of the worker range, one row per strategy and end."""
    mine = loaded[NAME]
    by_workers, facts = mine.by_workers, mine.facts
    ends = by_workers[by_workers["worker_count"].isin([facts["low"], facts["high"]])].copy()
    ends["strategy"] = ends["strategy"].astype(str)
    ends["lost per win"] = [lost_per_win(s, v) for s, v in zip(ends["strategy"], ends["losses_per_win"])]
    return table(
        ends[["strategy", "worker_count", "claims_per_second", "unique_jobs_per_second", "duplicate_jobs",
              "lost per win", "p50_ms", "p99_ms"]].rename(columns={
            "worker_count": "workers", "claims_per_second": "claims/s", "unique_jobs_per_second": "distinct jobs/s",
            "duplicate_jobs": "jobs claimed twice+", "p50_ms": "p50", "p99_ms": "p99"}),
        caption=say("ends_caption", job_count=count(facts["job_count"]), races=counted(facts["repeats"], "race"),
                    fewer=fewer_repeats_said(facts["fewer_repeats"])),
        formats={"claims/s": whole, "distinct jobs/s": whole, "jobs claimed twice+": count, "p50": ms, "p99": ms})
