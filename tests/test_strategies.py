"""The claims beyond the original three, raced on a real server: what the audit says about each.

Small races (a few workers, a few hundred jobs): each test asks what the study's
claims C1-C3 and the job libraries' claims predict, from the server's audit.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.experiments import registry
from harness.experiments.race.trials import RaceSweep
from harness.server import schema
from harness.server.database import connect
from harness.storage import Run, read_manifest
from harness.claims.strategies import STRATEGIES
from harness.claims.steps import ABORTED, EMPTY, WON, AttemptNotes


def race(db, tmp_path, strategy, worker_count, job_count, **options):
    asked = RaceSweep(strategies=[strategy], worker_counts=[worker_count], job_count=job_count, **options)
    [run_dir] = registry.measure("race", asked, tmp_path, db=db, progress=False)  # stored only if checks passed
    return run_dir, Run(run_dir).summary, Run(run_dir).table("claims"), Run(run_dir).table("attempts")


def claimed_once_each(claims, job_count) -> bool:
    per_job = claims.groupby("job_id").size()
    return len(per_job) == job_count and int(per_job.max()) == 1


def test_one_read_committed_transaction_still_hands_jobs_to_two_workers(db, tmp_path):
    # C2: each statement of the transaction takes its own snapshot; the UPDATE of a job another open
    # transaction has just flipped waits for it, then flips it again (no status check)
    run_dir, summary, claims, _ = race(db, tmp_path, "naive_transaction", 4, 1000)
    per_job = claims.groupby("job_id").size()
    assert (per_job > 1).sum() > 0, "the audit shows jobs claimed twice"
    assert summary["duplicate_jobs"] == int((per_job > 1).sum()) and summary["wins"] == len(claims)
    assert summary["lost"] == 0 and summary["aborts"] == 0
    assert "READ COMMITTED transaction" in read_manifest(run_dir)["procedure"]["isolation"]


def test_serializable_aborts_instead_of_handing_a_job_out_twice(db, tmp_path):
    # C1: the second writer of a job fails with a serialization failure; its retry is the next attempt
    run_dir, summary, claims, attempts = race(db, tmp_path, "naive_serializable", 4, 600)
    assert claimed_once_each(claims, 600)
    assert summary["duplicate_jobs"] == 0 and summary["wins"] == 600
    assert summary["aborts"] > 0 and summary["aborts_per_win"] == pytest.approx(summary["aborts"] / 600)
    assert attempts.loc[attempts["outcome"] == "aborted", "job_id"].notna().all(), "the job the try went for"
    # a win's cost counts the aborted tries before it: never less than the winning attempt alone
    assert summary["time_to_job_p50_ms"] >= summary["p50_ms"]
    assert summary["time_to_job_p99_ms"] >= summary["p99_ms"]
    assert read_manifest(run_dir)["checks"]["aborted"] == summary["aborts"]


def test_for_update_queues_behind_the_row_lock_and_never_loses_or_duplicates(db, tmp_path):
    # C3: correct, and the backends wait on each other's row locks (sampled wait events)
    run_dir, summary, claims, attempts = race(db, tmp_path, "for_update", 8, 800)
    assert claimed_once_each(claims, 800)
    assert summary["lost"] == 0 and summary["duplicate_jobs"] == 0 and summary["wins"] == 800
    # zero rows is read as an empty queue (strategies._settle_for_update): every worker says so once, at
    # the end, and no job was won after any of those answers
    assert summary["empty"] == 8
    assert read_manifest(run_dir)["checks"]["early_empty_answers"] == 0
    shares = summary["wait_share"]
    assert shares.get("Lock:transactionid", 0) + shares.get("Lock:tuple", 0) > 0, shares


@pytest.mark.parametrize("strategy", ["skip_locked_batch", "skip_locked_batch_in"])
def test_a_batch_claims_at_most_its_size_and_every_job_once(db, tmp_path, strategy):
    run_dir, summary, claims, attempts = race(db, tmp_path, strategy, 4, 1000, batch=5)
    assert claimed_once_each(claims, 1000)
    assert summary["wins"] == 1000 and summary["batch_size"] == 5
    assert summary["winning_attempts"] < 1000, "an attempt claims several jobs"
    # on this table the IN form's subquery runs once per statement; see test_the_in_form_claims_more_than_
    # its_limit_when_the_plan_reruns_it for the plan that does not
    assert attempts["rows"].max() <= 5 and summary["max_rows_per_attempt"] <= 5
    assert read_manifest(run_dir)["checks"]["attempts_over_batch"] == 0
    won = attempts[attempts["outcome"] == "won"]
    every_id = np.sort(np.concatenate(won["job_ids"].to_numpy()))
    assert np.array_equal(every_id, np.sort(claims["job_id"].to_numpy())), "the stored ids are the audit's"
    assert (won["job_id"] == won["job_ids"].map(min)).all() and (won["rows"] == won["job_ids"].map(len)).all()
    manifest = read_manifest(run_dir)
    assert "LIMIT 5 FOR UPDATE SKIP LOCKED" in manifest["procedure"]["sql"]
    plan = manifest["results"]["claim_plan"]  # the subquery runs once per statement in either plan
    assert ("CTE picked" in plan) if strategy == "skip_locked_batch" else ("Semi Join" not in plan or "Hash" in plan)


def test_advisory_locks_claim_every_job_once_and_the_strays_are_counted(db, tmp_path):
    run_dir, summary, claims, attempts = race(db, tmp_path, "advisory_lock", 4, 600)
    assert claimed_once_each(claims, 600) and summary["duplicate_jobs"] == 0
    assert attempts["stray_locks"].notna().all() and (attempts["stray_locks"] >= 0).all()
    assert summary["advisory_locks_leaked"] == int(attempts["stray_locks"].sum())
    checks = read_manifest(run_dir)["checks"]
    assert summary["early_empty_answers"] == checks["early_empty_answers"] >= 0


def advisory_locks(conn, pid) -> int:
    return conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %s",
                        [pid]).fetchone()[0]


def plan_with(worker, strategy, *settings, batch=5):
    """Prepare the strategy again under these planner settings (a prepared statement keeps its first plan)."""
    worker.pgconn.exec_(b"DEALLOCATE ALL")
    worker.execute("RESET ALL")
    for setting in settings:
        worker.execute(setting)
    strategy.prepare(worker.pgconn, batch)


def test_the_advisory_pick_locks_more_jobs_than_it_returns_and_the_release_counts_them(db, conn):
    """The leak the counter is for, on the plans the pick can get."""
    schema.create_queue(conn, 40)
    strategy = STRATEGIES["advisory_lock"]
    with connect(db.url) as worker:
        pgconn = worker.pgconn
        notes = AttemptNotes()
        claim, _ = strategy.steps(notes)
        # the planner's own plan: an index scan in id order whose filter takes the lock before it tests the
        # status, so it locks each taken job it walks past
        plan_with(worker, strategy)
        assert "pg_try_advisory_lock(id) AND" in "".join(
            r[0] for r in worker.execute(f"EXPLAIN {dict(strategy.statements)['pick']}"))
        assert [claim(pgconn), claim(pgconn), claim(pgconn)] == [(WON, 1), (WON, 2), (WON, 3)]
        assert notes.stray_locks == [0, 1, 2], "jobs 1 and 2 were taken before the third pick locked them"
        # a seq scan feeding a sort: the filter runs on every row before LIMIT 1 keeps one
        plan_with(worker, strategy, "SET enable_indexscan = off", "SET enable_bitmapscan = off")
        assert claim(pgconn) == (WON, 4)
        assert notes.stray_locks[-1] == 39, "locked all 40 jobs, returned one"
        assert advisory_locks(conn, pgconn.backend_pid) == 0, "and released them all"
    assert schema.status_counts(conn) == {"running": 4, "pending": 36}


def test_the_in_form_claims_more_than_its_limit_when_the_plan_reruns_its_subquery(db, conn):
    """The IN form's hazard (strategies.BATCH_CLAIM_IN): a Nested Loop Semi Join re-runs the LIMIT 2 subquery
    for every row of jobs, each run skipping what the statement already took; the CTE form runs it once."""
    rerun = ("SET enable_hashjoin = off", "SET enable_mergejoin = off", "SET enable_material = off",
             "SET enable_hashagg = off", "SET enable_sort = off")
    with connect(db.url) as worker:
        for name, claimed in (("skip_locked_batch_in", 200), ("skip_locked_batch", 2)):
            schema.create_queue(conn, 200)
            strategy = STRATEGIES[name]
            plan_with(worker, strategy, *rerun, batch=2)
            notes = AttemptNotes()
            claim, _ = strategy.steps(notes, 2)
            assert claim(worker.pgconn) == (WON, 1)
            assert notes.rows == [claimed] and len(notes.job_ids) == claimed, name
            assert schema.status_counts(conn)["running"] == claimed
        plan = "".join(r[0] for r in worker.execute(
            f"EXPLAIN {dict(STRATEGIES['skip_locked_batch_in'].statements_for(2))['claim']}"))
        assert "Nested Loop Semi Join" in plan


def test_a_serialization_failure_is_rolled_back_and_counted_as_an_aborted_attempt(db, conn, monkeypatch):
    """The claim step's own path: a rival flips job 1 between this worker's pick and its UPDATE."""
    from harness.claims import strategies

    schema.create_queue(conn, 3)
    with connect(db.url) as worker, connect(db.url) as rival:
        pgconn = worker.pgconn
        STRATEGIES["naive_serializable"].prepare(pgconn)
        _, claim_stepwise = STRATEGIES["naive_serializable"].steps(AttemptNotes())

        def rival_claims_job_one(_seconds):
            rival.execute("UPDATE claimrace.jobs SET status = 'running' WHERE id = 1")

        # the slowed-down attempt's pause between pick and claim is where the rival acts
        monkeypatch.setattr(strategies.time, "sleep", rival_claims_job_one)
        outcome, job_id, read_end, write_start = claim_stepwise(pgconn, 0.0, iter(range(1, 100)).__next__)
        monkeypatch.undo()
        assert (outcome, job_id) == (ABORTED, 1) and 0 < read_end < write_start
        assert worker.info.transaction_status.name == "IDLE", "rolled back"
        assert STRATEGIES["naive_serializable"].steps(AttemptNotes())[0](pgconn) == (WON, 2)
    assert schema.status_counts(conn) == {"running": 2, "pending": 1}


@pytest.mark.parametrize("strategy, has_read", [
    ("naive_transaction", True), ("naive_serializable", True), ("advisory_lock", True),
    ("for_update", False), ("skip_locked_batch", False), ("skip_locked_batch_in", False)])
def test_the_slowed_down_race_pauses_where_each_claim_has_a_gap(db, tmp_path, strategy, has_read):
    _, summary, claims, attempts = race(db, tmp_path, strategy, 3, 24, pause_ms=3, jitter_ms=3, batch=2)
    assert summary["wins"] == len(claims) and claims["job_id"].nunique() == 24
    won = attempts[attempts["outcome"] == "won"]
    assert won["write_start_ns"].notna().all()
    if has_read:
        assert won["read_end_ns"].notna().all()
        assert ((won["write_start_ns"] - won["read_end_ns"]) >= 3e6).all(), "the pause sits between read and write"
    else:
        assert won["read_end_ns"].isna().all(), "one statement reads and writes: no gap to pause in"


def test_an_empty_answer_is_the_end_of_the_queue_for_every_claim_without_stray_locks(db, tmp_path):
    for strategy in ("for_update", "skip_locked_batch", "naive_serializable"):
        run_dir, summary, _, attempts = race(db, tmp_path, strategy, 4, 200)
        assert read_manifest(run_dir)["checks"]["early_empty_answers"] == 0, strategy
        assert (attempts.loc[attempts["outcome"] == "empty", "rows"] == 0).all()
        assert int((attempts["outcome"] == "empty").sum()) == 4, "each worker stops at its first empty answer"


def test_outcome_codes_are_the_stored_names():
    from harness.claims.steps import OUTCOME_NAMES

    assert OUTCOME_NAMES[WON] == "won" and OUTCOME_NAMES[EMPTY] == "empty" and OUTCOME_NAMES[ABORTED] == "aborted"
