"""Wake-ups on the real server: idle workers of procrastinate woken by LISTEN/NOTIFY against polling only, jobs
arriving one at a time, each job's pickup from the audit's enqueue to its first start."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import forked_workers, run_cli, survivors_of_sigkill
from harness.errors import UserError
from harness.experiments import wakeups

S = 1_000_000_000  # ns


def test_a_job_not_started_by_the_end_counts_up_to_it_and_makes_the_figures_lower_bounds():
    audit = pd.DataFrame({"job_id": [1, 2, 3], "event": ["enqueued"] * 3, "at_ns": [0, S, 2 * S],
                          "txid": [1, 2, 3], "pid": [1, 1, 1]})
    starts = pd.DataFrame({"job_id": [1, 2, 2], "at_ns": [S // 100, S + S // 10, S + S // 5], "worker": [0, 1, 0]})
    jobs = wakeups.pickups(audit, starts, ended_ns=5 * S)
    assert jobs["pickup_ms"].tolist() == [10.0, 100.0, 3000.0] and jobs["censored"].tolist() == [False, False, True]
    summary = wakeups.summarise(wakeups.WakeupParameters("procrastinate", "poll", 1.0, 3), jobs, 30, 6.0, True)
    assert (summary["started"], summary["not_started"], summary["executed_twice"]) == (2, 1, 1)
    assert summary["pickup_is_lower_bound"] and summary["pickup_max_ms"] == 3000.0
    assert summary["transactions_per_s"] == 5.0
    clean = wakeups.summarise(wakeups.WakeupParameters("procrastinate", "poll", 1.0, 2), jobs.iloc[:2], 0, 1.0, True)
    assert not clean["pickup_is_lower_bound"] and clean["not_started"] == 0


def test_a_wakeup_run_refuses_what_it_cannot_run_in_one_line():
    with pytest.raises(UserError, match="must be one of procrastinate, chancy"):
        wakeups.WakeupParameters("pgboss")
    with pytest.raises(UserError, match="interval between jobs"):
        wakeups.WakeupParameters("procrastinate", interval_s=0.0001)
    with pytest.raises(UserError, match="take more than 300 s to arrive"):
        wakeups.WakeupParameters("procrastinate", interval_s=10, job_count=40)
    done = run_cli("wakeups", "--wake", "shout", "--data-dir", "/nonexistent")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "shout" in done.stderr


def test_listening_workers_pick_a_job_up_sooner_than_polling_ones(tmp_path):
    """procrastinate polls every 5 s by default: without LISTEN a job waits for the next poll, with it a worker is
    woken at once."""
    done = run_cli("wakeups", "--library", "procrastinate", "--interval", "0.3", "--jobs", "3", "--json", "--quiet",
                   "--data-dir", str(tmp_path), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {row["wake"]: row for row in map(json.loads, done.stdout.splitlines())}
    for row in rows.values():
        assert (row["started"], row["not_started"], row["executed_twice"]) == (3, 0, 0), row
    assert rows["listen"]["pickup_max_ms"] < 1000, rows["listen"]
    assert rows["poll"]["pickup_max_ms"] > rows["listen"]["pickup_max_ms"], rows


def test_no_worker_outlives_the_command_killed_with_sigkill(tmp_path):
    assert survivors_of_sigkill(["wakeups", "--library", "procrastinate", "--wake", "poll", "--interval", "2",
                                 "--jobs", "10", "--quiet", "--data-dir", str(tmp_path)], forked_workers, 120) == []
