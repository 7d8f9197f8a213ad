"""The libraries modelled for a fault run (harness.libraries.models), on the real server: each model's rules, statement
by statement on its own connections, then two models under a killed worker through the command and the article."""

from __future__ import annotations

import json
import time

import psycopg
import pytest

from conftest import forked_workers, handed, run_cli, survivors_of_sigkill
from harness import libraries
from harness.article import contents
from harness.article.findings import CONFIRMED, CORRECTED
from harness.article.sections import library_faults as worker_dies
from harness.config import SCHEMA
from harness.errors import UserError
from harness.experiments.libraries import drain as library_runs
from harness.experiments import library_runtime as runtime
from harness.libraries import models
from harness.libraries.good_job import adapter as good_job
from harness.libraries.oban import adapter as oban
from harness.libraries.que import adapter as que
from harness.libraries.river import adapter as river
from harness.libraries.solid_queue import adapter as solid_queue
from harness.server import faults


@pytest.fixture
def model_db(db):
    """A fresh database with a model's table and 3 jobs; a function that opens a worker's connection to it."""
    with db.connect() as admin:
        runtime.fresh_database(admin)
    url = runtime.database_url(db.url)
    models.install(url)
    models.enqueue(url, 3)
    opened = []

    def connect():
        conn = psycopg.connect(url, autocommit=True, cursor_factory=psycopg.RawCursor)
        opened.append(conn)
        return conn
    yield connect
    for conn in opened:
        conn.close()
    with db.connect() as admin:
        runtime.drop_database(admin)


def _status(conn, job):
    return models.one(conn, f"SELECT status FROM {SCHEMA}.jobs WHERE id = $1", job)


def _started_long_ago(conn, job):
    """As if the job had been running past every raced recovery setting."""
    conn.execute(f"UPDATE {SCHEMA}.jobs SET started_at = now() - interval '1 minute' WHERE id = $1", (job,))


def test_river_completes_a_job_only_while_it_runs_and_oban_whatever_became_of_it(model_db):
    a, b = model_db(), model_db()
    # River: job 1 rescued and run again by b; a, which lost it, still completes it while b runs it
    job = river.PROTOCOL.claim(a, None)
    _started_long_ago(a, job)
    river.PROTOCOL.maintain(a, None)
    # rescued, it waits its first retry's backoff (1 s), and then the scheduler's pass
    assert _status(a, job) == "retryable"
    assert models.one(a, f"SELECT available_at - now() FROM {SCHEMA}.jobs WHERE id = $1", job).total_seconds() \
        == pytest.approx(river.SETTINGS["first_retry_s"], abs=0.1)
    a.execute(models.SCHEDULE)
    assert _status(a, job) == "retryable", "a pass before its time leaves it waiting"
    assert river.PROTOCOL.claim(b, None) != job
    _due(a, job)
    a.execute(models.SCHEDULE)
    assert _status(a, job) == "pending"
    assert river.PROTOCOL.claim(b, None) == job
    river.PROTOCOL.complete(a, job, None)
    assert _status(a, job) == "done"
    # job 3 rescued and not yet run again: a's late completion leaves it waiting to run again
    job = river.PROTOCOL.claim(a, None)
    _started_long_ago(a, job)
    river.PROTOCOL.maintain(b, None)
    river.PROTOCOL.complete(a, job, None)
    assert _status(a, job) == "retryable"
    # Oban: rescued with no backoff, the stager's pass makes it available; a's late completion goes through
    a.execute(f"UPDATE {SCHEMA}.jobs SET status = 'pending'")
    job = oban.PROTOCOL.claim(a, None)
    _started_long_ago(a, job)
    oban.PROTOCOL.maintain(b, None)
    a.execute(models.SCHEDULE)
    assert _status(a, job) == "pending"
    oban.PROTOCOL.complete(a, job, None)
    assert _status(a, job) == "done"
    # a job running within the setting is not rescued
    job = oban.PROTOCOL.claim(a, None)
    oban.PROTOCOL.maintain(b, None)
    assert _status(a, job) == "running"


def _due(conn, job):
    """As if its retry's time had come."""
    conn.execute(f"UPDATE {SCHEMA}.jobs SET available_at = now() - interval '1 second' WHERE id = $1", (job,))


def test_a_scheduling_pass_is_due_once_per_interval_of_the_clock(monkeypatch):
    clock = [100.2]
    monkeypatch.setattr(models.time, "time", lambda: clock[0])
    ticks = models.Ticks(5.0)
    assert ticks.due(), "the first pass"
    clock[0] = 104.9
    assert not ticks.due(), "within the same 5 s"
    clock[0] = 105.1
    assert ticks.due() and not ticks.due(), "once past the boundary, and once only"


def test_each_model_s_wait_after_its_recovery_is_its_sources_and_bounds_the_runs():
    from harness.experiments.libraries import faults as library_faults
    from harness.experiments.libraries import probe as stale_completion

    # River: the first retry's backoff at its most (+10 %) and a scheduler pass; Oban: a stager pass
    assert libraries.recovers_within_s("river") == pytest.approx(3.0 + 1.1 + 5.0)
    assert libraries.recovers_within_s("oban") == pytest.approx(3.0 + 1.0)
    assert libraries.recovers_within_s("que") is None
    assert library_faults.pause_s("river") == pytest.approx(3.0 + 6.1 + library_faults.PAUSE_MARGIN_S)
    assert stale_completion.hand_on_bound_s("river") > libraries.recovers_within_s("river")


@pytest.mark.parametrize("model", [que, good_job], ids=["que", "good_job"])
def test_a_session_advisory_lock_keeps_a_job_while_its_session_lives_and_frees_it_when_it_ends(model_db, model):
    a, b = model_db(), model_db()
    job = model.PROTOCOL.claim(a, None)
    assert model.PROTOCOL.start(a, job, None)
    # a holds it (paused, its session open): b takes the next job, not a's
    other = model.PROTOCOL.claim(b, None)
    assert other not in (None, job)
    model.PROTOCOL.release(b, other, None)
    backend = a.info.backend_pid
    a.close()  # a's worker killed: its session ends and its lock drops; the job is free once it has, started or not
    c = model_db()
    _wait_until_gone(c, backend)  # the server ends the backend after the client closed, on a busy machine later
    assert model.PROTOCOL.claim(c, None) == job
    assert model.PROTOCOL.start(c, job, None)


def _wait_until_gone(conn, backend: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = $1", (backend,)).fetchone():
        assert time.monotonic() < deadline, f"backend {backend} still there {timeout_s:g} s after its client closed"
        time.sleep(0.02)


def test_solid_queue_fails_a_silent_process_claims_and_its_late_completion_does_nothing(model_db):
    solid_queue._pruned_at[0] = 0.0
    a, b = model_db(), model_db()
    me, peer = solid_queue.PROTOCOL.register(a), solid_queue.PROTOCOL.register(b)
    job = solid_queue.PROTOCOL.claim(a, me)
    assert solid_queue.PROTOCOL.maintain(b, peer) is True
    assert _status(a, job) == "running"  # a's heartbeat is fresh: not pruned
    a.execute(f"UPDATE {SCHEMA}.processes SET last_heartbeat_at = now() - interval '1 minute' WHERE id = $1", (me,))
    assert solid_queue.PROTOCOL.maintain(b, peer) is True
    assert _status(a, job) == "running"  # b pruned less than a threshold ago: not yet
    solid_queue._pruned_at[0] = 0.0  # a threshold later
    assert solid_queue.PROTOCOL.maintain(b, peer) is True
    assert _status(a, job) == "failed"
    solid_queue.PROTOCOL.complete(a, job, me)  # a wakes and completes: its claim is gone, so nothing
    assert _status(a, job) == "failed"
    assert solid_queue.PROTOCOL.maintain(a, me) is False  # its heartbeat finds its process gone: it shuts down
    # a job completed by the worker that holds it
    job = solid_queue.PROTOCOL.claim(b, peer)
    solid_queue.PROTOCOL.complete(b, job, peer)
    assert _status(b, job) == "done"


def test_models_are_named_apart_run_only_under_a_fault_and_say_what_they_stand_for():
    assert library_runs.parse_libraries("models") == libraries.MODELS
    assert library_runs.parse_libraries("pgmq,models,que") == ("pgmq", *libraries.MODELS)
    assert library_runs.parse_libraries("all") == libraries.NAMES  # `all` is the libraries that run here
    assert library_runs.parse_libraries("all, models") == (*libraries.NAMES, *libraries.MODELS)
    assert not set(libraries.MODELS) & set(libraries.NAMES)
    for name in libraries.MODELS:
        module = libraries.get(name)
        assert module.NAME == name and libraries.version(name).startswith("model of ")
        assert {"mechanism", "setting", "default_s", "raced_s"} <= set(module.RECOVERY)
        with pytest.raises(UserError, match="modelled here for a fault run only"):
            library_runs.LibraryParameters(name, 3, 6)
    done = run_cli("libraries", "--library", "river", "--data-dir", "/nonexistent")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "--fault" in done.stderr


def test_a_killed_worker_job_runs_again_at_once_under_que_and_is_failed_for_good_under_solid_queue(tmp_path):
    done = run_cli("libraries", "--library", "que,solid_queue", "--fault", "kill", "--workers", "2", "--jobs", "2",
                   "--json", "--quiet", "--data-dir", str(tmp_path), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {row["library"]: row for row in map(json.loads, done.stdout.splitlines())}
    assert rows["que"]["fault_landed"] and rows["solid_queue"]["fault_landed"]
    # Que: the killed worker's session ended, its lock with it; the other worker ran the job, once completed
    assert (rows["que"]["completed_once"], rows["que"]["executed_twice"], rows["que"]["stuck"]) == (2, 1, 0), rows
    assert rows["que"]["recovery_s"] is not None and rows["que"]["recovery_setting_s"] is None
    # Solid Queue: pruned after the raced threshold, its claimed job failed, and nothing runs it again
    assert (rows["solid_queue"]["completed_once"], rows["solid_queue"]["stuck"], rows["solid_queue"]["failed"]) \
        == (1, 0, 1), rows
    assert rows["solid_queue"]["recovery_s"] is None
    assert rows["solid_queue"]["recovery_setting_s"] == solid_queue.RECOVERY["raced_s"]
    # every job completed or failed for good: the run ended there, not at its bound
    assert rows["solid_queue"]["waited_s"] < rows["solid_queue"]["bound_s"] / 2, rows["solid_queue"]
    # the article reads the stored runs, each model named as one
    stored = sorted((tmp_path / "libraries").iterdir())
    mine = contents.load(handed("library_faults", stored))[worker_dies.NAME]
    found = worker_dies.a9_a_dead_workers_job_completes_once(mine.faults)
    assert dict(found.parts) == {"que (model)": CONFIRMED, "solid_queue (model)": CORRECTED}
    assert "solid_queue (model): after kill, 1 failed." in found.note
    ledger = worker_dies.ledger_table({worker_dies.NAME: mine})
    assert "que (model)" in ledger and "(model): a library that does not run here" in ledger
    assert "failed for good" in ledger


def test_que_worker_exits_once_its_locker_connection_is_cut_and_never_completes_a_job_it_lost(tmp_path):
    """Que's locker does not reconnect: a terminated backend ends the worker, its running job with it."""
    done = run_cli("libraries", "--library", "que", "--fault", "terminate", "--workers", "2", "--jobs", "2",
                   "--json", "--quiet", "--data-dir", str(tmp_path), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    [row] = map(json.loads, done.stdout.splitlines())
    assert row["fault_landed"] and row["worker_exits"] >= 1, row
    assert (row["completed_by_stale_holder"], row["completed_twice"], row["stuck"], row["lost"]) == (0, 0, 0, 0), row


def test_no_model_worker_outlives_the_command_killed_with_sigkill_while_one_is_paused(tmp_path):
    """A model's worker runs its recovery loop on a thread of its own: a paused one still dies with the command."""
    paused = lambda harness: [p for p in forked_workers(harness) if faults.stop_state(p.pid) == "T"]  # noqa: E731
    assert survivors_of_sigkill(["libraries", "--library", "solid_queue", "--fault", "pause", "--quiet",
                                 "--data-dir", str(tmp_path)], paused, 120) == []


def test_river_production_is_a_pair_its_client_accepts_with_its_fixed_30_s_rescuer():
    from harness.experiments.libraries import probe

    river = libraries.get("river")
    raced, defaults = river.PRODUCTION["raced"], river.PRODUCTION["defaults"]
    # client.go:590-592, after the defaults: RescueStuckJobsAfter may not be less than JobTimeout, which must
    # outlast the probe's job or cancel it
    assert raced["RescueStuckJobsAfter_s"] >= raced["JobTimeout_s"] > probe.JOB_S
    assert raced["rescuer_interval_s"] == defaults["rescuer_interval_s"] == river.SETTINGS["rescuer_interval_default_s"]
    # the default row's shortened setting is one River would refuse beside its default JobTimeout, as the docs say
    assert river.RECOVERY["raced_s"] < defaults["JobTimeout_s"]
    assert libraries.recovers_within_s("river", "production") == pytest.approx(3.0 + 30.0 + river.RECOVERY["then_s"])
    assert probe.hand_on_bound_s("river", "production") > libraries.recovers_within_s("river", "production")
