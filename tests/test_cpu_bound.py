"""The CPU-bound rule, the sampler's windows and the CPU layouts, on real races stored and summarised.

A point is CPU-bound when its worker processes, or their backends, waited for a CPU at least half of
their window (harness.server.activity.cpu_bound). Every outcome is made for real: two workers on a quiet
machine (neither side), 4 niced workers sharing one CPU with a spinning process (the clients), and a niced
server pinned to one CPU beside a spinner while its workers have the other (the server).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from pathlib import Path

import pandas as pd
import psutil
import pytest

from harness.article import compare, contents
from harness.article.sections import should_switch
from harness.article import analysis, charts, findings
from harness.article.sections import race_charts
from harness.experiments import registry
from harness.experiments.race.trials import RaceSweep
from harness.server import activity, cpus, database
from harness.storage import Run, read_json
from conftest import handed, spin

# the CPU-bound rule reads how long the workers waited for a CPU: a test whose outcome turns on it runs with no other
# test beside it (serial); the rest read fields or a rule and hold at any load
serial = pytest.mark.serial

JOBS = 1500
# starved workers claim slowly, and start slowly: 4 of them and 150 jobs fill every worker's window (their runnable
# share 0.89 and 0.91 here, against 0.5, in 15 s, 2026-12-07, run alone), where 32 and 500 took 54 s
BUSY_WORKERS, BUSY_JOBS = 4, 150
SERVER_BUSY_JOBS = 500  # a starved server's four workers: enough claims for its backends' window
SPINNERS = 1


def sweep(db, tmp_path, strategies, worker_counts, job_count=JOBS, **options):
    asked = RaceSweep(strategies=strategies, worker_counts=worker_counts, job_count=job_count, **options)
    return registry.measure("race", asked, tmp_path, db=db, progress=False)


def _sweep_at_lowest_priority(results, *args) -> None:
    os.setpriority(os.PRIO_PROCESS, 0, 19)  # inherited by every worker the sweep starts
    try:
        results.put([str(path) for path in sweep(*args, job_count=BUSY_JOBS)])
    except BaseException as error:  # the parent re-raises it
        results.put(error)


def sweep_on_a_busy_machine(db, tmp_path, strategies, worker_counts):
    """The sweep and every worker it starts run at the lowest priority on one CPU, beside a spinner at normal priority.

    Pinned to one CPU and niced, the workers wait for it most of their window
    whatever the machine's size or speed (0.8 to 0.95 here): a spinner at normal
    priority weighs about 68 times a niced worker, so a woken worker seldom gets
    the CPU at once. One spinner is enough; a second only slows the workers' start.
    The machine's other CPUs keep the server and any CPU quota the machine runs
    under out of the picture (time throttled by a quota is not counted as
    waiting for a CPU). The sweep runs in a child so the test process keeps its
    own priority.
    """
    own = os.sched_getaffinity(0)
    context = mp.get_context("fork")
    results = context.Queue()
    hogs = [context.Process(target=spin, daemon=True) for _ in range(SPINNERS)]
    child = context.Process(target=_sweep_at_lowest_priority, args=(results, db, tmp_path, strategies, worker_counts))
    os.sched_setaffinity(0, {min(own)})
    try:
        for hog in hogs:
            hog.start()
        child.start()
    finally:
        os.sched_setaffinity(0, own)
    try:
        outcome = results.get(timeout=600)
        child.join(30)
    finally:
        for process in [*hogs, child]:
            process.kill()
            process.join(5)
    if isinstance(outcome, BaseException):
        raise outcome
    return [Path(path) for path in outcome]


# --------------------------------------------------------------------------- the rule and the windows


@pytest.mark.parametrize("share, expected", [(None, None), (float("nan"), None), (0.0, False), (0.49, False),
                                             (0.5, True), (0.93, True)])
def test_the_rule_marks_a_point_from_half_its_window_waiting_for_a_cpu(share, expected):
    assert activity.cpu_bound(share) is expected


@pytest.mark.parametrize("runnable, running, expected", [(0.05, 0.8, False), (0.05, 0.85, True), (0.3, 0.55, False),
                                                         (0.02, None, False)])
def test_a_client_that_is_never_idle_is_cpu_bound_too(runnable, running, expected):
    # one process driving every connection: saturated when on a CPU or waiting for one 90% of its window
    assert activity.cpu_bound(runnable, running) is expected


@pytest.mark.parametrize("client, running, backend, side", [
    (0.1, 0.3, 0.2, ""), (0.1, 0.3, 0.49, ""), (0.1, 0.3, 0.5, activity.SERVER), (0.6, 0.1, 0.2, activity.CLIENTS),
    (0.05, 0.9, 0.1, activity.CLIENTS), (0.6, None, 0.7, activity.BOTH), (None, None, 0.7, activity.SERVER),
    (0.2, None, None, ""), (None, None, None, None), (float("nan"), None, float("nan"), None)])
def test_either_side_waiting_for_a_cpu_half_its_window_marks_the_point(client, running, backend, side):
    assert activity.cpu_bound_side(client, running, backend) == side
    assert activity.cpu_bound(client, running, backend) is (None if side is None else side != "")


@serial  # a spinner's share of a CPU
def test_the_backend_watch_reads_processes_that_come_and_go_and_says_none_once_it_failed():
    import time as clock

    spinner = mp.get_context("fork").Process(target=spin, daemon=True)
    spinner.start()
    try:
        appears = iter([[], [spinner.pid]])  # a backend that connects after the start is read from when it is seen
        watch = activity.BackendWatch(lambda: next(appears, [spinner.pid]), interval_seconds=0.02).start()
        clock.sleep(0.3)
        shares = watch.stop()
        assert shares["backends"] == 1 and shares["running_share"] > 0.3
        calls = []

        def breaks_after_the_start():
            calls.append(1)
            if len(calls) > 1:
                raise RuntimeError("the watching connection went away")
            return [spinner.pid]

        failed = activity.BackendWatch(breaks_after_the_start, interval_seconds=0.02).start()
        clock.sleep(0.1)
        assert failed.stop()["runnable_share"] is None and failed.error is not None
    finally:
        spinner.kill()
        spinner.join(5)


def test_only_samples_inside_their_workers_window_are_kept():
    samples = activity.samples_frame(seqs=[0, 0, 1, 1, 2], times=[5, 5, 15, 15, 30], pids=[1, 2, 1, 2, 1],
                                     states=["active"] * 5, types=[None] * 5, events=[None] * 5)
    kept = activity.within_windows(samples, {1: (10, 20), 2: (0, 15)})
    assert list(zip(kept["pid"], kept["sample_ns"])) == [(2, 5), (1, 15), (2, 15)]
    assert len(activity.within_windows(samples, {})) == 0
    assert activity.achieved_interval_ms(activity.samples_frame(times=[0, 2_000_000, 4_000_000, 9_000_000],
                                                                seqs=[0, 1, 2, 3], pids=[1] * 4,
                                                                states=["idle"] * 4, types=[None] * 4,
                                                                events=[None] * 4)) == pytest.approx(2.0)
    assert activity.achieved_interval_ms(activity.samples_frame()) is None


# --------------------------------------------------------------------------- end to end


@serial
def test_both_outcomes_of_the_rule_on_stored_races_and_the_verdicts_that_read_them(db, tmp_path):
    free = sweep(db, tmp_path, ["guarded", "skip_locked"], [2])
    bound = sweep_on_a_busy_machine(db, tmp_path, ["guarded", "skip_locked"], [BUSY_WORKERS])
    for run_dir in free:
        summary = Run(run_dir).summary
        assert summary["cpu_bound"] is False, summary["client_runnable_share"]
        assert summary["client_runnable_share"] < activity.CPU_BOUND_CLIENT_RUNNABLE_SHARE
        assert summary["backend_runnable_share"] < activity.CPU_BOUND_BACKEND_RUNNABLE_SHARE
    for run_dir in bound:
        summary = Run(run_dir).summary
        assert summary["cpu_bound"] is True, summary["client_runnable_share"]
        assert summary["cpu_bound_side"] in (activity.CLIENTS, activity.BOTH)
        # the sampler read the backends' wait for their clients; its size depends on the lock waits beside it
        # (0.375 of guarded's samples at 32 starved workers on one CI machine), so it is not the test of the side
        assert 0 < summary["waiting_for_client_share"] <= 1
    frame = analysis.race_summary(free + bound)
    races = compare.Races(frame)
    assert races.workers("guarded", cpu_free=True) == [2] and races.cpu_bound_workers("guarded") == [BUSY_WORKERS]
    f7 = should_switch.f7_skip_locked_no_waste(races)
    assert f7.worker_counts_used == (2,) and f"Not judged at {BUSY_WORKERS} workers" in f7.note
    # only CPU-bound points: not measured, and the note says why
    only_bound = should_switch.f7_skip_locked_no_waste(compare.Races(analysis.race_summary(bound)))
    assert only_bound.verdict == findings.NOT_MEASURED and "CPU-bound" in only_bound.note
    assert only_bound.worker_counts_used == ()
    # the charts shade the CPU-bound worker counts, and only those
    by_workers = analysis.over_repeats(frame)
    assert charts.cpu_bound_workers(by_workers) == [BUSY_WORKERS]
    spec = json.dumps(race_charts.throughput_chart(by_workers).to_dict())
    assert '"rect"' in spec and "CPU-bound" in spec
    free_only = analysis.over_repeats(analysis.race_summary(free))
    assert '"rect"' not in json.dumps(race_charts.throughput_chart(free_only).to_dict())


SERVER_SPINNERS = 2  # on the server's one CPU at normal priority, beside a niced postmaster's backends


@serial
def test_a_race_whose_backends_wait_for_a_cpu_is_cpu_bound_by_the_server(tmp_path):
    """The server starved, its clients not: a throwaway server niced to the lowest priority, pinned (with the
    race's cpus="split") to one CPU where spinners run at normal priority, its four workers alone on the other CPUs."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs: one for the starved server, one for its workers")
    server_cpus, _ = cpus.split_cpus()
    context = mp.get_context("fork")
    with database.open_database("embedded") as server:
        with database.connect(server.url) as conn:
            postmaster = psutil.Process(conn.pgconn.backend_pid).parent()
        postmaster.nice(19)  # the race's backends are forked from it, and inherit its priority
        hogs = [context.Process(target=spin, daemon=True) for _ in range(SERVER_SPINNERS)]
        own = os.sched_getaffinity(0)
        os.sched_setaffinity(0, server_cpus)
        try:
            for hog in hogs:
                hog.start()
        finally:
            os.sched_setaffinity(0, own)
        try:
            runs = sweep(server, tmp_path, ["guarded"], [4], job_count=SERVER_BUSY_JOBS, cpus="split")
        finally:
            for hog in hogs:
                hog.kill()
                hog.join(5)
    summary = Run(runs[0]).summary
    assert summary["backend_runnable_share"] >= activity.CPU_BOUND_BACKEND_RUNNABLE_SHARE, summary
    assert summary["client_runnable_share"] < activity.CPU_BOUND_CLIENT_RUNNABLE_SHARE, summary
    assert summary["cpu_bound"] is True and summary["cpu_bound_side"] == activity.SERVER
    races = compare.Races(analysis.race_summary(runs))
    assert races.cpu_bound_workers("guarded") == [4] and races.workers("guarded", cpu_free=True) == []


@serial  # F5 needs two counts clear of the CPU-bound line
def test_findings_json_names_the_worker_counts_each_verdict_used(db, tmp_path):
    runs = sweep(db, tmp_path, ["guarded", "skip_locked"], [1, 2, 4])
    found = findings.by_id(contents.from_runs(handed("races", runs)))
    as_dict = found["F5"].as_dict()
    # F5 reads 2 and 4 workers, less any the machine made CPU-bound (the suite's load can, on 2 CPUs)
    races = compare.Races(analysis.race_summary(runs))
    bound = {w for strategy in ("guarded", "skip_locked") for w in races.cpu_bound_workers(strategy)}
    assert as_dict["worker_counts_used"] == [w for w in (2, 4) if w not in bound], bound
    assert found["F6"].worker_counts_used == (1, 2, 4)


def test_a_race_without_the_sampler_stores_no_samples_and_says_so(db, tmp_path):
    [run_dir] = sweep(db, tmp_path, ["guarded"], [2], sampler=False)
    manifest = read_json(run_dir / "manifest.json")
    assert manifest["parameters"]["sampler"] is False and manifest["results"]["activity"]["sampler"] is None
    summary = Run(run_dir).summary
    assert summary["wait_share"] == {} and summary["sampler_interval_ms"] is None
    assert summary["waiting_for_client_share"] is None and summary["sampler"] is False
    assert summary["cpu_bound"] in (True, False)  # the kernel's counters do not need the sampler
    [with_sampler] = sweep(db, tmp_path, ["guarded"], [2])
    interval = Run(with_sampler).summary["sampler_interval_ms"]
    assert interval is not None and interval >= 9


@serial
def test_split_cpus_pins_server_and_workers_apart_and_gives_the_cpus_back(db, tmp_path, conn):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    [run_dir] = sweep(db, tmp_path, ["skip_locked"], [4], cpus="split")
    manifest = read_json(run_dir / "manifest.json")
    assert manifest["parameters"]["cpus"] == "split"
    clients = set(manifest["results"]["client_cpus"])
    assert clients and clients < set(os.sched_getaffinity(0))
    # afterwards the server's processes have every CPU again, and so does this process
    postmaster = psutil.Process(conn.pgconn.backend_pid).parent()
    everything = sorted(os.sched_getaffinity(0))
    assert postmaster.cpu_affinity() == everything
    for child in postmaster.children():
        try:
            affinity = child.cpu_affinity()
        except psutil.NoSuchProcess:  # a backend that ended since it was listed (the race's, a worker of autovacuum)
            continue
        assert affinity == everything, child
    summary = Run(run_dir).summary
    assert summary["proxy"] is False and summary["client_layout"] == "processes"


def test_summary_json_carries_the_cpu_budget_fields(db, tmp_path):
    from conftest import run_cli

    sweep(db, tmp_path, ["guarded"], [2])
    result = run_cli("summary", "--data-dir", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout.strip().splitlines()[0])
    for key in ("client_layout", "cpu_bound", "client_runnable_share", "backend_runnable_share",
                "waiting_for_client_share", "sampler_interval_ms", "proxy"):
        assert key in record, key
    assert record["client_layout"] == "processes" and isinstance(record["cpu_bound"], bool)
    assert record["proxy"] is False


def test_bad_cpu_layouts_are_one_line(tmp_path):
    from conftest import run_cli

    result = run_cli("race", "--cpus", "half", "--workers", "1", "--jobs", "10", "--data-dir", str(tmp_path))
    assert result.returncode == 2 and "cpus must be one of shared, split" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_over_repeats_marks_a_point_cpu_bound_when_any_repeat_was():
    rows = [{"strategy": "guarded", "worker_count": 8, "repeat": r, "cpu_bound": bound, "claims_per_second": 1.0}
            for r, bound in enumerate((False, True, None))]
    rows.append({"strategy": "guarded", "worker_count": 2, "repeat": 0, "cpu_bound": None, "claims_per_second": 1.0})
    points = analysis.over_repeats(pd.DataFrame(rows))
    assert dict(zip(points["worker_count"], points["cpu_bound"])) == {2: False, 8: True}
