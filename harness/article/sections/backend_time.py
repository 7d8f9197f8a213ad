"""Where the backends' time goes (A2, the sentence F6 borrows), how they were sampled, where a point was
CPU-bound, and the sweep's setup against its variants."""

from __future__ import annotations

import pandas as pd

from harness.article.analysis import at_workers, cpu_bound_facts, race_summary, setup_comparison, shares_at
from harness.article.compare import Races
from harness.article.findings import ADDED, Finding, make_finding, not_measured
from harness.article.formats import DASH, MISSING, count, missing, ms, number, percent
from harness.article.labels import LOCK_WAIT
from harness.article.prose import counted, cpu_bound_note, join, table, worker_list
from harness.article.sections.race_sweep import BOTTLENECK_PHRASES, RACES, bottleneck, race_data, time_spent_sentence
from harness.article.wording import Sentences
from harness.server.activity import CPU_BOUND_CLIENT_RUNNABLE_SHARE, SAMPLE_INTERVAL_SECONDS

NAME = "backend_time"
READS = ()
UPSTREAM = ("races",)
say = Sentences(NAME)


CPU_FREE_FINDINGS = ("F3", "F5", "F6", "F7", "F8", "C4", "A1", "A2")


def a2_where_the_time_goes(races: Races, shares: pd.DataFrame | None) -> Finding:
    """Where guarded's backends' time went at its most workers that were not CPU-bound: at a CPU-bound point the
    shares say how this machine schedules its processes, not what the claim waits on."""
    contended = races.workers("guarded", least=2, cpu_free=True)
    at = shares_at(shares, "guarded", contended[-1]) if contended else {}
    if not at:
        bound = races.cpu_bound_workers("guarded", least=2)
        return not_measured("A2", say("A2.all_bound", workers=worker_list(bound)) if bound and not contended
                            else say("A2.none"))
    w = contended[-1]
    lock, runnable, running = at.get(LOCK_WAIT), at.get("runnable_share"), at.get("running_share")
    ours = say("A2.ours", workers=w, lock_share=percent(lock), running_share=percent(running),
               runnable_share=percent(runnable))
    values = {"workers": count(w), "lock_share": percent(lock), "runnable_share": percent(runnable),
              "running_share": percent(running), "bottleneck": bottleneck(lock, runnable)}
    return make_finding("A2", ADDED, ours, [time_spent_sentence(shares, w),
                                            cpu_bound_note(races.cpu_bound_workers("guarded", least=2))],
                        values, (w,))


# the wait table's columns the prose names at the sweep's top worker count, and their short names
WAIT_SHARES = ((LOCK_WAIT, "lock"), ("waiting for the client", "client"), ("running_share", "running"),
               ("runnable_share", "runnable"))


# how the setup table shows its columns (analysis.SETUP_COLUMNS)
SETUP_FORMATS = {"claims/s": lambda v: number(v, 0),
                 "lost races per win": lambda v: DASH if missing(v) else number(v, 2),
                 "workers waiting for a CPU": percent, "backends waiting for a CPU": percent}


def setup_table(loaded: dict) -> str:
    """The sweep's setup against its variants (CPUs split between client and server, no sampler), at the indexed
    race's points."""
    runs = loaded[RACES].setup_runs
    frame = setup_comparison(race_summary(runs.get("indexed_race", [])),
                             {"CPUs split": race_summary(runs.get("split_cpus", [])),
                              "no sampler": race_summary(runs.get("no_sampler", []))})
    return table(frame, formats=SETUP_FORMATS)


# --------------------------------------------------------------------------- the section


def load(reads: dict, loaded: dict) -> None:
    """Nothing of its own: it reads the sweep the races section loaded."""
    return None


def findings(loaded: dict) -> list[Finding]:
    """A2 from the sweep's wait shares."""
    mine = race_data(loaded)
    return [a2_where_the_time_goes(Races(mine.summary), mine.shares)]


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    """How the backends were sampled, where a point was CPU-bound, and the wait shares the prose names."""
    mine = loaded[RACES]
    summary, facts, site = mine.summary, mine.facts, mine.site
    high = facts["high"]
    sampler = mine.sampler
    out = {"sampler_interval": ms(sampler.get("interval_ms")),
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
                             if bound_workers else say("bound_clause_none",
                                                           threshold=percent(CPU_BOUND_CLIENT_RUNNABLE_SHARE, 0))),
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
    return out
