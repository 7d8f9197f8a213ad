"""One timed run of the bench on a fresh queue: the bench's table with the partial index, then the race's
workers or pgbench on it for a window, and what the server recorded and the client used (a Measurement).
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass

import numpy as np

from harness import config
from harness.experiments.bench.pgbench import QueueDrained, run_pgbench
from harness.experiments.race.workers import run_race
from harness.server import database, schema
from harness.server import activity
from harness.server.activity import ActivitySampler, server_cpu_ns
from harness.storage import utc_now
from harness.claims.strategies import get_strategy
from harness.claims.steps import EMPTY, ERROR, LOST, WON

# The threads each pgbench client of bench.CLIENTS drives its connections with (why each: beside CLIENTS)
REFERENCE_THREADS = {"pgbench": lambda worker_count: worker_count, "pgbench_j2": lambda worker_count: min(2, worker_count),
                     "pgbench_j1": lambda worker_count: 1}
PARTIAL_INDEX = "jobs_pending_idx"


@dataclass
class Measurement:
    """One client's timed run: what the server recorded and what the client used."""

    client: str
    strategy: str
    worker_count: int
    pair_index: int
    position: int  # 0: ran first in its pair, 1: second
    job_count: int
    audit: bool  # the audit trigger was on (without it, wins are what the claims returned)
    wins: int  # flips to 'running' in the server's audit (naive's duplicate flips count, as in the race)
    attempts: int
    empty_attempts: int  # answers of "no job" (skip_locked: every attempt that did not win)
    lost_attempts: int  # guarded: picks whose UPDATE found the job taken (attempts - wins - empty)
    lost_per_win: float
    attempt_p50_us: float  # every attempt's latency (pgbench: its per-transaction log), at a fixed queue fill
    attempt_p99_us: float
    win_p50_us: float  # winning attempts only (harness; pgbench logs no outcome: nan)
    win_p99_us: float
    seconds: float
    claims_per_second: float
    attempts_per_second: float
    cpu_seconds: float  # client CPU (user + system) in the window, all workers or the pgbench process
    cpu_us_per_attempt: float
    max_rss_bytes: int  # the largest client process's peak resident set (shared pages included)
    private_bytes_per_worker: float  # the client processes' unshared memory (USS) at the end, per connection
    gap_p50_ns: float  # harness: time from one attempt's end to the next one's start; pgbench: nan
    gap_p99_ns: float
    server_cpu_seconds: float  # the server's processes' CPU over the run (backends reaped after it), nan if remote
    server_cpu_us_per_win: float
    threads: int  # processes (harness) or threads (pgbench) driving the connections
    pending_after: int
    plan_index: str  # the index the first statement's plan read on this run's queue
    started_at: str
    load_average: float
    # the harness's worker processes and their backends over their windows (harness.server.activity.share_split):
    # what the CPU-bound rule reads (activity.cpu_bound); None for pgbench, and where the server is not on this host
    client_runnable_share: float | None = None
    client_running_share: float | None = None
    backend_runnable_share: float | None = None


def server_counts(conn, client: str, strategy: str, worker_count: int, seconds: int) -> tuple[int, int]:
    """Wins from the audit, and the pending jobs left: fewer than one per worker means the queue ran out."""
    wins = conn.execute(f"SELECT count(*) FROM {config.SCHEMA}.claims").fetchone()[0]
    return int(wins), _pending_or_drained(conn, client, strategy, worker_count, seconds, wins)


def _pending_or_drained(conn, client: str, strategy: str, worker_count: int, seconds: int, wins=None) -> int:
    pending = conn.execute(f"SELECT count(*) FROM {config.SCHEMA}.jobs WHERE status = 'pending'").fetchone()[0]
    if pending < worker_count:
        jobs = conn.execute(f"SELECT count(*) FROM {config.SCHEMA}.jobs").fetchone()[0]
        raise QueueDrained(f"{client} left {pending} of {jobs} jobs pending after {seconds} s ({strategy}, "
                           f"{worker_count} workers{'' if wins is None else f', {wins} wins'})")
    return int(pending)


def wait_for_clients_to_leave(conn, application_prefix: str, timeout_seconds: float = 15.0) -> None:
    """Until no backend of a client that starts with application_prefix is left (its CPU is then reaped)."""
    deadline = time.monotonic() + timeout_seconds
    while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE starts_with(application_name, %s)",
                       [application_prefix]).fetchone()[0]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"backends of {application_prefix} still running {timeout_seconds:.0f} s after the run")
        time.sleep(0.01)


def _server_cpu(conn, before: int | None, application_prefix: str) -> float:
    """Seconds of server CPU since `before`, once the client's backends have left; nan if not measurable."""
    wait_for_clients_to_leave(conn, application_prefix)
    after = server_cpu_ns(conn)
    return (after - before) / 1e9 if before is not None and after is not None else math.nan


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def create_bench_queue(conn, pending_jobs: int, strategy: str = "skip_locked", audit: bool = True) -> str:
    """The race's table with the partial index: pending_jobs pending, after a history of finished ones.

    The finished rows (ids up to 0, status 'done', a quarter as many as the
    pending ones) make the planner's statistics see a working queue, so the
    pick reads the partial index on every run: on a table of pending rows only,
    the primary key and the partial index cost the same and the choice flips
    with the table's size (147,723 pending rows: primary key; 200,000: partial
    index), and a run on the primary key walks everything claimed before it.
    Returns the indexes the strategy's first statement reads; if that is not
    the partial index, the history grows until it is.
    """
    # autovacuum off on this table: a 5 s window updates enough rows to start it at a random moment in one run
    # and not in the other, which would be noise in a ratio of two runs
    schema.create_queue(conn, pending_jobs, partial_index=True, audit=audit, autovacuum=False)
    history = 0
    for _ in range(4):
        added = max(1, pending_jobs // 4) if history == 0 else history
        conn.execute(f"INSERT INTO {config.SCHEMA}.jobs (id, status) SELECT -g, 'done' "
                     "FROM generate_series(%s::bigint, %s::bigint) g", [history, history + added - 1])
        history += added
        conn.execute(f"ANALYZE {config.SCHEMA}.jobs")  # the pending rows were vacuumed by create_queue
        plan_index = claim_plan_index(conn, strategy)
        if plan_index.startswith(PARTIAL_INDEX):
            return plan_index
    raise RuntimeError(f"the planner will not read {PARTIAL_INDEX} for {strategy} ({plan_index})")


def claim_plan_index(conn, strategy: str) -> str:
    """The indexes the strategy's first statement reads, in plan order (the pick; skip_locked's whole UPDATE)."""
    text = get_strategy(strategy).statements[0][1]
    found = []
    for (line,) in conn.execute(f"EXPLAIN {text}").fetchall():
        match = re.search(r"[Ii]ndex (?:Only )?Scan using (\w+)", line)
        if match and match.group(1) not in found:
            found.append(match.group(1))
    return "+".join(found) or "none"


def _harness_gaps(result) -> np.ndarray:
    """Per attempt, the client's time between receiving a result and starting the next attempt."""
    parts = [w.start_ns[1:] - (w.start_ns[:-1] + w.latency_ns[:-1]) for w in result.workers if len(w.start_ns) > 1]
    return np.concatenate(parts) if parts else np.array([], dtype=np.int64)


def _percentile(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else math.nan


def measure_harness(db: database.Database, conn, strategy: str, worker_count: int, seconds: int, job_count: int,
                    pair_index: int = 0, position: int = 0, audit: bool = True) -> Measurement:
    """The race workers on a fresh queue for `seconds` seconds."""
    started_at = utc_now()
    plan_index = create_bench_queue(conn, job_count, strategy, audit=audit)
    server_before = server_cpu_ns(conn)
    # the sampler on, as in the races the article publishes
    sampler = ActivitySampler(db.url)
    try:
        result = run_race(db.url, strategy, worker_count, duration_seconds=seconds, timeout_seconds=seconds + 120,
                          on_release=sampler.start)
    finally:
        sampler.stop()
    server_seconds = _server_cpu(conn, server_before, "claimrace-worker-")
    outcomes = np.concatenate([w.outcome for w in result.workers])
    latency_us = np.concatenate([w.latency_ns for w in result.workers]) / 1e3
    if (outcomes == ERROR).any():
        raise RuntimeError(f"{int((outcomes == ERROR).sum())} harness attempts failed ({strategy}, {worker_count})")
    reported = int((outcomes == WON).sum())
    if audit:
        wins, pending = server_counts(conn, "the harness", strategy, worker_count, seconds)
        if reported != wins:
            raise RuntimeError(f"the harness counted {reported} wins but the audit holds {wins} ({strategy})")
    else:  # no audit to count from: the wins are what the claims returned
        wins, pending = reported, _pending_or_drained(conn, "the harness", strategy, worker_count, seconds)
    gaps = _harness_gaps(result)
    attempts = int(len(outcomes))
    cpu_ns = sum(w.cpu_ns for w in result.workers)
    shares = cpu_shares(result, activity.server_is_local(conn))
    return Measurement(
        client="harness" if audit else "harness_no_audit", strategy=strategy, worker_count=worker_count, pair_index=pair_index, position=position,
        job_count=job_count, wins=wins, attempts=attempts, empty_attempts=int((outcomes == EMPTY).sum()),
        lost_attempts=int((outcomes == LOST).sum()), lost_per_win=float((outcomes == LOST).sum()) / max(wins, 1),
        attempt_p50_us=_percentile(latency_us, 50), attempt_p99_us=_percentile(latency_us, 99),
        win_p50_us=_percentile(latency_us[outcomes == WON], 50), win_p99_us=_percentile(latency_us[outcomes == WON], 99),
        audit=audit, seconds=result.wall_seconds,
        claims_per_second=wins / result.wall_seconds, attempts_per_second=attempts / result.wall_seconds,
        cpu_seconds=cpu_ns / 1e9, cpu_us_per_attempt=cpu_ns / 1e3 / max(attempts, 1),
        max_rss_bytes=max(w.max_rss_bytes for w in result.workers),
        private_bytes_per_worker=sum(w.private_bytes for w in result.workers) / worker_count,
        gap_p50_ns=float(np.percentile(gaps, 50)) if len(gaps) else math.nan,
        gap_p99_ns=float(np.percentile(gaps, 99)) if len(gaps) else math.nan,
        server_cpu_seconds=server_seconds, server_cpu_us_per_win=server_seconds * 1e6 / max(wins, 1),
        threads=result.process_count, pending_after=pending, plan_index=plan_index, started_at=started_at,
        load_average=_load(), **shares,
    )


def cpu_shares(result, local: bool) -> dict:
    """The shares of their windows the harness's worker processes and (on a server on this host) their backends
    waited for a CPU or ran on one, as the race stores them per worker (race_trials.workers_table)."""
    def window(w):
        return w.ended_ns - w.released_ns

    client = activity.share_split(None if w.client_run_delay_ns is None else (w.cpu_ns, w.client_run_delay_ns, 0,
                                                                               window(w)) for w in result.workers)
    backend = activity.share_split(
        None if not local or (delta := activity.schedstat_delta(w.backend_schedstat_start, w.backend_schedstat_end))
        is None else (*delta, window(w)) for w in result.workers)
    return {"client_runnable_share": client["runnable_share"], "client_running_share": client["running_share"],
            "backend_runnable_share": backend["runnable_share"]}


def measure_pgbench(db: database.Database, conn, strategy: str, worker_count: int, seconds: int, job_count: int,
                    pair_index: int = 0, position: int = 0, pg_version: int = 16,
                    client: str = "pgbench") -> Measurement:
    """pgbench on the same statements, on a fresh queue of the same size (threads by `client`)."""
    threads = REFERENCE_THREADS[client](worker_count)
    started_at = utc_now()
    plan_index = create_bench_queue(conn, job_count, strategy)
    server_before = server_cpu_ns(conn)
    sampler = ActivitySampler(db.url, prefix="pgbench")  # the same sampling load on the server as in a race
    sampler.start()
    try:
        run = run_pgbench(db.url, get_strategy(strategy), worker_count, seconds, pg_version, threads)
    finally:
        sampler.stop()
    server_seconds = _server_cpu(conn, server_before, "pgbench")
    if run.failed:
        raise RuntimeError(f"pgbench reported {run.failed} failed transactions ({strategy}, {worker_count})")
    wins, pending = server_counts(conn, client, strategy, worker_count, seconds)
    # one statement: an attempt either wins or finds nothing; two: an empty pick aborts the client (drained),
    # so every attempt that did not win lost its race (naive cannot lose: its UPDATE always finds the row)
    one_statement = len(get_strategy(strategy).statements) == 1
    empty = run.transactions - wins if one_statement else 0
    lost = 0 if one_statement else max(0, run.transactions - wins)
    return Measurement(
        client=client, strategy=strategy, worker_count=worker_count, pair_index=pair_index, position=position,
        job_count=job_count, wins=wins, attempts=run.transactions, empty_attempts=empty, lost_attempts=lost,
        lost_per_win=lost / max(wins, 1), audit=True,
        attempt_p50_us=_percentile(run.latency_us, 50), attempt_p99_us=_percentile(run.latency_us, 99),
        win_p50_us=math.nan, win_p99_us=math.nan,
        seconds=run.seconds,
        claims_per_second=wins / run.seconds, attempts_per_second=run.transactions / run.seconds,
        cpu_seconds=run.cpu_ns / 1e9, cpu_us_per_attempt=run.cpu_ns / 1e3 / max(run.transactions, 1),
        max_rss_bytes=run.max_rss_bytes, private_bytes_per_worker=run.private_bytes / worker_count,
        gap_p50_ns=math.nan, gap_p99_ns=math.nan,
        server_cpu_seconds=server_seconds, server_cpu_us_per_win=server_seconds * 1e6 / max(wins, 1),
        threads=run.threads, pending_after=pending, plan_index=plan_index, started_at=started_at,
        load_average=_load(),
    )
