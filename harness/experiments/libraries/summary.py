"""A libraries run's summary (harness.experiments.libraries.drain): its figures per job as it was stored, the
CPU-bound mark from today's rule, and what `python -m harness libraries` prints of it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from harness import libraries
from harness.server import activity
from harness.storage import Run


def summarise(p: LibraryParameters, audit: pd.DataFrame, executions: pd.DataFrame, timings: pd.DataFrame,
              released_ns: int, ended_ns: int, wal_bytes: int, before: dict, after: dict, statements: int | None,
              server_cpu_ms: float | None, advisory_locks: int, stopped: int, backend_shares: dict) -> dict:
    """One run's figures, per job where the name says so."""
    claims = audit[audit["event"] == "claimed"]
    per_job = claims.groupby("job_id").size()
    executed = executions.groupby("job_id").size()
    first_claim = claims.groupby("job_id")["at_ns"].min()
    pickups_ms = (first_claim - released_ns).clip(lower=0) / 1e6
    last_end = int(timings["ended_ns"].max()) if len(timings) and not stopped else ended_ns
    # the drain: from the release to the last job's execution; the workers' own shutdown after it is apart
    last_execution = int(executions["at_ns"].max()) if len(executions) else ended_ns
    window_s = max(1e-9, (last_execution - released_ns) / 1e9)
    jobs = p.job_count
    done = int(len(executed))
    windows = (timings["ended_ns"] - timings["released_ns"]).astype(float) if len(timings) else pd.Series(dtype=float)
    runnable = (float(timings["run_delay_ns"].sum() / windows.sum())
                if len(timings) and timings["run_delay_ns"].notna().all() and windows.sum() > 0 else None)
    running = (float(timings["cpu_ns"].sum() / windows.sum())
               if len(timings) and timings["cpu_ns"].notna().all() and windows.sum() > 0 else None)

    def per(value):
        return None if value is None else value / jobs

    return {
        "library": p.library, "version": libraries.version(p.library), "level": "own_worker",
        "worker_count": p.worker_count, "repeat": p.repeat, "jobs": jobs,
        "executed": done, "executed_twice": int((executed > 1).sum()), "not_executed": jobs - done,
        "duplicate_claims": int((per_job > 1).sum()), "claims": int(len(claims)),
        "jobs_per_s": done / window_s, "drain_s": window_s, "shutdown_s": max(0.0, (last_end - last_execution) / 1e9),
        "pickup_p50_ms": float(np.percentile(pickups_ms, 50)) if len(pickups_ms) else None,
        "pickup_p99_ms": float(np.percentile(pickups_ms, 99)) if len(pickups_ms) else None,
        "statements_per_job": per(statements),
        "transactions_per_job": per(after["transactions"] - before["transactions"]),
        "wal_bytes_per_job": per(wal_bytes),
        "updates_per_job": per(after["updates"] - before["updates"]),
        "hot_share": ((after["hot_updates"] - before["hot_updates"]) / (after["updates"] - before["updates"])
                      if after["updates"] > before["updates"] else None),
        "dead_tuples_per_job": per(after["dead_tuples"] - before["dead_tuples"]),
        "server_cpu_ms_per_job": per(server_cpu_ms),
        "client_runnable_share": runnable, "client_running_share": running,
        "backend_runnable_share": backend_shares.get("runnable_share"),
        "backend_running_share": backend_shares.get("running_share"),
        "cpu_bound": activity.cpu_bound(runnable, running, backend_shares.get("runnable_share")),
        "advisory_locks_left": advisory_locks, "workers_stopped_at_bound": stopped,
    }


SHOWN = ("library", "version", "level", "pooler", "pooler_setting",
         "worker_count", "jobs", "executed", "executed_twice",
         "duplicate_claims",
         "jobs_per_s", "pickup_p50_ms", "pickup_p99_ms", "statements_per_job", "transactions_per_job",
         "wal_bytes_per_job", "hot_share", "dead_tuples_per_job", "server_cpu_ms_per_job", "cpu_bound",
         "advisory_locks_left", "not_executed", "workers_with_errors")


def stored_summary(run: Run) -> dict:
    """A libraries or wake-ups run's figures: what the run summarised from its rows when it was stored, with the
    CPU-bound mark from today's rule (a run stored before the backends were watched is judged on its workers)."""
    summary = run.results["summary"]
    if "client_runnable_share" not in summary:  # a wake-ups run
        return summary
    shares = (summary.get("client_runnable_share"), summary.get("client_running_share"),
              summary.get("backend_runnable_share"))
    return summary | {"cpu_bound": activity.cpu_bound(*shares), "cpu_bound_side": activity.cpu_bound_side(*shares)}


def show_runs(paths, as_json: bool) -> None:
    """What `python -m harness libraries` prints: one line (or JSON object) per run."""
    for path in paths:
        summary = Run(path).summary
        if as_json:
            # a run stored before the pooler was one ran directly, and one stored before its setting, with defaults
            print(json.dumps({key: summary.get(key, {"pooler": "none", "pooler_setting": "default"}.get(key))
                              for key in SHOWN}))
            continue
        through = "" if summary.get("pooler", "none") == "none" else f" via {summary['pooler']}"
        if summary.get("pooler_setting") == "documented":
            through += " (documented setting)"
        print(f"{summary['library'] + through:<14} {summary['version']:<8} {summary['worker_count']:>3} workers  "
              f"{summary['executed']:>6}/{summary['jobs']} executed  {summary['executed_twice']} twice  "
              f"{summary['duplicate_claims']} claimed twice  {summary['jobs_per_s']:8.1f} jobs/s  "
              f"pickup p99 {summary['pickup_p99_ms'] or float('nan'):8.1f} ms  "
              f"{summary['wal_bytes_per_job']:7.0f} WAL B/job"
              + ("  CPU-bound" if summary["cpu_bound"] else ""))
