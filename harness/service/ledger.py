"""The final ledger: after the faults and the drain, every run classified from the database and the runners' logs.

Each run falls in exactly one class:

- completed_once:  exactly one accepted finish in claimrace.finishes;
- completed_twice: two or more accepted finishes (the run was completed more than once);
- stuck:           not completed, still 'running', and no live runner holds it (its claimer is dead, or alive
                   but no longer working on it);
- in_progress_at_timeout: not completed, still 'running', and a live runner was still working on it when the
                   drain's time ran out (neither lost nor stuck: the bound came first);
- lost:            not completed, not running: back to 'pending' (or never claimed) when the drain ended, so a job
                   that was started went unfinished.

and may carry any of these marks:

- executed_twice:   two or more runners (or one runner twice, under different tokens) started the job, from the
                    runners' event logs: the work ran more than once (at-least-once);
- stale_completion: an accepted finish came from a runner that no longer held the run (an attempt older than the
                    run's last claim, or a runner other than its last claimer): a runner that had lost its lease
                    completed a run another runner held;
- acknowledged_lost: a runner was told its finish was accepted (event `finished`), but the database has no
                    accepted finish from that runner and token (a committed write that did not survive).

Reads claimrace.runs, claimrace.finishes and the audit of flips through the SQL below; the runners' event logs
are JSON lines (see harness.service.runner).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from harness.config import SCHEMA

CLASSES = ("completed_once", "completed_twice", "stuck", "lost", "in_progress_at_timeout")
MARKS = ("executed_twice", "stale_completion", "acknowledged_lost")

RUNS_SQL = f"SELECT id, status, attempt, claimed_by FROM {SCHEMA}.runs ORDER BY id"
FINISHES_SQL = f"SELECT run_id, runner, attempt FROM {SCHEMA}.finishes ORDER BY run_id"

STARTED_EVENTS = ("started",)
HOLDING_EVENTS = ("claimed", "started", "heartbeat")
DONE_EVENTS = ("finished", "finish_rejected", "stopped")  # the runner has left the run


def read_events(paths) -> list[dict]:
    """Every event of the runners' JSON-lines logs (a torn last line, from a killed runner, is skipped)."""
    events = []
    for path in paths:
        path = Path(path)
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    events.sort(key=lambda e: e.get("t", 0))
    return events


def holders(events: list[dict]) -> dict[tuple[str, int], int]:
    """{(runner, run): token} of the runs each runner was still working on at its last event."""
    holding: dict[tuple[str, int], int] = {}
    for event in events:
        run = event.get("run")
        if run is None:
            continue
        key = (event["runner"], int(run))
        if event["event"] in HOLDING_EVENTS:
            holding[key] = event.get("token")
        elif event["event"] in DONE_EVENTS:
            holding.pop(key, None)
    return holding


def classify(runs: list[dict], finishes: list[dict], events: list[dict], live_runners: set[str]) -> list[dict]:
    """One row per run: its class and marks, with the figures they were decided from.

    runs: {id, status, attempt, claimed_by}; finishes: {run_id, runner, attempt} (accepted finishes);
    events: the runners' events; live_runners: the runners whose process was alive at the end of the drain.
    """
    accepted = defaultdict(list)
    for finish in finishes:
        accepted[int(finish["run_id"])].append(finish)
    started = defaultdict(set)
    acknowledged = defaultdict(set)
    for event in events:
        if event.get("run") is None:
            continue
        run = int(event["run"])
        if event["event"] in STARTED_EVENTS:
            started[run].add((event["runner"], event.get("token")))
        elif event["event"] == "finished":
            acknowledged[run].add((event["runner"], event.get("token")))
    held = holders(events)
    rows = []
    for run in runs:
        run_id = int(run["id"])
        done = accepted[run_id]
        holder = run.get("claimed_by")
        held_by_live = (holder in live_runners and (holder, run_id) in held)
        if len(done) >= 2:
            klass = "completed_twice"
        elif len(done) == 1:
            klass = "completed_once"
        elif run["status"] == "running":
            klass = "in_progress_at_timeout" if held_by_live else "stuck"
        else:
            klass = "lost"
        accepted_keys = {(f["runner"], f["attempt"]) for f in done}
        rows.append({
            "run": run_id,
            "status": run["status"],
            "attempt": int(run["attempt"]),
            "accepted_finishes": len(done),
            "runners_started": len(started[run_id]),
            "class": klass,
            "executed_twice": len(started[run_id]) >= 2,
            "stale_completion": any(int(f["attempt"]) < int(run["attempt"]) or f["runner"] != holder for f in done),
            "acknowledged_lost": any(key not in accepted_keys for key in acknowledged[run_id]),
        })
    return rows


def counts(rows: list[dict]) -> dict:
    """{class or mark: how many runs} over a classified ledger (every class and mark present, zeros included)."""
    totals = {name: sum(1 for row in rows if row["class"] == name) for name in CLASSES}
    totals.update({name: sum(1 for row in rows if row[name]) for name in MARKS})
    totals["runs"] = len(rows)
    return totals


def read_ledger(conn, events: list[dict], live_runners: set[str]) -> list[dict]:
    """The ledger of the runs in the database now."""
    runs = [dict(zip(("id", "status", "attempt", "claimed_by"), row)) for row in conn.execute(RUNS_SQL).fetchall()]
    finishes = [dict(zip(("run_id", "runner", "attempt"), row)) for row in conn.execute(FINISHES_SQL).fetchall()]
    return classify(runs, finishes, events, live_runners)
