"""The stale-completion probe (harness.experiments.libraries.probe) on the real server with the libraries' own
workers and the models: each outcome it can return, through the command and through stored runs, the source beside
it, its refusals, and nothing left behind by a SIGKILL."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from conftest import forked_workers, handed, run_cli, survivors_of_sigkill
from harness.article import contents
from harness.article.findings import CONFIRMED, CORRECTED, NOT_MEASURED
from harness.article.sections import library_faults as worker_dies, stale_completions
from harness import libraries, scratch
from harness.experiments.libraries import outcomes as probe_outcomes
from harness.experiments import registry
from harness.experiments.libraries import drain as library_runs
from harness.experiments.libraries import probe as stale_completion
from harness.server import faults
from harness.storage import Run


def _probe(*args: str) -> dict[str, dict]:
    done = run_cli("libraries", "--probe", "stale_completion", *args, "--json", "--quiet", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {row["library"]: row for row in map(json.loads, done.stdout.splitlines())}


def test_each_outcome_from_the_libraries_own_workers_and_a_model_beside_their_sources(tmp_path):
    """pgmq archives by message id: the paused reader's archive lands on the message its second reader is running;
    Que's locker ends its process when its session is cut, so its completion is never sent; procrastinate hands
    nothing on. Oban's completion checks nothing, so the live holder's rewrites the finished row."""
    rows = _probe("--library", "pgmq,que,procrastinate,oban", "--repeat", "1", "--data-dir", str(tmp_path))
    pgmq, que, procrastinate, oban = rows["pgmq"], rows["que"], rows["procrastinate"], rows["oban"]
    assert (pgmq["stale_completion"], pgmq["lost_by"], pgmq["handed_on"]) == ("accepted", "frozen", 1), pgmq
    assert (pgmq["stale_completions_sent"], pgmq["stale_completions_applied"]) == (1, 1), pgmq
    # the second reader's archive finds the message gone: sent, and nothing applied
    assert (pgmq["completions_sent"], pgmq["completions_applied"]) == (2, 1), pgmq
    assert (pgmq["live_completions_sent"], pgmq["live_completions_applied"], pgmq["completed_every_time"]) == (1, 0, True)
    assert (oban["stale_completion"], oban["live_completions_sent"], oban["live_completions_applied"]) == \
        ("accepted", 1, 1), oban
    assert (que["stale_completion"], que["lost_by"], que["handed_on"]) == ("not_sent", "sessions cut", 1), que
    assert (que["stale_completions_sent"], que["stale_completions_applied"]) == (0, 0), que
    assert procrastinate["stale_completion"] == "not_handed_on" and procrastinate["handed_on"] == 0, procrastinate
    for row in rows.values():
        assert row["agrees_with_source"] is True and row["expected_from_source"] == row["stale_completion"], row
        assert ":" in row["source_ref"] and row["repeats"] == row["landed"] == 1, row
    [stored] = [Run(path) for path in (tmp_path / "libraries").iterdir() if Run(path).summary["library"] == "pgmq"]
    holders = stored.manifest["procedure"]["holders"]
    assert holders["a"]["pid"] != holders["b"]["pid"] and holders["a"]["backends_sent"], holders
    # the article reads the stored runs: A9 per library from the probe alone, each outcome its own verdict
    loaded = contents.load(handed("library_probe", sorted((tmp_path / "libraries").iterdir())))
    a9 = worker_dies.a9_a_dead_workers_job_completes_once(None, loaded[worker_dies.NAME].probes)
    assert dict(a9.parts) == {"pgmq": CORRECTED, "que (model)": CONFIRMED, "procrastinate": NOT_MEASURED,
                              "oban (model)": CORRECTED}, a9.parts
    assert "under pgmq and oban (model), in every repeat" in a9.note, a9.note
    shown = worker_dies.probe_table(loaded)
    assert "pgmq/sql/pgmq.sql:578-600" in shown and "not handed on" in shown and "its sessions cut" in shown
    assert "never sent (its worker ended first)" in shown and "by construction" in shown
    for run in (tmp_path / "libraries").iterdir():
        assert Run(run).manifest["checks"]["every_completion_attributed"], Run(run).summary


def test_the_release_before_a_guard_is_probed_beside_the_installed_one_and_the_page_says_from_which(tmp_path):
    """chancy checks the claim_id its fetch set from 0.26.0 (installed); 0.25.0 completes by the job's id alone.
    --library chancy==0.25.0 installs that release beside the environment's (not in it) and probes it in a child
    Python: refused from 0.26.0, accepted in 0.25.0, each as its own source says, and the advice says both."""
    rows = run_cli("libraries", "--probe", "stale_completion", "--library", "chancy,chancy==0.25.0", "--repeat", "1",
                   "--json", "--quiet", "--data-dir", str(tmp_path), timeout=600)
    assert rows.returncode == 0, rows.stderr[-3000:]
    current, earlier = map(json.loads, rows.stdout.splitlines())
    assert (current["version"], current["release"], current["stale_completion"]) == ("0.26.0", "installed", "refused")
    assert (earlier["version"], earlier["release"], earlier["stale_completion"]) == ("0.25.0", "0.25.0", "accepted")
    assert earlier["agrees_with_source"] is True and "chancy/worker.py:506-518" in earlier["source_ref"], earlier
    assert current["agrees_with_source"] is True, current
    assert libraries.version("chancy") == "0.26.0", "the environment's release is untouched"
    loaded = contents.load(handed("library_probe", sorted((tmp_path / "libraries").iterdir())))
    probes = loaded[worker_dies.NAME].probes
    [installed] = stale_completions.installed(probes)
    said = stale_completions.advice(installed, probes)
    assert said == ("refused (observed; its source agrees), from 0.26.0; applied in 0.25.0 (observed; its source "
                    "there checks the job's id alone)"), said
    a9 = worker_dies.a9_a_dead_workers_job_completes_once(None, probes)
    assert dict(a9.parts) == {"chancy": CONFIRMED}, a9.parts  # A9 reads the release installed
    shown = worker_dies.probe_table(loaded)
    assert "chancy 0.26.0" in shown and "chancy 0.25.0" in shown, shown


def test_procrastinate_as_its_production_how_to_runs_it_hands_a_hung_worker_s_job_on_and_accepts_its_completion(
        tmp_path):
    """As it comes, procrastinate hands nothing on. Its production how-to's periodic task retries the jobs of workers
    whose heartbeat is old: the frozen worker's job runs again on the other worker, and its completion, once the
    first is resumed, is applied to the job the second is running (its finish checks only that the job is 'todo'
    or 'doing'). A row per setting; the advice says it in words a reader acts on; A9 reads the defaults."""
    done = run_cli("libraries", "--probe", "stale_completion", "--library", "procrastinate", "--setting",
                   "default,production", "--repeat", "1", "--json", "--quiet", "--data-dir", str(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    default, production = map(json.loads, done.stdout.splitlines())
    assert (default["setting"], default["stale_completion"], default["handed_on"]) == ("default", "not_handed_on", 0)
    assert (production["setting"], production["stale_completion"], production["handed_on"]) == \
        ("production", "accepted", 1), production
    assert production["agrees_with_source"] is True, production
    # its retry task's own completions are not the probe's job's: one sent by the stale holder, and applied
    assert (production["stale_completions_sent"], production["stale_completions_applied"]) == (1, 1), production
    # found once the heartbeat is 3 s old, at the task's next run a second later at most; by default 30 s and 10 min
    assert production["recovery_setting_s"] == 4.0 and production["recovery_default_s"] == 630.0, production
    loaded = contents.load(handed("library_probe", sorted((tmp_path / "libraries").iterdir())))
    probes = loaded[worker_dies.NAME].probes
    [row] = stale_completions.installed(probes)
    said = stale_completions.advice(row, probes)
    assert "Under its production setting (the how-to's periodic retry_stalled_jobs task (get_stalled_jobs, then " \
           "retry_job on each)): accepted: a hung worker completes a job another worker is running (observed)" \
           in said, said
    a9 = worker_dies.a9_a_dead_workers_job_completes_once(None, probes)
    assert dict(a9.parts) == {"procrastinate": NOT_MEASURED}, a9.parts
    shown = worker_dies.probe_table(loaded)
    assert "procrastinate (its production setting)" in shown
    assert "procrastinate: the how-to&#x27;s periodic retry_stalled_jobs task" in shown, shown


@pytest.mark.skipif(libraries.version("graphile_worker") is None, reason="graphile-worker is not installed here")
def test_graphile_worker_s_force_unlock_hands_a_worker_declared_dead_on_and_accepts_its_completion(tmp_path):
    """As it comes, a graphile-worker job stays locked for 4 hours. forceUnlockWorkers, for a worker declared dead
    (here as soon as it is frozen), unlocks its job at once: the other worker runs it, and the frozen one, resumed,
    deletes it by id while it runs."""
    done = run_cli("libraries", "--probe", "stale_completion", "--library", "graphile_worker", "--setting",
                   "production", "--repeat", "1", "--json", "--quiet", "--data-dir", str(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    [row] = map(json.loads, done.stdout.splitlines())
    assert (row["setting"], row["stale_completion"], row["handed_on"], row["agrees_with_source"]) == \
        ("production", "accepted", 1, True), row
    assert (row["stale_completions_sent"], row["stale_completions_applied"]) == (1, 1), row
    [stored] = [Run(path) for path in (tmp_path / "libraries").iterdir()]
    assert stored.summary["fault_effects"]["declared_dead"] == 1, stored.summary


def test_a_hung_que_worker_that_stays_connected_keeps_its_job_where_a_cut_session_hands_it_on(tmp_path):
    """Que's hold is its locker's session advisory lock: cut, the job runs again at once (and the old process ends
    before it completes: not sent); hung with its session kept, nothing hands the job on. A row each, and the
    advice says both."""
    done = run_cli("libraries", "--probe", "stale_completion", "--library", "que", "--lost-by", "default,frozen",
                   "--repeat", "1", "--json", "--quiet", "--data-dir", str(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    cut, hung = map(json.loads, done.stdout.splitlines())
    assert (cut["lost_by"], cut["hung"], cut["stale_completion"]) == ("sessions cut", False, "not_sent"), cut
    assert (hung["lost_by"], hung["hung"], hung["stale_completion"], hung["handed_on"]) == \
        ("frozen", True, "not_handed_on", 0), hung
    assert hung["agrees_with_source"] is True and "locker.rb:428" in hung["source_ref"], hung
    loaded = contents.load(handed("library_probe", sorted((tmp_path / "libraries").iterdir())))
    probes = loaded[worker_dies.NAME].probes
    [row] = stale_completions.installed(probes)
    assert stale_completions.advice(row, probes).endswith(
        "A worker that hangs and stays connected: not handed on within 6.0 s, as long as the probe waited (observed "
        "in the model of its source)"), stale_completions.advice(row, probes)
    assert "que (model) (hung, still connected)" in worker_dies.probe_table(loaded)


def _chancy(release: str, outcome: str, agrees: bool = True) -> dict:
    return {"library": "chancy", "version": "0.26.0" if release == "installed" else release, "release": release,
            "stale_completion": outcome, "agrees_with_source": agrees, "model": False, "outcomes": [outcome],
            "source_checks": "the claim", "expected_from_source": "refused" if release == "installed" else "accepted",
            "setting": "default", "hung": False, "hand_on_bound_s": 8.8}


@pytest.mark.parametrize("earlier, said", [
    (_chancy("0.25.0", "accepted"), "refused (observed; its source agrees), from 0.26.0; applied in 0.25.0 (observed; "
                                    "its source there checks the job's id alone)"),
    # the same outcome in both: no "from"
    (_chancy("0.25.0", "refused", agrees=False), "refused (observed; its source agrees); refused in 0.25.0 "
                                                 "(observed), where its source there reads applied"),
    # not probed: read in its source
    (None, "refused (observed; its source agrees), from 0.26.0; in 0.25.0, its completion checks the job's id alone "
           "(read in its source, chancy/worker.py:506-518 (Worker._maintain_updates), release 0.25.0; not run here)")])
def test_the_release_before_says_from_which_only_where_it_differs_and_its_source_where_it_disagrees(earlier, said):
    current = _chancy("installed", "refused")
    assert stale_completions.advice(current, [current] + ([earlier] if earlier else [])) == said


def test_a_release_read_in_its_source_and_not_run_is_said_as_read():
    """Solid Queue's guard is first tagged in v1.5.0; 1.4.0 is read, not modelled: the advice says so, with its
    source."""
    row = {"library": "solid_queue", "version": "model of 1.5.0", "stale_completion": "not_handed_on",
           "agrees_with_source": True, "model": True, "source_checks": "its claimed execution",
           "outcomes": ["not_handed_on"]}
    said = stale_completions.advice(row, [row])
    assert said == ("not handed on (observed); once you hand it on, its completion checks its claimed execution"
                    ", from 1.5.0; in 1.4.0, its completion checks nothing: it finishes the job "
                    "and destroys its claimed execution without looking for it (read in its source, "
                    "app/models/solid_queue/claimed_execution.rb:110-115 (finished), v1.4.0 (176721e); not run "
                    "here)"), said


def test_repeats_that_disagree_vary_and_a_disagreement_with_the_source_is_kept(db, tmp_path, monkeypatch):
    """Two stored runs of chancy: one with its full wait for the second holder (refused, as its source says), one
    whose wait ends before chancy's recovery could hand the job on (not handed on): over both, varies, and the
    row says it disagrees with the source."""
    asked = library_runs.LibrarySweep(libraries=("chancy",), probes=("stale_completion",))
    [first] = registry.measure("libraries", asked, tmp_path, db=db, progress=False)
    monkeypatch.setattr(stale_completion, "hand_on_bound_s", lambda name, configuration="default": 0.5)
    [second] = registry.measure("libraries", library_runs.LibraryParameters(
        library="chancy", worker_count=2, job_count=1, repeat=1, probe="stale_completion"), tmp_path, db=db,
        progress=False)
    outcomes = [Run(path).summary["stale_completion"] for path in (first, second)]
    assert outcomes == ["refused", "not_handed_on"], outcomes
    refused = Run(first).summary  # chancy's flush names the claim_id: sent, and nothing changed; the live one applied
    assert refused["stale_completions_sent"] >= 1 and refused["stale_completions_applied"] == 0, refused
    assert refused["live_completions_applied"] == 1, refused
    [row] = probe_outcomes.per_library([Run(path).summary for path in (first, second)])
    assert (row["stale_completion"], row["agrees_with_source"], row["handed_on"]) == ("varies", False, 1), row
    assert row["outcomes"] == outcomes
    # on the page: the disagreement in the table and in A9's note, and refused where it was handed on: confirmed
    loaded = contents.load(handed("library_probe", [first, second]))
    assert "no: both shown" in worker_dies.probe_table(loaded)
    a9 = worker_dies.a9_a_dead_workers_job_completes_once(None, loaded[worker_dies.NAME].probes)
    assert a9.parts == (("chancy", CONFIRMED),)
    assert "chancy: the probe found varies (1 refused and 1 not handed on) where its source reads refused." \
        in a9.note, a9.note


@pytest.mark.parametrize("outcomes, expected", [
    (["accepted"] * 3, "accepted"), (["refused", "refused"], "refused"), (["not_handed_on"], "not_handed_on"),
    (["accepted", "refused"], "varies"), ([None, "refused"], "refused"), ([None, None], None), ([], None)])
def test_a_library_outcome_needs_every_landed_repeat_to_agree(outcomes, expected):
    assert probe_outcomes.library_outcome(outcomes) == expected


@pytest.mark.parametrize("lost, handed_on, stale, expected", [
    (False, True, {"completions_applied": 1, "completions_sent": 1}, None), (True, False, None, "not_handed_on"),
    (True, True, {"completions_applied": 1, "completions_sent": 1}, "accepted"),
    (True, True, {"completions_applied": 1, "completions_sent": None}, "accepted"),
    (True, True, {"completions_applied": 0, "completions_sent": 1}, "refused"),
    (True, True, {"completions_applied": 0, "completions_sent": 0}, "not_sent"),
    (True, True, {"completions_applied": 0, "completions_sent": None}, "not_applied")])
def test_a_run_outcome(lost, handed_on, stale, expected):
    assert probe_outcomes.run_outcome(lost, handed_on, stale) == expected


def _audit(*rows) -> pd.DataFrame:
    return pd.DataFrame([(7, event, at, pid) for event, at, pid in rows], columns=["job_id", "event", "at_ns", "pid"])


def test_completions_are_credited_to_the_holder_whose_backend_sent_them_and_the_rest_are_counted_apart():
    """The stale holder (backend 11) completed the job at 5, after its window; the live one (backend 22) rewrote the
    finished row at 8 and sent a heartbeat before it (an UPDATE at 4, not a rewrite); backend 33 completed it too."""
    audit = _audit(("updated", 4, 22), ("completed", 5, 11), ("updated", 8, 22), ("completed", 9, 33))
    stale = {"completions_sent": 1, "backends_sent": [11], "window_ns": [1, 3]}
    live = {"completions_sent": 1, "backends_sent": [22], "window_ns": [6, 10]}
    assert stale_completion.applied(audit, 7, stale, rewrites=False)["completions_applied"] == 1
    assert stale_completion.applied(audit, 7, live, rewrites=True) == {"completions_applied": 1, "completed": 0,
                                                                        "rewrote": 1}
    assert stale_completion.unattributed_completions(audit, 7, [stale, live]) == 1
    assert stale_completion.unattributed_completions(audit.iloc[:3], 7, [stale, live, None]) == 0
    # without the server's log: the completions inside the holder's window, no rewrite
    unseen = {"completions_sent": None, "backends_sent": [], "window_ns": [6, 10]}
    assert stale_completion.applied(audit, 7, unseen, rewrites=True) == {"completions_applied": 1, "completed": 1,
                                                                          "rewrote": 0}


def _row(outcomes, completed_every_time=True) -> dict:
    return {"outcomes": outcomes, "completed_every_time": completed_every_time}


@pytest.mark.parametrize("row, expected", [
    (None, None), (_row(["accepted", "refused"]), CORRECTED), (_row(["refused", "not_sent"]), CONFIRMED),
    (_row(["not_applied"]), None), (_row(["refused", "not_applied"]), CONFIRMED),
    (_row(["not_sent", "not_applied"]), CONFIRMED), (_row(["refused"], completed_every_time=False), None),
    (_row(["not_handed_on", None]), None), (_row([None]), None)])
def test_the_probe_decides_a_library_part_of_a9_only_where_it_bears_on_it(row, expected):
    assert stale_completions.probe_verdict(row) == expected


@pytest.mark.parametrize("args, said", [
    (["--probe", "stale_check", "--library", "pgmq"], "probe must be one of stale_completion"),
    (["--probe", "stale_completion", "--library", "nosuch"], "no job library named 'nosuch'"),
    (["--probe", "stale_completion", "--library", "pgmq", "--fault", "kill"], "a probe runs on its own"),
    (["--probe", "stale_completion", "--library", "pgmq", "--jobs", "3"], "a probe races one job"),
    (["--probe", "stale_completion", "--library", "pgmq", "--workers", "1"], "a probe takes 2 to 8 workers"),
    (["--probe", "stale_completion", "--library", "chancy==0.24.0"],
     "chancy 0.24.0 is not offered to the probe: its source there was not read (offered: chancy==0.25.0)"),
    (["--probe", "stale_completion", "--library", "solid_queue==1.4.0"],
     "solid_queue 1.4.0 is not offered to the probe: it is read in its source, not run"),
    (["--library", "chancy==0.25.0"], "chancy==0.25.0) is raced by the probe only"),
    (["--probe", "stale_completion", "--library", "chancy", "--setting", "production"],
     "chancy declares no production setting beyond its defaults (PRODUCTION)"),
    (["--library", "procrastinate", "--setting", "production"],
     "the production setting is raced by the probe and by a fault run of kill or pause, not by none"),
    (["--probe", "stale_completion", "--library", "pgmq", "--setting", "prod"],
     "setting must be one of default, production"),
    (["--probe", "stale_completion", "--library", "pgmq", "--lost-by", "frozen"],
     "pgmq's probe freezes its first holder already: --lost-by frozen is for a library whose hold is its session"),
    (["--library", "que", "--lost-by", "frozen", "--fault", "kill"], "--lost-by is the probe's")])
def test_a_probe_refuses_what_it_cannot_run_in_one_line_before_anything_starts(args, said, tmp_path):
    done = run_cli("libraries", *args, "--data-dir", str(tmp_path), timeout=60)
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "libraries").exists()


def _scratch_of_dead_harnesses() -> list[Path]:
    return [path for path in Path(tempfile.gettempdir()).glob(f"{scratch.PREFIX}*")
            if (pid := scratch.owner(path)) is not None and not faults.alive(pid)]


def test_no_worker_or_gate_outlives_the_command_killed_with_sigkill_while_a_worker_is_frozen(tmp_path):
    """SIGKILL of the command while the probe holds its first worker stopped: every worker dies with it, and the
    next probe sweeps away the gates and logs the killed one left (a probe beside this test may sweep them first)."""
    frozen = lambda harness: [p for p in forked_workers(harness) if faults.stop_state(p.pid) == "T"]  # noqa: E731
    assert survivors_of_sigkill(["libraries", "--probe", "stale_completion", "--library", "river", "--quiet",
                                 "--data-dir", str(tmp_path)], frozen, 120) == []
    scratch.sweep()
    assert _scratch_of_dead_harnesses() == []


def test_the_sweep_removes_the_folders_of_dead_harnesses_only():
    mine = scratch.folder("probe")  # a new folder sweeps first: made before the dead harness's one
    dead = Path(tempfile.mkdtemp(prefix=f"{scratch.PREFIX}{_pid_of_ended()}-probe-"))
    try:
        (dead / "gates").mkdir()
        removed = scratch.sweep()
        assert dead in removed and not dead.exists()
        assert mine not in removed and mine.exists() and scratch.owner(mine) == os.getpid()
    finally:
        mine.rmdir()


def _pid_of_ended() -> int:
    """A pid no process holds any more (a process that ended and was waited for)."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid
