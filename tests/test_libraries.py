"""The job libraries raced with their own workers, on the real server: every installed library drains a small queue
with two workers, audited on its own jobs table; the counts of jobs run or claimed twice can say yes and no."""

from __future__ import annotations

import json
import tempfile

import pandas as pd
import psutil
import pytest

from conftest import forked_workers, run_cli, survivors_of_sigkill
from harness import libraries
from harness.errors import UserError
from harness.experiments.libraries import drain as library_runs
from harness.experiments.libraries import summary as run_summary
from harness.experiments import registry
from harness.experiments import library_runtime as runtime
from harness.server import activity, database, pgstats
from harness.storage import read_json
from harness.claims.strategies import STRATEGIES

INSTALLED = libraries.available()


def test_the_libraries_this_project_races_install_here():
    # the Python ones from the lock file always; the Node ones wherever make install could run npm ci
    python_ones = [name for name in libraries.NAMES if libraries.get(name).installed_version is None]
    assert [name for name in INSTALLED if name in python_ones] == python_ones
    missing = [name for name in libraries.NAMES if name not in INSTALLED]
    if missing:
        pytest.skip(f"not installed here: {', '.join(missing)} ({libraries.install_hint(missing[0])})")


@pytest.mark.parametrize("name", INSTALLED)
def test_a_library_drains_a_small_queue_with_its_own_workers_each_job_once(db, tmp_path, name):
    [run] = registry.measure("libraries", library_runs.LibraryParameters(name, 2, 120), tmp_path, db, progress=False)
    manifest = read_json(run / "manifest.json")
    summary = manifest["results"]["summary"]
    assert manifest["checks"]["passed"], manifest["checks"]
    assert summary["version"] == libraries.version(name) and manifest["procedure"]["source"]
    assert (summary["executed"], summary["executed_twice"], summary["duplicate_claims"], summary["not_executed"]) \
        == (120, 0, 0, 0)
    assert summary["jobs_per_s"] > 0 and summary["pickup_p99_ms"] >= summary["pickup_p50_ms"] >= 0
    assert summary["wal_bytes_per_job"] > 0 and summary["transactions_per_job"] > 0
    assert summary["statements_per_job"] is None or summary["statements_per_job"] > 0
    # both sides of the CPU-bound rule were read: the workers' and their backends' wait for a CPU
    assert 0 <= summary["client_runnable_share"] < 1
    backend = summary["backend_runnable_share"]
    # read every 0.1 s: a drain of a few tenths may end before the backends are read twice
    assert (0 <= backend < 1) if summary["drain_s"] >= 0.5 else (backend is None or 0 <= backend < 1), summary
    assert summary["cpu_bound"] is activity.cpu_bound(summary["client_runnable_share"],
                                                      summary["client_running_share"],
                                                      summary["backend_runnable_share"])
    audit = pd.read_parquet(run / "audit.parquet")
    assert (audit["event"] == "enqueued").sum() == 120 and audit.loc[audit["event"] == "claimed", "job_id"].is_unique
    executions = pd.read_parquet(run / "executions.parquet")
    assert sorted(executions["job_id"]) == sorted(audit.loc[audit["event"] == "enqueued", "job_id"])
    assert set(executions["worker"]) <= {0, 1}
    with db.connect() as conn:  # the run's database is gone, and none of its workers' sessions is left
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s",
                            (runtime.DATABASE,)).fetchone()[0] == 0
    if not (run / "statements.parquet").exists():
        pytest.skip("the server is not one started here: it logs no statements to find the claim among")
    _its_model_is_its_logged_claim(db, name, pd.read_parquet(run / "statements.parquet"), summary)


def _its_model_is_its_logged_claim(db, name, statements, summary):
    """The library's claim, as the server logged it while the library ran, is the one its tight-loop model sends:
    once per job (and a worker's last fetch that found nothing), a SKIP LOCKED claim in its text or in the body
    of the function it calls; and the model sends no more statements per job than the library did."""
    module, model = libraries.get(name), STRATEGIES[name]
    # the harness's own statements on the library's database are not the library's
    assert not statements["statement"].str.contains("claimrace_audit|pg_stat_|pg_current_wal_lsn").any()
    logged = statements[statements["statement"].str.contains(module.CLAIM_LOGGED, case=False, regex=False)]
    assert summary["executed"] <= int(logged["calls"].sum()) <= summary["executed"] * 1.5, logged
    text = _function_body(db, module) if module.CLAIM_FUNCTION else " ".join(logged["statement"])
    assert "SKIP LOCKED" in text.upper()
    assert model.statements_per_attempt <= round(summary["statements_per_job"])


def _function_body(db, module) -> str:
    """The body of the function a library's claim calls, from its own schema installed in a database of its own."""
    with db.connect() as admin:
        admin.execute("DROP DATABASE IF EXISTS claimrace_claim_function WITH (FORCE)")
        admin.execute("CREATE DATABASE claimrace_claim_function")
    try:
        url = runtime.database_url(db.url, "claimrace_claim_function")
        module.install(url)
        with database.connect(url) as conn:
            return " ".join(row[0] for row in conn.execute(
                "SELECT pg_get_functiondef(oid) FROM pg_proc WHERE proname = %s", (module.CLAIM_FUNCTION,)))
    finally:
        with db.connect() as admin:
            admin.execute("DROP DATABASE IF EXISTS claimrace_claim_function WITH (FORCE)")


def test_a_run_that_fails_leaves_no_execution_logs_behind(db, tmp_path, monkeypatch):
    def broken(url):
        raise RuntimeError("its schema could not be installed")

    monkeypatch.setattr(libraries.get(INSTALLED[0]), "install", broken)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "temp"))
    (tmp_path / "temp").mkdir()
    with pytest.raises(RuntimeError, match="its schema could not be installed"):
        library_runs.measure_libraries(db, library_runs.LibraryParameters(INSTALLED[0], 1, 5), "r-failed")
    assert list((tmp_path / "temp").iterdir()) == []


def test_idle_listening_sessions_cost_a_transaction_to_read_notifications(db):
    # none listening: the NOTIFYs cost the listeners nothing; three: each reads them in transactions of its own,
    # at least one each and at most one per notification (a read takes every notification waiting). A database of
    # its own, so that no other test's sessions flush their counts into the window.
    name = "claimrace_listeners"
    with db.connect() as admin:
        runtime.fresh_database(admin, name)
    try:
        url = runtime.database_url(db.url, name)
        assert abs(pgstats.notification_transactions(url, 0, 40)["transactions"]) <= 1
        read = pgstats.notification_transactions(url, 3, 40)
        assert (read["listeners"], read["notifications"]) == (3, 40) and 3 <= read["transactions"] <= 3 * 40 + 1
    finally:
        with db.connect() as admin:
            runtime.drop_database(admin, name)


def listening(transactions: dict[int, list[float]]) -> pd.DataFrame:
    """A library's runs: transactions per job per worker count, each with the listener probe's figures."""
    return pd.DataFrame([{"library": "pgqueuer", "worker_count": w, "transactions_per_job": t,
                          "probe_listeners": w, "probe_notifications": 100, "probe_transactions": 100 * w}
                         for w, values in transactions.items() for t in values])


def test_the_listeners_sentence_says_grown_flat_or_one_count_from_the_ranges():
    from harness.article.sections.libraries import _listeners
    grown = _listeners(listening({1: [3.0, 3.1], 32: [31.5, 32.4]}))
    assert "grow with its workers, 3.0 to 3.1 at one worker to 31.5 to 32.4 at 32 workers" in grown
    assert "100 NOTIFYs to 32 idle listening sessions cost 3,200 transactions" in grown
    flat = _listeners(listening({1: [3.0, 4.0], 4: [3.5, 3.9]}))  # the ranges overlap
    assert "do not grow beyond their spread" in flat and "grow with" not in flat
    one = _listeners(listening({4: [5.6, 6.0]}))
    assert "grow" not in one and "100 NOTIFYs to 4 idle listening sessions cost 400 transactions" in one
    assert _listeners(listening({4: [5.6]}).assign(probe_transactions=None)) == ""


def summarised(audit_rows, execution_rows, jobs=3):
    audit = pd.DataFrame(audit_rows, columns=["job_id", "event", "at_ns", "txid", "pid"])
    executions = pd.DataFrame(execution_rows, columns=["job_id", "worker", "at_ns"])
    timings = pd.DataFrame([{"worker": 0, "pid": 1, "released_ns": 0, "ended_ns": 5_000_000, "cpu_ns": 1,
                             "run_delay_ns": 1}], columns=["worker", "pid", "released_ns", "ended_ns", "cpu_ns",
                                                           "run_delay_ns"])
    counters = {"transactions": 0, "updates": 0, "hot_updates": 0, "dead_tuples": 0}
    return run_summary.summarise(library_runs.LibraryParameters("procrastinate", 2, jobs), audit, executions,
                                  timings, 0, 5_000_000, 100, counters, counters, None, None, 0, 0, {})


def test_a_job_run_twice_or_claimed_twice_is_counted_and_a_clean_drain_counts_none():
    enqueued = [(j, "enqueued", 0, 1, 1) for j in (1, 2, 3)]
    once = [(j, "claimed", 1_000_000 * j, 10 + j, 2) for j in (1, 2, 3)]
    clean = summarised(enqueued + once, [(1, 0, 1_100_000), (2, 1, 2_100_000), (3, 0, 3_100_000)])
    assert (clean["executed"], clean["executed_twice"], clean["duplicate_claims"]) == (3, 0, 0)
    twice = summarised(enqueued + once + [(2, "claimed", 2_500_000, 20, 3)],
                       [(1, 0, 1_100_000), (2, 1, 2_100_000), (2, 0, 2_600_000), (3, 0, 3_100_000)])
    assert (twice["executed"], twice["executed_twice"], twice["duplicate_claims"]) == (3, 1, 1)
    short = summarised(enqueued + once[:2], [(1, 0, 1_100_000), (2, 1, 2_100_000)])
    assert short["not_executed"] == 1


def test_the_command_prints_one_json_object_per_library_and_worker_count(tmp_path):
    done = run_cli("libraries", "--library", "all", "--workers", "4", "--jobs", "500", "--json", "--quiet",
                   "--data-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [(r["library"], r["worker_count"]) for r in rows] == [(name, 4) for name in INSTALLED]
    for row in rows:
        assert {"library", "version", "level", "worker_count", "jobs", "executed", "executed_twice",
                "duplicate_claims", "jobs_per_s", "statements_per_job", "wal_bytes_per_job",
                "pickup_p99_ms"} <= set(row)
        queued = min(500, libraries.get(row["library"]).JOB_CAP or 500)  # pg-boss paces itself
        assert row["level"] == "own_worker" and row["jobs"] == queued and row["executed"] == queued


def test_an_unknown_library_is_one_line_naming_the_known_ones_and_exit_2(tmp_path):
    done = run_cli("libraries", "--library", "celery", "--workers", "1", "--jobs", "10", "--data-dir", str(tmp_path))
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "celery" in line and all(name in line for name in libraries.NAMES)
    with pytest.raises(UserError, match="known: procrastinate"):
        library_runs.LibrarySweep(libraries=("celery",))


def test_a_sweep_too_big_for_the_machine_is_refused_in_one_line():
    with pytest.raises(UserError, match="worker count must be between 1 and 64"):
        library_runs.LibrarySweep(worker_counts=(65,))
    with pytest.raises(UserError, match="job count must be between"):
        library_runs.LibraryParameters("pgqueuer", 1, 10_000_000)


def _all_started(count: int, started):
    """started(harness) once it finds `count` processes, [] before."""
    def find(harness):
        found = started(harness)
        return found if len(found) >= count else []
    return find


def test_no_worker_outlives_the_command_killed_with_sigkill(tmp_path):
    """The harness killed mid-drain: its worker processes die with it (PR_SET_PDEATHSIG)."""
    assert survivors_of_sigkill(["libraries", "--library", INSTALLED[0], "--workers", "4", "--jobs", "100000",
                                 "--quiet", "--data-dir", str(tmp_path)], _all_started(4, forked_workers), 120) == []


NODE_LIBRARIES = [name for name in INSTALLED if libraries.get(name).installed_version is not None]


@pytest.mark.skipif(not NODE_LIBRARIES, reason="no Node job library is installed here (make install, with node)")
def test_no_node_worker_outlives_the_command_killed_with_sigkill(tmp_path):
    """The harness killed mid-drain: its worker processes die with it, and the node process each one started dies
    with that worker."""
    script = str(libraries.get(NODE_LIBRARIES[0]).SCRIPT)
    nodes = lambda harness: [p for p in harness.children(recursive=True) if _runs(p, script, "work")]  # noqa: E731
    assert survivors_of_sigkill(["libraries", "--library", NODE_LIBRARIES[0], "--workers", "2", "--jobs", "20000",
                                 "--quiet", "--data-dir", str(tmp_path)], _all_started(2, nodes), 180) == []


def _runs(process: psutil.Process, *words: str) -> bool:
    try:
        line = " ".join(process.cmdline())
    except psutil.Error:
        return False
    return all(word in line for word in words)


def test_a_library_not_installed_is_one_line_and_the_sweep_races_the_rest(tmp_path, monkeypatch):
    # pg-boss without node: one line naming what to install; beside an installed library, the sweep leaves it out
    monkeypatch.setattr(libraries.get("pgboss"), "installed_version", lambda: None)
    with pytest.raises(UserError, match="pgboss is not installed here: install Node.js 20 and npm"):
        library_runs.LibraryParameters("pgboss", 1, 5).check()
    sweep = library_runs.LibrarySweep(libraries=("pgboss", "pgmq"), worker_counts=(1,), job_count=5)
    assert [run.library for run in sweep.runs()] == ["pgmq"]
    with pytest.raises(UserError, match="none of pgboss is installed here"):
        library_runs.LibrarySweep(libraries=("pgboss",), worker_counts=(1,), job_count=5).runs()
