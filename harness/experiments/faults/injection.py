"""A faults run's fault and the drain after it: the control connection that outlives the fault, the trigger (a
runner's first started job, or a request the service holds open), the fault itself, and the wait until every run
is done or nothing can change any more.

inject and drain are handed the run's FaultParameters (harness.experiments.faults.measure) as p.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import psycopg

from harness.config import SCHEMA
from harness.errors import UserError
from harness.server import database, faults
from harness.service import ledger
from harness.service.app import APPLICATION_NAME as SERVICE_APPLICATION_NAME  # its pool's connections
from harness.service.runner import log_path

# The faults injected inside a request's window (the service holds that request open: AnswerHold)
HELD_FAULTS = {"service_mid_claim": "claim", "restart_mid_finish": "finish"}
RUNS = f"{SCHEMA}.runs"
TERMINATE_ROUNDS = 3  # pg_terminate_backend of the service's connections this many times, TERMINATE_GAP_S apart
TERMINATE_GAP_S = 0.3
SERVICE_DOWN_S = 0.5  # how long the killed service stays down before its new process starts
TRIGGER_TIMEOUT_S = 30.0  # the longest wait for a runner to start a job (the fault's trigger)


class Watch:
    """The control connection, reopened after a terminated backend or a restarted server."""

    def __init__(self, url: str):
        self.url = url
        self.conn = None

    def execute(self, sql: str, params=None):
        for attempt in range(60):
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = database.connect(self.url, application_name="claimrace-faults")
                return self.conn.execute(sql, params)
            except (psycopg.OperationalError, UserError):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                time.sleep(0.1)
        raise RuntimeError("the server did not come back within 6 s")

    def connection(self) -> psycopg.Connection:
        """A live connection (reopened if it was lost)."""
        self.execute("SELECT 1")
        return self.conn

    def close(self):
        if self.conn is not None:
            self.conn.close()


def _first_started(events_dir: Path, names: list[str], since: float, timeout: float) -> dict | None:
    """The first `started` event any runner logged after `since` (unix time), read from their logs as they grow."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in ledger.read_events(log_path(events_dir, name) for name in names):
            if event["event"] == "started" and event["t"] >= since:
                return event
        time.sleep(0.01)
    return None


def _held(hold_dir: Path, place: str, timeout: float) -> dict | None:
    """What the service holds open at `place` (its `held-<place>` file), once it does; None at the timeout."""
    held = hold_dir / f"held-{place}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if held.exists():
            return json.loads(held.read_text())
        time.sleep(0.005)
    return None


def _kill_and_restart_service(service, log: faults.FaultLog) -> dict:
    """SIGKILL of the claim service, SERVICE_DOWN_S down, then a new process on the same port; both pids."""
    old_pid = service.pid
    service.kill()
    log.record("service_kill", f"claim service pid {old_pid}", pid=old_pid)
    time.sleep(SERVICE_DOWN_S)
    service.start()
    log.record("service_start", f"claim service pid {service.pid}", pid=service.pid)
    return {"old_pid": old_pid, "new_pid": service.pid}


def inject_held(fault: str, db: database.Database, service, log: faults.FaultLog, hold_dir: Path) -> dict:
    """A fault inside a request's window: the service is told to hold the next claim (committed, not answered)
    or finish (written, not committed), and the fault lands while it is held: the service killed mid-claim, or
    PostgreSQL crash-restarted mid-finish."""
    place = HELD_FAULTS[fault]
    (hold_dir / f"arm-{place}").touch()
    held = _held(hold_dir, place, TRIGGER_TIMEOUT_S)
    if held is None:
        return {"landed": False, "why": f"no {place} was held within {TRIGGER_TIMEOUT_S:g} s"}
    hit = {"runner": held["runner"], "run": held["run"], "held": place}
    # logged first: what the fault does (the failed answer) happens while it is injected
    log.record(f"held_{place}", f"run {held['run']} of {held['runner']}", run=held["run"], runner=held["runner"])
    if fault == "service_mid_claim":
        return {"landed": True, **hit, **_kill_and_restart_service(service, log)}
    times = faults.restart_server(db, log)
    (hold_dir / f"release-{place}").touch()  # the finish goes on to commit, on a connection the restart broke
    return {"landed": True, **hit, **times}


def inject(fault: str, p, db: database.Database, service, runners, reaper, watch: Watch,
           log: faults.FaultLog, events_dir: Path, hold_dir: Path | None = None) -> dict:
    """Inject one fault once a runner has started a job (or, for HELD_FAULTS, once the service holds the request
    it targets); what it hit (the run, the runner) and whether it landed."""
    if fault == "none":
        return {"landed": True}
    if fault in HELD_FAULTS:
        return inject_held(fault, db, service, log, hold_dir)
    trigger = _first_started(events_dir, runners.names, log.began_unix, TRIGGER_TIMEOUT_S)
    if trigger is None:
        return {"landed": False, "why": f"no runner started a job within {TRIGGER_TIMEOUT_S:g} s"}
    victim, run, token = trigger["runner"], trigger["run"], trigger["token"]
    pid = runners.pids[runners.names.index(victim)]
    if fault == "kill":
        faults.kill(pid, log, victim, run=run, token=token)
        return {"landed": True, "runner": victim, "run": run, "token": token}
    if fault == "pause":
        with faults.stopped(pid, log, victim, run=run, token=token) as entry:
            if p.protocol == "none":  # nothing hands the run on: a pause of PAUSE_LEASES leases
                time.sleep(p.pause_s)
                handed_on = True
            else:  # stopped until another runner holds its run (only after its lease ran out), then woken at once:
                # it wakes into the hazard, another runner working on its run
                handed_on = _wait_for_reclaim(watch, run, token, p.drain_bound_seconds)
        return {"landed": True, "runner": victim, "run": run, "token": token, "handed_on": handed_on,
                "paused_s": entry["paused_seconds"]}
    if fault == "terminate":
        hit = []
        for _ in range(TERMINATE_ROUNDS):
            hit += faults.terminate_backends(watch.connection(), SERVICE_APPLICATION_NAME, log)
            time.sleep(TERMINATE_GAP_S)
        return {"landed": bool(hit), "backends": len(hit), "run": run}
    if fault == "restart":
        times = faults.restart_server(db, log)
        return {"landed": True, **times, "run": run}
    if fault == "service":
        return {"landed": True, **_kill_and_restart_service(service, log), "run": run}
    raise ValueError(fault)


def _wait_for_reclaim(watch: Watch, run: int, token: int, timeout: float) -> bool:
    """Whether another runner claimed run (a later attempt, still running) within timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = watch.execute(f"SELECT status, attempt FROM {RUNS} WHERE id = %s", [run]).fetchone()
        if row is not None and row[0] == "running" and int(row[1]) > int(token):
            return True
        time.sleep(0.02)
    return False


def _status(watch: Watch) -> dict:
    rows = watch.execute(f"SELECT status, claimed_by, count(*) FROM {RUNS} GROUP BY 1, 2").fetchall()
    counts = {"pending": 0, "running": 0, "done": 0}
    running_by = []
    for status, holder, count in rows:
        counts[status] += int(count)
        if status == "running":
            running_by.append(holder)
    return {**counts, "running_by": running_by}


def drain(p, watch: Watch, runners, events_dir: Path) -> dict:
    """Wait until every run is done, or nothing can change any more (no lease, nothing pending, every running run
    held by no live runner), or the bound; what the queue looked like then."""
    began = time.monotonic()
    while True:
        state = _status(watch)
        seconds = time.monotonic() - began
        if state["done"] == p.job_count:
            return {**state, "drained": True, "drain_seconds": seconds, "ended_by": "done"}
        if p.protocol == "none" and state["pending"] == 0:
            live = live_runners(runners)
            held = ledger.holders(ledger.read_events(runners_logs(events_dir, runners)))
            if not any(holder in live and any(key[0] == holder for key in held) for holder in state["running_by"]):
                return {**state, "drained": False, "drain_seconds": seconds, "ended_by": "stuck"}
        if seconds > p.drain_bound_seconds:
            return {**state, "drained": False, "drain_seconds": seconds, "ended_by": "time"}
        time.sleep(0.1)


def runners_logs(events_dir: Path, runners) -> list[Path]:
    return [log_path(events_dir, name) for name in runners.names]


def live_runners(runners) -> set[str]:
    return {name for name, pid in zip(runners.names, runners.pids) if faults.alive(pid)}
