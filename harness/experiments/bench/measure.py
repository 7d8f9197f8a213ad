"""Is the harness measuring PostgreSQL or itself? The race workers against pgbench, on the same SQL.

For each strategy and worker count, on one server, the harness (`run_race` in
a timed window) and pgbench (a script made from the same statements, run with
prepared statements and one connection per client) take turns: a pair is one
run of each, back to back, and the order inside a pair alternates. The ratio
harness / pgbench of claims per second is computed per pair; the summary is
its median and spread over the pairs.

The queue: every run gets a fresh `claimrace.jobs` with the audit trigger, as
in the race, plus the partial index on pending rows, and more pending jobs
than either client can claim inside the window (a drained queue fails the
run). Why not the race's default table without the partial index: there,
every claim walks the consumed prefix, so a claim costs more the further a
client has got, and a slower client would be rewarded with cheaper claims
within a timed window; the walk would also bury the client's cost under the
server's. With the partial index the cost of a claim stays flat, so both
clients buy the same claims, and it is the harsher test of the client: the
server's work per claim is the smallest this study ever asks for. The table
also holds a history of finished jobs (see `bench_runs.create_bench_queue`),
so the planner reads the partial index on every run.

data/bench/<run_id>/pairs.parquet        one row per measurement (client, strategy, worker count, pair)
data/bench/<run_id>/client_cost.parquet  the harness's own time per attempt outside libpq, per strategy
data/bench/<run_id>/manifest.json        parameters, scripts, server and client facts

BenchParameters says what to time; measure_bench runs it through harness.experiments.registry.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
from tqdm.auto import tqdm

from harness.errors import UserError
from harness.experiments.bench.runs import (PARTIAL_INDEX, Measurement, create_bench_queue, measure_harness,
                                            measure_pgbench, server_counts)
from harness.experiments.contract import Kind
from harness.experiments.contract import (Measured, Option, Parameters, as_bool, as_int, as_ints, as_strategies,
                                          int_list, setting)
from harness.experiments.limits import check_race_size
from harness.experiments.bench.pgbench import QueueDrained, check_scriptable, pgbench_script, pgbench_version
from harness.experiments.race.workers import CLIENT_LAYOUT_TEXT, run_race
from harness.server import activity, database
from harness.storage import Run
from harness.claims.strategies import ORIGINAL_STRATEGIES, STRATEGIES, get_strategy, parse_strategies

BENCH_WORKER_COUNTS = (1, 8, 32, 64, 100)
DEFAULT_PAIRS = 5  # make bench: at least 5 pairs of at least 10 s
DEFAULT_SECONDS = 10
# pgbench with one thread per client is the reference (the harness runs one process per worker);
# pgbench with two threads in all shows what the client's own layout does to the same race
CLIENTS = ("harness", "pgbench", "pgbench_j2", "pgbench_j1")
REFERENCES = ("pgbench", "pgbench_j2", "pgbench_j1")  # the envelope a harness figure must lie in
# The gates a point passes (see point_verdicts): the server's CPU per audited win within this share of pgbench's, or
# twice pgbench's own pair-to-pair coefficient of variation where that is larger; and, where both clients keep the
# CPUs busy, the claims/s ratio within this share of what their CPU per claim predicts.
SERVER_CPU_TOLERANCE = 0.10
PREDICTED_RATIO_TOLERANCE = 0.10
SATURATED_CPU_SHARE = 0.9  # client + server CPU over the window, per CPU of the machine: both saturate above it
TARGET_BAND = (0.85, 1.15)
# Queue sizing: a setting's first pair assumes jobs go at least this fast (or as fast as anything
# seen so far); later pairs size the queue from what that setting consumed, with headroom.
FIRST_GUESS_JOBS_PER_SECOND = 30_000
QUEUE_HEADROOM = 1.5
MIN_QUEUE_JOBS = 5_000
CLIENT_COST_SECONDS = 0.3  # the instrumented one-worker run per strategy (thousands of attempts)
SETUP = ("a fresh claimrace.jobs per run: the race's table (audit trigger on, fillfactor 100, autovacuum off) plus "
         "the partial "
         "index on pending rows, after a history of finished jobs (ids <= 0, a quarter as many as pending) so "
         "the pick reads the partial index on every run; more pending jobs than either client can claim in "
         "the window; the two runs of a pair back to back, their order alternating")

PAIR_COLUMNS = ("client", "strategy", "worker_count", "pair_index", "position", "job_count", "audit", "wins",
                "attempts", "empty_attempts", "lost_attempts", "lost_per_win", "attempt_p50_us", "attempt_p99_us",
                "win_p50_us", "win_p99_us", "seconds", "claims_per_second", "attempts_per_second", "cpu_seconds",
                "cpu_us_per_attempt", "max_rss_bytes", "private_bytes_per_worker", "gap_p50_ns", "gap_p99_ns",
                "server_cpu_seconds", "server_cpu_us_per_win", "threads", "pending_after", "plan_index", "started_at", "load_average",
                "client_runnable_share", "client_running_share", "backend_runnable_share")


def measure_client_cost(db: database.Database, conn, strategy: str, seconds: float = CLIENT_COST_SECONDS) -> dict:
    """One instrumented worker: per attempt, the time outside libpq calls (the client's own work).

    The instrumentation's own wrapper call is included, so the figure is an upper bound.
    """
    create_bench_queue(conn, max(MIN_QUEUE_JOBS, int(seconds * FIRST_GUESS_JOBS_PER_SECOND)), strategy)
    result = run_race(db.url, strategy, 1, duration_seconds=seconds, timeout_seconds=seconds + 120, instrument=True)
    [worker] = result.workers
    server_counts(conn, "the instrumented worker", strategy, 1, seconds)
    cycle = np.diff(worker.start_ns)  # start to start: everything one attempt costs the worker
    outside = cycle - worker.round_trip_ns[:-1]
    return {
        "strategy": strategy,
        "attempts": int(len(worker.start_ns)),
        "statements_per_attempt": len(get_strategy(strategy).statements),
        "outside_p50_ns": float(np.percentile(outside, 50)),
        "outside_p99_ns": float(np.percentile(outside, 99)),
        "outside_mean_ns": float(outside.mean()),
        "round_trip_p50_ns": float(np.percentile(worker.round_trip_ns, 50)),
        "cycle_p50_ns": float(np.percentile(cycle, 50)),
        "outside_share": float(outside.sum() / cycle.sum()),
        "max_rss_bytes": int(worker.max_rss_bytes),
        "private_bytes": int(worker.private_bytes),
    }


@dataclass(frozen=True)
class BenchParameters(Parameters):
    """Which strategies and worker counts to time, how many pairs of how many seconds."""

    strategies: tuple = setting(ORIGINAL_STRATEGIES, as_strategies, Option(
        "--strategy", f"one of {', '.join(n for n, s in STRATEGIES.items() if s.not_benched is None)}; a comma "
                      f"list; or all (the original three)", parse_strategies, default_text="all"))
    worker_counts: tuple = setting(BENCH_WORKER_COUNTS, as_ints, Option(
        "--workers", "worker counts, comma-separated", int_list))
    pairs: int = setting(DEFAULT_PAIRS, as_int, Option("--pairs", "harness/pgbench pairs per setting", int))
    seconds: int = setting(DEFAULT_SECONDS, as_int, Option(
        "--seconds", "each run's timed window, whole seconds", int))
    audit_cost: bool = setting(False, as_bool, Option(
        "--audit-cost", "also time the harness without the audit trigger (its cost in claims per second)",
        given=True))

    def check(self) -> None:
        for name in self.strategies:
            check_scriptable(get_strategy(name))
        if not self.worker_counts or min(self.worker_counts) < 1:
            raise UserError("worker counts must be whole numbers of at least 1")
        if self.pairs < 1:
            raise UserError(f"--pairs must be at least 1, not {self.pairs}")
        if self.seconds < 1:
            raise UserError(f"--seconds must be a whole number of at least 1 (pgbench times whole seconds), "
                            f"not {self.seconds}")


def workers_needed(parameters: BenchParameters) -> int:
    return max(parameters.worker_counts)


def check_size(parameter_sets: list[BenchParameters], local: bool, pg_version: int) -> None:
    """Before any server or process starts: the largest timed race fits this machine, and pgbench starts."""
    check_race_size(max(workers_needed(p) for p in parameter_sets), None, local)
    pgbench_version(pg_version)  # one line if pgbench cannot start


def bench_checks(pairs: pd.DataFrame, clients: tuple[str, ...]) -> dict:
    """What must hold for a bench run to count.

    every_pair_complete: every client ran once in every pair of every setting.
    queue_never_drained: every run ended with at least one pending job per worker, so its window was all claims.
    partial_index_read: every run's pick read the partial index, so both clients bought the same claims.
    """
    per_pair = pairs.groupby(["strategy", "worker_count", "pair_index"])["client"]
    checks = {
        "every_pair_complete": bool(len(pairs) > 0 and per_pair.apply(lambda c: sorted(c) == sorted(clients)).all()),
        "queue_never_drained": bool((pairs["pending_after"] >= pairs["worker_count"]).all()),
        "partial_index_read": bool(pairs["plan_index"].str.startswith(PARTIAL_INDEX).all()),
    }
    checks["passed"] = all(checks.values())
    return checks


def _queue_size(consumed: dict, strategy: str, worker_count: int, seconds: int) -> int:
    """Pending jobs for a run: more than the setting took so far (jobs per second), with headroom."""
    known = consumed.get((strategy, worker_count)) or max(FIRST_GUESS_JOBS_PER_SECOND, *consumed.values(), 0)
    return max(MIN_QUEUE_JOBS, int(math.ceil(known * QUEUE_HEADROOM * seconds)))


def measure_bench(db: database.Database, parameters: BenchParameters, run_id: str, progress: bool = True) -> Measured:
    """Harness and pgbench, interleaved, on an open server.

    Drops and recreates claimrace.jobs and claimrace.claims before every measurement.
    """
    strategies, worker_counts = list(parameters.strategies), list(parameters.worker_counts)
    pairs, seconds, pg_version = parameters.pairs, parameters.seconds, db.pg_version
    # audit_cost: the harness also runs without the audit trigger, counting wins from what the claims returned
    clients = CLIENTS + (("harness_no_audit",) if parameters.audit_cost else ())
    began = time.monotonic()
    version = pgbench_version(pg_version)
    rows: list[Measurement] = []
    costs: list[dict] = []
    consumed: dict = {}  # (strategy, worker count) -> the most jobs per second a run took
    with db.connect() as conn:
        settings = [(s, w) for s in strategies for w in worker_counts]
        plan = [(p, index, s, w) for p in range(pairs) for index, (s, w) in enumerate(settings)]
        bar = tqdm(total=len(plan) * len(clients) + len(strategies), desc="bench", unit="run", disable=not progress)
        for pair_index, setting_index, strategy, worker_count in plan:
            # who goes first alternates from one setting to the next and from one pair to the next
            shift = (pair_index + setting_index) % len(clients)
            order = clients[shift:] + clients[:shift]
            for attempt in range(3):  # a drained queue: size it up from what was seen and run the pair again
                job_count = _queue_size(consumed, strategy, worker_count, seconds)
                try:
                    pair = []
                    for position, client_name in enumerate(order):
                        bar.set_postfix_str(f"{strategy} x{worker_count} {client_name} pair {pair_index + 1}")
                        if client_name.startswith("harness"):
                            measure, extra = measure_harness, {"audit": client_name == "harness"}
                        else:
                            measure, extra = measure_pgbench, {"pg_version": pg_version, "client": client_name}
                        pair.append(measure(db, conn, strategy, worker_count, seconds, job_count,
                                            pair_index, position, **extra))
                    break
                except QueueDrained:
                    consumed[(strategy, worker_count)] = 2 * job_count / seconds / QUEUE_HEADROOM  # twice the size
                    if attempt == 2:
                        raise
            for m in pair:
                taken = (m.job_count - m.pending_after) / m.seconds
                consumed[(strategy, worker_count)] = max(consumed.get((strategy, worker_count), 0), taken)
            rows.extend(pair)
            bar.update(len(clients))
        for strategy in strategies:
            bar.set_postfix_str(f"{strategy} client cost")
            costs.append(measure_client_cost(db, conn, strategy))
            bar.update(1)
        bar.close()
    pairs_frame = pd.DataFrame([asdict(m) for m in rows], columns=list(PAIR_COLUMNS))
    return Measured(
        tables={"pairs": pairs_frame, "client_cost": pa.Table.from_pylist(costs)},
        procedure={
            "setup": SETUP,
            "scripts": {name: pgbench_script(get_strategy(name)) for name in strategies},
            "sql": {name: get_strategy(name).sql for name in strategies},
            "queue": {"partial_index": True, "audit": True, "fillfactor": 100},
            "pgbench_protocol": "prepared",
            "harness_layout": CLIENT_LAYOUT_TEXT,
            "pgbench_threads": {"pgbench": "one per client", "pgbench_j2": "two in all", "pgbench_j1": "one in all"},
            "sampler": "the wait-event sampler runs during every harness and pgbench window, as in the races",
            "server_cpu": "the server's processes' CPU over each run, read once the run's backends have exited",
            "validated": "the client: the same statements, table and sampler, with the partial index so a claim "
                         "costs the same in both clients' windows; not the drain (a timed pgbench window cannot "
                         "reproduce a drain's growing walk)",
            "client_cost_seconds": CLIENT_COST_SECONDS,
        },
        checks=bench_checks(pairs_frame, clients),
        results={"pgbench": version, "target_band": list(TARGET_BAND),
                 "wall_seconds": time.monotonic() - began})


# --------------------------------------------------------------------------- reading


def pair_ratios(pairs: pd.DataFrame) -> pd.DataFrame:
    """One row per pair: every client's rates side by side and the harness's ratios to each reference."""
    wide = pairs.pivot_table(index=["strategy", "worker_count", "pair_index"], columns="client",
                             values=["claims_per_second", "attempts_per_second", "cpu_us_per_attempt", "lost_per_win",
                                     "threads"],
                             aggfunc="first")
    wide.columns = [f"{client}_{value}" for value, client in wide.columns]
    wide = wide.reset_index()
    wide["ratio"] = wide["harness_claims_per_second"] / wide["pgbench_claims_per_second"]
    wide["attempts_ratio"] = wide["harness_attempts_per_second"] / wide["pgbench_attempts_per_second"]
    # lost races per win: only guarded loses; elsewhere both sides are 0 and the ratio has no meaning
    both_lose = (wide["pgbench_lost_per_win"] > 0) & (wide["harness_lost_per_win"] > 0)
    wide["lost_per_win_ratio"] = (wide["harness_lost_per_win"] / wide["pgbench_lost_per_win"]).where(both_lose)
    if "pgbench_j2_claims_per_second" in wide:
        wide["ratio_to_j2"] = wide["harness_claims_per_second"] / wide["pgbench_j2_claims_per_second"]
        wide["layout_effect"] = wide["pgbench_j2_claims_per_second"] / wide["pgbench_claims_per_second"]
    return wide


def _race_figure(strategy: str):
    """What the server-side envelope is drawn on, per strategy: guarded's lost races per win, skip_locked's empty
    answers per win; naive neither loses nor finds the queue empty in a window (None: no envelope)."""
    return {"guarded": "lost_per_win", "skip_locked": "empty_per_win"}.get(strategy)


def point_verdicts(pairs: pd.DataFrame, cpu_count: int | None = None) -> pd.DataFrame:
    """Per strategy and worker count, the gates the harness must pass against pgbench, on what the server did:

    envelope: guarded's lost races per win (skip_locked's empty answers per win) within the range pgbench gave with
        one thread per client, two threads and one thread (every pair), widened by pgbench's own pair-to-pair spread;
    server_cpu: the server's CPU per audited win within max(SERVER_CPU_TOLERANCE, twice pgbench's coefficient of
        variation over its pairs) of pgbench's (one thread per client);
    predicted: where both clients keep the machine's CPUs busy (SATURATED_CPU_SHARE), the claims/s ratio within
        PREDICTED_RATIO_TOLERANCE of what the two clients' CPU per claim (client and server) predicts.
    verdict: pass when every gate that applies holds; the server's CPU must be measured (a server on this host).
    """
    cpu_count = cpu_count or os.cpu_count() or 1
    frame = pairs.copy()
    frame["empty_per_win"] = frame["empty_attempts"] / frame["wins"].clip(lower=1)
    frame["client_cpu_us_per_win"] = frame["cpu_seconds"] * 1e6 / frame["wins"].clip(lower=1)
    frame["cpu_share"] = (frame["cpu_seconds"] + frame["server_cpu_seconds"]) / (frame["seconds"] * cpu_count)
    rows = []
    for (strategy, workers), point in frame.groupby(["strategy", "worker_count"], sort=False):
        harness = point[point["client"] == "harness"]
        reference = point[point["client"] == "pgbench"]
        references = point[point["client"].isin(REFERENCES)]
        row = {"strategy": strategy, "worker_count": int(workers)}
        figure = _race_figure(strategy)
        if figure is not None and len(references) and len(harness):
            spread = float(reference[figure].max() - reference[figure].min()) if len(reference) else 0.0
            low, high = float(references[figure].min()) - spread, float(references[figure].max()) + spread
            ours = float(harness[figure].median())
            row.update(envelope_figure=figure, envelope=[max(low, 0.0), high], harness_figure=ours,
                       envelope_ok=bool(low <= ours <= high))
        else:
            row.update(envelope_figure=None, envelope=None, harness_figure=math.nan, envelope_ok=None)
        h_cpu = harness["server_cpu_us_per_win"].median() if len(harness) else math.nan
        p_cpu = reference["server_cpu_us_per_win"].median() if len(reference) else math.nan
        values = reference["server_cpu_us_per_win"].dropna()
        cv = float(values.std(ddof=0) / values.mean()) if len(values) > 1 and values.mean() else 0.0
        tolerance = max(SERVER_CPU_TOLERANCE, 2 * cv)
        measured = not (math.isnan(h_cpu) or math.isnan(p_cpu) or not p_cpu)
        row.update(harness_server_cpu_us_per_win=h_cpu, pgbench_server_cpu_us_per_win=p_cpu,
                   server_cpu_tolerance_floor=SERVER_CPU_TOLERANCE, server_cpu_tolerance=tolerance,
                   server_cpu_ok=bool(abs(h_cpu / p_cpu - 1) <= tolerance) if measured else None)
        saturated = bool(len(harness) and len(reference) and harness["cpu_share"].median() >= SATURATED_CPU_SHARE
                         and reference["cpu_share"].median() >= SATURATED_CPU_SHARE)
        predicted = math.nan
        if saturated and measured:
            predicted = ((reference["client_cpu_us_per_win"].median() + p_cpu)
                         / (harness["client_cpu_us_per_win"].median() + h_cpu))
        ratio = (harness["claims_per_second"].median() / reference["claims_per_second"].median()
                 if len(harness) and len(reference) else math.nan)
        row.update(cpu_saturated=saturated, predicted_ratio=predicted, measured_ratio=ratio,
                   predicted_tolerance=PREDICTED_RATIO_TOLERANCE,
                   predicted_ok=bool(abs(ratio / predicted - 1) <= PREDICTED_RATIO_TOLERANCE)
                   if saturated and measured else None)
        gates = [row["envelope_ok"], row["server_cpu_ok"], row["predicted_ok"]]
        row["verdict"] = "pass" if measured and all(g is not False for g in gates) else "fail"
        rows.append(row)
    return pd.DataFrame(rows)


def in_band(ratio: float, band: tuple[float, float] = TARGET_BAND) -> bool:
    """Whether a harness/pgbench ratio is within the target band (a NaN ratio is not)."""
    return bool(band[0] <= ratio <= band[1])


def summarise(run: Run) -> pd.DataFrame:
    """Per strategy and worker count: medians over the pairs (the `pairs` table: the raw measurements, one row per
    client run), the median ratios and their spread."""
    pairs = run.table("pairs")
    wide = pair_ratios(pairs)
    harness = pairs[pairs["client"] == "harness"]
    gaps = harness.groupby(["strategy", "worker_count"]).agg(
        harness_gap_p50_us=("gap_p50_ns", lambda v: v.median() / 1e3),
        harness_gap_p99_us=("gap_p99_ns", lambda v: v.median() / 1e3),
        harness_processes=("threads", "max"),
    )
    memory = pairs.pivot_table(index=["strategy", "worker_count"], columns="client",
                               values=["max_rss_bytes", "private_bytes_per_worker"], aggfunc="median")
    memory.columns = [f"{client}_{'max_rss_mib' if value == 'max_rss_bytes' else 'private_mib_per_worker'}"
                      for value, client in memory.columns]
    memory = memory / 2**20
    aggregations = dict(
        pairs=("ratio", "size"),
        harness_claims_per_second=("harness_claims_per_second", "median"),
        pgbench_claims_per_second=("pgbench_claims_per_second", "median"),
        ratio=("ratio", "median"),
        ratio_min=("ratio", "min"),
        ratio_max=("ratio", "max"),
        harness_lost_per_win=("harness_lost_per_win", "median"),
        pgbench_lost_per_win=("pgbench_lost_per_win", "median"),
        lost_per_win_ratio=("lost_per_win_ratio", "median"),
        harness_attempts_per_second=("harness_attempts_per_second", "median"),
        pgbench_attempts_per_second=("pgbench_attempts_per_second", "median"),
        attempts_ratio=("attempts_ratio", "median"),
        harness_cpu_us_per_attempt=("harness_cpu_us_per_attempt", "median"),
        pgbench_cpu_us_per_attempt=("pgbench_cpu_us_per_attempt", "median"),
        pgbench_threads=("pgbench_threads", "max"),
    )
    if "pgbench_j2_claims_per_second" in wide:
        aggregations.update(pgbench_j2_claims_per_second=("pgbench_j2_claims_per_second", "median"),
                            pgbench_j2_lost_per_win=("pgbench_j2_lost_per_win", "median"),
                            layout_effect=("layout_effect", "median"))
    if "harness_no_audit_claims_per_second" in wide:
        wide["audit_cost"] = 1 - wide["harness_claims_per_second"] / wide["harness_no_audit_claims_per_second"]
        aggregations.update(harness_no_audit_claims_per_second=("harness_no_audit_claims_per_second", "median"),
                            audit_cost=("audit_cost", "median"), audit_cost_min=("audit_cost", "min"),
                            audit_cost_max=("audit_cost", "max"))
    latency = pairs.pivot_table(index=["strategy", "worker_count"], columns="client",
                                values=["attempt_p50_us", "attempt_p99_us", "win_p50_us", "win_p99_us"],
                                aggfunc="median")
    latency.columns = [f"{client}_{value}" for value, client in latency.columns]
    latency = latency.dropna(axis=1, how="all")
    # the winning claims' p99 over the pairs: its spread, for a verdict that compares two strategies' p99s
    harness_wins = harness.groupby(["strategy", "worker_count"])["win_p99_us"]
    latency = latency.join(harness_wins.min().rename("harness_win_p99_us_min")).join(
        harness_wins.max().rename("harness_win_p99_us_max"))
    summary = wide.groupby(["strategy", "worker_count"]).agg(**aggregations).join(gaps).join(memory).join(latency)
    summary["meets_target"] = summary["ratio"].map(in_band)
    lost_ok = summary["lost_per_win_ratio"].map(lambda r: math.isnan(r) or in_band(r))
    summary["lost_per_win_meets_target"] = lost_ok
    order = {name: i for i, name in enumerate(STRATEGIES)}
    summary = summary.reset_index()
    if "server_cpu_us_per_win" in pairs:  # runs stored before the gates had no server CPU: no verdict
        cpu_count = (run.manifest.get("client") or {}).get("cpu_count")
        verdicts = point_verdicts(pairs, cpu_count)
        summary = summary.merge(verdicts, on=["strategy", "worker_count"], how="left")
        summary["lost_per_win_envelope"] = summary["envelope"]
    summary = summary.merge(cpu_bound_points(pairs), on=["strategy", "worker_count"], how="left")
    summary = summary.sort_values(["strategy", "worker_count"], key=lambda c: c.map(order) if c.name == "strategy"
                                  else c).reset_index(drop=True)
    return summary


def cpu_bound_points(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per strategy and worker count, whether any of the harness's runs (with the audit, as the ratio reads) was
    CPU-bound by the race's rule (activity.cpu_bound); None where no run was measured (a run stored before the
    bench kept the shares, or a server on another host)."""
    columns = ("client_runnable_share", "client_running_share", "backend_runnable_share")
    harness = pairs[pairs["client"] == "harness"]
    rows = []
    for (strategy, worker_count), runs in harness.groupby(["strategy", "worker_count"]):
        marks = [activity.cpu_bound(*(getattr(r, c, None) for c in columns)) for r in runs.itertuples()]
        measured = [m for m in marks if m is not None]
        rows.append({"strategy": strategy, "worker_count": worker_count,
                     "cpu_bound": any(measured) if measured else None})
    return pd.DataFrame(rows, columns=["strategy", "worker_count", "cpu_bound"])


# --------------------------------------------------------------------------- command line

TABLE_COLUMNS = ("strategy", "worker_count", "pairs", "harness_processes", "pgbench_threads",
                 "harness_claims_per_second", "pgbench_claims_per_second", "ratio", "ratio_min", "ratio_max",
                 "harness_lost_per_win", "pgbench_lost_per_win", "pgbench_j2_claims_per_second", "layout_effect",
                 "harness_cpu_us_per_attempt", "pgbench_cpu_us_per_attempt")


def _print(run: Run, as_json: bool) -> None:
    summary = run.summary
    if as_json:
        for record in summary.to_dict(orient="records"):
            print(json.dumps({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in record.items()},
                             default=lambda v: v.item() if hasattr(v, "item") else str(v)))
        return
    print(summary.loc[:, [c for c in TABLE_COLUMNS if c in summary]].to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    cost = run.table("client_cost")
    print("\nharness client time per attempt outside libpq (one instrumented worker):")
    print(cost.loc[:, ["strategy", "attempts", "outside_p50_ns", "outside_p99_ns", "round_trip_p50_ns",
                       "outside_share"]].to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
    if "verdict" in summary:
        print("\nthe gates, on what the server did (see bench.point_verdicts):")
        print(summary.loc[:, ["strategy", "worker_count", "envelope_figure", "envelope", "harness_figure",
                              "envelope_ok", "harness_server_cpu_us_per_win", "pgbench_server_cpu_us_per_win",
                              "server_cpu_ok", "cpu_saturated", "predicted_ratio", "measured_ratio", "predicted_ok",
                              "verdict"]].to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
        failed = summary[summary["verdict"] != "pass"]
        print(f"\n{len(summary) - len(failed)} of {len(summary)} settings pass; the claims/s ratio to pgbench (one "
              f"thread per client) is reported, not gated; layout_effect = pgbench -j 2 / pgbench one thread per "
              f"client; stored in {run.path}")
    else:
        print(f"\nstored before the gates existed: no verdict; stored in {run.path}")


def show_runs(paths, as_json: bool) -> None:
    """What `python -m harness bench` prints: per strategy and worker count, the ratios and the target's verdict."""
    for path in paths:
        _print(Run(path), as_json)


# The kind as the store, the command line and the report see it (harness.experiments.registry).
KIND = Kind("bench", BenchParameters, measure_bench, summarise,
            help="the harness against pgbench on the same SQL and server, interleaved (drops and recreates "
                 "claimrace.jobs and claimrace.claims before every run)",
            show=show_runs, sections=("bench",), workers=workers_needed, check_size=check_size)
