"""The original's client layout (one asyncio process) and the proxied 0 ms baseline, raced for real."""

from __future__ import annotations

import multiprocessing as mp

import pandas as pd
import pytest

from harness.article import analysis
from harness.article.sections import client_layouts, strategy_charts
from harness.experiments import registry
from harness.experiments.race.trials import RaceSweep
from harness.storage import Run, read_json


def sweep(db, tmp_path, strategies, worker_counts, job_count=400, **options):
    asked = RaceSweep(strategies=strategies, worker_counts=worker_counts, job_count=job_count, **options)
    return registry.measure("race", asked, tmp_path, db=db, progress=False)


@pytest.mark.parametrize("strategy", ["naive", "guarded", "skip_locked"])
def test_one_asyncio_process_drains_the_queue_and_passes_the_audit(db, tmp_path, strategy):
    [run_dir] = sweep(db, tmp_path, [strategy], [8], clients=("asyncio",))
    manifest = read_json(run_dir / "manifest.json")
    assert manifest["parameters"]["client"] == "asyncio" and manifest["checks"]["passed"]
    assert manifest["results"]["client_processes"] == 1 and "asyncio" in manifest["results"]["client_layout_text"]
    summary = Run(run_dir).summary
    assert summary["client_layout"] == "asyncio" and summary["distinct_jobs_claimed"] == 400
    assert set(Run(run_dir).table("claims")["job_id"]) == set(range(1, 401))
    if strategy != "naive":
        assert summary["duplicate_jobs"] == 0
    assert not [p for p in mp.active_children() if p.name == "claimrace-asyncio-client"], "the client is gone"


def test_a_sweep_races_both_layouts_and_keeps_them_apart(db, tmp_path):
    runs = sweep(db, tmp_path, ["guarded"], [2], clients=("processes", "asyncio"))
    frame = analysis.race_summary(runs)
    assert sorted(frame["client_layout"]) == ["asyncio", "processes"]
    assert len(analysis.over_repeats(frame)) == 2, "a layout is part of what sets a point apart"


def test_the_asyncio_client_refuses_what_it_cannot_race():
    from conftest import run_cli

    result = run_cli("race", "--client", "asyncio", "--strategy", "for_update", "--workers", "2", "--jobs", "10")
    assert result.returncode == 2 and "races naive, guarded, skip_locked only" in result.stderr


def layouts(**values) -> pd.DataFrame:
    """Summary rows of the client-layout races: values maps 'layout_strategy_workers' to (figure column, value)."""
    rows = []
    for key, figures in values.items():
        layout, strategy, workers = key.split("_", 2)
        rows.append({"client_layout": layout, "strategy": strategy, "worker_count": int(workers),
                     "job_count": 1000, "cpu_bound": layout == "asyncio", **figures})
    return pd.DataFrame(rows)


def test_the_layout_table_says_which_layout_lies_nearer_the_original():
    frame = layouts(processes_guarded_100={"losses_per_win": 9.0, "claims_per_second": 500.0},
                    asyncio_guarded_100={"losses_per_win": 40.0, "claims_per_second": 100.0},
                    processes_naive_2={"duplicate_jobs": 900, "extra_claims": 950},
                    asyncio_naive_2={"duplicate_jobs": 500, "extra_claims": 520})
    free = frame.assign(cpu_bound=False)
    table = client_layouts.layout_table(free)
    f5 = table[(table["finding"] == "F5") & (table["workers"] == 100)].iloc[0]
    assert f5["nearer the original"] == client_layouts.ASYNCIO  # 22 lies nearer 40 than 9 on a log scale
    f1 = table[table["finding"] == "F1"].iloc[0]
    assert f1["nearer the original"] == client_layouts.PROCESSES  # 97.6% lies nearer 90% than 50%
    note = client_layouts.layout_note(table, "F5")
    assert "40.00 against 9.00 at 100 workers" in note and "nearer the asyncio layout" in note
    assert "CPU-bound" not in note
    assert client_layouts.layout_note(table, "F7") == "", "no skip_locked race, no sentence"


def test_no_layout_is_read_against_the_original_where_either_was_cpu_bound():
    frame = layouts(processes_guarded_100={"losses_per_win": 9.0, "claims_per_second": 500.0},
                    asyncio_guarded_100={"losses_per_win": 40.0, "claims_per_second": 100.0})  # asyncio CPU-bound
    table = client_layouts.layout_table(frame)
    f5 = table[(table["finding"] == "F5") & (table["workers"] == 100)].iloc[0]
    assert f5["nearer the original"] is None and f5["asyncio CPU-bound"] and not f5["processes CPU-bound"]
    note = client_layouts.layout_note(table, "F5")
    assert "nearer" not in note and "CPU-bound throughout" in note
    assert "At 100 workers a layout was CPU-bound, so neither is read against the original" in note


def test_a_round_trip_sweep_races_0_ms_straight_and_through_the_proxy():
    networks = RaceSweep(strategies=("guarded",), worker_counts=(2,), rtt_ms=(0, 5)).networks()
    assert networks == [(0.0, False), (0.0, True), (5.0, False)]
    assert RaceSweep(strategies=("guarded",), worker_counts=(2,)).networks() == [(0.0, False)]


def test_the_proxied_baseline_is_stored_as_proxied(db, tmp_path):
    runs = sweep(db, tmp_path, ["guarded"], [2], job_count=200, rtt_ms=(0, 1))
    by_network = {(Run(r).summary["rtt_ms"], Run(r).summary["proxy"]) for r in runs}
    assert by_network == {(0.0, False), (0.0, True), (1.0, True)}
    points = strategy_charts.by_round_trip(analysis.race_summary(runs))
    assert list(points["rtt_ms"]) == [0.0, 1.0] and points["proxy"].all(), "the chart's 0 ms is the proxied one"
