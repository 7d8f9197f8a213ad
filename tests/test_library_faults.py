"""The job libraries' own workers under injected faults, on the real server: a killed, paused or cut-off worker and a
restarted server, each fault seen to land, and every job in the ledger as exactly one of its classes."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import forked_workers, handed, poolers_of, run_cli, survivors_of_sigkill
from harness import libraries
from harness.article import contents
from harness.article.findings import CONFIRMED, CORRECTED
from harness.article.sections import library_faults as worker_dies
from harness.errors import ConservationError, UserError
from harness.experiments.libraries import drain as library_runs
from harness.experiments.libraries import statements as statement_log
from harness.experiments import registry
from harness.experiments.libraries import faults as library_faults
from harness.server import faults, pooler
from harness.storage import read_json

S = 1_000_000_000  # ns


def _audit(rows):
    return pd.DataFrame([(job, event, int(at * S)) for job, event, at in rows], columns=["job_id", "event", "at_ns"])


def _lines(rows):
    return pd.DataFrame([(job, int(at * S), pid, event, 0) for job, at, pid, event in rows],
                        columns=["job_id", "at_ns", "pid", "event", "worker"])


VICTIM, HEALTHY = 100, 200


def test_the_ledger_puts_each_job_in_one_class_with_its_marks():
    # the fault at t=2 s hits pid 100's job; pid 200 is alive at the bound
    audit = _audit([(job, "enqueued", 0) for job in range(7)] + [
        (0, "completed", 1.5),                       # completed once
        (1, "completed", 3.5), (1, "completed", 6),  # completed twice
        (5, "completed", 6),                         # while pid 200 still ran it: pid 100's, late
        (6, "completed", 5.1)])                      # pid 200's, before pid 100 woke up
    lines = _lines([
        (0, 0.5, HEALTHY, "start"), (0, 1.4, HEALTHY, "end"),
        (1, 1.0, HEALTHY, "start"), (1, 3.4, HEALTHY, "end"), (1, 4.0, HEALTHY, "start"), (1, 5.9, HEALTHY, "end"),
        (2, 1.0, VICTIM, "start"),                   # killed with it: still in the table
        (3, 1.0, VICTIM, "start"),                   # gone from the table without a completion
        (4, 9.0, HEALTHY, "start"),                  # running at the bound
        (5, 1.0, VICTIM, "start"), (5, 4.0, HEALTHY, "start"), (5, 5.8, VICTIM, "end"), (5, 7.0, HEALTHY, "end"),
        (6, 1.0, VICTIM, "start"), (6, 4.5, HEALTHY, "start"), (6, 5.0, HEALTHY, "end"), (6, 8.0, VICTIM, "end")])
    ledger = library_faults.ledger(audit, lines, in_table={2, 4}, live_pids={HEALTHY}, fault_ns=2 * S,
                                   victim_pid=VICTIM).set_index("job_id")
    assert list(ledger["state"]) == ["completed_once", "completed_twice", "stuck", "lost", "in_progress_at_timeout",
                                     "completed_once", "completed_once"]
    assert list(ledger["executed_twice"]) == [False, True, False, False, False, True, True]
    assert list(ledger["completed_by_stale_holder"]) == [False] * 5 + [True, False]
    # a kill or a pause hits only its victim's job: pid 200's job 1, running at the fault, was not hit
    assert list(ledger["hit_by_fault"]) == [False, False, True, True, False, True, True]
    assert ledger.loc[5, "recovery_s"] == pytest.approx(2.0) and ledger.loc[6, "recovery_s"] == pytest.approx(2.5)
    assert pd.isna(ledger.loc[2, "recovery_s"])
    totals = library_faults.totals(ledger.reset_index())
    assert (totals["completed_once"], totals["completed_twice"], totals["stuck"], totals["lost"],
            totals["in_progress_at_timeout"], totals["executed_twice"], totals["completed_by_stale_holder"]) \
        == (3, 1, 1, 1, 1, 3, 1)
    assert (totals["jobs_hit"], totals["jobs_hit_recovered"]) == (4, 2)
    # a job in the library's failed state is failed for good, not stuck
    failed = library_faults.ledger(audit, lines, in_table={2, 4}, live_pids={HEALTHY}, fault_ns=2 * S,
                                   victim_pid=VICTIM, failed={2}).set_index("job_id")
    assert failed.loc[2, "state"] == "failed" and library_faults.totals(failed.reset_index())["failed"] == 1
    assert totals["recovery_s"] == pytest.approx(2.25)
    # a fault on every connection (terminate, restart) hits every job running then: job 1's too
    everyone = library_faults.ledger(audit, lines, {2, 4}, {HEALTHY}, 2 * S, victim_pid=None).set_index("job_id")
    assert everyone.loc[1, "hit_by_fault"] and everyone.loc[1, "recovery_s"] == pytest.approx(2.0)
    # the killed process's job is not in progress: with the victim alive at the bound it would be
    alive = library_faults.ledger(audit, lines, {2, 4}, {HEALTHY, VICTIM}, 2 * S, VICTIM).set_index("job_id")
    assert alive.loc[2, "state"] == "in_progress_at_timeout"
    none_recovered = library_faults.totals(ledger.reset_index().assign(recovery_s=None))
    assert none_recovered["recovery_s"] is None


def test_each_job_counts_the_completions_sent_for_it_beside_those_applied_or_says_they_cannot_be_seen():
    audit = _audit([(job, "enqueued", 0) for job in range(3)] + [(0, "completed", 1.5), (1, "completed", 2.5)])
    lines = _lines([(0, 0.5, HEALTHY, "start"), (0, 1.4, HEALTHY, "end"), (1, 1.0, VICTIM, "start"),
                    (1, 2.0, HEALTHY, "start"), (1, 2.4, HEALTHY, "end"), (2, 1.0, VICTIM, "start")])
    args = dict(in_table={2}, live_pids={HEALTHY}, fault_ns=int(1.2 * S), victim_pid=VICTIM)
    # job 1's stale holder sent a completion that changed nothing; job 2's killed holder sent none
    seen = library_faults.ledger(audit, lines, sent={0: 1, 1: 2, 2: 0}, **args).set_index("job_id")
    assert list(seen["completions_sent"]) == [1, 2, 0] and list(seen["completions"]) == [1, 1, 0]
    counted = library_faults.totals(seen.reset_index())
    assert (counted["completions_sent"], counted["completions_applied"], counted["completions_not_applied"]) == (3, 2, 1)
    # without the server's log, what was sent cannot be seen: None, never 0
    unseen = library_faults.ledger(audit, lines, **args)
    assert unseen["completions_sent"].isna().all()
    counted = library_faults.totals(unseen)
    assert (counted["completions_sent"], counted["completions_applied"], counted["completions_not_applied"]) \
        == (None, 2, None)


@pytest.mark.parametrize("parameters, which, expected", [
    ("$1 = 'claimrace', $2 = '7'", "$2", [7]),                     # one id (pgmq's archive)
    ("$1 = '{5,6}', $2 = '{successful,successful}'", "$1", [5, 6]),  # an array of ids (PgQueuer's batch)
    ("$1 = 'q', $2 = '{aa-1,\"bb-2\"}', $3 = NULL", "$2", [1, 2]),  # uuids, read as the audit's ids (pg-boss)
    ("$1 = '99'", "$1", []),                                        # no job enqueued has that id
    ("$1 = NULL", "$1", []), ("", "$1", [])])                       # nothing bound: DDL, a statement inline
def test_a_completion_statement_names_its_jobs_by_its_declared_parameter(parameters, which, expected):
    keys = {"5": 5, "6": 6, "7": 7, "aa-1": 1, "bb-2": 2}
    assert statement_log.named_jobs(parameters, which, keys) == expected


def test_a_completion_marker_that_matches_other_statements_or_misses_the_completion_fails_the_run(db, tmp_path,
                                                                                                  monkeypatch):
    """The checks on what was sent can fail: a marker that also matches pgmq's schema (its DDL names no job), and
    one that matches no completion (the audit then holds completions never sent)."""
    pgmq = libraries.get("pgmq")
    for marker, broken in (("pgmq.", "every_completion_sent_names_a_job"),
                           ("no statement says this", "no_completion_applied_unsent")):
        monkeypatch.setattr(pgmq, "COMPLETION_LOGGED", marker)
        with pytest.raises(ConservationError, match=broken):
            registry.measure("libraries", library_runs.LibraryParameters("pgmq", 2, 2, fault="terminate"),
                             tmp_path, db, progress=False)


# the libraries whose completion statements no other fault-run test here reads (pgmq, procrastinate, que and Solid
# Queue have theirs)
UNREAD = ("pgqueuer", "chancy", "pgboss", "graphile_worker", "river", "oban", "good_job")


def test_every_library_s_completion_marker_names_only_its_completions_in_a_run(tmp_path):
    """Each library's COMPLETION_LOGGED over everything the server logged from its schema's install on: every
    statement it matches names an enqueued job, and every completion applied was sent (the run's checks; a run that
    fails them is not stored and the command exits non-zero)."""
    asked = [name for name in UNREAD if libraries.is_model(name) or name in libraries.available()]
    done = run_cli("libraries", "--library", ",".join(asked), "--fault", "terminate", "--workers", "2", "--jobs", "2",
                   "--json", "--quiet", "--data-dir", str(tmp_path), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {row["library"]: row for row in map(json.loads, done.stdout.splitlines())}
    assert sorted(rows) == sorted(asked)
    for row in rows.values():
        assert row["completions_applied"] == 2 and row["completions_sent"] >= 2, row
    for run in (tmp_path / "libraries").iterdir():
        checks = read_json(run / "manifest.json")["checks"]
        assert checks["every_completion_sent_names_a_job"] and checks["no_completion_applied_unsent"], checks


def test_a_fault_counts_only_where_its_effect_was_seen():
    for fault, seen in (("kill", {"process_gone": 1}), ("pause", {"process_stopped_s": 5.0}),
                        ("short_pause", {"process_stopped_s": 1.5}),
                        ("terminate", {"backends_terminated": 4}), ("restart", {"server_restarted": 1})):
        assert library_faults.landed(fault, seen)
        assert not library_faults.landed(fault, {name: 0 for name in seen})
        assert not library_faults.landed(fault, {})


def test_a_pause_and_the_bound_follow_the_library_recovery_setting():
    pgmq = library_runs.LibraryParameters("pgmq", 3, 6, fault="pause")
    raced = libraries.get("pgmq").RECOVERY["raced_s"]
    assert library_faults.pause_s("pgmq") == raced + library_faults.PAUSE_MARGIN_S
    assert library_faults.bound_s(pgmq) > 2 * raced + library_faults.pause_s("pgmq")
    # nothing recovers procrastinate's job, and graphile-worker's only after 4 hours: a fixed pause, a short bound
    assert library_faults.pause_s("procrastinate") == library_faults.PAUSE_S
    assert library_faults.pause_s("graphile_worker") == library_faults.PAUSE_S
    assert library_faults.bound_s(library_runs.LibraryParameters("graphile_worker", 3, 6, fault="kill")) \
        <= library_faults.MAX_BOUND_S
    # a short pause is half the setting, so the job must not be handed on; where nothing is set there is none
    short = library_runs.LibraryParameters("pgmq", 3, 6, fault="short_pause")
    assert library_faults.paused_for_s(short) == raced / 2 < raced
    assert library_runs.short_pause_s("procrastinate") is None and library_runs.short_pause_s("graphile_worker") is None
    assert library_runs.short_pause_s("que") is None  # its session holds the job: a pause never loses it
    with pytest.raises(UserError, match="procrastinate has no recovery set within a run to pause short of"):
        library_runs.LibraryParameters("procrastinate", 3, 6, fault="short_pause").check()
    sweep = library_runs.LibrarySweep(libraries=("procrastinate", "pgmq"), faults=("short_pause",))
    assert [r.library for r in sweep.runs()] == ["pgmq"], "a sweep leaves out the libraries with nothing to pause short of"
    # unless no library asked has one: the sweep is refused, not run empty
    with pytest.raises(UserError, match="procrastinate has no recovery set within a run to pause short of"):
        library_runs.LibrarySweep(libraries=("procrastinate", "graphile_worker"), faults=("short_pause",)).check()
    for name in libraries.NAMES:  # every library states its recovery, its default and what was raced
        recovery = libraries.get(name).RECOVERY
        assert recovery["mechanism"] and {"setting", "default_s", "raced_s"} <= set(recovery)
        assert (recovery["default_s"] is None) == (recovery["raced_s"] is None)


def test_a_fault_sweep_takes_its_own_defaults_and_refuses_what_it_cannot_run():
    sweep = library_runs.LibrarySweep(libraries=("pgmq",), faults=("kill", "pause"))
    assert [(r.fault, r.worker_count, r.job_count) for r in sweep.runs()] == [("kill", 3, 6), ("pause", 3, 6)]
    assert library_runs.LibrarySweep(libraries=("pgmq",)).worker_counts == (1, 4, 16, 32)
    with pytest.raises(UserError, match="a fault run takes 2 to 8 workers"):
        library_runs.LibrarySweep(libraries=("pgmq",), faults=("kill",), worker_counts=(1,))
    with pytest.raises(UserError, match="between the worker count .3. and 50 jobs"):
        library_runs.LibrarySweep(libraries=("pgmq",), faults=("kill",), job_count=500)
    with pytest.raises(UserError, match="either drains .fault none. or faults"):
        library_runs.LibrarySweep(libraries=("pgmq",), faults=("none", "kill"))
    with pytest.raises(UserError, match="fault must be one of kill, pause, short_pause, stall, terminate, restart"):
        library_runs.LibraryParameters("pgmq", 3, 6, fault="flood")
    done = run_cli("libraries", "--library", "pgmq", "--fault", "flood", "--data-dir", "/nonexistent")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "flood" in done.stderr


def test_a_killed_worker_job_stays_stuck_where_nothing_recovers_it(db, tmp_path):
    # procrastinate: nothing in the library brings back a job whose worker died
    [run] = registry.measure("libraries", library_runs.LibraryParameters("procrastinate", 2, 2, fault="kill"),
                             tmp_path, db, progress=False)
    manifest = read_json(run / "manifest.json")
    summary = manifest["results"]["summary"]
    assert manifest["checks"]["passed"], manifest["checks"]
    assert summary["fault_landed"] and summary["fault_effects"] == {"process_gone": 1}
    assert (summary["stuck"], summary["completed_once"], summary["jobs_hit"], summary["recovery_s"]) == (1, 1, 1, None)
    # the killed worker was started again, as a supervisor would, and still nothing brought the job back
    assert summary["recovery_setting_s"] is None and (summary["worker_exits"], summary["worker_restarts"]) == (1, 1)
    ledger = pd.read_parquet(run / "ledger.parquet")
    assert ledger.loc[ledger["hit_by_fault"], "state"].tolist() == ["stuck"]
    # one completion sent, by the worker that was not killed, and it applied
    assert (summary["completions_sent"], summary["completions_applied"]) == (1, 1)
    assert ledger.loc[ledger["hit_by_fault"], "completions_sent"].tolist() == [0]
    # the article reads the stored run: nothing brought the job back, so A9's part for procrastinate is corrected
    mine = contents.load(handed("library_faults", [run]))[worker_dies.NAME]
    found = worker_dies.a9_a_dead_workers_job_completes_once(mine.faults)
    assert found.parts == (("procrastinate", CORRECTED),) and "procrastinate: after kill, 1 stuck." in found.note


def test_under_its_production_setting_procrastinate_runs_a_killed_worker_job_again_apart_from_its_defaults(
        db, tmp_path):
    # its production how-to's periodic retry (raced every second) brings the job back; the task's own jobs are not
    # the run's, and the article reads the run beside the library as it comes, never in A9
    parameters = [library_runs.LibraryParameters("procrastinate", 2, 2, fault="kill", configuration=setting)
                  for setting in ("default", "production")]
    default, production = (registry.measure("libraries", p, tmp_path, db, progress=False)[0] for p in parameters)
    manifest = read_json(production / "manifest.json")
    summary = manifest["results"]["summary"]
    assert manifest["checks"]["passed"], manifest["checks"]
    assert summary["setting"] == "production" and summary["fault_landed"]
    assert (summary["stuck"], summary["completed_once"], summary["jobs_hit"]) == (0, 2, 1), summary
    assert summary["recovery_s"] is not None and summary["recovery_s"] <= summary["bound_s"]
    assert summary["recovery_setting_s"] == libraries.get("procrastinate").PRODUCTION["recovery"]["raced_s"]
    mine = contents.load(handed("library_faults", [default, production]))[worker_dies.NAME]
    assert list(mine.faults["library"]) == ["procrastinate"] and list(mine.production["library"]) == ["procrastinate"]
    found = worker_dies.a9_a_dead_workers_job_completes_once(mine.faults)
    assert found.parts == (("procrastinate", CORRECTED),), "A9 reads the library as it comes"
    advice = worker_dies.advice_table({worker_dies.NAME: mine})
    assert "1 job left stuck or lost after kill. Under its production setting: 1 job hit in 1 run" in advice, advice


def test_the_production_setting_is_raced_by_a_kill_or_a_pause_of_a_library_that_declares_one():
    sweep = library_runs.LibrarySweep(libraries=("procrastinate", "pgmq"), faults=("kill", "short_pause"),
                                      configurations=("default", "production"))
    assert [(r.library, r.fault, r.configuration) for r in sweep.runs()] == [
        ("procrastinate", "kill", "default"), ("pgmq", "kill", "default"), ("procrastinate", "kill", "production"),
        ("pgmq", "short_pause", "default")]
    with pytest.raises(UserError, match="raced by the probe and by a fault run of kill or pause, not by short_pause"):
        library_runs.LibraryParameters("procrastinate", 3, 6, fault="short_pause", configuration="production").check()
    with pytest.raises(UserError, match="pgmq declares no production setting"):
        library_runs.LibraryParameters("pgmq", 3, 6, fault="kill", configuration="production").check()


def test_each_fault_lands_on_a_library_and_the_command_prints_its_ledger(tmp_path):
    """pgmq under each fault, through the command: its JSON per run, every job in one class; a killed or paused
    worker's message is read again once its visibility timeout ran out (the raced one, stated beside it)."""
    done = run_cli("libraries", "--library", "pgmq", "--fault", "all", "--json", "--quiet", "--data-dir",
                   str(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {row["fault"]: row for row in map(json.loads, done.stdout.splitlines())}
    assert list(rows) == list(library_runs.ALL_FAULTS) and "stall" not in rows  # asked with its own --stall
    vt = libraries.get("pgmq").RECOVERY["raced_s"]
    for fault, row in rows.items():
        assert {"library", "fault", "fault_effects", "completed_once", "completed_twice", "executed_twice", "stuck",
                "lost", "in_progress_at_timeout", "recovery_s", "recovery_setting_s"} <= set(row)
        assert row["fault_landed"], (fault, row)
        assert sum(row[name] for name in library_faults.CLASSES) == 6
        assert row["recovery_setting_s"] == vt
        # every completion the workers sent is counted, applied or not
        assert row["completions_applied"] == 6 and row["completions_sent"] >= 6, row
        assert row["completions_not_applied"] == row["completions_sent"] - 6, row
    for fault in ("kill", "pause"):
        assert rows[fault]["completed_once"] == 6 and rows[fault]["executed_twice"] >= 1, rows[fault]
        assert vt * 0.9 <= rows[fault]["recovery_s"] <= vt + 5, rows[fault]
    # paused for half its visibility timeout, the worker keeps its message: no job ran twice
    short = rows["short_pause"]
    assert short["jobs_hit"] >= 1 and short["completed_once"] == 6 and short["executed_twice"] == 0, short
    # the article reads the stored runs: a killed or paused worker's message ran again and completed once
    stored = sorted((tmp_path / "libraries").iterdir())
    mine = contents.load(handed("library_faults", stored))[worker_dies.NAME]
    killed_or_paused = mine.faults[mine.faults["fault"].isin(["kill", "pause"])]
    assert worker_dies.a9_a_dead_workers_job_completes_once(killed_or_paused).parts == (("pgmq", CONFIRMED),)


def test_no_worker_outlives_the_command_killed_with_sigkill_while_one_is_paused(tmp_path):
    """A worker stopped by the pause fault, the command SIGKILLed then: every worker still dies with it."""
    paused = lambda harness: [p for p in forked_workers(harness) if faults.stop_state(p.pid) == "T"]  # noqa: E731
    assert survivors_of_sigkill(["libraries", "--library", "pgmq", "--fault", "pause", "--quiet", "--data-dir",
                                 str(tmp_path)], paused, 120) == []


@pytest.mark.skipif(pooler.binary() is None, reason=f"pgbouncer not found: {pooler.INSTALL_HINT}")
def test_a_library_own_workers_run_through_pgbouncer_and_the_pooler_stops_after(tmp_path):
    """--pooler puts PgBouncer between a library's workers and the server, for a drain and for a fault run: each
    JSON object says which mode, the manifest says the pooler as it ran, and no pgbouncer is left after."""
    drained = run_cli("libraries", "--library", "pgmq", "--workers", "2", "--jobs", "40", "--pooler", "session",
                      "--json", "--quiet", "--data-dir", str(tmp_path / "drain"))
    assert drained.returncode == 0, drained.stderr[-3000:]
    [drain] = [json.loads(line) for line in drained.stdout.splitlines()]
    assert (drain["pooler"], drain["executed"], drain["executed_twice"]) == ("session", 40, 0)
    done = run_cli("libraries", "--library", "pgmq", "--fault", "kill", "--pooler", "transaction", "--json",
                   "--quiet", "--data-dir", str(tmp_path / "fault"))
    assert done.returncode == 0, done.stderr[-3000:]
    [fault] = [json.loads(line) for line in done.stdout.splitlines()]
    assert fault["pooler"] == "transaction" and fault["fault_landed"]
    assert sum(fault[name] for name in library_faults.CLASSES) == 6
    [run] = (tmp_path / "fault" / "libraries").iterdir()
    described = read_json(run / "manifest.json")["procedure"]["pooler"]
    assert described["mode"] == "transaction" and described["pgbouncer"] == pooler.version()
    assert poolers_of(drained.pid) == [] and poolers_of(done.pid) == []  # each stopped its pooler
