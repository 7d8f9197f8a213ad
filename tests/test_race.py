"""The race against a real server: duplicates, conservation, the audit, the stored rows."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from harness import storage
from harness.experiments import registry
from harness.experiments.race.trials import RaceSweep
from harness.server import schema
from harness.storage import ATTEMPT_SCHEMA, Run, read_json


def sweep(db, tmp_path, strategies, worker_counts, job_count=1500, **options):
    asked = RaceSweep(strategies=strategies, worker_counts=worker_counts, job_count=job_count, **options)
    return registry.measure("race", asked, tmp_path, db=db, progress=False)


@pytest.mark.parametrize("strategy", ["guarded", "skip_locked"])
def test_safe_strategies_claim_every_job_exactly_once(db, tmp_path, strategy):
    for run_dir in sweep(db, tmp_path, [strategy], [8, 16]):
        claims = Run(run_dir).table("claims")  # what the server recorded, not what workers believe
        per_job = claims.groupby("job_id").size()
        assert len(per_job) == 1500, "every job claimed"
        assert per_job.max() == 1, "no job claimed twice"
        assert (claims["previous_status"] == "pending").all()
        attempts = Run(run_dir).table("attempts")
        worker_wins = np.sort(attempts.loc[attempts["outcome"] == "won", "job_id"].to_numpy())
        assert np.array_equal(worker_wins, np.sort(claims["job_id"].to_numpy()))


def test_naive_hands_jobs_to_two_workers_and_the_audit_sees_it(db, tmp_path):
    # the negative control: if this finds no duplicate, the detector is broken
    [run_dir] = sweep(db, tmp_path, ["naive"], [2], job_count=3000)
    claims = Run(run_dir).table("claims")
    per_job = claims.groupby("job_id").size()
    assert (per_job > 1).sum() > 0
    assert (claims["previous_status"] == "running").sum() == len(claims) - len(per_job)
    summary = Run(run_dir).summary
    assert summary["duplicate_jobs"] == int((per_job > 1).sum())
    assert summary["wins"] == len(claims)  # every naive UPDATE "wins", the audit agrees


def test_guarded_loses_races_and_counts_them(db, tmp_path):
    [run_dir] = sweep(db, tmp_path, ["guarded"], [8])
    summary = Run(run_dir).summary
    assert summary["lost"] > 0
    assert summary["wins"] == 1500
    assert summary["losses_per_win"] == pytest.approx(summary["lost"] / 1500)


def test_attempts_parquet_schema_and_conservation(db, tmp_path):
    [run_dir] = sweep(db, tmp_path, ["guarded"], [4], job_count=500)
    table = pq.read_table(run_dir / "attempts.parquet")
    assert table.schema.equals(ATTEMPT_SCHEMA, check_metadata=False)
    attempts = Run(run_dir).table("attempts")
    counts = attempts["outcome"].value_counts()
    assert len(attempts) == sum(counts.get(k, 0) for k in ("won", "lost", "empty", "error"))
    assert counts.get("error", 0) == 0
    assert counts["empty"] == 4, "each worker stops at its first empty answer"
    assert set(attempts["worker_index"]) == {0, 1, 2, 3}
    # per worker, attempts are numbered and ordered in time
    for _, worker in attempts.groupby("worker_index"):
        assert list(worker["attempt_seq"]) == list(range(len(worker)))
        assert (np.diff(worker["start_ns"].to_numpy()) > 0).all()
    assert (attempts["latency_ns"] > 0).all()
    assert attempts["start_ns"].min() >= 0
    assert attempts.loc[attempts["outcome"] == "empty", "job_id"].isna().all()
    assert set(Run(run_dir).table("claims")["job_id"]) == set(range(1, 501))


def test_manifest_records_parameters_server_and_client(db, tmp_path):
    [run_dir] = sweep(db, tmp_path, ["skip_locked"], [2], job_count=300, partial_index=True, fillfactor=70)
    manifest = read_json(run_dir / "manifest.json")
    assert tuple(manifest) == storage.MANIFEST_KEYS and manifest["kind"] == "race"
    assert manifest["run_id"] == run_dir.name and "-race-" in run_dir.name
    assert manifest["parameters"] == {"strategy": "skip_locked", "worker_count": 2, "job_count": 300, "repeat": 0,
                                      "partial_index": True, "fillfactor": 70, "pause_ms": 0.0, "jitter_ms": 0.0,
                                      "autovacuum": True, "audit": True, "batch": 1, "rtt_ms": 0.0,
                                      "proxy_at_zero": False, "sampler": True, "cpus": "shared",
                                      "client": "processes", "pooler": "none", "storage": "tmpfs"}
    results = manifest["results"]
    assert results["client_processes"] == 2 and results["client_layout"] == "processes"
    assert "one process per worker" in results["client_layout_text"]
    assert results["table_activity"] and results["activity"]["sampler"]["samples"] > 0
    assert "FOR UPDATE SKIP LOCKED" in manifest["procedure"]["sql"]
    server = manifest["server"]
    assert server["major"] == 16 and server["server_version"].startswith("16.")
    assert int(server["settings"]["max_connections"]) >= 100
    assert server["settings"]["default_transaction_isolation"] == "read committed"
    assert "pgstattuple_available" in server
    client = manifest["client"]
    assert client["cpu_count"] >= 1 and client["python"].startswith("3.")
    assert client["packages"]["psycopg"]
    assert "commit" in client["git"]
    assert manifest["checks"]["passed"] is True
    assert manifest["started_at"] < manifest["finished_at"]
    assert run_dir.parent == storage.kind_dir(tmp_path, "race") == tmp_path / "races"


def test_the_table_setup_is_what_the_server_reports(db, conn, tmp_path):
    schema.create_queue(conn, 200, partial_index=True, fillfactor=70)
    options = conn.execute("SELECT reloptions FROM pg_class WHERE oid = 'claimrace.jobs'::regclass").fetchone()[0]
    assert options == ["fillfactor=70"]
    indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'claimrace' "
                                          "AND tablename = 'jobs'")}
    assert indexes == {"jobs_pkey", "jobs_pending_idx"}
    schema.create_queue(conn, 100)
    assert schema.status_counts(conn) == {"pending": 100}
    assert conn.execute("SELECT reloptions FROM pg_class WHERE oid = 'claimrace.jobs'::regclass").fetchone()[0] \
        == ["fillfactor=100"]


def test_summary_json_has_the_documented_fields(db, tmp_path):
    from conftest import run_cli

    sweep(db, tmp_path, ["guarded"], [2], job_count=300)
    result = run_cli("summary", "--data-dir", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    [line] = result.stdout.strip().splitlines()
    record = json.loads(line)
    for key in ("run_id", "strategy", "worker_count", "job_count", "repeat", "attempts", "wins", "lost", "empty",
                "errors", "audit_claims", "duplicate_jobs", "unclaimed_jobs", "losses_per_win", "wall_seconds",
                "claims_per_second", "attempts_per_second", "p50_ms", "p99_ms", "pg_version", "partial_index",
                "fillfactor", "aborts", "batch_size", "max_rows_per_attempt"):
        assert key in record, key
    assert record["wins"] == 300 and record["audit_claims"] == 300 and record["unclaimed_jobs"] == 0
    assert record["aborts"] == 0 and record["batch_size"] == 1 and record["max_rows_per_attempt"] == 1
    assert record["pg_version"].startswith("16.") and record["partial_index"] is False


def test_summary_carries_where_the_time_went_from_stored_rows(db, tmp_path):
    [run_dir] = sweep(db, tmp_path, ["guarded"], [4], job_count=800)
    summary = Run(run_dir).summary
    assert sum(summary["wait_share"].values()) == pytest.approx(1.0)
    assert summary["wait_share"]["CPU"] + summary["wait_share"]["Client"] > 0, "the sampler saw the backends"
    # the embedded server's backends are processes of this host: the kernel's counters were read
    assert 0 < summary["running_share"] <= 1 and 0 <= summary["runnable_share"] <= 1
    assert 0 < summary["client_running_share"] <= 1
    assert len(summary["p99_ms_by_fill"]) == 10 and summary["client_processes"] == 4


def test_waits_the_drain_cut_off_count_as_lower_bounds(db, tmp_path):
    from harness.stats import censored_percentile, censored_waits_ns

    frame = pd.DataFrame({"worker_index": [0, 0, 0, 1, 1], "attempt_seq": [0, 1, 2, 0, 1],
                          "start_ns": [0, 10, 20, 0, 50], "latency_ns": [5, 5, 100, 40, 5],
                          "outcome": ["won", "lost", "empty", "lost", "won"]})
    assert censored_waits_ns(frame).tolist() == [110]  # worker 0 from its first attempt after its win to the end
    value, lower_bound = censored_percentile([1.0, 2.0, 3.0], [50.0], 99)
    assert lower_bound and value > 3.0
    assert censored_percentile([1.0, 2.0, 3.0], [], 99)[1] is False
    # a real drain: every skip_locked worker ends on an empty answer, a wait the end of the queue cut off
    [run_dir] = sweep(db, tmp_path, ["skip_locked"], [4], job_count=400)
    summary = Run(run_dir).summary
    assert summary["time_to_job_censored"] == 4
    assert isinstance(summary["time_to_job_p99_is_lower_bound"], bool)
