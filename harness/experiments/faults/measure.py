"""A claim is not a completion: leases, heartbeats, injected faults and the final ledger (C7).

One run: a fresh queue of `job_count` runs (claimrace.runs, dropped and recreated), the claim
service (harness.service) under one protocol, `runner_count` runner processes claiming through
POST /claim, and, for the lease protocols, the reaper (harness.service.reaper). Once a runner has
started a job, one fault is injected for real and logged with its time and target:

    kill       SIGKILL of that runner, after its claim and before its finish (read from its event log);
    pause      SIGSTOP of that runner: under a lease until another runner has claimed its run again (which
               the reaper allows only once its lease ran out), else for PAUSE_LEASES leases; then SIGCONT:
               it wakes up and tries to finish;
    terminate  pg_terminate_backend of the service's connections (application_name), TERMINATE_ROUNDS times;
    restart    the PostgreSQL server stopped the way a crash stops it and started again on its data directory;
    service    SIGKILL of the claim service, and a new service process on the same port;
    none       nothing: the baseline whose counters give what the protocol costs.

Two faults land inside a request's window instead, where the service holds that request open for them
(harness.service.app.AnswerHold), whatever a runner is doing:

    service_mid_claim   SIGKILL of the service after a claim committed and before its answer left: the
                        run is claimed in the database by a runner that never heard of it;
    restart_mid_finish  a crash restart of PostgreSQL while a finish's transaction is open: the finish
                        is rolled back and its runner is answered with an error.

Then the healthy runners drain the queue, bounded in time (drain_bound_seconds), and every run is
classified by harness.service.ledger from the database and the runners' event logs: completed once,
completed twice, stuck, lost; marked executed twice, completed by a stale holder, acknowledged but lost.

The cost of leases: the heartbeats the runners sent and the server accepted, and what the server's
counters for claimrace.runs say (n_tup_upd, n_tup_hot_upd, n_dead_tup; see harness.server.pgstats),
beside the claims per second of the drain. A restart of the server discards its statistics, so a
restart run (restart, restart_mid_finish) does not report counters.

Public API::

    FaultParameters(protocol, fault, runner_count=4, job_count=8, lease_s=1.0, job_s=1.5)   # one run
    FaultSweep(protocols, faults, ...)             # what a params section or the command line asks
    measure_faults(db, parameters, run_id, progress) -> Measured     # through harness.experiments.registry
    expectations(protocol, fault, totals) -> {rule: True/False/None}   # what each protocol must show
    summarise(Run(run_dir)) -> dict                 # the ledger's counts, as --json prints them

Stored as data/faults/<run_id>/{ledger,timeline,faults}.parquet and manifest.json, read with storage.Run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
from contextlib import closing
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from psycopg import conninfo
from tqdm.auto import tqdm

from harness import scratch
from harness.config import SCHEMA
from harness.errors import UserError
from harness.experiments.contract import Kind
from harness.experiments.contract import one_of, Measured, Option, Parameters, as_float, as_int, setting
from harness.experiments.faults.injection import (HELD_FAULTS, RUNS, SERVICE_DOWN_S, TERMINATE_ROUNDS, Watch, drain,
                                                 inject, live_runners, runners_logs)
from harness.server import database, faults, pgstats
from harness.service import ledger
from harness.service import cipher, producer
from harness.service.process import running_service
from harness.service.reaper import REAP_SQL, Reaper
from harness.service.runner import RunnerGroup, RunnerSettings
from harness.service.schema import create_run_queue
from harness.storage import Run

PROTOCOLS = ("none", "lease", "lease_holder", "lease_fenced")
FAULTS = ("kill", "pause", "terminate", "restart", "service", "service_mid_claim", "restart_mid_finish", "none")

MAX_RUNNERS = 20
MAX_JOBS = 500
MIN_LEASE_SECONDS, MAX_LEASE_SECONDS = 0.3, 30.0
MAX_JOB_SECONDS = 30.0
PAUSE_LEASES = 2.5  # a paused runner sleeps this many leases: its lease runs out and the reaper hands the run on
POLL_S = 0.1  # runners' idle poll interval (POST /claim)
REAPER_INTERVAL_LEASES = 0.1  # the reaper passes every tenth of a lease
MAX_DRAIN_SECONDS = 180.0
SERVICE_POOL_SIZE = 4


as_protocol = one_of(PROTOCOLS, "protocol")


as_fault = one_of(FAULTS, "fault")


def _choices(allowed: tuple[str, ...], what: str):
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(part.strip() for part in text.split(",") if part.strip())
        if text.strip() == "all":
            return allowed
        bad = [name for name in names if name not in allowed]
        if bad or not names:
            raise argparse.ArgumentTypeError(f"{what} must be one or more of {', '.join(allowed)} (comma-separated) "
                                             f"or all, not {text!r}")
        return names
    return parse


def _as_names(allowed: tuple[str, ...], what: str):
    def convert(name: str, values) -> tuple[str, ...]:
        if isinstance(values, str) or not hasattr(values, "__iter__"):
            raise UserError(f"{what}s must be a list, not {values!r}")
        values = tuple(values)
        if not values:
            raise UserError(f"give at least one {what}")
        for value in values:
            if value not in allowed:
                raise UserError(f"{what} must be one of {', '.join(allowed)}, not {value!r}")
        return values
    return convert


def _check_sizes(runner_count: int, job_count: int, lease_s: float, job_s: float) -> None:
    if not 2 <= runner_count <= MAX_RUNNERS:  # one to hit, one to drain
        raise UserError(f"runners must be between 2 and {MAX_RUNNERS}, not {runner_count}")
    if not runner_count <= job_count <= MAX_JOBS:
        raise UserError(f"jobs must be between the runner count ({runner_count}) and {MAX_JOBS}, not {job_count}")
    if not MIN_LEASE_SECONDS <= lease_s <= MAX_LEASE_SECONDS:  # NaN fails too
        raise UserError(f"lease must be between {MIN_LEASE_SECONDS:g} and {MAX_LEASE_SECONDS:g} s, not {lease_s}")
    if not 0.05 <= job_s <= MAX_JOB_SECONDS:
        raise UserError(f"job time must be between 0.05 and {MAX_JOB_SECONDS:g} s, not {job_s}")


@dataclass(frozen=True)
class FaultParameters(Parameters):
    """One run: a protocol, one fault, the runners, the queue, the lease and each job's time."""

    protocol: str = setting("lease_fenced", as_protocol)
    fault: str = setting("kill", as_fault)
    runner_count: int = setting(4, as_int)
    job_count: int = setting(8, as_int)
    lease_s: float = setting(1.0, as_float)
    job_s: float = setting(1.5, as_float)  # every job runs this long (fixed), longer than a lease: heartbeats happen

    def check(self) -> None:
        _check_sizes(self.runner_count, self.job_count, self.lease_s, self.job_s)

    @property
    def pause_s(self) -> float:
        return PAUSE_LEASES * self.lease_s

    @property
    def drain_bound_seconds(self) -> float:
        """The longest a run waits for the queue to drain after its fault: rounds of jobs, leases, restarts."""
        rounds = -(-self.job_count // (self.runner_count - 1))  # the healthy runners' rounds of jobs
        return min(MAX_DRAIN_SECONDS, 15.0 + 2 * rounds * self.job_s + 6 * self.lease_s + self.pause_s)


@dataclass(frozen=True)
class FaultSweep(Parameters):
    """Every protocol under every fault: what `python -m harness faults` and a params section ask."""

    protocols: tuple = setting(PROTOCOLS, _as_names(PROTOCOLS, "protocol"), Option(
        "--protocol", f"{', '.join(PROTOCOLS)}; a comma list; or all", _choices(PROTOCOLS, "protocol"),
        default_text="all"))
    faults: tuple = setting(FAULTS, _as_names(FAULTS, "fault"), Option(
        "--fault", f"{', '.join(FAULTS)} (none: the baseline for the cost); a comma list; or all",
        _choices(FAULTS, "fault"), default_text="all"))
    runner_count: int = setting(4, as_int, Option("--runners", "runner processes", int))
    job_count: int = setting(8, as_int, Option("--jobs", "runs queued", int))
    lease_s: float = setting(1.0, as_float, Option("--lease-s", "lease length in seconds (heartbeat every third)",
                                                  float))
    job_s: float = setting(1.5, as_float, Option("--job-s", "how long each job runs, in seconds", float))

    def check(self) -> None:
        _check_sizes(self.runner_count, self.job_count, self.lease_s, self.job_s)

    def runs(self) -> list[FaultParameters]:
        return [FaultParameters(protocol, fault, self.runner_count, self.job_count, self.lease_s, self.job_s)
                for fault in self.faults for protocol in self.protocols]



def workers_needed(parameters: FaultParameters) -> int:
    return SERVICE_POOL_SIZE + 1  # the service's pool and the reaper


def run_label(parameters: FaultParameters) -> str:
    return f"{parameters.protocol}, {parameters.fault}"


def check_size(sets: list[FaultParameters], local: bool, pg_version: int) -> None:
    """Before any server starts: the restart fault needs a server this harness starts and can restart."""
    if not local and any(p.fault in ("restart", "restart_mid_finish") for p in sets):
        raise UserError("the restart fault needs the embedded server (it stops and starts PostgreSQL)")


# --------------------------------------------------------------------------- what each protocol must show


def expectations(protocol: str, fault: str, totals: dict) -> dict:
    """The rules a run is held to, each True (holds), False (broken) or None (does not apply to this run).

    fenced_keeps_every_run: under lease_fenced no run is lost, stuck or completed by a stale holder, whatever the
        fault (a run still being worked on when the drain's bound came is counted apart, in_progress_at_timeout).
    holder_keeps_every_run: the same under lease_holder (the holder checked by name, no attempt counter).
    unfenced_kill_leaves_stuck_run (negative control): under none, a runner killed after its claim leaves its run
        stuck; a kill that shows no stuck run did not happen where it should (or the ledger cannot see it).
    lease_recovers_killed_run: under a lease, the killed runner's run is completed by another runner.
    unfenced_pause_completes_stale: under lease without the fence, the runner paused past its lease completes a
        run that was handed to another runner (or completes it twice).
    """
    rules = {name: None for name in ("fenced_keeps_every_run", "holder_keeps_every_run",
                                     "unfenced_kill_leaves_stuck_run", "lease_recovers_killed_run",
                                     "unfenced_pause_completes_stale")}
    keeps_every_run = totals["lost"] == 0 and totals["stuck"] == 0 and totals["stale_completion"] == 0
    if protocol == "lease_fenced":
        rules["fenced_keeps_every_run"] = keeps_every_run
    if protocol == "lease_holder":
        rules["holder_keeps_every_run"] = keeps_every_run
    if protocol == "none" and fault == "kill":
        rules["unfenced_kill_leaves_stuck_run"] = totals["stuck"] > 0
    if protocol in LEASE_PROTOCOLS and fault == "kill":
        rules["lease_recovers_killed_run"] = (totals["stuck"] == 0 and totals["lost"] == 0
                                              and totals["executed_twice"] > 0)
    if protocol == "lease" and fault == "pause":
        rules["unfenced_pause_completes_stale"] = totals["stale_completion"] > 0
    return rules


LEASE_PROTOCOLS = ("lease", "lease_holder", "lease_fenced")


def fault_effects(fault: str, hit: dict, events: list[dict], reaps: list[dict], live: set[str],
                  fault_unix: float | None) -> dict:
    """What the fault was seen to do, from the runners' logs, the reaper's log and the processes: only effects
    observed after the fault count (a request that failed, a heartbeat or finish refused, a reap, a runner gone
    or stopped). {} for the baseline without a fault."""
    if fault == "none" or fault_unix is None:
        return {}
    after = [e for e in events if e.get("t", 0) >= fault_unix]
    victim = hit.get("runner")
    effects = {
        "runner_errors": sum(1 for e in after if e["event"] == "error"),
        "heartbeats_refused": sum(1 for e in after if e["event"] == "heartbeat" and e.get("status") != 200),
        "finishes_refused": sum(1 for e in after if e["event"] == "finish_rejected"),
        "reaps": sum(1 for r in reaps if r.get("unix", 0) >= fault_unix),
    }
    if fault == "kill":
        effects["runner_gone"] = int(victim is not None and victim not in live)
    if fault in HELD_FAULTS:
        # the held request's own answer failed: a claim whose runner never heard of it, a finish that failed
        mine = [e for e in after if e["runner"] == victim]
        if fault == "service_mid_claim":  # its next word on a claim was an error, not the claim it was given
            outcomes = [e["event"] for e in mine if e["event"] in ("error", "claimed")]
            effects["claim_answer_lost"] = int(bool(outcomes) and outcomes[0] == "error")
        else:
            effects["finish_lost"] = int(any(e["event"] == "finish_rejected" and e.get("run") == hit.get("run")
                                             for e in mine))
    if fault == "pause":
        effects["runner_stopped_s"] = round(float(hit.get("paused_s") or 0.0), 3)
        effects["victim_reaped"] = sum(1 for r in reaps if r.get("runner") == victim and r.get("unix", 0) >= fault_unix)
    return {name: value for name, value in effects.items() if value}


def landed_by_effects(fault: str, effects: dict) -> bool:
    """A fault counts as landed only where an effect of it was observed (the baseline needs none)."""
    if fault == "none":
        return True
    if fault == "pause":  # a pause lands when the runner stayed stopped; under a lease, when its run was reaped too
        return bool(effects.get("runner_stopped_s"))
    if fault == "kill":
        return bool(effects.get("runner_gone"))
    if fault == "service_mid_claim":
        return bool(effects.get("claim_answer_lost"))
    if fault == "restart_mid_finish":
        return bool(effects.get("finish_lost"))
    return any(effects.get(name) for name in ("runner_errors", "heartbeats_refused", "finishes_refused", "reaps"))


def run_checks(p: FaultParameters, totals: dict, landed: bool, hit: dict, events: list[dict], claims: int) -> dict:
    """What must hold for a run to count (a run that fails them is kept aside, not used).

    fault_injected: the fault was injected where it should be (a runner had started a job; a paused runner, under a
        lease, stayed stopped until its run was handed on). Whether it was seen to do anything is not a check but a
        result (fault_landed, from fault_effects): a run whose fault had no effect is kept, and counted as such;
    every_run_classified: the ledger has a row per run queued;
    audit_counts_every_claim: the audit saw at least one claim per completed run;
    kill_before_finish (kill): the killed runner never finished the run it held;
    negative_control_sees_stuck_run (none, kill): a kill that leaves no stuck run did not happen where it should,
        or the ledger cannot see what it should.
    """
    checks = {
        "fault_injected": bool(landed),
        "every_run_classified": totals["runs"] == p.job_count,
        "audit_counts_every_claim": claims >= totals["completed_once"] + totals["completed_twice"],
    }
    if p.fault == "kill":
        checks["kill_before_finish"] = not any(e["event"] == "finished" and e["runner"] == hit.get("runner")
                                               and e.get("run") == hit.get("run") for e in events)
    if p.protocol == "none" and p.fault == "kill":
        checks["negative_control_sees_stuck_run"] = totals["stuck"] > 0
    checks["passed"] = all(checks.values())
    return checks


# --------------------------------------------------------------------------- the run


def _service_dsn(url: str) -> str:
    return conninfo.make_conninfo(url)


def _counters(watch: Watch) -> tuple[dict, object]:
    conn = watch.connection()
    return pgstats.table_counters(conn, RUNS), conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0]


def _timeline(events: list[dict], log: faults.FaultLog, reaps: list[dict], zero: float) -> pd.DataFrame:
    rows = [{"t": e["t"] - zero, "source": "runner", "event": e["event"], "runner": e["runner"],
             "run": e.get("run"), "token": e.get("token"), "status": e.get("status")} for e in events]
    rows += [{"t": f["unix"] - zero, "source": "fault", "event": f["fault"], "runner": f["target"],
              "run": f.get("run"), "token": f.get("token"), "status": None} for f in log.entries]
    rows += [{"t": r["unix"] - zero, "source": "reaper", "event": "reaped", "runner": r["runner"], "run": r["run"],
              "token": r["attempt"], "status": None} for r in reaps]
    frame = pd.DataFrame(rows, columns=["t", "source", "event", "runner", "run", "token", "status"])
    for column in ("run", "token", "status"):
        frame[column] = frame[column].astype("Int64")
    return frame.sort_values("t", kind="stable").reset_index(drop=True)


def measure_faults(db: database.Database, parameters: FaultParameters, run_id: str,
                   progress: bool = True) -> Measured:
    """One protocol under one fault, drained and classified. Drops and recreates claimrace.runs, run_flips and
    finishes."""
    p = parameters
    key = cipher.new_key()
    events_dir = scratch.folder("faults-events")
    watch = Watch(db.url)
    bar = tqdm(total=3, desc=f"faults {run_label(p)}", unit="step", disable=not progress)
    try:
        with closing(db.connect()) as conn:
            create_run_queue(conn)
            now = pd.Timestamp.now(tz="UTC").to_pydatetime()
            producer.enqueue(conn, key, [now] * p.job_count, np.random.default_rng(0))
            pgstats.reset_table_counters(conn, RUNS)
            before, started_at = pgstats.table_counters(conn, RUNS), \
                conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0]
        log = faults.FaultLog()
        zero = log.began_unix
        settings = RunnerSettings(service="http://127.0.0.1:1", poll_s=POLL_S, endpoint="claim",
                                  service_time_s=p.job_s, service_time_distribution="fixed", jitter=0.2,
                                  seed=0)
        reaper = Reaper(db.url, interval_s=max(0.02, REAPER_INTERVAL_LEASES * p.lease_s), clock_zero=zero) \
            if p.protocol != "none" else None
        hold_dir = events_dir / "holds"
        hold_dir.mkdir()
        with running_service(_service_dsn(db.url), p.protocol, p.lease_s, key=key, pool_size=SERVICE_POOL_SIZE,
                             hold_dir=str(hold_dir) if p.fault in HELD_FAULTS else None) as service:
            settings = RunnerSettings(**{**asdict(settings), "service": service.url})
            with (reaper if reaper is not None else contextlib.nullcontext()), \
                    RunnerGroup(settings, p.runner_count, events_dir) as runners:
                bar.set_postfix_str("waiting for a job to start, then the fault")
                hit = inject(p.fault, p, db, service, runners, reaper, watch, log, events_dir, hold_dir)
                bar.update()
                bar.set_postfix_str("draining")
                drained = drain(p, watch, runners, events_dir)
                bar.update()
                live = live_runners(runners)
                events = ledger.read_events(runners_logs(events_dir, runners))
                rows = ledger.read_ledger(watch.connection(), events, live)
                flips = int(watch.execute(f"SELECT count(*) FROM {SCHEMA}.run_flips "
                                          "WHERE new_status = 'running'").fetchone()[0])
                first_last = watch.execute(f"SELECT extract(epoch FROM min(flipped_at)), "
                                           f"extract(epoch FROM max(flipped_at)) FROM {SCHEMA}.run_flips").fetchone()
        reaps = reaper.reaps if reaper is not None else []
        events = ledger.read_events(runners_logs(events_dir, runners))  # with the runners' last words
        after, restarted_at = _counters(watch)
        bar.update()
    finally:
        watch.close()
        shutil.rmtree(events_dir, ignore_errors=True)
        bar.close()

    totals = ledger.counts(rows)
    heartbeats = [e for e in events if e["event"] == "heartbeat"]
    counters_valid = restarted_at == started_at  # a crash restart discards the server's statistics
    deltas = pgstats.counter_deltas(before, after)
    claims = flips
    busy = (float(first_last[1]) - float(first_last[0])) if first_last[0] is not None else None
    fault_unix = log.entries[0]["unix"] if log.entries else None
    effects = fault_effects(p.fault, hit, events, reaps, live, fault_unix)
    landed = landed_by_effects(p.fault, effects) and bool(hit.get("landed")) and hit.get("handed_on", True)
    results = {
        "protocol": p.protocol, "fault": p.fault,
        "faults_injected": len(log.entries), "fault_landed": landed, "fault_effects": effects,
        "hit": hit,
        **{name: totals[name] for name in (*ledger.CLASSES, *ledger.MARKS)},
        "runs": totals["runs"], "drained": drained["drained"], "drain_ended_by": drained["ended_by"],
        "drain_seconds": drained["drain_seconds"], "pending_at_end": drained["pending"],
        "running_at_end": drained["running"], "reaps": len(reaps), "reaper_errors": reaper.errors if reaper else 0,
        "reaps_of_healthy_holders": sum(1 for r in reaps if r["runner"] != hit.get("runner")),
        "claims": claims, "finishes_accepted": sum(1 for e in events if e["event"] == "finished"),
        "heartbeats": len(heartbeats),
        "heartbeats_accepted": sum(1 for e in heartbeats if e.get("status") == 200),
        "heartbeats_per_run": len(heartbeats) / p.job_count,
        "claims_per_second": claims / busy if busy else None,
        "counters_valid": counters_valid,
        "updates": deltas["n_tup_upd"] if counters_valid else None,
        "hot_updates": deltas["n_tup_hot_upd"] if counters_valid else None,
        "dead_tuples": int(after["n_dead_tup"]) if counters_valid else None,
        "updates_per_run": deltas["n_tup_upd"] / p.job_count if counters_valid else None,
        "runner_errors": sum(1 for e in events if e["event"] == "error"),
    }
    results["expectations"] = expectations(p.protocol, p.fault, totals)
    checks = run_checks(p, totals, bool(hit.get("landed")) and hit.get("handed_on", True), hit, events, claims)
    for row in rows:
        row["run_id"] = run_id
    return Measured(
        tables={"ledger": pd.DataFrame(rows), "timeline": _timeline(events, log, reaps, zero),
                "faults": pd.DataFrame(log.rows())},
        procedure={
            "runners": {**asdict(settings), "count": p.runner_count},
            "service": {"protocol": p.protocol, "lease_s": p.lease_s, "pool_size": SERVICE_POOL_SIZE,
                        "endpoint": "POST /claim"},
            "reaper": {"interval_s": reaper.interval_s if reaper else None, "sql": REAP_SQL if reaper else None},
            "fault": {"kind": p.fault, "pause_s": p.pause_s if p.fault == "pause" else None,
                      "terminate_rounds": TERMINATE_ROUNDS if p.fault == "terminate" else None,
                      "service_down_s": SERVICE_DOWN_S if p.fault == "service" else None,
                      "trigger": "the first `started` event in any runner's log"},
            "drain_bound_seconds": p.drain_bound_seconds,
            "ledger": ledger.__doc__.strip().splitlines()[0],
        },
        checks=checks,
        results=results,
    )


# --------------------------------------------------------------------------- reading runs back


JSON_KEYS = ("protocol", "fault", "faults_injected", "fault_landed", "fault_effects", *ledger.CLASSES, *ledger.MARKS,
             "reaps",
             "reaps_of_healthy_holders",
             "heartbeats", "claims", "claims_per_second", "updates", "hot_updates", "dead_tuples", "drain_seconds",
             "drained")


def summarise(run: Run) -> dict:
    """What `--json` prints for one run (its tables: ledger, timeline, faults)."""
    return {**{key: run.results.get(key) for key in JSON_KEYS}, "run_id": run.run_id}


def show_runs(paths, as_json: bool) -> None:
    """What `python -m harness faults` prints: the ledger counts per run, or one JSON object per run."""
    rows = [Run(path).summary for path in paths]
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return
    frame = pd.DataFrame(rows)
    print(frame.loc[:, ["protocol", "fault", "faults_injected", *ledger.CLASSES, "executed_twice",
                        "stale_completion", "reaps", "heartbeats"]].to_string(index=False))
    for path in paths:
        print(f"stored in {path}")


__all__ = ["FaultParameters", "FaultSweep", "measure_faults", "expectations", "summarise", "PROTOCOLS", "FAULTS"]


# The kind as the store, the command line and the report see it (harness.experiments.registry).
KIND = Kind("faults", FaultParameters, measure_faults, summarise,
            help="protocols none, lease and lease_fenced under injected faults (a killed, paused or cut-off runner, "
                 "a restarted server or service), then the final ledger of every run (drops and recreates "
                 "claimrace.runs, run_flips and finishes before every run)",
            show=show_runs, sections=("faults",), request=FaultSweep, expand=FaultSweep.runs,
            workers=workers_needed, check_size=check_size,
            label=run_label)
