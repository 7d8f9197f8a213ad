"""The soak's stored runs as the command line shows them (python -m harness soak --show): a line per run, or a
JSON object per run with SHOWN's keys, the model's prediction from the runs stored beside it."""

from __future__ import annotations

import functools
import json

from harness.experiments.soak import outcomes as soak_outcomes
from harness.storage import Run, run_dirs


SHOWN = ("shape", "strategy", "library", "storage", "synchronous_commit", "wal_sync_ms_per_sync", "pg_test_fsync_ms",
         "rate", "rate_asked", "sustained_rate", "workers", "seconds", "holder", "analytics_s", "analytics_sessions",
         "pin_from", "pin_s",
         "hold_until_failure", "hold_asked", "released_because",
         "mitigation", "vacuum_every", "vacuum_passes", "vacuum_failed", "vacuum_pass_ms",
         "jobs_arrived", "jobs_claimed", "duplicate_jobs", "backlog_max", "backlog_at_end",
         "arrived_per_s_before", "arrived_per_s_during", "arrived_per_s_after", "claimed_per_s_before",
         "claimed_per_s_during", "claimed_per_s_after", "claim_p99_ms_before", "claim_p99_ms_during",
         "claim_p99_ms_after", "dead_tuples_max", "horizon_age_max_s", "table_bytes_max", "index_bytes_max",
         "buffers_per_claim_max", "autovacuum_runs", "dead_tuples_at_hold", "autovacuum_before_hold_s",
         # the rule's onsets, from the hold's start, and what the hold kept at them (harness.experiments.soak.outcomes)
         "claim_level_ms", "backlog_level", "seconds_to_slow", "seconds_to_fall_behind", "unremovable_at_slow",
         "unremovable_at_fall_behind", "buffers_per_claim_at_fall_behind", "horizon_age_s_at_fall_behind",
         "held_s", "observed_s", "held_without_failing", "seconds_to_slow_in_run", "seconds_to_fall_behind_in_run",
         "recovered_s", "verdict", "arrivals_behind", "cpu_bound",
         # this machine's CPUs, and the mark from when they were full (outcomes.cpu_mark)
         "cpu_measured", "cpu_bound_from_s", "cpu_busy_before", "cpu_busy_hold",
         # the model's slope from this run's hold, and its prediction for this run from the runs stored beside it
         "claim_ms_per_100k", "predicted_seconds_to_fall_behind",
         # the model's CPU limit: this run's CPU slope, its CPUs busy before the hold, empty polls a second, CPUs
         "cpu_ms_per_100k", "busy_cores_before", "empty_per_s", "cpus",
         # a job library's run (harness.experiments.soak.library) judges each job's pickup in place of the claim
         "latency", "library_version", "finished_jobs", "pickup_level_ms", "pickup_p99_ms_before",
         "pickup_p99_ms_during", "pickup_p99_ms_after", "jobs_claimed_again", "jobs_waiting_at_end", "worker_exits",
         "worker_restarts",
         # a run raced in phases (harness.experiments.soak.phases): the phases asked, and each judged
         "phases", "phase_results")


def _summary(run: Run) -> dict:
    """A run's stored summary with the model's CPU figures, from its stored series and samples (outcomes.with_cpu);
    a sweep shows each run beside every other, so each is read once (_figured)."""
    if run.summary.get("phases") or run.summary.get("library"):
        return run.summary
    return dict(_figured(run.path))


@functools.lru_cache(maxsize=256)
def _figured(path) -> dict:
    run = Run(path)
    return soak_outcomes.with_cpu(run.summary, run.table("series"), run.table("samples"), run.client.get("cpu_count"))


def beside(path) -> list[dict]:
    """The summaries of the soak runs stored beside a run, but its own: what the model is fitted on for it."""
    return [_summary(Run(other)) for other in run_dirs(path.parent) if other != path and Run(other).kind == "soak"]


def show_runs(paths, as_json: bool) -> None:
    for path in paths:
        run = Run(path)
        summary = _summary(run) | {"pg_version": run.manifest.get("server", {}).get("major")}
        summary["predicted_seconds_to_fall_behind"] = soak_outcomes.predicted_for(beside(path), summary)
        if as_json:
            print(json.dumps({key: summary.get(key) for key in (*SHOWN, "pg_version")}))
            continue
        if summary.get("phases"):
            _show_phases(summary)
            continue
        latency = summary.get("latency") or "claim"
        arm = f"{summary['shape']:<15} {summary['strategy']:<11}" if summary.get("library") is None \
            else f"{summary['library']:<27}"
        print(f"{arm} {summary['holder']:<19} "
              f"{summary['rate']:g} jobs/s x {summary['workers']}  held {summary['held_s']:.0f} s  "
              f"{latency} p99 {_ms(summary[f'{latency}_p99_ms_before'])} / "
              f"{_ms(summary[f'{latency}_p99_ms_during'])} / {_ms(summary[f'{latency}_p99_ms_after'])} ms  "
              f"slow at {_s(summary['seconds_to_slow'])}  behind at {_s(summary['seconds_to_fall_behind'])} "
              f"(predicted {_s(summary['predicted_seconds_to_fall_behind'])})  "
              f"backlog max {summary['backlog_max']}  recovered {_s(summary['recovered_s'])}  "
              f"{summary['verdict'].replace('_', ' ')}"
              + ("  ARRIVALS BEHIND" if summary["arrivals_behind"] else "")
              + ("  cpu-bound" if summary["cpu_bound"] else "")
              + (f"  CPUs full from {summary['cpu_bound_from_s']:.0f} s into the hold"
                 if summary.get("cpu_bound_from_s") is not None else ""))


def _s(value) -> str:
    return "-" if value is None else f"{value:.0f} s"


def _ms(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def _show_phases(summary: dict) -> None:
    """A run raced in phases: a line for the arm, then one per phase with its verdict against its reference."""
    print(f"{summary['shape']:<15} {summary['strategy']:<11} {summary['holder']:<19} {summary['workers']} workers, "
          f"{len(summary['phases'])} phases" + ("  ARRIVALS BEHIND" if summary["arrivals_behind"] else "")
          + ("  cpu-bound" if summary["cpu_bound"] else ""))
    for phase in summary["phase_results"]:
        verdict = (phase["verdict"] or "-").replace("_", " ")
        print(f"  {phase['label']:<12} {phase['kind']:<9} {phase['start_s']:>6.0f}-{phase['end_s']:<6.0f} s "
              f"{phase['rate']:>7.0f} jobs/s  backlog max {_n(phase['backlog_max'])}  "
              f"slow at {_s(phase['seconds_to_slow'])}  behind at {_s(phase['seconds_to_fall_behind'])}  "
              f"recovered {_s(phase['recovered_s'])}  {verdict}"
              + (f" (against {phase['reference']})" if phase["reference"] else ""))


def _n(value) -> str:
    return "-" if value is None else f"{value:.0f}"
