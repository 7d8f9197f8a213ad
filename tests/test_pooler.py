"""Races through PgBouncer, started and stopped by the harness: session mode keeps a client's session, transaction
mode hands its statements to any server session, and what a session-scoped claim does through each."""

from __future__ import annotations

import os

import pytest

from conftest import handed, poolers_of, survivors_of_sigkill
from harness import config
from harness.article import contents
from harness.article.findings import CONFIRMED, CORRECTED
from harness.article.sections import library_faults as worker_dies, library_poolers
from harness.errors import UserError
from harness.experiments import registry
from harness.experiments.race.trials import RaceParameters, RaceSweep
from harness.server import pooler
from harness.storage import Run, read_manifest
from harness.claims.strategies import STRATEGIES, without_cleanup

TINY_PARAMS = config.PROJECT_ROOT / "notebooks" / "params" / "tiny.yml"
needs_pgbouncer = pytest.mark.skipif(pooler.binary() is None, reason=f"pgbouncer not found: {pooler.INSTALL_HINT}")


def race_through(db, tmp_path, strategy: str, mode: str, workers: int, jobs: int):
    asked = RaceSweep(strategies=(strategy,), worker_counts=(workers,), job_count=jobs, poolers=(mode,))
    [run] = registry.measure("race", asked, tmp_path, db=db, progress=False)
    return run, read_manifest(run), Run(run).summary


def test_a_pooler_mode_is_checked_and_a_missing_pgbouncer_is_one_line(monkeypatch):
    with pytest.raises(UserError, match="pooler must be one of none, transaction, session"):
        RaceParameters(strategy="que", worker_count=2, pooler="statement").check()
    with pytest.raises(UserError, match="one process per worker"):
        RaceParameters(strategy="skip_locked", worker_count=2, pooler="session", client="asyncio").check()
    monkeypatch.setattr(pooler, "binary", lambda: None)
    # a params file names a mode without pgbouncer here; a run that starts one says in one line what to install
    RaceParameters(strategy="que", worker_count=2, pooler="transaction").check()
    with pytest.raises(UserError, match=r"pgbouncer not found: install Debian's pgbouncer \(apt-get install"):
        pooler.Pooler("host=127.0.0.1 dbname=postgres", "transaction", 2)


def test_without_pgbouncer_the_report_makes_no_pooled_run_and_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pooler, "binary", lambda: None)
    params = registry.load_params(TINY_PARAMS)
    assert registry.ensure_section(params, "pooler_claims", tmp_path) == ([], 0)
    assert registry.ensure_section(params, "library_poolers", tmp_path) == ([], 0)
    said = capsys.readouterr().err.strip().splitlines()
    assert said == [f"pooler_claims: 4 of 4 runs not made: pgbouncer not found ({pooler.INSTALL_HINT})",
                    # two modes, and transaction mode again with each library's documented setting
                    f"library_poolers: 6 of 6 runs not made: pgbouncer not found ({pooler.INSTALL_HINT})"]


def test_through_a_pooler_the_library_protocols_drop_the_harness_clean_up():
    que, good_job = without_cleanup("que"), without_cleanup("good_job")
    assert dict(que.statements)["unlock"] == "SELECT pg_advisory_unlock($1)" and not que.counts_stray_locks
    assert "held_after" not in dict(good_job.statements) and not good_job.counts_stray_locks
    assert without_cleanup("advisory_lock") is STRATEGIES["advisory_lock"]  # its release of every lock is its own
    assert without_cleanup("skip_locked") is STRATEGIES["skip_locked"]


@needs_pgbouncer
def test_through_session_mode_que_claims_each_job_once_and_leaves_no_lock(db, tmp_path):
    run, manifest, summary = race_through(db, tmp_path, "que", "session", 4, 300)
    described = manifest["results"]["pooler"]
    assert described["mode"] == "session" and described["pgbouncer"] == pooler.version()
    assert described["default_pool_size"] == 4 and described["advisory_locks_held_at_end"] == 0
    assert manifest["checks"]["passed"] and summary["duplicate_jobs"] == 0
    assert "pg_advisory_unlock_all" not in manifest["procedure"]["sql"]  # sent as Que sends it
    assert poolers_of(os.getpid()) == []  # stopped after the race (another test's, beside it, not counted)


@needs_pgbouncer
def test_through_transaction_mode_ques_unlock_misses_the_session_that_holds_the_lock(db, tmp_path):
    run, manifest, summary = race_through(db, tmp_path, "que", "transaction", 4, 300)
    assert manifest["results"]["pooler"]["mode"] == "transaction"
    # its locks outlive its clients, on the pooler's server sessions, and a session lock is re-entrant: another
    # client's poll on the session that holds a job's lock takes it too, and both resolve the job
    assert manifest["results"]["pooler"]["advisory_locks_held_at_end"] > 0 and summary["duplicate_jobs"] > 0


@needs_pgbouncer
def test_skip_locked_claims_each_job_once_through_transaction_mode(db, tmp_path):
    run, manifest, summary = race_through(db, tmp_path, "skip_locked", "transaction", 4, 300)
    assert manifest["checks"]["passed"] and summary["duplicate_jobs"] == 0
    assert manifest["results"]["pooler"]["advisory_locks_held_at_end"] == 0


@needs_pgbouncer
def test_the_article_reads_each_claim_through_both_modes_from_the_store(db, tmp_path):
    """A10 end to end: que and skip_locked raced in session and transaction mode, stored, read back by the
    article's section: que corrected (jobs claimed twice, locks left), skip_locked confirmed."""
    asked = RaceSweep(strategies=("que", "skip_locked"), worker_counts=(4,), job_count=300,
                      poolers=("session", "transaction"))
    runs = registry.measure("race", asked, tmp_path, db=db, progress=False)
    mine = contents.load(handed("pooler_claims", runs))[worker_dies.NAME]
    found = library_poolers.a10_through_a_transaction_pooler(mine.pooled, mine.claims)
    assert dict(found.parts) == {"que (claim)": CORRECTED, "skip_locked (claim)": CONFIRMED}
    assert found.verdict == CORRECTED
    assert found.ours.startswith("1 of 2 went wrong")
    assert "claimed twice" in library_poolers.pooler_table({worker_dies.NAME: mine})


@needs_pgbouncer
def test_no_pgbouncer_outlives_the_command_killed_with_sigkill(tmp_path):
    pgbouncers = lambda harness: [p for p in harness.children(recursive=True) if p.name() == "pgbouncer"]  # noqa: E731
    assert survivors_of_sigkill(["race", "--strategy", "skip_locked", "--workers", "2", "--jobs", "300000",
                                 "--pooler", "session", "--quiet", "--data-dir", str(tmp_path)], pgbouncers, 120) == []


def test_the_documented_pooler_setting_is_a_third_arm_in_transaction_mode_for_a_library_that_has_one():
    from harness.experiments.libraries.drain import LibraryParameters, LibrarySweep
    asked = LibrarySweep(libraries=("procrastinate", "chancy", "pgboss"), worker_counts=(2,), job_count=20,
                         poolers=("none", "session", "transaction"), pooler_settings=("default", "documented"))
    documented = [(run.library, run.pooler) for run in asked.runs() if run.pooler_setting == "documented"]
    # chancy and pg-boss document none; the setting is raced through the transaction pooler only
    assert documented == [("procrastinate", "transaction")]
    with pytest.raises(UserError, match="chancy documents no setting for a pooler"):
        LibraryParameters("chancy", 2, 20, pooler="transaction", pooler_setting="documented").check()
    with pytest.raises(UserError, match="for a run through the pooler, not directly"):
        LibraryParameters("procrastinate", 2, 20, pooler_setting="documented").check()
    with pytest.raises(UserError, match="in a drain, not a fault run"):
        LibraryParameters("procrastinate", 2, 6, fault="kill", pooler="transaction",
                          pooler_setting="documented").check()
    with pytest.raises(UserError, match="pooler setting must be one of default, documented"):
        LibrarySweep(libraries=("procrastinate",), pooler_settings=("off",)).check()


@needs_pgbouncer
def test_procrastinate_goes_wrong_through_the_transaction_pooler_with_defaults_and_not_with_its_setting(db, tmp_path):
    """A10's new reading end to end: procrastinate's workers through PgBouncer in session mode, in transaction mode
    with their defaults (psycopg prepares statements: they may fail), and with prepare_threshold=None (they do not,
    and the verdict is that arm's)."""
    from harness.experiments.libraries.drain import LibrarySweep
    asked = LibrarySweep(libraries=("procrastinate",), worker_counts=(4,), job_count=100,
                         poolers=("session", "transaction"), pooler_settings=("default", "documented"))
    runs = registry.measure("libraries", asked, tmp_path, db=db, progress=False)
    settings = sorted((Run(run).summary["pooler"], Run(run).summary["pooler_setting"]) for run in runs)
    assert settings == [("session", "default"), ("transaction", "default"), ("transaction", "documented")]
    mine = contents.load(handed("library_poolers", runs))[worker_dies.NAME]
    found = library_poolers.a10_through_a_transaction_pooler(mine.pooled, mine.claims, library_poolers.pgbouncer_version(mine))
    assert dict(found.parts) == {"procrastinate": CONFIRMED}
    # with defaults, a worker fails only where PgBouncer hands it a server connection another worker prepared on:
    # with a pool as large as the workers that is timing (about 1 run in 5 here ran clean), so either is read out
    assert any(f"procrastinate: defaults: {outcome}" in found.note for outcome in ("went wrong (", "ran clean;"))
    assert ("with the documented setting (`prepare_threshold=None`): ran clean (the verdict is the documented "
            "setting's)") in found.note
    assert f"PgBouncer {pooler.version()};" in found.note
