"""Statistics for the article, all computed from stored rows, audits and manifests.

harness.stats computes one run's figures; this module combines runs: over
repeats, across worker counts, and into the shapes the charts and tables need.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.article.labels import (LOST, SCHEDSTAT_LABELS, SCHEDSTAT_PARTS, STRATEGY_ORDER, TIME_TO_GET_A_JOB,
                                    WAIT_GROUPS, WINNING_CLAIM_LATENCY, WON, WON_SHARED)
from harness.experiments.race.outcomes import spread_by_point
from harness.stats import summarise_runs, time_to_job_ns
from harness.storage import open_runs

# Figures that get a median and a min-max spread over repeats.
REPEATED_METRICS = ("attempts", "wins", "lost", "duplicate_jobs", "extra_claims", "distinct_jobs_claimed",
                    "losses_per_win", "claims_per_second", "unique_jobs_per_second", "attempts_per_second",
                    "p50_ms", "p99_ms", "wall_seconds", "aborts", "aborts_per_win", "max_rows_per_attempt",
                    "advisory_locks_leaked", "time_to_job_p50_ms", "time_to_job_p99_ms", "wasted_attempt_p50_ms",
                    "wasted_ms_per_win", "extra_claims_per_job")


def fewer_repeats(points: pd.DataFrame) -> dict[int, list[int]]:
    """The worker counts raced fewer times than the most-raced ones (a sweep's once_from_workers), grouped by their
    fewest races: {races: [worker counts]}; empty where every count was raced alike."""
    if not len(points) or "worker_count" not in points:
        return {}
    most = int(points["repeats"].max())
    grouped: dict[int, list[int]] = {}
    for workers, races in points.groupby("worker_count")["repeats"].min().sort_index().items():
        if races < most:
            grouped.setdefault(int(races), []).append(int(workers))
    return dict(sorted(grouped.items()))


def runs_of(asked: dict, section: str) -> list:
    """The stored runs of a params-file section as the article is handed it ({section: registry.Asked}); none
    where the section is absent."""
    return list(asked[section].runs) if section in asked else []


def race_summary(paths) -> pd.DataFrame:
    """One row per stored run (its Run.summary: harness.experiments.race.summary), in strategy order."""
    frame = summarise_runs(run_paths=list(paths))
    if not len(frame):
        return frame
    frame["extra_claims_per_job"] = frame["extra_claims"] / frame["job_count"]  # claims beyond each job's first
    frame["strategy"] = pd.Categorical(frame["strategy"], categories=list(STRATEGY_ORDER), ordered=True)
    return frame.sort_values(["strategy", "worker_count", "repeat"]).reset_index(drop=True)


def over_repeats(summary: pd.DataFrame) -> pd.DataFrame:
    """Per strategy and worker count (and whatever else sets a point apart, harness.experiments.race.outcomes.POINT_KEYS): the
    median of each figure over repeats under the figure's own name, its min and max, and `repeats`."""
    if "cpu_bound" in summary:  # a point is CPU-bound when any repeat was: the highest repeat of 0/1 says it
        summary = summary.assign(cpu_bound_repeat=summary["cpu_bound"].map(lambda v: float(v is True or v == 1)))
    figures = [m for m in (*REPEATED_METRICS, "cpu_bound_repeat") if m in summary.columns]
    spread = spread_by_point(summary, figures)
    spread = spread.rename(columns={f"{m}_median": m for m in REPEATED_METRICS})
    if "cpu_bound_repeat_max" in spread:
        spread["cpu_bound"] = spread["cpu_bound_repeat_max"] > 0
        spread = spread.drop(columns=[c for c in spread if c.startswith("cpu_bound_repeat")])
    return spread.sort_values(["strategy", "worker_count"]).reset_index(drop=True)


def at_workers(frame: pd.DataFrame, strategy: str, worker_count: int, column: str):
    """One figure of over_repeats() (NaN if that trial is not in the data)."""
    rows = frame[(frame["strategy"] == strategy) & (frame["worker_count"] == worker_count)]
    return rows[column].iloc[0] if len(rows) else float("nan")


def _quantile_levels() -> np.ndarray:
    # dense in the tail, where the two measures part ways
    return np.unique(np.concatenate([np.linspace(0.0, 0.9, 46), 1 - np.logspace(-1, -3, 30), [0.999, 1.0]]))


# The strategies whose time to get a job differs from the winning statement: guarded loses races on the way,
# skip_locked never does, so it is the comparison that shows what the lost races cost.
WAIT_STRATEGIES = ("guarded", "skip_locked")


def wait_times(paths: list[Path], strategy: str | tuple[str, ...] = WAIT_STRATEGIES) -> pd.DataFrame:
    """Per run of the strategy (or strategies): each win's statement latency and each win's time to get a job
    (C4), in ms."""
    wanted = {strategy} if isinstance(strategy, str) else set(strategy)
    rows = []
    for run in open_runs(paths):
        attempts = run.table("attempts")
        if not len(attempts) or attempts["strategy"].iloc[0] not in wanted:
            continue
        won = attempts["outcome"] == "won"
        base = {"strategy": attempts["strategy"].iloc[0], "worker_count": int(run.parameters.worker_count),
                "repeat": int(run.parameters.repeat)}
        rows.append(pd.DataFrame({**base, "measure": WINNING_CLAIM_LATENCY,
                                  "ms": attempts.loc[won, "latency_ns"].to_numpy() / 1e6}))
        rows.append(pd.DataFrame({**base, "measure": TIME_TO_GET_A_JOB, "ms": time_to_job_ns(attempts) / 1e6}))
    if not rows:
        return pd.DataFrame(columns=["strategy", "worker_count", "repeat", "measure", "ms"])
    return pd.concat(rows, ignore_index=True)


def _percentile_name(quantile: float) -> str:
    return f"p{quantile * 100:g}"


def wait_quantiles(waits: pd.DataFrame, quantiles=(0.5, 0.9, 0.99)) -> pd.DataFrame:
    """p50/p90/p99 of each measure per strategy and worker count: `ms` pooled over repeats, `ms_min` and
    `ms_max` the lowest and highest of the repeats' own quantiles, `repeats` how many there were."""
    columns = ["strategy", "worker_count", "measure", "quantile", "percentile", "ms", "ms_min", "ms_max", "repeats"]
    if not len(waits):
        return pd.DataFrame(columns=columns)
    point = ["strategy", "worker_count", "measure"]
    pooled = (waits.groupby(point)["ms"].quantile(list(quantiles))
              .rename_axis([*point, "quantile"]).rename("ms").reset_index())
    per_repeat = (waits.groupby([*point, "repeat"])["ms"].quantile(list(quantiles))
                  .rename_axis([*point, "repeat", "quantile"]).rename("ms").reset_index())
    spread = per_repeat.groupby([*point, "quantile"])["ms"].agg(ms_min="min", ms_max="max", repeats="size")
    out = pooled.merge(spread.reset_index(), on=[*point, "quantile"])
    out["percentile"] = out["quantile"].map(_percentile_name)
    return out[columns]


def wait_distribution(waits: pd.DataFrame, worker_count: int) -> pd.DataFrame:
    """Each strategy's two measures at one worker count, as quantile curves (a compact ECDF), pooled over
    repeats."""
    chosen = waits[waits["worker_count"] == worker_count]
    levels = _quantile_levels()
    parts = []
    for (strategy, measure), group in chosen.groupby(["strategy", "measure"]):
        parts.append(pd.DataFrame({"strategy": strategy, "measure": measure, "fraction": levels,
                                   "ms": np.quantile(group["ms"].to_numpy(), levels)}))
    if not parts:
        return pd.DataFrame(columns=["strategy", "measure", "fraction", "ms"])
    return pd.concat(parts, ignore_index=True)


def timeline(paths: list[Path]) -> pd.DataFrame:
    """Every attempt of small races, for drawing: who tried what when, and which wins were duplicates.

    A duplicate is a job the server's audit shows flipped to 'running' more than once.
    """
    parts = []
    for run in open_runs(paths):
        attempts = run.table("attempts")
        claims = run.table("claims")
        claims_per_job = claims.groupby("job_id").size()
        frame = attempts.loc[attempts["outcome"] != "empty"].copy()
        frame["worker"] = "worker " + (frame["worker_index"] + 1).astype(str)
        frame["start_ms"] = frame["start_ns"] / 1e6
        frame["end_ms"] = (frame["start_ns"] + frame["latency_ns"]) / 1e6
        # the read runs from the start to its result; the write from its start to the end (one statement: no read)
        frame["read_end_ms"] = frame["read_end_ns"].astype("float") / 1e6
        frame["write_start_ms"] = frame["write_start_ns"].astype("float").fillna(frame["start_ns"]) / 1e6
        frame["job_id"] = frame["job_id"].astype("Int64")
        frame["times_claimed"] = frame["job_id"].map(claims_per_job).fillna(0).astype(int)
        frame["duplicate"] = (frame["outcome"] == "won") & (frame["times_claimed"] > 1)
        outcome = frame["outcome"].astype(str)
        frame["result"] = np.where(frame["duplicate"], WON_SHARED,
                                   outcome.map({"won": WON, "lost": LOST}).fillna(outcome))
        parts.append(frame[["strategy", "worker", "attempt_seq", "start_ms", "read_end_ms", "write_start_ms", "end_ms",
                            "outcome", "job_id", "times_claimed", "duplicate", "result"]])
    if not parts:
        return pd.DataFrame()
    return pd.concat(parts, ignore_index=True)


def timeline_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """Per strategy of a timeline: attempts, wins, lost races, jobs handed out twice or more."""
    rows = []
    for strategy, group in frame.groupby("strategy", observed=True):
        won = group[group["outcome"] == "won"]
        rows.append({"strategy": strategy, "attempts": len(group), "wins": len(won),
                     "lost": int((group["outcome"] == "lost").sum()),
                     "duplicate_jobs": int(won.loc[won["duplicate"], "job_id"].nunique()),
                     "duplicate_wins": int(won["duplicate"].sum())})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- where it ran


def machine(paths: list[Path]) -> dict:
    """The machine and server the runs report in their manifests (first run; ranges where they vary)."""
    runs = open_runs(paths)
    if not runs:
        return {}
    client, server = runs[0].client, runs[0].server
    loads = [run.client.get("load_average") for run in runs]
    one_minute = [load[0] for load in loads if load]
    started = sorted(str(run.started_at or "") for run in runs)
    commits = sorted({str(run.client.get("git", {}).get("commit") or "")[:10] for run in runs} - {""})
    return {
        "cpu_count": client.get("cpu_count"),
        "platform": client.get("platform"),
        "machine": client.get("machine"),
        "python": client.get("python"),
        "packages": client.get("packages", {}),
        "server_version": server.get("server_version"),
        "server_version_string": server.get("version"),
        "server_source": server.get("source"),
        "tmpfs": server.get("tmpfs"),
        "settings": server.get("settings", {}),
        "load_average_min": min(one_minute) if one_minute else None,
        "load_average_max": max(one_minute) if one_minute else None,
        "first_started_at": started[0] if started else None,
        "last_started_at": started[-1] if started else None,
        "git_commits": commits,
        "runs": len(runs),
    }


# --------------------------------------------------------------------------- where the backends' time went

SCHEDSTAT_SHARES = tuple(SCHEDSTAT_LABELS)


def cpu_split_long(table: pd.DataFrame) -> pd.DataFrame:
    """wait_share_table()'s schedstat shares as one row per measure, for a chart."""
    long = table.melt(id_vars=["strategy", "worker_count"], value_vars=list(SCHEDSTAT_SHARES), var_name="measure",
                      value_name="share").dropna(subset=["share"])
    long["process"] = long["measure"].map(lambda column: SCHEDSTAT_PARTS[column][0])
    long["state"] = long["measure"].map(lambda column: SCHEDSTAT_PARTS[column][1])
    long["measure"] = long["measure"].map(SCHEDSTAT_LABELS)
    return long


def wait_share_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per strategy and worker count: each group's share of sampled backend time (median over repeats), the share
    in LWLock BufferContent alone, and the share of backend time on a CPU and runnable from /proc/<pid>/schedstat."""
    rows = []
    for _, run in summary.iterrows():
        shares = run.get("wait_share") or {}
        if not shares:
            continue
        row = {"strategy": run["strategy"], "worker_count": run["worker_count"], "repeat": run["repeat"]}
        for group, classes in WAIT_GROUPS.items():
            row[group] = sum(shares.get(c, 0.0) for c in classes)
        for column in (*SCHEDSTAT_SHARES, "buffer_content_share"):
            row[column] = run.get(column)
        rows.append(row)
    if not rows:
        return pd.DataFrame(columns=["strategy", "worker_count", *WAIT_GROUPS, *SCHEDSTAT_SHARES,
                                     "buffer_content_share"])
    frame = pd.DataFrame(rows)
    numeric = [*SCHEDSTAT_SHARES, "buffer_content_share"]
    frame[numeric] = frame[numeric].astype(float)
    out = frame.groupby(["strategy", "worker_count"], observed=True).median(numeric_only=True).drop(columns="repeat")
    return out.reset_index()


def shares_at(shares: pd.DataFrame | None, strategy: str, worker_count: int) -> dict:
    """One row of wait_share_table as a dict: {} where the strategy was not sampled at that worker count."""
    if shares is None or not len(shares):
        return {}
    rows = shares[(shares["strategy"] == strategy) & (shares["worker_count"] == worker_count)]
    return rows.iloc[0].to_dict() if len(rows) else {}


def wait_share_long(table: pd.DataFrame) -> pd.DataFrame:
    """wait_share_table() as one row per group, for a stacked chart."""
    long = table.melt(id_vars=["strategy", "worker_count"], value_vars=list(WAIT_GROUPS), var_name="wait",
                      value_name="share")
    long["order"] = long["wait"].map({g: i for i, g in enumerate(WAIT_GROUPS)})
    return long


def latency_by_fill(summary: pd.DataFrame) -> pd.DataFrame:
    """Wins' p50 and p99 per tenth of the drain, median over repeats with the min and max: one row per strategy,
    workers, tenth."""
    rows = []
    for _, run in summary.iterrows():
        for tenth, (p50, p99) in enumerate(zip(run["p50_ms_by_fill"], run["p99_ms_by_fill"])):
            rows.append({"strategy": run["strategy"], "worker_count": run["worker_count"],
                         "drained_to": (tenth + 1) / 10, "p50_ms": p50, "p99_ms": p99})
    frame = pd.DataFrame(rows)
    if not len(frame):
        return frame
    grouped = frame.groupby(["strategy", "worker_count", "drained_to"], observed=True)
    out = grouped[["p50_ms", "p99_ms"]].median()
    out = out.join(grouped[["p50_ms", "p99_ms"]].min().add_suffix("_min"))
    out = out.join(grouped[["p50_ms", "p99_ms"]].max().add_suffix("_max"))
    out["repeats"] = grouped.size()
    return out.reset_index()


def sampler_facts(paths: list[Path], summary: pd.DataFrame | None = None) -> dict:
    """The wait-event sampler as it ran: median achieved interval and median query time over the races, and the
    lowest and highest race's median interval inside the workers' windows (from summary, where given)."""
    intervals, queries = [], []
    for run in open_runs(paths):
        stats = run.results.get("activity", {}).get("sampler") or {}
        if stats.get("interval_ms_median") is not None:
            intervals.append(stats["interval_ms_median"])
            queries.append(stats.get("query_ms_median", np.nan))
    if not intervals:
        return {}
    facts = {"interval_ms": float(np.median(intervals)), "query_ms": float(np.nanmedian(queries)),
             "races": len(intervals)}
    if summary is not None and "sampler_interval_ms" in summary:
        achieved = summary["sampler_interval_ms"].dropna().astype(float)
        if len(achieved):
            facts.update(interval_ms=float(achieved.median()), interval_ms_low=float(achieved.min()),
                         interval_ms_high=float(achieved.max()))
            slowest = summary.loc[achieved.idxmax()]
            facts["slowest_workers"] = int(slowest["worker_count"])
    return facts


def cpu_bound_facts(summary: pd.DataFrame) -> dict:
    """What the CPU-bound rule (harness.server.activity.cpu_bound) marks in a sweep: the worker counts, and the
    share of time the workers and their backends waited for a CPU on either side of the line (each point's highest
    repeat)."""
    if not len(summary) or "client_runnable_share" not in summary:
        return {}
    # per point its highest repeat: a point is CPU-bound when any repeat crossed the line, so that repeat says why
    points = summary.groupby(["strategy", "worker_count"], observed=True).agg(
        share=("client_runnable_share", "max"), backend=("backend_runnable_share", "max"),
        bound=("cpu_bound", lambda v: bool(v.fillna(False).astype(bool).any()))).reset_index()
    free, bound = points[~points["bound"]], points[points["bound"]]
    # a bound point crossed the line on its clients' side or its backends': the larger of the two says how far
    crossed = bound[["share", "backend"]].max(axis=1)
    return {"bound_workers": sorted({int(w) for w in bound["worker_count"]}),
            "free_workers": sorted({int(w) for w in free["worker_count"]} - {int(w) for w in bound["worker_count"]}),
            "free_share_max": float(free["share"].max()) if len(free) else np.nan,
            "bound_share_min": float(crossed.min()) if len(bound) else np.nan,
            "free_backend_max": float(free["backend"].max()) if len(free) else np.nan}


SETUP_COLUMNS = ["strategy", "workers", "setup", "claims/s", "lost races per win", "workers waiting for a CPU",
                 "backends waiting for a CPU"]


def setup_comparison(reference: pd.DataFrame, variants: dict[str, pd.DataFrame],
                     reference_label: str = "as published") -> pd.DataFrame:
    """The same drains (strategy, workers, jobs, index) raced the way the article's races are and in other set-ups
    (variants: label -> race_summary, e.g. the CPUs split, the sampler off); medians over repeats, one row per point
    and set-up, only at the points some variant raced."""
    variants = {label: frame for label, frame in variants.items() if len(frame)}
    if not variants or not len(reference):
        return pd.DataFrame(columns=SETUP_COLUMNS)
    keys = ["strategy", "worker_count", "job_count", "partial_index"]
    wanted = pd.concat([frame[keys] for frame in variants.values()]).drop_duplicates()
    reference = reference.merge(wanted, on=keys)
    rows = []
    for layout, frame in ((reference_label, reference), *variants.items()):
        points = frame.groupby(["strategy", "worker_count"], observed=True).agg(
            claims=("claims_per_second", "median"), lost=("losses_per_win", "median"),
            client=("client_runnable_share", "median"), backend=("backend_runnable_share", "median")).reset_index()
        for _, point in points.iterrows():
            rows.append({"strategy": str(point["strategy"]), "workers": int(point["worker_count"]), "setup": layout,
                         "claims/s": point["claims"], "lost races per win": point["lost"],
                         "workers waiting for a CPU": point["client"], "backends waiting for a CPU": point["backend"]})
    out = pd.DataFrame(rows)
    out["order"] = out["strategy"].map({s: i for i, s in enumerate(STRATEGY_ORDER)})
    out["setup_order"] = out["setup"].map({s: i for i, s in enumerate((reference_label, *variants))})
    return out.sort_values(["order", "workers", "setup_order"]).drop(
        columns=["order", "setup_order"]).reset_index(drop=True)
