"""The job libraries section: procrastinate and PgQueuer draining one queue with their own workers (A7), and what
each job costs the server."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.article.findings import CONFIRMED, CORRECTED, Finding, make_finding, not_measured
from harness.article.formats import DASH, count, missing, ms, number
from harness.article.prose import counted, join, table
from harness.article.wording import Sentences
from harness.experiments import registry
from harness.experiments.libraries import load_summary
from harness.storage import read_manifest

NAME = "libraries"
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
    runs: tuple  # the libraries' run folders
    summary: pd.DataFrame  # one row per run: the run's summary, with its settings
    points: pd.DataFrame  # per library and worker count: each figure's median, min and max over repeats


def library_summary(paths) -> pd.DataFrame:
    rows = []
    for path in paths:
        manifest = read_manifest(path)
        rows.append({**load_summary(path), "settings": manifest["procedure"]["settings"],
                     "source": manifest["procedure"]["source"], "run_id": manifest["run_id"]})
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


def load(runs: dict[str, list[Path]], loaded: dict) -> Loaded | None:
    paths = tuple(Path(p) for p in runs.get("libraries", []))
    if not paths:
        return None
    summary = library_summary(paths)
    return Loaded(paths, summary, library_points(summary))


# --------------------------------------------------------------------------- A7


def a7_each_job_runs_once(summary: pd.DataFrame | None) -> Finding:
    """Per library, a part: confirmed where no job was run twice or claimed twice in any run, corrected where the
    workers' logs or the audit show one that was."""
    if summary is None or not len(summary):
        return not_measured("A7", say("A7.no_runs"))
    parts, listed, notes = [], [], []
    for library, runs in summary.groupby("library", sort=False):
        twice, claimed = int(runs["executed_twice"].sum()), int(runs["duplicate_claims"].sum())
        jobs = int(runs["jobs"].sum())
        parts.append((library, CONFIRMED if twice == 0 and claimed == 0 else CORRECTED))
        listed.append(say("A7.library", library=library, version=runs["version"].iloc[0], twice=count(twice),
                          claimed=count(claimed), jobs=count(jobs), runs=count(len(runs))))
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
    return make_finding("A7", verdict, say("A7.ours", libraries="; ".join(listed)), notes, values, parts=tuple(parts))


def findings(loaded: dict) -> list[Finding]:
    mine = loaded.get(NAME)
    return [a7_each_job_runs_once(mine.summary if mine else None)]


# --------------------------------------------------------------------------- the prose's figures and the table


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    mine = loaded[NAME]
    request = registry.request_of("libraries", list(mine.runs))
    per_library = []
    for library, runs in mine.summary.groupby("library", sort=False):
        settings = runs["settings"].iloc[0]
        per_library.append(say("settings", library=library, version=runs["version"].iloc[0],
                               settings=join(_settings_text(settings))))
    return {"libraries_list": join(list(dict.fromkeys(mine.summary["library"]))),
            "libraries_job_count": count(request.job_count),
            "libraries_worker_list": join([str(w) for w in request.worker_counts]),
            "libraries_repeats": counted(request.repeats, "run"),
            "libraries_settings": " ".join(per_library)}


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


def _dash_or(fmt):
    return lambda value: DASH if missing(value) else fmt(value)


def libraries_table(loaded: dict) -> str:
    """One row per library and worker count: medians over repeats, jobs run twice summed."""
    points = loaded[NAME].points
    shown = points[[c for c in TABLE_COLUMNS if c in points]].rename(columns=TABLE_COLUMNS)
    shown["library"] = [f"{library}{' (CPU-bound)' if bound else ''}" for library, bound in
                        zip(points["library"], points["cpu_bound"])]
    return table(shown, caption=say("table_caption", jobs=count(int(points["jobs"].max() / points["repeats"].max()))),
                 formats={TABLE_COLUMNS["jobs_per_s"]: lambda v: number(v, 0), TABLE_COLUMNS["pickup_p99_ms"]: ms,
                          TABLE_COLUMNS["statements_per_job"]: _dash_or(lambda v: number(v, 1)),
                          TABLE_COLUMNS["transactions_per_job"]: lambda v: number(v, 1),
                          TABLE_COLUMNS["wal_bytes_per_job"]: lambda v: number(v, 0),
                          TABLE_COLUMNS["server_cpu_ms_per_job"]: _dash_or(lambda v: number(v, 2)),
                          TABLE_COLUMNS["executed_twice"]: count})
