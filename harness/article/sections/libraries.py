"""The job libraries section: the libraries installed here draining one queue with their own workers (A7), what each
job costs the server, and every library's claim protocol raced in the tight loop (A8)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness import libraries
from harness.article.analysis import over_repeats, race_summary
from harness.article.findings import CONFIRMED, CORRECTED, NOT_MEASURED, Finding, make_finding, not_measured
from harness.article.formats import DASH, MISSING, count, missing, ms, number, span
from harness.article.labels import CANNOT_LOSE
from harness.article.prose import counted, join, table
from harness.article.wording import Sentences
from harness.storage import open_runs
from harness.libraries.declaration import CHECK
from harness.libraries.catalogue import (DROPPED, LIBRARY_NAMES, LIBRARY_STATEMENTS, LIBRARY_STRATEGIES,
                                         MODELLED_LIBRARY_STRATEGIES, RACED_LIBRARY_STRATEGIES, SOURCES)
from harness.claims.protocols import LIBRARY_VARIANTS
from harness.claims.strategies import STRATEGIES
from harness.article.sections.library_runs import jobs_per_run

NAME = "libraries"
READS = ("libraries", "library_claims")
UPSTREAM = ()
say = Sentences(NAME)

# the figures the section's table and chart read, each with its median, min and max over repeats
FIGURES = ("jobs_per_s", "pickup_p50_ms", "pickup_p99_ms", "statements_per_job", "transactions_per_job",
           "wal_bytes_per_job", "dead_tuples_per_job", "server_cpu_ms_per_job", "shutdown_s")
TABLE_COLUMNS = {"library": "library", "worker_count": "workers", "jobs_per_s": "jobs/s",
                 "pickup_p99_ms": "pickup p99", "statements_per_job": "statements per job",
                 "transactions_per_job": "transactions per job", "wal_bytes_per_job": "WAL bytes per job",
                 "server_cpu_ms_per_job": "server CPU ms per job", "executed_twice": "run twice"}


@dataclass(frozen=True)
class Loaded:
    runs: tuple  # the libraries' runs (their own workers), storage.Run
    summary: pd.DataFrame  # one row per run: the run's summary, with its settings
    points: pd.DataFrame  # per library and worker count: each figure's median, min and max over repeats
    claim_runs: tuple = ()  # the races of the libraries' claim protocols (report section library_claims)
    request: object = None  # what the params file's libraries section asked (a LibrarySweep)
    claim_request: object = None  # what its library_claims section asked (a RaceSweep)
    claims: pd.DataFrame | None = None  # analysis.race_summary of those races
    claims_by_workers: pd.DataFrame | None = None  # analysis.over_repeats of it


def library_summary(runs) -> pd.DataFrame:
    """One row per run (folders or storage.Run): its summary, its settings and its source."""
    rows = []
    for run in open_runs(runs):
        procedure = run.procedure
        rows.append({**run.summary, "settings": procedure["settings"], "source": procedure["source"],
                     "run_id": run.run_id})
    return pd.DataFrame(rows)


def library_points(summary: pd.DataFrame) -> pd.DataFrame:
    """Per library and worker count: each figure's median and range over repeats, duplicates summed, CPU-bound
    where any repeat was."""
    rows = []
    for (library, workers), runs in summary.groupby(["library", "worker_count"], sort=False):
        row = {"library": library, "worker_count": int(workers), "repeats": len(runs),
               "version": runs["version"].iloc[0], "jobs": int(runs["jobs"].sum()),
               "executed_twice": int(runs["executed_twice"].sum()),
               "duplicate_claims": int(runs["duplicate_claims"].sum()),
               "not_executed": int(runs["not_executed"].sum()),
               "cpu_bound": bool(runs["cpu_bound"].fillna(False).astype(bool).any())}
        for figure in FIGURES:
            values = pd.to_numeric(runs[figure], errors="coerce")
            row |= {figure: values.median(), f"{figure}_min": values.min(), f"{figure}_max": values.max()}
        rows.append(row)
    return pd.DataFrame(rows)


def load(reads: dict, loaded: dict) -> Loaded | None:
    own, claimed = reads.get("libraries"), reads.get("library_claims")
    runs = own.runs if own is not None else ()
    claim_runs = claimed.runs if claimed is not None else ()
    if not runs and not claim_runs:
        return None
    summary = library_summary(runs) if runs else pd.DataFrame()
    claims = race_summary(list(claim_runs)) if claim_runs else None
    return Loaded(runs, summary, library_points(summary) if runs else pd.DataFrame(), claim_runs,
                  own.request if own is not None else None, claimed.request if claimed is not None else None, claims,
                  over_repeats(claims) if claims is not None and len(claims) else None)


# --------------------------------------------------------------------------- A7


def a7_each_job_runs_once(summary: pd.DataFrame | None) -> Finding:
    """Per library, a part: confirmed where no job was run twice or claimed twice in any run, corrected where the
    workers' logs or the audit show one that was."""
    if summary is None or not len(summary):
        return not_measured("A7", say("A7.no_runs"))
    parts, listed, notes = [], [], []
    for library, runs in summary.groupby("library", sort=False):
        twice, claimed = int(runs["executed_twice"].sum()), int(runs["duplicate_claims"].sum())
        parts.append((library, CONFIRMED if twice == 0 and claimed == 0 else CORRECTED))
        listed.append(say("A7.library", library=library, version=runs["version"].iloc[0], twice=count(twice),
                          claimed=count(claimed)))
        if twice or claimed:
            worst = runs.loc[(runs["executed_twice"] + runs["duplicate_claims"]).idxmax()]
            notes.append(say("A7.twice", library=library, twice=count(twice), claimed=count(claimed),
                             workers=int(worst["worker_count"]), run=worst["run_id"]))
        missed = int(runs["not_executed"].sum())
        if missed:
            notes.append(say("A7.not_executed", library=library, jobs=count(missed)))
    verdict = CORRECTED if any(v == CORRECTED for _, v in parts) else CONFIRMED
    workers = sorted({int(w) for w in summary["worker_count"]})
    values = {"workers": join([str(w) for w in workers]), "libraries": count(len(parts))}
    per_library = summary.groupby("library")["run_id"].count()
    return make_finding("A7", verdict, say("A7.ours", libraries="; ".join(listed),
                                           runs=span(per_library.min(), per_library.max(), count)),
                        notes, values, parts=tuple(parts))


# --------------------------------------------------------------------------- A8


def a8_protocols_hand_each_job_once(claims: pd.DataFrame | None) -> Finding:
    """Per library protocol, a part: corrected where the audit shows a job claimed twice in any race (a duplicate
    is one whatever the machine did); confirmed where none was, every job was claimed, and at least one race had
    several workers and was not marked CPU-bound (a race the rule could not read counts as not bound); not
    measured otherwise, and for a protocol this build did not race."""
    runs = claims[claims["strategy"].astype(str).isin(LIBRARY_STRATEGIES)] if claims is not None else None
    if runs is None or not len(runs):
        return not_measured("A8", say("A8.no_runs"))
    parts, listed, notes = [], [], []
    raced = set(runs["strategy"].astype(str))
    for name in LIBRARY_STRATEGIES:
        if name not in raced:
            parts.append((name, NOT_MEASURED))
            notes.append(say("A8.not_raced", library=name))
            continue
        mine = runs[runs["strategy"].astype(str) == name]
        twice, unclaimed = int(mine["duplicate_jobs"].sum()), int(mine["unclaimed_jobs"].sum())
        deciding = mine[(mine["cpu_bound"] != True) & (mine["worker_count"] > 1)]  # noqa: E712
        if twice:
            verdict = CORRECTED
            worst = mine.loc[mine["duplicate_jobs"].idxmax()]
            notes.append(say("A8.twice", library=name, twice=count(twice), workers=int(worst["worker_count"]),
                             run=worst["run_id"]))
        elif unclaimed or not len(deciding):
            verdict = NOT_MEASURED
            notes.append(say("A8.unclaimed", library=name, jobs=count(unclaimed)) if unclaimed
                         else say("A8.no_deciding_race", library=name))
        else:
            verdict = CONFIRMED
        parts.append((name, verdict))
        listed.append(say("A8.library", library=name, twice=count(twice)))
    verdicts = {v for _, v in parts}
    verdict = CORRECTED if CORRECTED in verdicts else CONFIRMED if verdicts == {CONFIRMED} else NOT_MEASURED
    workers = sorted({int(w) for w in runs["worker_count"]})
    used = sorted({int(w) for w in runs.loc[(runs["cpu_bound"] != True) & (runs["worker_count"] > 1),  # noqa: E712
                                            "worker_count"]})
    per_protocol = runs.groupby(runs["strategy"].astype(str))["run_id"].count()
    jobs = runs["job_count"]
    ours = say("A8.ours", libraries="; ".join(listed), runs=span(per_protocol.min(), per_protocol.max(), count),
               jobs=span(jobs.min(), jobs.max(), count))
    return make_finding("A8", verdict, ours, notes,
                        {"workers": join([str(w) for w in workers]), "libraries": count(len(parts))},
                        used=used, parts=tuple(parts))


def findings(loaded: dict) -> list[Finding]:
    mine = loaded.get(NAME)
    return [a7_each_job_runs_once(mine.summary if mine is not None and len(mine.summary) else None),
            a8_protocols_hand_each_job_once(mine.claims if mine is not None else None)]


# --------------------------------------------------------------------------- the prose's figures and the table


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    mine = loaded[NAME]
    return _own_worker_values(mine) | _claim_values(mine)


def _claim_values(mine: Loaded) -> dict[str, str]:
    """The claim protocols' races: their size, and per library one sentence on its protocol and its figures."""
    if mine.claims_by_workers is None:
        return {}
    request = mine.claim_request
    points = mine.claims_by_workers.assign(strategy=mine.claims_by_workers["strategy"].astype(str))
    out = {"library_claims_modelled": join([LIBRARY_NAMES[name] for name in MODELLED_LIBRARY_STRATEGIES]),
           "library_claims_raced": join([LIBRARY_NAMES[name] for name in RACED_LIBRARY_STRATEGIES]),
           "library_claims_job_count": count(request.job_count),
           "library_claims_worker_list": join([str(w) for w in request.worker_counts]),
           "library_claims_repeats": counted(request.repeats, "race")}
    bound = [STRATEGIES[name].title for name in LIBRARY_STRATEGIES
             if name in set(points["strategy"]) and points.loc[points["strategy"] == name, "cpu_bound"].all()]
    out["library_claims_all_bound"] = say("A8.all_bound", protocols=join(bound)) if bound else ""
    out["library_claims_unchecked"] = _without_recheck(mine.claims)
    return out


def _without_recheck(claims: pd.DataFrame) -> str:
    """What Que's protocol does without its re-check, from its races: jobs claimed twice against Que's own."""
    names = claims["strategy"].astype(str)
    unchecked, checked = claims[names == "que_without_recheck"], claims[names == "que"]
    if not len(unchecked):
        return ""
    # one worker cannot claim a job twice: only the races with several say anything
    several = unchecked[unchecked["worker_count"] > 1].assign(bound=lambda f: f["cpu_bound"] == True)  # noqa: E712
    twice = several.groupby("worker_count").agg(min=("duplicate_jobs", "min"), max=("duplicate_jobs", "max"),
                                                bound=("bound", "any"))
    if not len(twice):
        return ""
    que = count(int(checked["duplicate_jobs"].sum())) if len(checked) else MISSING
    if int(twice["max"].max()) == 0:
        return say("unchecked.none", workers=join([str(int(w)) for w in twice.index]), que=que)
    at = [say("unchecked.at_bound", twice=span(row["min"], row["max"], count), workers=counted(int(w), "worker"))
          if row["bound"] else
          say("unchecked.at", twice=span(row["min"], row["max"], count), workers=counted(int(w), "worker"))
          for w, row in twice.iterrows()]
    return say("unchecked", at=join(at), que=que, jobs=count(int(unchecked["job_count"].max())))


def _own_worker_values(mine: Loaded) -> dict[str, str]:
    if not mine.runs:
        return {}
    request = mine.request
    raced = list(dict.fromkeys(mine.summary["library"]))
    return {"libraries_list": join(raced),
            "libraries_not_installed": _not_installed(raced),
            "libraries_job_count": jobs_per_run(mine.summary)[0],
            "libraries_fewer_jobs": jobs_per_run(mine.summary)[1],
            "libraries_worker_list": join([str(w) for w in request.worker_counts]),
            "libraries_repeats": counted(request.repeats, "run"),
            "libraries_listeners": _listeners(mine.summary)}


def _listeners(summary: pd.DataFrame) -> str:
    """Per library whose table notifies its listening workers of every change: its transactions per job at its
    fewest and most workers, and what the probe after its runs measured a notification to cost its listeners."""
    if "probe_transactions" not in summary:
        return ""
    said = []
    for library, runs in summary.dropna(subset=["probe_transactions"]).groupby("library", sort=False):
        per_workers = runs.groupby("worker_count")["transactions_per_job"]
        low, high = per_workers.min(), per_workers.max()
        fewest, most = int(low.index[0]), int(low.index[-1])
        largest = runs[runs["probe_listeners"] == runs["probe_listeners"].max()]
        probe = say("listeners.probe", notifications=count(int(largest["probe_notifications"].iloc[0])),
                    listeners=count(int(largest["probe_listeners"].iloc[0])),
                    transactions=span(largest["probe_transactions"].min(), largest["probe_transactions"].max(),
                                      count))
        if fewest == most:
            said.append(say("listeners.one", library=library, probe=probe))
            continue
        figures = {"library": library, "low": span(low[fewest], high[fewest], lambda v: number(v, 1)),
                   "high": span(low[most], high[most], lambda v: number(v, 1)), "fewest": counted(fewest, "worker"),
                   "most": counted(most, "worker"), "probe": probe}
        # grown only where the most workers' lowest repeat lies above the fewest workers' highest
        said.append(say("listeners", **figures) if low[most] > high[fewest] else say("listeners.flat", **figures))
    return " ".join(said)


SETTINGS_COLUMNS = ("library", "version", "how it claims", "settings as raced (default)")


def library_settings_table(loaded: dict) -> str:
    """Each library's version and the settings its workers ran with, beside the defaults."""
    summary = loaded[NAME].summary
    claims = _claim_text()
    rows = [dict(zip(SETTINGS_COLUMNS, (library, runs["version"].iloc[0], claims[library],
                                        join(_settings_text(runs["settings"].iloc[0])))))
            for library, runs in summary.groupby("library", sort=False)]
    return table(pd.DataFrame(rows), caption=say("settings_caption"))


def _not_installed(raced: list[str]) -> str:
    """The libraries this build could not race because they are not installed here, and what to install."""
    missing = [name for name in libraries.NAMES if name not in raced and libraries.version(name) is None]
    if not missing:
        return ""
    return say("not_installed", libraries=join(missing),
               hints="; ".join(dict.fromkeys(libraries.install_hint(name) for name in missing)))


def _claim_text() -> dict[str, str]:
    """How each library installed here claims, as its source shows."""
    return say.each("claim", RACED_LIBRARY_STRATEGIES)


DEFAULT_SUFFIX = "_default_s"


def _settings_text(settings: dict) -> list[str]:
    """A library's settings as raced, each with its default where the library has one: 'fetch_job_polling_interval
    0.1 s (default 5 s)', 'listen_notify on'."""
    shown = []
    for key, value in settings.items():
        if key.endswith(DEFAULT_SUFFIX) or value is None:
            continue
        if isinstance(value, bool):
            shown.append(f"{key} {'on' if value else 'off'}")
        elif key.endswith("_s"):
            default = settings.get(key[:-2] + DEFAULT_SUFFIX)
            name = key[:-2]
            shown.append(f"{name} {value:g} s" + (f" (default {default:g} s)" if default is not None else ""))
        else:
            shown.append(f"{key} {value}")
    return shown


def _whole(value) -> str:
    return number(value, 0)


def _dash_or(fmt):
    return lambda value: DASH if missing(value) else fmt(value)


def libraries_table(loaded: dict) -> str:
    """One row per library and worker count: medians over repeats, jobs run twice summed."""
    points = loaded[NAME].points
    shown = points[[c for c in TABLE_COLUMNS if c in points]].rename(columns=TABLE_COLUMNS)
    shown["library"] = [f"{library}{' (CPU-bound)' if bound else ''}" for library, bound in
                        zip(points["library"], points["cpu_bound"])]
    jobs, fewer = jobs_per_run(loaded[NAME].summary)
    return table(shown, caption=say("table_caption", jobs=jobs, fewer=fewer),
                 formats={TABLE_COLUMNS["jobs_per_s"]: lambda v: number(v, 0), TABLE_COLUMNS["pickup_p99_ms"]: ms,
                          TABLE_COLUMNS["statements_per_job"]: _dash_or(lambda v: number(v, 1)),
                          TABLE_COLUMNS["transactions_per_job"]: lambda v: number(v, 1),
                          TABLE_COLUMNS["wal_bytes_per_job"]: lambda v: number(v, 0),
                          TABLE_COLUMNS["server_cpu_ms_per_job"]: _dash_or(lambda v: number(v, 2)),
                          TABLE_COLUMNS["executed_twice"]: count})


PROTOCOL_COLUMNS = ("protocol", "what it sends per job", "statements: model / library", "the model leaves out",
                    "read from")


def _logged_statements_per_job(loaded: dict) -> dict[str, float]:
    """Per library raced with its own workers: the statements the server logged per job at its fewest workers
    (the median over the repeats)."""
    mine = loaded.get(NAME)
    if mine is None or not mine.runs or "statements_per_job" not in mine.summary:
        return {}
    summary = mine.summary.dropna(subset=["statements_per_job"])
    fewest = summary[summary["worker_count"] == summary.groupby("library")["worker_count"].transform("min")]
    return fewest.groupby("library")["statements_per_job"].median().to_dict()


def library_protocols_table(loaded: dict) -> str:
    """What each protocol sends per job, what its model leaves out, and where it was read."""
    rows = []
    logged = _logged_statements_per_job(loaded)
    for name in (*LIBRARY_STRATEGIES, *LIBRARY_VARIANTS):
        library = LIBRARY_VARIANTS.get(name, name)
        sends = (LIBRARY_STATEMENTS[library] if library in LIBRARY_STATEMENTS
                 else number(logged[library], 1) if library in logged else DASH)
        statements = f"{STRATEGIES[name].statements_per_attempt} / {sends}"
        rows.append(dict(zip(PROTOCOL_COLUMNS, (name, STRATEGIES[name].summary, statements, DROPPED[library],
                                                SOURCES[library].short))))
    return table(pd.DataFrame(rows), caption=say("protocols_table_caption"))


def _can_lose(name: str) -> bool:
    """Whether a strategy's attempt can end lost: a protocol only where it re-checks its job."""
    strategy = STRATEGIES[name]
    return any(role == CHECK for _, role in strategy.protocol) if strategy.protocol else name not in CANNOT_LOSE


CLAIM_TABLE_COLUMNS = {"strategy": "protocol", "worker_count": "workers", "claims_per_second": "jobs/s",
                       "p99_ms": "p99 of a job's statements", "losses_per_win": "lost per win", "statements": "statements per job",
                       "advisory_locks_leaked": "advisory locks left", "duplicate_jobs": "jobs claimed twice"}


def library_claims_table(loaded: dict) -> str:
    """One row per protocol and worker count: the medians over repeats and their ranges, duplicates summed."""
    mine = loaded[NAME]
    points = mine.claims_by_workers.assign(strategy=mine.claims_by_workers["strategy"].astype(str)).copy()
    summed = mine.claims.assign(strategy=mine.claims["strategy"].astype(str)).groupby(
        ["strategy", "worker_count"])[["duplicate_jobs", "advisory_locks_leaked"]].sum(min_count=1)
    for column in summed:
        points[column] = [summed[column].get((s, w)) for s, w in zip(points["strategy"], points["worker_count"])]
    points["statements"] = [STRATEGIES[s].statements_per_attempt for s in points["strategy"]]
    # a protocol with no re-check cannot lose a race: a dash, as the other tables give such strategies
    points["losses_per_win"] = [v if _can_lose(s) else None for s, v in zip(points["strategy"], points["losses_per_win"])]
    points["claims_per_second"] = [span(lo, hi, _whole) for lo, hi in
                                   zip(points["claims_per_second_min"], points["claims_per_second_max"])]
    shown = points[list(CLAIM_TABLE_COLUMNS)].rename(columns=CLAIM_TABLE_COLUMNS)
    shown["protocol"] = [f"{name}{' (CPU-bound)' if bound is True or bound == 1 else ''}" for name, bound in
                         zip(points["strategy"], points["cpu_bound"])]
    return table(shown, caption=say("claims_table_caption", jobs=count(int(points["job_count"].max()))),
                 formats={CLAIM_TABLE_COLUMNS["p99_ms"]: ms,
                          CLAIM_TABLE_COLUMNS["losses_per_win"]: _dash_or(lambda v: number(v, 2)),
                          CLAIM_TABLE_COLUMNS["advisory_locks_leaked"]: _dash_or(lambda v: count(int(v))),
                          CLAIM_TABLE_COLUMNS["duplicate_jobs"]: count,
                          CLAIM_TABLE_COLUMNS["statements"]: count})
