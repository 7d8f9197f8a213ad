"""Statistics for the article, all computed from stored rows, audits and manifests.

harness.stats computes one run's figures; this module combines runs: over
repeats, across worker counts, and into the shapes the charts and tables need.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness.article.formats import MISSING, count, missing, ms, rate, round_trip
from harness.article.labels import (CANNOT_LOSE, INDEX_LABELS, LOCK_WAIT, LOST, ROUND_TRIP_MEASURES, SCHEDSTAT_LABELS,
                                    SCHEDSTAT_PARTS, SIDE_BY_SIDE_MEASURES, STRATEGY_ORDER, TIME_TO_GET_A_JOB,
                                    WAIT_GROUPS, WINNING_CLAIM_LATENCY, WON, WON_SHARED)
from harness.stats import spread_by_point, summarise_runs, time_to_job_ns
from harness.storage import open_runs

# Figures that get a median and a min-max spread over repeats.
REPEATED_METRICS = ("attempts", "wins", "lost", "duplicate_jobs", "extra_claims", "distinct_jobs_claimed",
                    "losses_per_win", "claims_per_second", "unique_jobs_per_second", "attempts_per_second",
                    "p50_ms", "p99_ms", "wall_seconds", "aborts", "aborts_per_win", "max_rows_per_attempt",
                    "advisory_locks_leaked", "time_to_job_p50_ms", "time_to_job_p99_ms", "wasted_attempt_p50_ms",
                    "wasted_ms_per_win", "extra_claims_per_job")


def runs_of(asked: dict, section: str) -> list:
    """The stored runs of a params-file section as the article is handed it ({section: registry.Asked}); none
    where the section is absent."""
    return list(asked[section].runs) if section in asked else []


def race_summary(paths) -> pd.DataFrame:
    """One row per stored run (its Run.summary: harness.stats.summarise_run), in strategy order."""
    frame = summarise_runs(run_paths=list(paths))
    if not len(frame):
        return frame
    frame["extra_claims_per_job"] = frame["extra_claims"] / frame["job_count"]  # claims beyond each job's first
    frame["strategy"] = pd.Categorical(frame["strategy"], categories=list(STRATEGY_ORDER), ordered=True)
    return frame.sort_values(["strategy", "worker_count", "repeat"]).reset_index(drop=True)


def over_repeats(summary: pd.DataFrame) -> pd.DataFrame:
    """Per strategy and worker count (and whatever else sets a point apart, harness.stats.POINT_KEYS): the
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
        base = {"strategy": attempts["strategy"].iloc[0], "worker_count": int(run.asked["worker_count"]),
                "repeat": int(run.asked["repeat"])}
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
    manifests = [run.manifest for run in open_runs(paths)]
    manifests = [m for m in manifests if m]
    if not manifests:
        return {}
    first = manifests[0]
    client, server = first.get("client", {}), first.get("server", {})
    loads = [m.get("client", {}).get("load_average") for m in manifests]
    one_minute = [load[0] for load in loads if load]
    started = sorted(str(m.get("started_at", "")) for m in manifests)
    commits = sorted({str(m.get("client", {}).get("git", {}).get("commit") or "")[:10] for m in manifests} - {""})
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
        "runs": len(manifests),
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
    worker processes' share of time waiting for a CPU on either side of the line (each point's highest repeat)."""
    if not len(summary) or "client_runnable_share" not in summary:
        return {}
    # per point its highest repeat: a point is CPU-bound when any repeat crossed the line, so that repeat says why
    points = summary.groupby(["strategy", "worker_count"], observed=True).agg(
        share=("client_runnable_share", "max"), backend=("backend_runnable_share", "max"),
        bound=("cpu_bound", lambda v: bool(v.fillna(False).astype(bool).any()))).reset_index()
    free, bound = points[~points["bound"]], points[points["bound"]]
    return {"bound_workers": sorted({int(w) for w in bound["worker_count"]}),
            "free_workers": sorted({int(w) for w in free["worker_count"]} - {int(w) for w in bound["worker_count"]}),
            "free_share_max": float(free["share"].max()) if len(free) else np.nan,
            "bound_share_min": float(bound["share"].min()) if len(bound) else np.nan,
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


def claim_comparison(points: pd.DataFrame, shares: pd.DataFrame) -> pd.DataFrame:
    """Per strategy and worker count, what each way of claiming costs and whether it is correct: the medians over
    repeats of duplicates, lost races and aborts per win, claims per second, the time to get a job, the most
    rows one attempt claimed, advisory locks left on jobs not returned, and the share of samples waiting on a lock."""
    columns = {"strategy": "strategy", "worker_count": "workers", "duplicate_jobs": "jobs claimed twice+",
               "losses_per_win": "lost per win", "aborts_per_win": "aborts per win",
               "claims_per_second": "claims/s", "time_to_job_p99_ms": "time to get a job, p99",
               "max_rows_per_attempt": "most rows in one attempt", "advisory_locks_leaked": "stray advisory locks"}
    table = points[[c for c in columns if c in points]].copy()
    table["strategy"] = table["strategy"].astype(str)
    # a figure a strategy cannot have is left empty (a dash in the table), not shown as a measured zero
    if "losses_per_win" in table:
        table.loc[table["strategy"].isin(CANNOT_LOSE), "losses_per_win"] = np.nan
    if "aborts_per_win" in table:
        table.loc[table["strategy"] != "naive_serializable", "aborts_per_win"] = np.nan
    if len(shares):
        locks = shares[["strategy", "worker_count", LOCK_WAIT]].copy()
        locks["strategy"] = locks["strategy"].astype(str)
        table = table.merge(locks, on=["strategy", "worker_count"], how="left")
    columns[LOCK_WAIT] = "lock waits"
    return table.rename(columns=columns).reset_index(drop=True)


def by_round_trip(summary: pd.DataFrame, keep_straight: bool = False) -> pd.DataFrame:
    """over_repeats() of races behind a network round trip, in order of strategy, workers and round trip.

    Where 0 ms was raced through the proxy too, that is the 0 ms point; the straight 0 ms races (no proxy) are
    kept only with keep_straight (to tell what the proxy alone adds)."""
    points = over_repeats(summary)
    if not len(points):
        return points
    if not keep_straight and "proxy" in points:
        proxied_zero = points["proxy"].astype(bool) & (points["rtt_ms"] == 0)
        if proxied_zero.any():
            points = points[points["proxy"].astype(bool)]
    return points.sort_values(["strategy", "worker_count", "rtt_ms"]).reset_index(drop=True)


def round_trip_long(points: pd.DataFrame) -> pd.DataFrame:
    """by_round_trip() as the latency chart draws it: one row per strategy, round trip and measure, with its
    min-max; naive's claims beyond each job's first and guarded's lost races per win, and every strategy's
    claims per second."""
    measures = (("naive", "extra_claims_per_job", ROUND_TRIP_MEASURES[0]),
                ("guarded", "losses_per_win", ROUND_TRIP_MEASURES[1]),
                (None, "claims_per_second", ROUND_TRIP_MEASURES[2]))
    frames = []
    for strategy, column, measure in measures:
        rows = points if strategy is None else points[points["strategy"].astype(str) == strategy]
        if not len(rows) or column not in rows:
            continue
        frames.append(pd.DataFrame({
            "strategy": rows["strategy"].astype(str), "worker_count": rows["worker_count"],
            "rtt_ms": rows["rtt_ms"], "measure": measure, "value": rows[column],
            "low": rows[f"{column}_min"], "high": rows[f"{column}_max"], "repeats": rows["repeats"]}))
    columns = ["strategy", "worker_count", "rtt_ms", "measure", "value", "low", "high", "repeats"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


# --------------------------------------------------------------------------- the sections on how to claim


@dataclass
class ClaimSections:
    """What the article's sections on the network round trip, the partial index, the two server versions and
    "which claim should I use" draw and say: their frames, and every figure their prose names (`facts`)."""

    facts: dict = field(default_factory=dict)  # placeholder name -> formatted value
    latency: pd.DataFrame = field(default_factory=pd.DataFrame)  # by_round_trip() of the latency section
    index_points: pd.DataFrame = field(default_factory=pd.DataFrame)  # conditions() of the indexed race, on one server
    server_points: pd.DataFrame = field(default_factory=pd.DataFrame)  # conditions(): unindexed, on both servers
    server_table: pd.DataFrame = field(default_factory=pd.DataFrame)  # server_comparison()
    which_claim: pd.DataFrame = field(default_factory=pd.DataFrame)  # which_claim()
    which_low: int = 0  # the worker counts which_claim() reads claims per second at
    which_high: int = 0


def _list_text(values, fmt=str) -> str:
    items = [fmt(v) for v in values]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1] if items else MISSING


def _point(points: pd.DataFrame, strategy: str, column: str, **where):
    rows = points[points["strategy"].astype(str) == strategy]
    for key, value in where.items():
        rows = rows[rows[key] == value]
    return rows[column].iloc[0] if len(rows) and column in rows else np.nan


def latency_facts(latency: pd.DataFrame) -> dict:
    """The latency section's setup and the figures its prose names beside C6's, at the most workers raced."""
    if not len(latency):
        return {name: MISSING for name in ("latency_job_count", "latency_worker_list", "latency_rtt_list",
                                            "latency_repeats", "latency_skip_rate_low", "latency_skip_rate_high",
                                            "latency_guarded_rate_low", "latency_guarded_rate_high",
                                            "latency_skip_p50_high", "latency_guarded_p50_high", "latency_workers")}
    workers = sorted({int(w) for w in latency["worker_count"]})
    rtts = sorted({float(r) for r in latency["rtt_ms"]})
    top, low, high = workers[-1], rtts[0], rtts[-1]
    at = {"worker_count": top}
    repeats = int(latency["repeats"].max())
    return {
        "latency_job_count": count(latency["job_count"].max()) if "job_count" in latency else MISSING,
        "latency_worker_list": _list_text(workers), "latency_workers": count(top),
        "latency_rtt_list": _list_text(rtts, round_trip),
        "latency_repeats": f"{count(repeats)} race{'' if repeats == 1 else 's'}",
        "latency_skip_rate_low": rate(_point(latency, "skip_locked", "claims_per_second", rtt_ms=low, **at)),
        "latency_skip_rate_high": rate(_point(latency, "skip_locked", "claims_per_second", rtt_ms=high, **at)),
        "latency_guarded_rate_low": rate(_point(latency, "guarded", "claims_per_second", rtt_ms=low, **at)),
        "latency_guarded_rate_high": rate(_point(latency, "guarded", "claims_per_second", rtt_ms=high, **at)),
        "latency_skip_p50_high": ms(_point(latency, "skip_locked", "p50_ms", rtt_ms=high, **at)),
        "latency_guarded_p50_high": ms(_point(latency, "guarded", "p50_ms", rtt_ms=high, **at)),
    }


SERVER = "server"
INDEX = "partial index"


def server_label(version) -> str:
    """'PostgreSQL 16' from a server_version such as '16.4' (a run's pg_version)."""
    return f"PostgreSQL {str(version).split('.')[0]}" if not missing(version) else MISSING


def with_conditions(summary: pd.DataFrame) -> pd.DataFrame:
    """A race summary with the conditions a run was raced under as labels: its server and its partial index."""
    if not len(summary):
        return summary.assign(**{SERVER: [], INDEX: []})
    return summary.assign(**{SERVER: summary["pg_version"].map(server_label),
                             INDEX: summary["partial_index"].map(INDEX_LABELS)})


def conditions(summary: pd.DataFrame) -> pd.DataFrame:
    """over_repeats() of runs under several conditions, each point labelled with its server and partial index."""
    points = over_repeats(summary) if len(summary) else summary
    return with_conditions(points) if len(points) else points


def side_by_side_long(points: pd.DataFrame, condition: str) -> pd.DataFrame:
    """conditions() as a chart draws one condition against another: claims per second and a win's p99, with
    min-max, one row per strategy, workers, condition and measure."""
    frames = []
    for column, measure in (("claims_per_second", SIDE_BY_SIDE_MEASURES[0]), ("p99_ms", SIDE_BY_SIDE_MEASURES[1])):
        if not len(points):
            break
        frames.append(pd.DataFrame({
            "strategy": points["strategy"].astype(str), "worker_count": points["worker_count"],
            "condition": points[condition], "measure": measure, "value": points[column],
            "low": points[f"{column}_min"], "high": points[f"{column}_max"], "repeats": points["repeats"],
            # any repeat CPU-bound marks the point (over_repeats); a summary without the marking has none
            "cpu_bound": (points["cpu_bound"].fillna(False).astype(bool) if "cpu_bound" in points else False)}))
    columns = ["strategy", "worker_count", "condition", "measure", "value", "low", "high", "repeats", "cpu_bound"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def server_comparison(points: pd.DataFrame) -> pd.DataFrame:
    """Per strategy and worker count, one column per server for claims per second, lost races per win and a
    win's p99, and the ratio of the newer server's claims per second to the older's."""
    if not len(points):
        return pd.DataFrame()
    servers = sorted(points[SERVER].unique(), key=lambda label: int(label.split()[-1]))
    keyed = points.assign(strategy=points["strategy"].astype(str)).set_index(["strategy", "worker_count", SERVER])
    rows = []
    for (strategy, worker_count), _ in points.groupby([points["strategy"].astype(str), "worker_count"], sort=False):
        row = {"strategy": strategy, "workers": int(worker_count)}
        for server in servers:
            key = (strategy, worker_count, server)
            found = key in keyed.index
            row[f"claims/s, {server}"] = keyed.loc[key, "claims_per_second"] if found else np.nan
            row[f"lost per win, {server}"] = (keyed.loc[key, "losses_per_win"]
                                              if found and strategy not in CANNOT_LOSE else np.nan)
            row[f"p99, {server}"] = keyed.loc[key, "p99_ms"] if found else np.nan
        if len(servers) >= 2:
            row[f"{servers[-1].split()[-1]} / {servers[0].split()[-1]}, claims/s"] = (
                row[f"claims/s, {servers[-1]}"] / row[f"claims/s, {servers[0]}"])
        rows.append(row)
    order = {name: i for i, name in enumerate(STRATEGY_ORDER)}
    return pd.DataFrame(rows).sort_values(["strategy", "workers"], key=lambda c: c.map(order) if c.name ==
                                          "strategy" else c).reset_index(drop=True)


WHICH_CLAIM_COLUMNS = ("strategy", SERVER, INDEX, "jobs claimed twice+", "claims/s, low", "claims/s, high",
                       "time to get a job, p50", "time to get a job, p99", "wasted attempts per win", "lock waits")


def which_claim(summary: pd.DataFrame) -> tuple[pd.DataFrame, int, int]:
    """"Which claim should I use": for every strategy, on every server and with and without the partial index
    raced for any strategy, its correctness and costs; NaN (a dash) where it was not raced under that condition.

    Jobs claimed twice+ is summed over every race of the strategy under that condition; claims per second at
    the fewest and the most workers above one that every raced row shares (low, high); the time to get a job,
    the attempts wasted per win (lost races and aborted transactions) and the share of samples waiting on a row
    or transaction lock at high. Returns (table, low, high).
    """
    columns = list(WHICH_CLAIM_COLUMNS)
    if not len(summary):
        return pd.DataFrame(columns=columns), 0, 0
    runs = with_conditions(summary)
    runs = runs.assign(strategy=runs["strategy"].astype(str))
    points = conditions(summary)
    points = points.assign(strategy=points["strategy"].astype(str))
    groups = {key: set(int(w) for w in frame["worker_count"] if int(w) > 1)
              for key, frame in points.groupby(["strategy", SERVER, INDEX])}
    shared = set.intersection(*groups.values()) if groups else set()
    everything = set.union(*groups.values()) if groups else set()
    low, high = (min(shared), max(shared)) if shared else (min(everything or {0}), max(everything or {0}))
    servers = sorted(runs[SERVER].unique(), key=lambda label: int(label.split()[-1]))
    indexes = [label for label in INDEX_LABELS.values()]
    strategies = [name for name in STRATEGY_ORDER if name in set(runs["strategy"])]
    rows = []
    for strategy in strategies:
        for server in servers:
            for index in indexes:
                at = points[(points["strategy"] == strategy) & (points[SERVER] == server) & (points[INDEX] == index)]
                raced = runs[(runs["strategy"] == strategy) & (runs[SERVER] == server) & (runs[INDEX] == index)]
                row = {"strategy": strategy, SERVER: server, INDEX: index}
                if not len(raced):
                    rows.append(row)
                    continue

                def figure(column, workers):
                    hit = at[at["worker_count"] == workers]
                    return float(hit[column].iloc[0]) if len(hit) and column in hit else np.nan

                wasted = np.nansum([figure("losses_per_win", high), figure("aborts_per_win", high)])
                shares = wait_share_table(raced)
                lock = shares[(shares["worker_count"] == high)][LOCK_WAIT] if len(shares) else pd.Series(dtype=float)
                row.update({"jobs claimed twice+": int(raced["duplicate_jobs"].sum()),
                            "claims/s, low": figure("claims_per_second", low),
                            "claims/s, high": figure("claims_per_second", high),
                            "time to get a job, p50": figure("time_to_job_p50_ms", high),
                            "time to get a job, p99": figure("time_to_job_p99_ms", high),
                            "wasted attempts per win": wasted if not np.isnan(figure("claims_per_second", high))
                            else np.nan,
                            "lock waits": float(lock.iloc[0]) if len(lock) else np.nan})
                rows.append(row)
    table = pd.DataFrame(rows, columns=columns)
    return table, low, high


def claim_sections(runs: dict, sweep: pd.DataFrame, others: pd.DataFrame | None,
                   latency: pd.DataFrame | None) -> ClaimSections:
    """The frames and facts of the sections on how to claim, from the report's runs, reusing the summaries
    already loaded: the sweep's races, the other strategies' and the ones behind a round trip."""
    latency = by_round_trip(latency) if latency is not None else pd.DataFrame()
    indexed = race_summary(runs_of(runs, "indexed_race"))
    newer = race_summary(runs_of(runs, "pg18_race"))
    index_points = conditions(indexed)
    unindexed, newer_unindexed = (frame[~frame["partial_index"].astype(bool)] if len(frame) else frame
                                  for frame in (indexed, newer))
    # the server comparison is made without the index, as the original raced; the closing table has both arms
    both_servers = pd.concat([frame for frame in (unindexed, newer_unindexed) if len(frame)], ignore_index=True) \
        if len(unindexed) or len(newer_unindexed) else pd.DataFrame()
    server_points = conditions(both_servers)
    others = others if others is not None else pd.DataFrame()
    other_conditions = race_summary([*runs_of(runs, "others_indexed"), *runs_of(runs, "pg18_others")])
    frames = [frame for frame in (others, other_conditions, indexed, newer) if len(frame)]
    every = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    table, low, high = which_claim(every)
    facts = {**latency_facts(latency), **comparison_facts(indexed, newer_unindexed, every, low, high),
             "indexed_size_phrase": size_phrase(indexed, sweep)}
    return ClaimSections(facts=facts, latency=latency, index_points=index_points, server_points=server_points,
                         server_table=server_comparison(server_points), which_claim=table, which_low=low,
                         which_high=high)


def size_phrase(indexed: pd.DataFrame, sweep: pd.DataFrame) -> str:
    """How the indexed race's drains compare with the sweep's, as the prose says it."""
    if not len(indexed) or sweep is None or not len(sweep):
        return "Both arms drain queues of the same size, so they compare with each other"
    mine, theirs = int(indexed["job_count"].max()), int(sweep["job_count"].max())
    if mine < theirs:
        return (f"These drains are shorter than the sweep's {count(theirs)} jobs, so that both arms fit in the "
                "build; both arms have the same size, so they compare with each other rather than with the sweep")
    return f"These drains are the sweep's size, {count(theirs)} jobs, so the arm without the index is the sweep's own runs"


def comparison_facts(indexed: pd.DataFrame, newer: pd.DataFrame, every: pd.DataFrame, low: int, high: int) -> dict:
    """The setup of the indexed race, the second server and the closing table, as the prose names it."""
    def setup(frame, prefix):
        if not len(frame):
            return {f"{prefix}_job_count": MISSING, f"{prefix}_worker_list": MISSING, f"{prefix}_repeats": MISSING}
        repeats = int(frame["repeat"].nunique())
        return {f"{prefix}_job_count": count(frame["job_count"].max()),
                f"{prefix}_worker_list": _list_text(sorted({int(w) for w in frame["worker_count"]})),
                f"{prefix}_repeats": f"{count(repeats)} race{'' if repeats == 1 else 's'}"}

    def at_top(frame, **where):
        """Each original strategy's claims per second at the frame's most workers, under a condition."""
        if not len(frame):
            return {}, 0
        top = int(frame["worker_count"].max())
        points = over_repeats(frame[np.logical_and.reduce([frame[k] == v for k, v in where.items()])]
                              if where else frame)
        return {name: _point(points, name, "claims_per_second", worker_count=top)
                for name in ("naive", "guarded", "skip_locked")}, top

    without, top = at_top(indexed, partial_index=False) if len(indexed) else ({}, 0)
    with_index, _ = at_top(indexed, partial_index=True) if len(indexed) else ({}, 0)
    on_newer, newer_top = at_top(newer)
    facts = {"indexed_top": count(top) if top else MISSING, "newer_top": count(newer_top) if newer_top else MISSING}
    for name in ("naive", "guarded", "skip_locked"):
        facts[f"indexed_{name}_without"] = rate(without.get(name, np.nan))
        facts[f"indexed_{name}_with"] = rate(with_index.get(name, np.nan))
        older = without.get(name, np.nan) if newer_top == top else np.nan
        facts[f"newer_{name}_rate"] = rate(on_newer.get(name, np.nan))
        facts[f"older_{name}_rate"] = rate(older)
    job_counts = sorted({int(j) for j in every["job_count"]}) if len(every) else []
    return {**facts, **setup(indexed, "indexed"), **setup(newer, "newer_server"),
            "newer_server_version": server_label(newer["pg_version"].iloc[0]) if len(newer) else MISSING,
            "older_server_version": server_label(indexed["pg_version"].iloc[0]) if len(indexed) else MISSING,
            "which_low": count(low) if low else MISSING, "which_high": count(high) if high else MISSING,
            "which_rate_workers": MISSING if not high else count(high) if low == high else
            f"{count(low)} and at {count(high)}",
            "which_job_counts": _list_text(job_counts, count) if job_counts else MISSING}
