"""Statistics for the article, all computed from stored rows, audits and manifests.

harness.stats computes one run's figures; this module combines runs: over
repeats, across worker counts, and into the shapes the charts and tables need.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.stats import load_attempts, load_claims, summarise_runs, time_to_job_ns
from harness.storage import read_json

STRATEGY_ORDER = ("naive", "guarded", "skip_locked")

# Figures that get a median and a min-max spread over repeats.
REPEATED_METRICS = ("attempts", "wins", "lost", "duplicate_jobs", "extra_claims", "distinct_jobs_claimed",
                    "losses_per_win", "claims_per_second", "unique_jobs_per_second", "attempts_per_second",
                    "p50_ms", "p99_ms", "wall_seconds")


def race_summary(paths: list[Path]) -> pd.DataFrame:
    """One row per stored run (harness.stats.summarise_run), in strategy order."""
    frame = summarise_runs(run_paths=[Path(p) for p in paths])
    if not len(frame):
        return frame
    frame["strategy"] = pd.Categorical(frame["strategy"], categories=list(STRATEGY_ORDER), ordered=True)
    return frame.sort_values(["strategy", "worker_count", "repeat"]).reset_index(drop=True)


def over_repeats(summary: pd.DataFrame) -> pd.DataFrame:
    """Per strategy and worker count: the median of each figure over repeats, and its min and max."""
    grouped = summary.groupby(["strategy", "worker_count"], observed=True)
    columns = [m for m in REPEATED_METRICS if m in summary.columns]
    median = grouped[columns].median()
    low = grouped[columns].min().add_suffix("_min")
    high = grouped[columns].max().add_suffix("_max")
    out = pd.concat([median, low, high], axis=1)
    out["repeats"] = grouped.size()
    out["job_count"] = grouped["job_count"].first()
    return out.reset_index()


def at_workers(frame: pd.DataFrame, strategy: str, worker_count: int, column: str):
    """One figure of over_repeats() (NaN if that trial is not in the data)."""
    rows = frame[(frame["strategy"] == strategy) & (frame["worker_count"] == worker_count)]
    return rows[column].iloc[0] if len(rows) else float("nan")


def _quantile_levels() -> np.ndarray:
    # dense in the tail, where the two measures part ways
    return np.unique(np.concatenate([np.linspace(0.0, 0.9, 46), 1 - np.logspace(-1, -3, 30), [0.999, 1.0]]))


def wait_times(paths: list[Path], strategy: str = "guarded") -> pd.DataFrame:
    """Per run of `strategy`: each win's statement latency and each win's time to get a job (C4), in ms."""
    rows = []
    for path in paths:
        attempts = load_attempts(path)
        if not len(attempts) or attempts["strategy"].iloc[0] != strategy:
            continue
        won = attempts["outcome"] == "won"
        manifest = read_json(Path(path) / "manifest.json")
        base = {"worker_count": int(manifest["parameters"]["worker_count"]),
                "repeat": int(manifest["parameters"]["repeat"])}
        rows.append(pd.DataFrame({**base, "measure": "winning claim latency",
                                  "ms": attempts.loc[won, "latency_ns"].to_numpy() / 1e6}))
        rows.append(pd.DataFrame({**base, "measure": "time to get a job", "ms": time_to_job_ns(attempts) / 1e6}))
    if not rows:
        return pd.DataFrame(columns=["worker_count", "repeat", "measure", "ms"])
    return pd.concat(rows, ignore_index=True)


def wait_quantiles(waits: pd.DataFrame, quantiles=(0.5, 0.9, 0.99)) -> pd.DataFrame:
    """p50/p90/p99 of each measure per worker count, pooled over repeats."""
    if not len(waits):
        return pd.DataFrame(columns=["worker_count", "measure", "quantile", "ms"])
    out = (waits.groupby(["worker_count", "measure"])["ms"].quantile(list(quantiles))
           .rename_axis(["worker_count", "measure", "quantile"]).reset_index())
    out["percentile"] = out["quantile"].map(lambda q: f"p{q * 100:g}")
    return out


def wait_distribution(waits: pd.DataFrame, worker_count: int) -> pd.DataFrame:
    """Both measures' distributions at one worker count, as quantile curves (a compact ECDF)."""
    chosen = waits[waits["worker_count"] == worker_count]
    levels = _quantile_levels()
    parts = []
    for measure, group in chosen.groupby("measure"):
        parts.append(pd.DataFrame({"measure": measure, "fraction": levels,
                                   "ms": np.quantile(group["ms"].to_numpy(), levels)}))
    if not parts:
        return pd.DataFrame(columns=["measure", "fraction", "ms"])
    return pd.concat(parts, ignore_index=True)


def timeline(paths: list[Path]) -> pd.DataFrame:
    """Every attempt of small races, for drawing: who tried what when, and which wins were duplicates.

    A duplicate is a job the server's audit shows flipped to 'running' more than once.
    """
    parts = []
    for path in paths:
        attempts = load_attempts(path)
        claims = load_claims(path)
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
        frame["result"] = np.where(frame["duplicate"], "won a job another worker also won",
                                   np.where(frame["outcome"] == "won", "won", frame["outcome"].astype(str)))
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
    manifests = [read_json(Path(p) / "manifest.json") for p in paths]
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


# --------------------------------------------------------------------------- plans (harness.experiments.plans)

INDEX_LABELS = {False: "without partial index", True: "with partial index"}


def table_states() -> pd.DataFrame:
    """The table states the plans are measured in, as harness.experiments.plans describes them, in their order."""
    from harness.experiments.plans import TABLE_STATES

    return pd.DataFrame([{"table_state": s.name, "table": s.label, "what it is": s.description}
                         for s in TABLE_STATES])


def claim_plan_points(points: pd.DataFrame, strategy: str = "skip_locked", statement: str = "claim") -> pd.DataFrame:
    """One strategy statement's EXPLAIN figures at every fill level, ready for charting.

    `table` is the table state's label from harness.experiments.plans.TABLE_STATES, and rows
    come in that order within each queue size and index setup.
    """
    from harness.experiments.plans import TABLE_STATES

    labels = {state.name: state.label for state in TABLE_STATES}
    order = {state.name: i for i, state in enumerate(TABLE_STATES)}
    chosen = points[(points["strategy"] == strategy) & (points["statement"] == statement)].copy()
    chosen["index"] = chosen["partial_index"].map(INDEX_LABELS)
    chosen["table"] = chosen["table_state"].map(labels).fillna(chosen["table_state"])
    chosen["state_order"] = chosen["table_state"].map(order)
    chosen["buffers"] = chosen["shared_hit_blocks"].astype(float) + chosen["shared_read_blocks"].astype(float)
    chosen["consumed_percent"] = 100 * chosen["consumed_fraction"].astype(float)
    return chosen.sort_values(["job_count", "partial_index", "state_order", "consumed_fraction"]).reset_index(drop=True)


def plan_point(points: pd.DataFrame, strategy: str, statement: str, job_count: int, consumed_fraction: float,
               partial_index: bool, table_state: str) -> dict:
    """One EXPLAIN point as a dict (empty if it was not measured); table_state is one of plans.TABLE_STATE_NAMES."""
    rows = points[(points["strategy"] == strategy) & (points["statement"] == statement)
                  & (points["job_count"] == job_count) & (points["partial_index"] == partial_index)
                  & (points["table_state"] == table_state)
                  & np.isclose(points["consumed_fraction"].astype(float), consumed_fraction)]
    return rows.iloc[0].to_dict() if len(rows) else {}


# --------------------------------------------------------------------------- churn (harness.experiments.churn)

MODE_ORDER = ("one connection", "race", "one bulk UPDATE")


def churn_modes(matrix: pd.DataFrame) -> pd.DataFrame:
    """The churn matrix with readable labels for the index setting and the way the queue was drained."""
    frame = matrix.copy()
    frame["index"] = frame["partial_index"].map(INDEX_LABELS)

    def label(row):
        if row["mode"] == "sequential":
            return "one connection"
        if row["mode"] == "bulk":
            return "one bulk UPDATE"
        return f"race, {int(row['worker_count'])} workers"

    frame["drained_by"] = frame.apply(label, axis=1)
    frame["hot_fraction"] = frame["hot_fraction"].astype(float)
    frame["heap_growth_pages"] = frame["heap_pages"].astype(float) - frame["heap_pages_before"].astype(float)
    return frame


def churn_point(matrix: pd.DataFrame, fillfactor: int, partial_index: bool, payload_bytes: int = 0,
                mode: str = "sequential", worker_count: int | None = None) -> dict:
    rows = matrix[(matrix["fillfactor"] == fillfactor) & (matrix["partial_index"] == partial_index)
                  & (matrix["payload_bytes"] == payload_bytes) & (matrix["mode"] == mode)]
    if worker_count is not None:
        rows = rows[rows["worker_count"] == worker_count]
    return rows.iloc[0].to_dict() if len(rows) else {}


PHASE_LABELS = {"immediate": "right after the claims", "settled": "once the statistics settled",
                "after_read": "after one full read"}


def pruning_phases(pruning: pd.DataFrame) -> pd.DataFrame:
    """The pruning experiment, one row per autovacuum arm and phase, labelled."""
    if not len(pruning):
        return pruning
    frame = pruning.copy()
    frame["phase_label"] = frame["phase"].map(PHASE_LABELS).fillna(frame["phase"])
    frame["autovacuum_label"] = frame["autovacuum"].map({True: "autovacuum on (default)",
                                                         False: "autovacuum off for the table"})
    frame["phase_order"] = frame["phase"].map({p: i for i, p in enumerate(PHASE_LABELS)})
    return frame.sort_values(["autovacuum", "phase_order"], ascending=[False, True]).reset_index(drop=True)


# --------------------------------------------------------------------------- where the backends' time went

# The sampler's classes (harness.server.activity.WAIT_CLASSES), grouped for the article, in stacking order.
WAIT_GROUPS = {
    "row or transaction lock": ("Lock:tuple", "Lock:transactionid"),
    "other lock": ("Lock:other", "LWLock"),
    "waiting for the client": ("Client",),
    "on a CPU or waiting for one": ("CPU",),
    "other (I/O, IPC, ...)": ("IO", "IPC", "Other"),
}


# From /proc/<pid>/schedstat over each worker's window: its backend's and its own process's time on a CPU
# and runnable (in the run queue, waiting for one).
SCHEDSTAT_SHARES = ("running_share", "runnable_share", "client_running_share", "client_runnable_share")
SCHEDSTAT_LABELS = {"running_share": "backend on a CPU", "runnable_share": "backend waiting for a CPU",
                    "client_running_share": "worker process on a CPU",
                    "client_runnable_share": "worker process waiting for a CPU"}


def cpu_split_long(table: pd.DataFrame) -> pd.DataFrame:
    """wait_share_table()'s schedstat shares as one row per measure, for a chart."""
    long = table.melt(id_vars=["strategy", "worker_count"], value_vars=list(SCHEDSTAT_SHARES), var_name="measure",
                      value_name="share").dropna(subset=["share"])
    long["measure"] = long["measure"].map(SCHEDSTAT_LABELS)
    return long


def wait_share_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per strategy and worker count: each group's share of sampled backend time (median over repeats), and
    the share of backend time on a CPU and runnable from /proc/<pid>/schedstat."""
    rows = []
    for _, run in summary.iterrows():
        shares = run.get("wait_share") or {}
        if not shares:
            continue
        row = {"strategy": run["strategy"], "worker_count": run["worker_count"], "repeat": run["repeat"]}
        for group, classes in WAIT_GROUPS.items():
            row[group] = sum(shares.get(c, 0.0) for c in classes)
        for column in SCHEDSTAT_SHARES:
            row[column] = run.get(column)
        rows.append(row)
    if not rows:
        return pd.DataFrame(columns=["strategy", "worker_count", *WAIT_GROUPS, *SCHEDSTAT_SHARES])
    frame = pd.DataFrame(rows)
    frame[list(SCHEDSTAT_SHARES)] = frame[list(SCHEDSTAT_SHARES)].astype(float)
    out = frame.groupby(["strategy", "worker_count"], observed=True).median(numeric_only=True).drop(columns="repeat")
    return out.reset_index()


def wait_share_long(table: pd.DataFrame) -> pd.DataFrame:
    """wait_share_table() as one row per group, for a stacked chart."""
    long = table.melt(id_vars=["strategy", "worker_count"], value_vars=list(WAIT_GROUPS), var_name="wait",
                      value_name="share")
    long["order"] = long["wait"].map({g: i for i, g in enumerate(WAIT_GROUPS)})
    return long


def latency_by_fill(summary: pd.DataFrame) -> pd.DataFrame:
    """Wins' p50 and p99 per tenth of the drain, median over repeats: one row per strategy, workers, tenth."""
    rows = []
    for _, run in summary.iterrows():
        for tenth, (p50, p99) in enumerate(zip(run["p50_ms_by_fill"], run["p99_ms_by_fill"])):
            rows.append({"strategy": run["strategy"], "worker_count": run["worker_count"],
                         "drained_to": (tenth + 1) / 10, "p50_ms": p50, "p99_ms": p99})
    frame = pd.DataFrame(rows)
    if not len(frame):
        return frame
    return frame.groupby(["strategy", "worker_count", "drained_to"], observed=True).median().reset_index()


def autovacuum_runs(summary: pd.DataFrame) -> dict:
    """How many races saw autovacuum or autoanalyze run on their table, and whether any had it turned off."""
    runs = summary.get("autovacuum_runs", pd.Series(dtype=float)).fillna(0)
    analyses = summary.get("autoanalyze_runs", pd.Series(dtype=float)).fillna(0)
    return {"races": int(len(summary)), "with_autovacuum": int((runs > 0).sum()),
            "with_autoanalyze": int((analyses > 0).sum()), "autovacuum_total": int(runs.sum()),
            "autovacuum_off": int((~summary.get("autovacuum", pd.Series(True, index=summary.index))).sum())}


def sampler_facts(paths: list[Path]) -> dict:
    """The wait-event sampler as it ran: median achieved interval and median query time over the races."""
    intervals, queries = [], []
    for path in paths:
        stats = read_json(Path(path) / "manifest.json")["results"].get("activity", {}).get("sampler", {})
        if stats.get("interval_ms_median") is not None:
            intervals.append(stats["interval_ms_median"])
            queries.append(stats.get("query_ms_median", np.nan))
    if not intervals:
        return {}
    return {"interval_ms": float(np.median(intervals)), "query_ms": float(np.nanmedian(queries)),
            "races": len(intervals)}
