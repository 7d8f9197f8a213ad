"""One race's figures, computed from its stored rows and audit: the race kind's summary (storage.Run.summary)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.server.activity import (achieved_interval_ms, cpu_bound, cpu_bound_side, event_share, samples_frame,
                                     share_split, wait_shares, within_windows)
from harness.stats import censored_percentile, censored_waits_ns, time_to_job_ns, win_latency_by_fill
from harness.storage import Run

CLIENT_LAYOUTS = ("processes", "asyncio")


def duplicate_counts(claims: pd.DataFrame) -> dict:
    """Jobs the server flipped to 'running' more than once, from the audit."""
    per_job = claims.groupby("job_id").size()
    return {
        "audit_claims": int(len(claims)),
        "distinct_jobs_claimed": int(len(per_job)),
        "duplicate_jobs": int((per_job > 1).sum()),
        "extra_claims": int(len(claims) - len(per_job)),
        "max_claims_per_job": int(per_job.max()) if len(per_job) else 0,
    }


def claimed_rows(attempts: pd.DataFrame) -> np.ndarray:
    """Per attempt, the jobs it claimed; runs stored before the `rows` column claimed one job per win."""
    if "rows" in attempts:
        return attempts["rows"].fillna(0).to_numpy(dtype=np.int64)
    return (attempts["outcome"] == "won").to_numpy(dtype=np.int64)


def stray_lock_counts(attempts: pd.DataFrame) -> np.ndarray:
    """Per attempt of an advisory-lock race, the locks it left on jobs it did not return (empty otherwise)."""
    if "stray_locks" not in attempts:
        return np.array([], dtype=np.int64)
    return attempts["stray_locks"].dropna().to_numpy(dtype=np.int64)


def window_samples(run: Run) -> pd.DataFrame:
    """The stored wait-event samples taken inside their worker's window (runs stored before the sampler kept only
    those also hold samples from before a worker's release and after its last attempt)."""
    if not run.has_table("activity"):
        return samples_frame()
    samples = run.table("activity")
    if not run.has_table("workers"):
        return samples
    workers = run.table("workers")
    windows = {int(pid): (int(start), int(end))
               for pid, start, end in zip(workers["backend_pid"], workers["released_ns"], workers["ended_ns"])}
    return within_windows(samples, windows)


def cpu_shares(run: Run) -> dict:
    """From workers.parquet: the share of each worker's window its backend spent on a CPU and runnable, and the
    same for the worker's own process (None where not measured, e.g. a server on another host)."""
    if not run.has_table("workers"):
        return {}
    workers = run.table("workers")
    window = (workers["ended_ns"] - workers["released_ns"]).tolist()

    def split(cpu, delay):
        return share_split(None if pd.isna(c) or pd.isna(d) else (int(c), int(d), 0, w)
                           for c, d, w in zip(workers[cpu], workers[delay], window))

    backend, client = split("backend_cpu_ns", "backend_run_delay_ns"), split("client_cpu_ns", "client_run_delay_ns")
    # running_share and runnable_share are the backend's, under the names runs have always been summarised with
    return {"running_share": backend["running_share"], "runnable_share": backend["runnable_share"],
            "backend_running_share": backend["running_share"], "backend_runnable_share": backend["runnable_share"],
            "client_running_share": client["running_share"], "client_runnable_share": client["runnable_share"]}


def _layout(results: dict) -> str:
    """The client layout's name; runs stored before it had a name ran one process per worker."""
    layout = results.get("client_layout")
    return layout if layout in CLIENT_LAYOUTS else "processes"


def summarise_run(run: Run) -> dict:
    """One race's figures, all computed from its stored rows and audit (the race kind's summary: Run.summary)."""
    manifest = run.manifest
    asked, results = run.parameters, run.results
    attempts = run.table("attempts")
    claims = run.table("claims")
    outcome_counts = attempts["outcome"].value_counts()
    rows = claimed_rows(attempts)
    wins = int(rows.sum())  # jobs claimed: a batch attempt can win several
    lost = int(outcome_counts.get("lost", 0))
    aborts = int(outcome_counts.get("aborted", 0))
    stray = stray_lock_counts(attempts)
    waits_ms = time_to_job_ns(attempts) / 1e6
    cut_off_ms = censored_waits_ns(attempts) / 1e6
    wait_p99, wait_p99_lower_bound = censored_percentile(waits_ms, cut_off_ms, 99)
    ends = attempts["start_ns"] + attempts["latency_ns"]
    wall_seconds = float(ends.max()) / 1e9 if len(attempts) else 0.0
    win_latency_ms = attempts.loc[attempts["outcome"] == "won", "latency_ns"].to_numpy() / 1e6
    # the attempts that were wasted: a lost race or an aborted transaction, each followed by another attempt
    wasted_ms = attempts.loc[attempts["outcome"].isin(["lost", "aborted"]), "latency_ns"].to_numpy() / 1e6
    dupes = duplicate_counts(claims)
    server = manifest.get("server", {})
    samples = window_samples(run)
    shares = wait_shares(samples)
    cpu = cpu_shares(run)
    summary = {
        "run_id": manifest["run_id"],
        "strategy": asked.strategy,
        "worker_count": asked.worker_count,
        "job_count": asked.job_count,
        "repeat": asked.repeat,
        "partial_index": asked.partial_index,
        "fillfactor": asked.fillfactor,
        "pause_ms": asked.pause_ms,
        "jitter_ms": asked.jitter_ms,
        "autovacuum": asked.autovacuum,
        "audit": asked.audit,
        "batch_size": asked.batch,
        "rtt_ms": float(asked.rtt_ms),
        "attempts": int(len(attempts)),
        "winning_attempts": int(outcome_counts.get("won", 0)),
        "wins": wins,
        "lost": lost,
        "empty": int(outcome_counts.get("empty", 0)),
        "errors": int(outcome_counts.get("error", 0)),
        "aborts": aborts,
        **dupes,
        "unclaimed_jobs": int(asked.job_count - dupes["distinct_jobs_claimed"]),
        "losses_per_win": lost / wins if wins else float("nan"),
        "aborts_per_win": aborts / wins if wins else float("nan"),
        "max_rows_per_attempt": int(rows.max()) if len(rows) else 0,
        # advisory_lock only (null otherwise): locks the picks took on jobs they did not return
        "advisory_locks_leaked": int(stray.sum()) if len(stray) else None,
        "attempts_leaking_locks": int((stray > 0).sum()) if len(stray) else None,
        "early_empty_answers": manifest["checks"].get("early_empty_answers"),
        "wall_seconds": wall_seconds,
        "claims_per_second": wins / wall_seconds if wall_seconds else float("nan"),
        "unique_jobs_per_second": dupes["distinct_jobs_claimed"] / wall_seconds if wall_seconds else float("nan"),
        "attempts_per_second": len(attempts) / wall_seconds if wall_seconds else float("nan"),
        "p50_ms": float(np.percentile(win_latency_ms, 50)) if len(win_latency_ms) else float("nan"),
        "p99_ms": float(np.percentile(win_latency_ms, 99)) if len(win_latency_ms) else float("nan"),
        # what one wasted attempt took (median), and the time wasted attempts took per job claimed
        "wasted_attempt_p50_ms": float(np.median(wasted_ms)) if len(wasted_ms) else float("nan"),
        "wasted_ms_per_win": float(wasted_ms.sum()) / wins if wins else float("nan"),
        # a win's cost with the lost or aborted attempts before it (per winning attempt)
        "time_to_job_p50_ms": float(np.percentile(waits_ms, 50)) if len(waits_ms) else float("nan"),
        # the waits the drain's end cut off count at their bound: the p99 is then at least this
        "time_to_job_p99_ms": wait_p99,
        "time_to_job_censored": int(len(cut_off_ms)),
        "time_to_job_p99_is_lower_bound": wait_p99_lower_bound,
        "p50_ms_by_fill": win_latency_by_fill(attempts, 50),
        "p99_ms_by_fill": win_latency_by_fill(attempts, 99),
        "wait_share": shares,
        # the lightweight lock on one shared page's contents, which the "other lock" group mostly is under SKIP LOCKED
        "buffer_content_share": event_share(samples, "LWLock", "BufferContent"),
        **cpu,
        # the backends' sampled time waiting for their client, and whether the clients' wait for a CPU set the pace
        "waiting_for_client_share": shares.get("Client") if shares else None,
        "cpu_bound": cpu_bound(cpu.get("client_runnable_share"), cpu.get("client_running_share"),
                               cpu.get("backend_runnable_share")),
        "cpu_bound_side": cpu_bound_side(cpu.get("client_runnable_share"), cpu.get("client_running_share"),
                                         cpu.get("backend_runnable_share")),
        "sampler": asked.sampler,
        "cpus": asked.cpus,
        "sampler_interval_ms": achieved_interval_ms(samples) if asked.sampler else None,
        "proxy": bool((results.get("network") or {}).get("delay_proxy")),
        # PgBouncer between the workers and the server, and the advisory locks its sessions still held at the end
        "pooler": asked.pooler,
        "advisory_locks_at_end": (results.get("pooler") or {}).get("advisory_locks_held_at_end"),
        "client_processes": results["client_processes"],
        "client_layout": _layout(results),
        "autovacuum_runs": results["table_activity"].get("autovacuum_runs"),
        "autoanalyze_runs": results["table_activity"].get("autoanalyze_runs"),
        "dead_tuples_at_end": results["table_activity"].get("dead_tuples"),
        "pg_version": server.get("server_version"),
        "db_source": server.get("source"),
        "checks_passed": manifest["checks"]["passed"],
        "started_at": manifest["started_at"],
    }
    return summary
