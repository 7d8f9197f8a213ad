"""The faults experiment: its rules for every outcome, its bounds, and every fault injected for real."""

from __future__ import annotations

import pytest

from harness.errors import UserError
from harness.experiments import faults
from harness.service import ledger


def totals(**counts) -> dict:
    base = {name: 0 for name in (*ledger.CLASSES, *ledger.MARKS)}
    base.update(counts)
    return base


@pytest.mark.parametrize("protocol, fault, counts, rule, expected", [
    ("lease_fenced", "pause", {"completed_once": 12, "executed_twice": 1}, "fenced_keeps_every_run", True),
    ("lease_fenced", "restart", {"lost": 1}, "fenced_keeps_every_run", False),
    ("lease_fenced", "kill", {"stuck": 1}, "fenced_keeps_every_run", False),
    ("lease_fenced", "pause", {"completed_twice": 1}, "fenced_keeps_every_run", False),
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
    ("lease", "pause", {"completed_twice": 1}, "unfenced_pause_completes_stale", True),
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


def test_the_sweep_round_trips_through_stored_parameters():
    import dataclasses

    sweep = faults.FaultSweep(protocols=("none", "lease_fenced"), faults=("kill", "none"), runner_count=3, job_count=6)
    runs = sweep.runs()
    assert [(r.protocol, r.fault) for r in runs] == [("none", "kill"), ("lease_fenced", "kill"), ("none", "none"),
                                                     ("lease_fenced", "none")]
    assert faults.sweep_of([dataclasses.asdict(r) for r in runs]) == sweep
    assert all(r.drain_bound_seconds <= faults.MAX_DRAIN_SECONDS for r in runs)
