"""Statistics from stored rows only: the attempts Parquet and the server's audit."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from harness import config
from harness.server.activity import (achieved_interval_ms, cpu_bound, cpu_bound_side, event_share, samples_frame,
                                     share_split, wait_shares, within_windows)
from harness.storage import Run, open_runs, stored_runs

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


def time_to_job_ns(attempts: pd.DataFrame) -> np.ndarray:
    """Per win: from the first attempt after the worker's previous win (or its start) to the end of the win.

    This is what a runner waits for a job, lost races included (C4), as opposed to
    the latency of the winning statement alone; for naive_serializable, the time a
    win costs with the aborted tries before it (C1).
    """
    waits = []
    for _, worker in attempts.sort_values(["worker_index", "attempt_seq"]).groupby("worker_index", sort=False):
        start = worker["start_ns"].to_numpy()
        end = start + worker["latency_ns"].to_numpy()
        won = (worker["outcome"] == "won").to_numpy()
        win_positions = np.flatnonzero(won)
        if not len(win_positions):
            continue
        first_after_previous = np.concatenate([[0], win_positions[:-1] + 1])
        waits.append(end[win_positions] - start[first_after_previous])
    return np.concatenate(waits) if waits else np.array([], dtype=np.int64)


def censored_waits_ns(attempts: pd.DataFrame) -> np.ndarray:
    """Per worker whose last attempt did not win: the wait it was still in when the drain ended, from its first
    attempt after its last win (or its first attempt) to the end of its last attempt. A lower bound of a wait for
    a job that never came: a worker stops at the first empty answer, not when a job would have arrived."""
    waits = []
    for _, worker in attempts.sort_values(["worker_index", "attempt_seq"]).groupby("worker_index", sort=False):
        won = (worker["outcome"] == "won").to_numpy()
        if not len(won) or won[-1]:
            continue
        start = worker["start_ns"].to_numpy()
        end = start[-1] + worker["latency_ns"].to_numpy()[-1]
        wins = np.flatnonzero(won)
        first = wins[-1] + 1 if len(wins) else 0
        waits.append(end - start[first])
    return np.array(waits, dtype=np.int64)


def censored_percentile(values, censored, percentile: float) -> tuple[float, bool]:
    """The percentile of values with the censored ones (lower bounds) counted at their bound, and whether the
    result is itself only a lower bound (some censored value lies at or above it)."""
    values, censored = np.asarray(values, dtype=float), np.asarray(censored, dtype=float)
    every = np.concatenate([values, censored])
    if not len(every):
        return float("nan"), False
    result = float(np.percentile(every, percentile))
    return result, bool(len(censored) and (censored >= result).any())


FILL_DECILES = 10


def win_latency_by_fill(attempts: pd.DataFrame, percentile: float) -> list[float]:
    """Wins' latency percentile (ms) per tenth of the drain: wins in the order they ended, split in ten.

    Without the partial index a pick walks every row claimed before it, so a
    claim costs more the further the queue has drained; a percentile over the
    whole drain mixes those positions. A tenth holds the wins that took the
    queue from k/10 to (k+1)/10 of all wins (naive's duplicate wins included).
    """
    wins = attempts.loc[attempts["outcome"] == "won"]
    if not len(wins):
        return [float("nan")] * FILL_DECILES
    ends = (wins["start_ns"] + wins["latency_ns"]).to_numpy()
    latency_ms = wins["latency_ns"].to_numpy()[np.argsort(ends, kind="stable")] / 1e6
    tenths = np.array_split(latency_ms, FILL_DECILES)
    return [float(np.percentile(part, percentile)) if len(part) else float("nan") for part in tenths]


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
    cfg, results = manifest["parameters"], manifest["results"]
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
        "strategy": cfg["strategy"],
        "worker_count": cfg["worker_count"],
        "job_count": cfg["job_count"],
        "repeat": cfg["repeat"],
        "partial_index": cfg["partial_index"],
        "fillfactor": cfg["fillfactor"],
        "pause_ms": cfg["pause_ms"],
        "jitter_ms": cfg["jitter_ms"],
        "autovacuum": cfg["autovacuum"],
        "audit": cfg["audit"],
        "batch_size": cfg.get("batch", 1),  # runs stored before batches claimed one job per attempt
        "rtt_ms": float(cfg.get("rtt_ms", 0.0)),  # runs stored before the round trip existed ran without one
        "attempts": int(len(attempts)),
        "winning_attempts": int(outcome_counts.get("won", 0)),
        "wins": wins,
        "lost": lost,
        "empty": int(outcome_counts.get("empty", 0)),
        "errors": int(outcome_counts.get("error", 0)),
        "aborts": aborts,
        **dupes,
        "unclaimed_jobs": int(cfg["job_count"] - dupes["distinct_jobs_claimed"]),
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
        "sampler": bool(cfg.get("sampler", True)),
        "cpus": cfg.get("cpus", "shared"),  # runs stored before the layout could change shared every CPU
        "sampler_interval_ms": achieved_interval_ms(samples) if cfg.get("sampler", True) else None,
        "proxy": bool((results.get("network") or {}).get("delay_proxy")),
        # PgBouncer between the workers and the server, and the advisory locks its sessions still held at the end
        "pooler": cfg.get("pooler", "none"),  # runs stored before the pooler went straight to the server
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


def summarise_runs(data_dir: Path = config.DATA_DIR, run_paths: list[Path] | None = None) -> pd.DataFrame:
    """One row per race: the given run folders, or every race stored in data_dir."""
    paths = run_paths if run_paths is not None else [path for _, path in stored_runs("race", data_dir)]
    rows = [run.summary for run in open_runs(paths)]
    frame = pd.DataFrame(rows)
    if len(frame):
        frame = frame.sort_values(["strategy", "worker_count", "repeat", "started_at"]).reset_index(drop=True)
    return frame


POINT_KEYS = ("strategy", "worker_count", "batch_size", "job_count", "partial_index", "fillfactor", "pause_ms",
              "jitter_ms", "autovacuum", "audit", "rtt_ms", "proxy", "cpus", "client_layout", "pooler", "pg_version")
SPREAD_FIGURES = ("claims_per_second", "losses_per_win", "duplicate_jobs", "p50_ms", "p99_ms", "wall_seconds")


def spread_by_point(frame: pd.DataFrame, figures=SPREAD_FIGURES) -> pd.DataFrame:
    """Per point (everything but the repeat): how many repeats, and each figure's median, min and max."""
    if not len(frame):
        return frame
    keys = [k for k in POINT_KEYS if k in frame]
    grouped = frame.groupby(keys, sort=False, dropna=False)
    spread = grouped.size().rename("repeats").to_frame()
    for figure in figures:
        if figure in frame:
            spread[f"{figure}_median"] = grouped[figure].median()
            spread[f"{figure}_min"] = grouped[figure].min()
            spread[f"{figure}_max"] = grouped[figure].max()
    return spread.reset_index()


def jsonable(value):
    """Plain JSON values: NaN becomes null, numpy scalars become numbers, at any depth."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95 % by default) of a proportion; (nan, nan) without trials."""
    if trials <= 0:
        return math.nan, math.nan
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def round_bootstrap_interval(rounds_by_run: list[list[list[int]]], resamples: int = 2000, seed: int = 0,
                             level: float = 0.95) -> tuple[float, float]:
    """The percentile bootstrap interval of a pooled share (sum of hits / sum of trials) whose trials come in
    rounds that move together ([trials, hits] per round): whole rounds are resampled, within each run, so
    trials of one round are never treated as independent. (nan, nan) without trials; fixed seed, so a
    build's figures repeat."""
    runs = [np.asarray(rounds, dtype=float).reshape(-1, 2) for rounds in rounds_by_run if len(rounds)]
    if not runs or sum(run[:, 0].sum() for run in runs) <= 0:
        return math.nan, math.nan
    generator = np.random.default_rng(seed)
    trials = np.zeros(resamples)
    hits = np.zeros(resamples)
    for run in runs:
        picks = generator.integers(0, len(run), size=(resamples, len(run)))
        trials += run[picks, 0].sum(axis=1)
        hits += run[picks, 1].sum(axis=1)
    shares = np.divide(hits, trials, out=np.zeros(resamples), where=trials > 0)
    tail = (1 - level) / 2
    return float(np.quantile(shares, tail)), float(np.quantile(shares, 1 - tail))


def polls_met_interval(met: int, listing: int, rounds_by_run: list) -> tuple[float, float]:
    """The 95 % interval of the share of listing polls that met a 409: the wider of the Wilson interval (polls
    as independent trials, sound for small counts and for none met) and round_bootstrap_interval over whole
    poll rounds (runners polling together see the same runs and race for them)."""
    wilson = wilson_interval(met, listing)
    rounds = round_bootstrap_interval(rounds_by_run)
    if math.isnan(rounds[0]) or math.isnan(wilson[0]):
        return wilson
    return min(wilson[0], rounds[0]), max(wilson[1], rounds[1])


def percentile_ratio_interval(numerator, denominator, percentile: float = 99, resamples: int = 2000, seed: int = 0,
                              level: float = 0.95) -> tuple[float, float]:
    """The percentile bootstrap interval of percentile(numerator) / percentile(denominator), each sample resampled
    on its own: how far apart two points' tails are, given how few values each tail rests on. Values counted at
    a bound (censored) go in at that bound. (nan, nan) when either side is empty or the denominator's is zero."""
    top, bottom = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    if not len(top) or not len(bottom):
        return math.nan, math.nan
    generator = np.random.default_rng(seed)
    tops = np.percentile(top[generator.integers(0, len(top), size=(resamples, len(top)))], percentile, axis=1)
    bottoms = np.percentile(bottom[generator.integers(0, len(bottom), size=(resamples, len(bottom)))], percentile,
                            axis=1)
    if (bottoms <= 0).any():
        return math.nan, math.nan
    ratios = tops / bottoms
    tail = (1 - level) / 2
    return float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1 - tail))
