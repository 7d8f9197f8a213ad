"""The harness-versus-pgbench bench: scripts made from the strategies' SQL, both clients measured, ratios computed.

Smoke-sized (one second windows, a few workers): these check the shape of what
is stored and printed, never the figures, which belong to `make bench`.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pandas as pd
import psycopg
import pytest

from harness import storage
from harness.experiments import registry
from harness.experiments.bench import measure as bench
from harness.experiments.bench import runs as bench_runs
from harness.server import activity, schema
from harness.experiments.bench.pgbench import pgbench_script, run_pgbench
from harness.experiments.race.workers import run_race
from harness.storage import Run, read_json
from harness.claims.strategies import STRATEGIES
from harness.claims.steps import WON

from conftest import run_cli

# These check the shape of what the bench stores, never its figures (the server's CPU is read from its own
# processes, and a CPU share only between 0 and 1): they run beside other tests. The one that times a race is serial.


BENCHED = [name for name, strategy in STRATEGIES.items() if strategy.not_benched is None]


def test_the_bench_takes_the_original_three_and_for_update():
    assert BENCHED == ["naive", "guarded", "skip_locked", "for_update"]


@pytest.mark.parametrize("name", BENCHED)
def test_pgbench_scripts_are_the_strategies_own_statements(name):
    strategy = STRATEGIES[name]
    script = pgbench_script(strategy).splitlines()
    assert len(script) == len(strategy.statements)
    for line, (_, text) in zip(script, strategy.statements):
        assert line.replace(":id", "$1").removesuffix(";").removesuffix(" \\gset") == text
    if len(strategy.statements) == 2:
        assert script[0].endswith("\\gset") and ":id" in script[1]


def test_the_bench_queue_has_history_so_the_pick_reads_the_partial_index(conn):
    schema.create_queue(conn, 147_723, partial_index=True)  # pending rows alone: this size plans on the primary key
    assert not bench_runs.claim_plan_index(conn, "skip_locked").startswith("jobs_pending_idx")
    for name in BENCHED:
        assert bench_runs.create_bench_queue(conn, 147_723, name).startswith("jobs_pending_idx")
        counts = schema.status_counts(conn)
        assert counts["pending"] == 147_723 and counts["done"] >= 147_723 // 4
        assert bench_runs.claim_plan_index(conn, name).startswith("jobs_pending_idx")


def test_pgbench_claims_what_the_audit_records(db, conn):
    bench_runs.create_bench_queue(conn, 20_000)
    run = run_pgbench(db.url, STRATEGIES["guarded"], 2, 1)
    wins = conn.execute("SELECT count(*) FROM claimrace.claims").fetchone()[0]
    running = conn.execute("SELECT count(*) FROM claimrace.jobs WHERE status = 'running'").fetchone()[0]
    assert run.transactions > 0 and run.failed == 0
    assert 0 < wins <= run.transactions  # a guarded attempt wins at most once
    assert wins == running  # the guard: no job flipped twice
    assert run.cpu_ns > 0 and run.max_rss_bytes > 0


@pytest.mark.serial  # its wall time is bounded: another test beside it would stretch it
def test_a_timed_race_stops_at_its_deadline_and_keeps_every_attempt(db, conn):
    bench_runs.create_bench_queue(conn, 20_000)
    result = run_race(db.url, "skip_locked", 2, duration_seconds=0.5, timeout_seconds=60)
    assert result.duration_seconds == 0.5
    assert 0.5 <= result.wall_seconds < 5
    wins = conn.execute("SELECT count(*) FROM claimrace.claims").fetchone()[0]
    assert sum(int((w.outcome == WON).sum()) for w in result.workers) == wins > 0
    for worker in result.workers:
        assert worker.cpu_ns > 0 and worker.max_rss_bytes > 0
        assert (np.diff(worker.start_ns) > 0).all()


def test_bench_measures_both_clients_and_computes_ratios(db, tmp_path):
    asked = bench.BenchParameters(strategies=["guarded", "skip_locked"], worker_counts=[1, 2], pairs=2, seconds=1)
    [run_dir] = registry.measure("bench", asked, tmp_path, db=db, progress=False)
    assert run_dir.parent == tmp_path / "bench"
    pairs = Run(run_dir).table("pairs")
    assert len(pairs) == 2 * 2 * 2 * 4  # strategies x worker counts x pairs x clients
    assert set(pairs["client"]) == {"harness", "pgbench", "pgbench_j2", "pgbench_j1"}
    assert (pairs.groupby(["strategy", "worker_count", "pair_index"])["client"].nunique() == 4).all()
    assert set(pairs["position"]) == {0, 1, 2, 3}, "the order inside a pair rotates"
    # the server's CPU over each run, from the embedded server's processes
    nothing = pairs[~(pairs["server_cpu_seconds"] > 0)]
    assert nothing.empty, nothing[["strategy", "worker_count", "client", "server_cpu_seconds", "wins"]].to_string()
    assert (pairs["server_cpu_us_per_win"] > 0).all()
    # the reference runs one thread per client, as the harness runs one process per worker
    for _, row in pairs.iterrows():
        expected = {"harness": row["worker_count"], "pgbench": row["worker_count"],
                    "pgbench_j2": min(2, row["worker_count"]), "pgbench_j1": 1}[row["client"]]
        assert row["threads"] == expected, row.to_dict()
    guarded = pairs[(pairs["strategy"] == "guarded") & (pairs["worker_count"] == 2)]
    assert (guarded["lost_per_win"] >= 0).all() and (guarded["lost_attempts"] == guarded["attempts"]
                                                    - guarded["wins"] - guarded["empty_attempts"]).all()
    assert (pairs["wins"] > 0).all() and (pairs["attempts"] >= pairs["wins"]).all()
    assert (pairs["pending_after"] > 0).all(), "neither client drained the queue"
    assert pairs["plan_index"].str.startswith("jobs_pending_idx").all(), "every pick read the partial index"
    harness = pairs[pairs["client"] == "harness"]
    assert harness["gap_p50_ns"].notna().all() and (harness["max_rss_bytes"] > 0).all()
    # what the race's CPU-bound rule reads, for the harness's workers and (a server on this host) their backends
    for column in ("client_runnable_share", "client_running_share", "backend_runnable_share"):
        assert harness[column].between(0, 1).all(), column
    assert pairs.loc[pairs["client"] != "harness", "client_runnable_share"].isna().all()

    summary = Run(run_dir).summary
    assert len(summary) == 4
    assert {"strategy", "worker_count", "pairs", "harness_claims_per_second", "pgbench_claims_per_second",
            "ratio", "ratio_min", "ratio_max", "harness_processes", "pgbench_threads", "lost_per_win_ratio",
            "pgbench_j2_claims_per_second", "layout_effect", "verdict", "lost_per_win_envelope"} <= set(summary.columns)
    assert set(summary["verdict"]) <= {"pass", "fail"}
    guarded_envelope = summary.loc[summary["strategy"] == "guarded", "lost_per_win_envelope"].iloc[0]
    assert len(guarded_envelope) == 2 and guarded_envelope[0] <= guarded_envelope[1]
    assert (summary["pairs"] == 2).all()
    assert summary["cpu_bound"].map(lambda v: v in (True, False)).all(), "every point read, bound or not"
    assert (summary["ratio"] > 0).all() and (summary["ratio_min"] <= summary["ratio_max"]).all()
    # the winning claims' p99 over the pairs, with its spread (F8 compares two strategies' on it)
    assert (summary["harness_win_p99_us_min"] <= summary["harness_win_p99_us"]).all()
    assert (summary["harness_win_p99_us"] <= summary["harness_win_p99_us_max"]).all()

    cost = Run(run_dir).table("client_cost")
    assert list(cost["strategy"]) == ["guarded", "skip_locked"]
    assert (cost["outside_p50_ns"] > 0).all() and (cost["round_trip_p50_ns"] > 0).all()

    manifest = read_json(run_dir / "manifest.json")
    assert tuple(manifest) == storage.MANIFEST_KEYS and manifest["kind"] == "bench"
    assert manifest["parameters"] == {"strategies": ["guarded", "skip_locked"], "worker_counts": [1, 2], "pairs": 2,
                                      "seconds": 1, "audit_cost": False}
    assert manifest["procedure"]["queue"]["partial_index"] is True
    assert manifest["procedure"]["scripts"]["skip_locked"].strip().endswith(";")
    assert manifest["checks"]["passed"] is True and manifest["results"]["pgbench"]
    assert manifest["server"]["settings"]["server_version"]


def test_bench_cli_prints_one_json_object_per_strategy_and_worker_count(tmp_path):
    result = run_cli("bench", "--strategy", "skip_locked", "--workers", "1,2", "--pairs", "1", "--seconds", "1",
                     "--json", "--data-dir", str(tmp_path), "--db", "embedded")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["strategy"], r["worker_count"]) for r in records] == [("skip_locked", 1), ("skip_locked", 2)]
    for record in records:
        assert record["pairs"] == 1
        assert record["harness_claims_per_second"] > 0 and record["pgbench_claims_per_second"] > 0
        assert record["ratio"] == pytest.approx(record["harness_claims_per_second"]
                                                / record["pgbench_claims_per_second"])
        assert record["harness_processes"] == record["pgbench_threads"] == record["worker_count"]
        assert record["verdict"] in ("pass", "fail") and len(record["lost_per_win_envelope"]) == 2


@pytest.mark.parametrize("ratio, inside", [(1.0, True), (0.85, True), (1.15, True), (0.84, False), (1.16, False),
                                           (float("nan"), False)])
def test_the_target_band_can_fail_on_both_sides(ratio, inside):
    assert bench.in_band(ratio) is inside


@pytest.mark.parametrize("args, fragment", [
    (["--seconds", "0"], "--seconds"),
    (["--pairs", "0"], "--pairs"),
    (["--strategy", "nope"], "unknown strategy"),
])
def test_bad_bench_options_are_one_line_errors(tmp_path, args, fragment):
    result = run_cli("bench", *args, "--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert fragment in result.stderr and len(result.stderr.strip().splitlines()) == 1


def _pairs(**per_client) -> pd.DataFrame:
    """Bench rows: per client a list of (lost_per_win, server_cpu_us_per_win) per pair, at one guarded point."""
    rows = []
    for client, values in per_client.items():
        for index, (lost, server_us) in enumerate(values):
            rows.append({"client": client, "strategy": "guarded", "worker_count": 8, "pair_index": index,
                         "wins": 1000, "empty_attempts": 0, "lost_per_win": lost, "cpu_seconds": 0.1,
                         "server_cpu_seconds": server_us * 1000 / 1e6, "server_cpu_us_per_win": server_us,
                         "seconds": 3.0, "claims_per_second": 333.0})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("harness, verdict, why", [
    ([(5.0, 100.0), (5.2, 102.0)], "pass", None),
    ([(12.0, 100.0), (12.5, 101.0)], "fail", "envelope_ok"),  # outside every pgbench layout, widened by its spread
    ([(5.0, 150.0), (5.1, 150.0)], "fail", "server_cpu_ok"),  # the server worked harder per win for the harness
])
def test_a_bench_point_passes_only_inside_the_envelope_and_at_pgbenchs_server_cost(harness, verdict, why):
    frame = _pairs(harness=harness, pgbench=[(4.0, 100.0), (4.5, 99.0)], pgbench_j2=[(6.0, 98.0), (6.5, 100.0)],
                   pgbench_j1=[(7.0, 97.0), (7.5, 100.0)])
    [row] = bench.point_verdicts(frame, cpu_count=2).to_dict(orient="records")
    assert row["verdict"] == verdict
    assert row["envelope"] == pytest.approx([3.5, 8.0])  # 4.0-7.5 widened by pgbench's own 0.5
    if why:
        assert row[why] is False
    unmeasured = frame.assign(server_cpu_us_per_win=float("nan"), server_cpu_seconds=float("nan"))
    assert bench.point_verdicts(unmeasured, cpu_count=2).iloc[0]["verdict"] == "fail"


def test_where_both_saturate_the_ratio_must_match_what_their_cpu_predicts():
    frame = _pairs(harness=[(5.0, 100.0)], pgbench=[(5.0, 100.0)], pgbench_j2=[(5.0, 100.0)], pgbench_j1=[(5.0, 100.0)])
    frame["cpu_seconds"] = 5.9 - frame["server_cpu_seconds"]  # client + server fill 2 CPUs for 3 s
    frame.loc[frame["client"] == "harness", "claims_per_second"] = 200.0  # slower than their equal CPU predicts
    [row] = bench.point_verdicts(frame, cpu_count=2).to_dict(orient="records")
    assert row["cpu_saturated"] and row["predicted_ok"] is False and row["verdict"] == "fail"
    frame["claims_per_second"] = 333.0
    assert bool(bench.point_verdicts(frame, cpu_count=2).iloc[0]["predicted_ok"])


def test_a_bench_point_is_cpu_bound_where_any_harness_run_was_and_unread_where_none_was_read():
    def run(client, workers, client_share, backend_share):
        return {"client": client, "strategy": "guarded", "worker_count": workers, "client_runnable_share": client_share,
                "client_running_share": 0.1 if client_share is not None else None,
                "backend_runnable_share": backend_share}
    pairs = pd.DataFrame([run("harness", 1, 0.05, 0.1), run("harness", 1, 0.1, 0.2),     # free
                          run("harness", 8, 0.1, 0.7), run("harness", 8, 0.1, 0.2),      # one run's backends waited
                          run("harness", 32, None, None), run("pgbench", 32, 0.9, 0.9)])  # only pgbench's: unread
    marks = bench.cpu_bound_points(pairs).set_index("worker_count")["cpu_bound"]
    assert marks[1] is False and marks[8] is True and marks[32] is None


def test_the_servers_cpu_never_goes_back_while_backends_come_and_go(db):
    """A backend reaped between reading the postmaster's times and listing its children is in neither reading:
    a run's server CPU could then come out at nothing (a bench row did, once)."""
    stop, made = threading.Event(), []

    def churn():
        while not stop.is_set():
            made.append(1)
            with psycopg.connect(db.url, application_name="claimrace-test-churn") as other:
                other.execute("SELECT count(*) FROM generate_series(1, 300000)")  # tens of ms: a tick or more

    threads = [threading.Thread(target=churn) for _ in range(2)]
    for thread in threads:
        thread.start()
    readings = []
    try:
        with db.connect() as conn:
            # 200 readings, or as many as 30 s allow: a loaded suite's machine gave 5 in 4 s once
            deadline = time.monotonic() + 30
            while len(readings) < 200 and time.monotonic() < deadline:
                readings.append(activity.server_cpu_ns(conn))
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert None not in readings and len(readings) >= 50, len(readings)
    assert len(made) >= 20, f"{len(made)} backends came and went"  # a churn thread that failed would leave none
    backwards = [(a, b) for a, b in zip(readings, readings[1:]) if b < a]
    assert not backwards, f"{len(backwards)} of {len(readings)} readings went back, by up to " \
                          f"{max(a - b for a, b in backwards) / 1e6:.0f} ms"
