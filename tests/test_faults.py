"""The faults experiment: its rules for every outcome, its bounds, and every fault injected for real."""

from __future__ import annotations

import pytest

from harness import storage
from harness.storage import Run
from harness.errors import UserError
from harness.experiments.faults import measure as faults
from harness.service import ledger


def totals(**counts) -> dict:
    base = {name: 0 for name in (*ledger.CLASSES, *ledger.MARKS)}
    base.update(counts)
    return base


@pytest.mark.parametrize("protocol, fault, counts, rule, expected", [
    ("lease_fenced", "pause", {"completed_once": 12, "executed_twice": 1}, "fenced_keeps_every_run", True),
    ("lease_fenced", "restart", {"lost": 1}, "fenced_keeps_every_run", False),
    ("lease_fenced", "kill", {"stuck": 1}, "fenced_keeps_every_run", False),
    ("lease_fenced", "restart", {"in_progress_at_timeout": 1}, "fenced_keeps_every_run", True),  # the bound came
    ("lease_holder", "pause", {"stale_completion": 1}, "holder_keeps_every_run", False),
    ("lease_holder", "pause", {}, "holder_keeps_every_run", True),
    ("lease_fenced", "pause", {}, "holder_keeps_every_run", None),
    ("lease_fenced", "pause", {"stale_completion": 1}, "fenced_keeps_every_run", False),
    ("lease", "pause", {"stale_completion": 1}, "fenced_keeps_every_run", None),
    ("none", "kill", {"stuck": 1}, "unfenced_kill_leaves_stuck_run", True),
    ("none", "kill", {}, "unfenced_kill_leaves_stuck_run", False),  # the negative control saw nothing
    ("none", "pause", {}, "unfenced_kill_leaves_stuck_run", None),
    ("lease", "kill", {"executed_twice": 1}, "lease_recovers_killed_run", True),
    ("lease", "kill", {"executed_twice": 1, "stuck": 1}, "lease_recovers_killed_run", False),
    ("lease_fenced", "kill", {}, "lease_recovers_killed_run", False),  # nobody ran it again: the kill hit nothing
    ("none", "kill", {}, "lease_recovers_killed_run", None),
    ("lease", "pause", {"stale_completion": 1}, "unfenced_pause_completes_stale", True),
    ("lease", "pause", {"executed_twice": 1}, "unfenced_pause_completes_stale", False),
    ("lease_fenced", "pause", {}, "unfenced_pause_completes_stale", None),
])
def test_expectations_every_outcome(protocol, fault, counts, rule, expected):
    assert faults.expectations(protocol, fault, totals(**counts))[rule] is expected


@pytest.mark.parametrize("settings, message", [
    ({"runner_count": 1}, "runners must be between 2"),
    ({"runner_count": 21}, "runners must be between 2"),
    ({"job_count": 2, "runner_count": 3}, "jobs must be between"),
    ({"job_count": 501}, "jobs must be between"),
    ({"lease_s": 0.1}, "lease must be between"),
    ({"lease_s": float("nan")}, "lease must be between"),
    ({"job_s": 31}, "job time must be between"),
    ({"protocols": ("lease", "bogus")}, "protocol must be one of"),
    ({"faults": ()}, "give at least one fault"),
])
def test_bounds_are_one_line(settings, message):
    with pytest.raises(UserError, match=message):
        faults.FaultSweep(**settings)


def test_the_sweep_expands_into_runs_that_read_back_from_their_stored_parameters():
    import dataclasses

    sweep = faults.FaultSweep(protocols=("none", "lease_fenced"), faults=("kill", "none"), runner_count=3, job_count=6)
    runs = sweep.runs()
    assert [(r.protocol, r.fault) for r in runs] == [("none", "kill"), ("lease_fenced", "kill"), ("none", "none"),
                                                     ("lease_fenced", "none")]
    stored = [storage.plain(dataclasses.asdict(r)) for r in runs]  # as a manifest keeps them
    assert [faults.FaultParameters.from_mapping(asked, "a stored run") for asked in stored] == runs
    assert all(r.drain_bound_seconds <= faults.MAX_DRAIN_SECONDS for r in runs)


# --------------------------------------------------------------------------- the run's checks, every outcome


def test_run_checks_every_outcome():
    p = faults.FaultParameters("none", "kill", runner_count=2, job_count=3)
    killed = {"runner": "runner-000", "run": 1}
    ok = faults.run_checks(p, totals(completed_once=2, stuck=1, runs=3), True, killed, [], 3)
    assert ok["passed"] and ok["negative_control_sees_stuck_run"]
    blind = faults.run_checks(p, totals(completed_once=3, runs=3), True, killed, [], 3)
    assert not blind["passed"] and blind["negative_control_sees_stuck_run"] is False
    finished = [{"event": "finished", "runner": "runner-000", "run": 1}]
    late = faults.run_checks(p, totals(completed_once=2, stuck=1, runs=3), True, killed, finished, 3)
    assert late["kill_before_finish"] is False and not late["passed"]
    missed = faults.run_checks(faults.FaultParameters("lease", "pause", runner_count=2, job_count=3),
                               totals(completed_once=3, runs=3), False, {}, [], 3)
    assert missed["fault_injected"] is False and not missed["passed"]
    short = faults.run_checks(faults.FaultParameters("lease", "none", runner_count=2, job_count=3),
                              totals(completed_once=2, runs=2), True, {}, [], 2)
    assert short["every_run_classified"] is False


@pytest.mark.parametrize("fault, effects, landed", [
    ("none", {}, True),
    ("kill", {"runner_gone": 1}, True), ("kill", {}, False),
    ("pause", {"runner_stopped_s": 2.5, "victim_reaped": 1}, True), ("pause", {}, False),
    ("restart", {"runner_errors": 3}, True), ("restart", {"heartbeats_refused": 1}, True), ("restart", {}, False),
    ("terminate", {"reaps": 1}, True), ("terminate", {}, False),
    ("service", {"finishes_refused": 1}, True), ("service", {}, False),
    # inside a request's window: only the held request's own failure counts
    ("service_mid_claim", {"claim_answer_lost": 1}, True), ("service_mid_claim", {"runner_errors": 2}, False),
    ("restart_mid_finish", {"finish_lost": 1}, True), ("restart_mid_finish", {"finishes_refused": 1}, False),
])
def test_a_fault_lands_only_on_an_observed_effect(fault, effects, landed):
    assert faults.landed_by_effects(fault, effects) is landed


def test_fault_effects_are_read_after_the_fault_only():
    events = [{"t": 1.0, "event": "error", "runner": "r1"}, {"t": 5.0, "event": "error", "runner": "r1"},
              {"t": 6.0, "event": "heartbeat", "status": 409, "runner": "r2", "run": 1},
              {"t": 6.5, "event": "heartbeat", "status": 200, "runner": "r2", "run": 1}]
    reaps = [{"unix": 2.0, "runner": "r3"}, {"unix": 7.0, "runner": "r3"}]
    effects = faults.fault_effects("restart", {"run": 1}, events, reaps, {"r1", "r2", "r3"}, 4.0)
    assert effects == {"runner_errors": 1, "heartbeats_refused": 1, "reaps": 1}
    assert faults.fault_effects("restart", {}, events[:1], reaps[:1], set(), 4.0) == {}
    assert faults.fault_effects("kill", {"runner": "r9"}, [], [], {"r1"}, 4.0) == {"runner_gone": 1}
    assert faults.fault_effects("none", {}, events, reaps, set(), None) == {}


def test_a_held_request_counts_only_when_its_own_answer_failed():
    held = {"runner": "r1", "run": 7}
    lost = [{"t": 5.0, "event": "error", "runner": "r1", "where": "poll"}]
    assert faults.fault_effects("service_mid_claim", held, lost, [], {"r1"}, 4.0)["claim_answer_lost"] == 1
    # the runner heard of its claim after all: the answer was not lost
    heard = [{"t": 4.5, "event": "claimed", "runner": "r1", "run": 7}] + lost
    assert "claim_answer_lost" not in faults.fault_effects("service_mid_claim", held, heard, [], {"r1"}, 4.0)
    # lost, then the same run claimed again once its lease was reaped: still lost the first time
    again = lost + [{"t": 6.0, "event": "claimed", "runner": "r1", "run": 7}]
    assert faults.fault_effects("service_mid_claim", held, again, [], {"r1"}, 4.0)["claim_answer_lost"] == 1
    failed = [{"t": 5.0, "event": "finish_rejected", "runner": "r1", "run": 7, "status": 500}]
    assert faults.fault_effects("restart_mid_finish", held, failed, [], {"r1"}, 4.0)["finish_lost"] == 1
    other = [{"t": 5.0, "event": "finish_rejected", "runner": "r1", "run": 8, "status": 500}]
    assert "finish_lost" not in faults.fault_effects("restart_mid_finish", held, other, [], {"r1"}, 4.0)


# --------------------------------------------------------------------------- every fault, for real


def _children() -> set[int]:
    import psutil

    return {child.pid for child in psutil.Process().children(recursive=True)}


REAL = [("none", "kill"), ("lease", "kill"), ("lease", "pause"), ("lease_holder", "pause"), ("lease_fenced", "pause"),
        ("lease_fenced", "terminate"), ("lease_fenced", "restart"), ("lease_fenced", "service"),
        ("none", "service_mid_claim"), ("lease", "service_mid_claim"), ("none", "restart_mid_finish"),
        ("lease_fenced", "restart_mid_finish")]
RESTARTS = ("restart", "restart_mid_finish")


@pytest.fixture(scope="module")
def real_runs(db, tmp_path_factory):
    """Each fault injected for real, one run each, small and short; {(protocol, fault): manifest}."""
    import time

    from harness.experiments import registry
    from harness.storage import read_manifest

    before = _children()
    data_dir = tmp_path_factory.mktemp("faults-data")
    from harness.server.faults import can_restart

    real = [key for key in REAL if key[1] not in RESTARTS or can_restart(db)]  # a server we did not start: no restart
    # a paused runner must get its finish in while the runner that took its run over is still working on it:
    # longer jobs there leave room for a loaded machine
    sets = [faults.FaultParameters(protocol, fault, runner_count=3, job_count=5, lease_s=1.0,
                                   job_s=2.0 if fault == "pause" else 1.0)
            for protocol, fault in real]
    began = time.monotonic()
    paths = registry.measure("faults", sets, data_dir, db, progress=False)
    seconds = time.monotonic() - began
    manifests = {(m["parameters"]["protocol"], m["parameters"]["fault"]): m for m in map(read_manifest, paths)}
    return {"manifests": manifests, "seconds": seconds, "left_behind": _children() - before, "paths": paths,
            "real": real}


def test_every_fault_ran_and_left_nothing_behind(real_runs):
    assert set(real_runs["manifests"]) == set(real_runs["real"])
    assert real_runs["left_behind"] == set()
    for key, manifest in real_runs["manifests"].items():
        results = manifest["results"]
        assert manifest["checks"]["passed"], key
        assert results["faults_injected"] >= 1 and isinstance(results["fault_effects"], dict), key
        # a fault counts as landed only on what it was seen to do
        assert results["fault_landed"] == faults.landed_by_effects(key[1], results["fault_effects"]), key
        if key[1] in ("kill", "pause", "service_mid_claim", "restart_mid_finish"):
            assert results["fault_landed"], key
        assert results["drain_seconds"] <= faults.FaultParameters(**manifest["parameters"]).drain_bound_seconds + 5


def test_without_a_lease_a_killed_runner_leaves_its_run_stuck(real_runs, db):
    results = real_runs["manifests"][("none", "kill")]["results"]
    assert results["stuck"] >= 1 and results["reaps"] == 0
    assert results["hit"]["run"] is not None
    assert results["expectations"]["unfenced_kill_leaves_stuck_run"] is True


def test_a_lease_hands_the_killed_runners_run_on(real_runs):
    results = real_runs["manifests"][("lease", "kill")]["results"]
    assert results["stuck"] == 0 and results["lost"] == 0 and results["reaps"] >= 1
    assert results["completed_once"] + results["completed_twice"] == 5
    assert results["expectations"]["lease_recovers_killed_run"] is True


def test_without_the_fence_a_paused_runner_completes_a_run_another_holds(real_runs):
    results = real_runs["manifests"][("lease", "pause")]["results"]
    assert results["hit"]["handed_on"] is True
    assert results["stale_completion"] >= 1 and results["executed_twice"] >= 1
    assert results["expectations"]["unfenced_pause_completes_stale"] is True


@pytest.mark.parametrize("fault", ["pause", "terminate", "restart", "service"])
def test_the_fence_keeps_every_run_under_every_fault(real_runs, fault):
    if ("lease_fenced", fault) not in real_runs["manifests"]:
        pytest.skip("the restart needs the embedded server")
    results = real_runs["manifests"][("lease_fenced", fault)]["results"]
    assert (results["lost"], results["stuck"], results["stale_completion"]) == (0, 0, 0)
    assert results["completed_once"] + results["in_progress_at_timeout"] == 5
    assert results["expectations"]["fenced_keeps_every_run"] is True


def test_a_claim_whose_answer_was_lost_sticks_without_a_lease_and_is_handed_on_with_one(real_runs):
    unleased = real_runs["manifests"][("none", "service_mid_claim")]["results"]
    assert unleased["fault_effects"]["claim_answer_lost"] == 1 and unleased["stuck"] >= 1
    leased = real_runs["manifests"][("lease", "service_mid_claim")]["results"]
    assert leased["stuck"] == 0 and leased["lost"] == 0 and leased["reaps"] >= 1
    assert leased["completed_once"] == 5


def test_a_finish_rolled_back_by_a_restart_leaves_the_job_to_run_again(real_runs):
    if ("none", "restart_mid_finish") not in real_runs["manifests"]:
        pytest.skip("the restart needs the embedded server")
    unleased = real_runs["manifests"][("none", "restart_mid_finish")]["results"]
    assert unleased["fault_effects"]["finish_lost"] == 1 and unleased["stuck"] >= 1
    fenced = real_runs["manifests"][("lease_fenced", "restart_mid_finish")]["results"]
    # the job ran, its finish was rolled back: the lease hands it on and it runs again
    assert fenced["fault_effects"]["finish_lost"] == 1 and fenced["executed_twice"] >= 1
    assert (fenced["lost"], fenced["stuck"], fenced["stale_completion"]) == (0, 0, 0)


def test_checking_the_holder_refuses_the_paused_runners_finish(real_runs):
    results = real_runs["manifests"][("lease_holder", "pause")]["results"]
    assert results["hit"]["handed_on"] is True and results["stale_completion"] == 0
    assert results["fault_effects"]["runner_stopped_s"] > 0
    assert results["expectations"]["holder_keeps_every_run"] is True


def test_every_run_has_its_ledger_and_timeline(real_runs):
    for path in real_runs["paths"]:
        ledger_rows = Run(path).table("ledger")
        timeline = Run(path).table("timeline")
        assert len(ledger_rows) == 5
        assert set(timeline["source"]) >= {"runner"}


def test_terminate_and_restart_hit_the_server(real_runs):
    terminate = real_runs["manifests"][("lease_fenced", "terminate")]["results"]
    assert terminate["hit"]["backends"] >= 1
    if ("lease_fenced", "restart") in real_runs["manifests"]:
        restart = real_runs["manifests"][("lease_fenced", "restart")]["results"]
        assert restart["hit"]["start_seconds"] > 0 and restart["counters_valid"] is False
    service = real_runs["manifests"][("lease_fenced", "service")]["results"]
    assert service["hit"]["old_pid"] != service["hit"]["new_pid"]


def test_cli_json_contract(tmp_path):
    import json

    from tests.conftest import run_cli

    done = run_cli("faults", "--protocol", "lease_fenced", "--fault", "kill", "--runners", "2", "--jobs", "2",
                   "--lease-s", "1", "--job-s", "0.5", "--json", "--quiet", "--data-dir", str(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    said = json.loads(line)
    for key in ("protocol", "fault", "faults_injected", "completed_once", "completed_twice", "executed_twice", "lost",
                "stuck", "fault_effects", "in_progress_at_timeout"):
        assert key in said
    assert said["protocol"] == "lease_fenced" and said["fault"] == "kill" and said["faults_injected"] == 1
    bad = run_cli("faults", "--jobs", "100000", "--data-dir", str(tmp_path))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_the_article_reads_the_runs(real_runs):
    """The ledger and cost tables, the timeline chart and every glued figure, from the stored runs."""
    from harness.article.sections import fault_runs
    from harness.article.sections import fault_charts

    paths = real_runs["paths"]
    summary = fault_runs.fault_summary(paths)
    assert len(summary) == len(real_runs["real"])
    ledger_table = fault_runs.ledger_frame(summary)
    assert list(ledger_table.columns[:3]) == ["fault", "protocol", "runs queued"]
    assert "<table" in fault_runs.ledger_html(paths)
    events = fault_runs.timeline(paths, "lease", "pause")
    assert {"claimed", "reaped", "pause"} <= set(events["event"])
    fault_charts.fault_timeline_chart(events).to_dict()
    facts = fault_runs.fault_facts(paths)
    assert facts["none_kill_stuck"] != "0" and facts["lease_pause_stale"] != "0"
    assert all(isinstance(value, str) for value in facts.values())
