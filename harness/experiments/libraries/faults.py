"""The job libraries' own workers under injected faults: what each library completes twice, leaves stuck or loses.

One run (a LibraryParameters with a fault): a fresh database, the library's own schema, an audit trigger on its
jobs table that records every enqueue, claim and completion (the library's own transition to its finished state,
or the row's DELETE where finishing deletes it), `job_count` jobs that each last JOB_S, and `worker_count` worker
processes running the library's own loop at concurrency 1, which keep polling on an empty queue. Each library's
recovery settings are shortened (its module's RECOVERY: the setting, its default and the value raced), so a run
ends in seconds. Each job logs its start and its end, with the pid of the process that ran it.

Once a job has started, one fault is injected for real:

    kill       SIGKILL of the process running that job (a Node library's node process);
    pause      SIGSTOP of that process, for the library's raced recovery time and PAUSE_MARGIN_S more (PAUSE_S
               where nothing recovers), then SIGCONT: it wakes up and finishes its job;
    stall      SIGSTOP of it a chosen offset into that job for a chosen time (--stall SECONDS@OFFSET; 0 s, the
               control, stops nothing), its jobs STALL_JOB_S long, then SIGCONT; the summary says whether the
               library's heartbeat schedule (its STALL) predicts the job handed on, and whether it was
               (harness.experiments.libraries.outcomes);
    terminate  pg_terminate_backend of every connection to the library's database, TERMINATE_ROUNDS times;
    restart    the PostgreSQL server stopped the way a crash stops it and started again on its data directory.

A fault counts only where its effect was seen: the process gone, stopped for the pause, backends terminated, the
server's start time moved. Then the run waits until every job has a completion or has failed for good (the
library's FAILED state), or its bound (bound_s), and stops the workers; meanwhile a worker process that exits is
started again after runtime.RESTART_DELAY_S, as a supervisor would (runtime.Supervisor). Every job is then exactly one of

    completed_once, completed_twice      one completion in the audit, or more;
    in_progress_at_timeout               no completion, and a start at the bound that is neither ended nor the
                                         faulted process's (a lower bound on what would have completed);
    failed                               no completion, and in the library's table in its failed state (FAILED,
                                         where the library declares one): failed for good, nothing runs it again;
    stuck                                no completion, and still in the library's table;
    lost                                 no completion, and gone from the table;

and marked executed_twice (two starts logged) and completed_by_stale_holder (its first completion came while a
later holder was still running it: the earlier, faulted holder's completion). recovery_s is the median, over
the jobs the fault hit, of the time from the fault to that job's next start.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import time
from pathlib import Path

import numpy as np
import pandas as pd
from psycopg import sql

from harness import libraries
from harness.experiments.libraries import drain as library_runs
from harness.experiments.libraries import outcomes as stall_outcomes
from harness.experiments.libraries import summary as run_summary
from harness.experiments.libraries import statements as statement_log
from harness.experiments.libraries import probe as stale_completion
from harness.experiments.libraries import release as earlier_release
from harness.experiments.contract import Kind
from harness.experiments.contract import Measured
from harness.experiments import library_runtime as runtime
from harness.libraries import releases
from harness.storage import Run
from harness.server import database, faults, pooler

FAULTS = library_runs.FAULTS
JOB_S = 1.0  # each job's length: long enough that a fault lands while a job runs
PAUSE_MARGIN_S = 2.0  # a pause outlasts the library's raced recovery time (and what it adds after it) by this
PAUSE_S = 5.0  # a pause where nothing recovers the job
TERMINATE_ROUNDS, TERMINATE_GAP_S = 3, 0.3
TRIGGER_TIMEOUT_S = 60.0  # the longest wait for the first job to start
SETTLE_S = 10.0  # a run's bound: this, twice the recovery and the pause, and two job lengths per round of jobs
MAX_BOUND_S = 120.0
STOP_GRACE_S = 5.0
CLASSES = ("completed_once", "completed_twice", "stuck", "failed", "lost", "in_progress_at_timeout")
MARKS = ("executed_twice", "completed_by_stale_holder")
TERMINATE_SQL = ("SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                 "AND pid <> pg_backend_pid() AND backend_type = 'client backend'")


def recovery(name: str, configuration: str = "default", fault: str = "none") -> dict:
    """What brings a dead worker's job back, as raced: its RECOVERY, under its production setting that setting's
    recovery (its PRODUCTION), in RECOVERY's shape, and in a stall run its STALL's setting."""
    library = libraries.get(name)
    if fault == "stall":
        return library.RECOVERY | {"raced_s": library.STALL["raced_s"]}
    if configuration != "production":
        return library.RECOVERY
    production = library.PRODUCTION
    return {"mechanism": production["setting"], "setting": production["setting"],
            "raced_s": production["recovery"]["raced_s"], "default_s": production["recovery"]["default_s"]}


def pause_s(name: str, configuration: str = "default") -> float:
    within = libraries.recovers_within_s(name, configuration)
    return PAUSE_S if within is None else within + PAUSE_MARGIN_S


def job_s(parameters) -> float:
    """Each job's length: a stall run's are long enough for a stall to begin beats into one."""
    return library_runs.STALL_JOB_S if parameters.fault == "stall" else JOB_S


def bound_s(parameters) -> float:
    """How long a run waits for every job to complete after its release."""
    p = parameters
    within = libraries.recovers_within_s(p.library, p.configuration)
    recovers = within or 0.0
    rounds = -(-p.job_count // (p.worker_count - 1))  # the healthy workers' rounds of jobs
    return min(MAX_BOUND_S, SETTLE_S + 2 * recovers + (paused_for_s(p) or 0.0) + 2 * rounds * job_s(p))


def paused_for_s(parameters) -> float | None:
    """How long a pause run freezes its worker: past the recovery (pause), or short of it (short_pause)."""
    p = parameters
    if p.fault == "stall":
        return library_runs.stall_of(p.stall)[0]
    return pause_s(p.library, p.configuration) if p.fault == "pause" else \
        library_runs.short_pause_s(p.library) if p.fault == "short_pause" else None


# --------------------------------------------------------------------------- the fault


def inject(fault: str, p, db: database.Database, conn, trigger: dict, log: faults.FaultLog) -> dict:
    """One fault, once `trigger`'s job has started; what it hit and what was seen of it (its effects)."""
    pid, job = trigger["pid"], trigger["job_id"]
    if fault == "kill":
        faults.kill(pid, log, f"worker {trigger['worker']} (pid {pid})", job=job)
        time.sleep(0.2)
        return {"process_gone": int(not faults.alive(pid))}
    if fault == "stall" and not paused_for_s(p):  # the control: nothing stopped, at the same point of the job
        log.record("stall_control", f"worker {trigger['worker']} (pid {pid})", job=job)
        return {"stall_control": 1}
    if fault in ("pause", "short_pause", "stall"):
        with faults.stopped(pid, log, f"worker {trigger['worker']} (pid {pid})", job=job) as entry:
            time.sleep(0.05)
            stopped = faults.stop_state(pid) == "T"
            time.sleep(max(0.0, paused_for_s(p) - 0.05))
        return {"process_stopped_s": round(entry["paused_seconds"], 3) if stopped else 0.0}
    if fault == "terminate":
        terminated = []
        for _ in range(TERMINATE_ROUNDS):
            rows = conn.execute(TERMINATE_SQL, [runtime.DATABASE]).fetchall()
            terminated += [int(pid) for pid, signalled in rows if signalled]
            time.sleep(TERMINATE_GAP_S)
        log.record("terminate", f"backends of {runtime.DATABASE}", pids=terminated)
        return {"backends_terminated": len(terminated)}
    if fault == "restart":
        before = conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0]
        faults.restart_server(db, log)
        with database.connect(db.url) as fresh:
            after = fresh.execute("SELECT pg_postmaster_start_time()").fetchone()[0]
        return {"server_restarted": int(after != before)}
    raise ValueError(fault)


# --------------------------------------------------------------------------- the ledger


def ledger(audit: pd.DataFrame, lines: pd.DataFrame, in_table: set[int], live_pids: set[int],
           fault_ns: int | None, victim_pid: int | None = None, failed: set[int] = frozenset(),
           sent: dict[int, int] | None = None) -> pd.DataFrame:
    """One row per job enqueued: its class (CLASSES), its marks (MARKS), its starts, its completions applied (the
    audit's: completions) and sent (completions_sent: the completion statements naming it, from the server's log;
    None where they cannot be seen), whether the fault hit it (it was running then) and, if so, the time from the
    fault to its next start.

    live_pids: the workers' processes alive at the bound (a faulted process that was killed is not);
    victim_pid: the process a kill or a pause hit (the fault hit only its job), None for a fault that hits every
    connection (terminate, restart); failed: the ids in the table in the library's failed state."""
    enqueued = sorted(int(j) for j in audit.loc[audit["event"] == "enqueued", "job_id"].unique())
    completions = audit[audit["event"] == "completed"].groupby("job_id")["at_ns"].apply(sorted)
    rows = []
    for job in enqueued:
        mine = lines[lines["job_id"] == job]
        starts = mine[mine["event"] == "start"].sort_values("at_ns")
        ends = mine[mine["event"] == "end"]

        def ended_by(start, until=None) -> bool:
            """Whether the process that started the job logged its end after that start (and before `until`)."""
            own = ends[(ends["pid"] == start.pid) & (ends["at_ns"] >= start.at_ns)]
            return bool(len(own if until is None else own[own["at_ns"] <= until]))

        done = completions.get(job, [])
        hit = fault_ns is not None and any(s.at_ns <= fault_ns and not ended_by(s, fault_ns)
                                           and victim_pid in (None, s.pid) for s in starts.itertuples())
        later = starts[starts["at_ns"] > fault_ns]["at_ns"] if fault_ns is not None else starts["at_ns"].iloc[:0]
        if len(done) >= 2:
            state = "completed_twice"
        elif len(done) == 1:
            state = "completed_once"
        elif any(not ended_by(s) and s.pid in live_pids for s in starts.itertuples()):
            state = "in_progress_at_timeout"
        elif job in failed:
            state = "failed"
        elif job in in_table:
            state = "stuck"
        else:
            state = "lost"
        stale = False
        if len(done) and len(starts) >= 2:
            last = starts.iloc[-1]
            last_end = ends[(ends["pid"] == last["pid"]) & (ends["at_ns"] >= last["at_ns"])]["at_ns"]
            # its first completion came while its last holder was still running it: an earlier holder's
            stale = bool(done[0] > last["at_ns"] and (len(last_end) == 0 or done[0] < last_end.min()))
        rows.append({"job_id": job, "state": state, "starts": int(len(starts)), "completions": int(len(done)),
                     "completions_sent": None if sent is None else sent.get(job, 0),
                     "executed_twice": len(starts) >= 2, "completed_by_stale_holder": stale, "hit_by_fault": hit,
                     "recovery_s": float(later.min() - fault_ns) / 1e9 if hit and len(later) else None})
    frame = pd.DataFrame(rows, columns=["job_id", "state", "starts", "completions", "completions_sent",
                                        "executed_twice", "completed_by_stale_holder", "hit_by_fault", "recovery_s"])
    return frame.astype({"completions_sent": "Int64"})


def totals(frame: pd.DataFrame) -> dict:
    counts = {name: int((frame["state"] == name).sum()) for name in CLASSES}
    counts |= {name: int(frame[name].sum()) for name in MARKS}
    hit = frame[frame["hit_by_fault"]]
    recovered = hit["recovery_s"].dropna()
    seen = frame["completions_sent"].notna().all() if "completions_sent" in frame else False
    sent, applied = frame.get("completions_sent"), frame["completions"]
    # a completion sent that changed nothing: the library's check refused it, or it failed (its connection gone)
    counts |= {"completions_applied": int(applied.sum()),
               "completions_sent": int(sent.sum()) if seen else None,
               "completions_not_applied": int((sent - applied).clip(lower=0).sum()) if seen else None}
    counts |= {"jobs_hit": int(len(hit)), "jobs_hit_recovered": int(len(recovered)),
               "recovery_s": float(np.median(recovered)) if len(recovered) else None}
    return counts


def landed(fault: str, effects: dict) -> bool:
    """A fault counts only where its effect was seen."""
    if fault == "stall":  # stopped, or the control's point in the job reached
        return bool(effects.get("process_stopped_s") or effects.get("stall_control"))
    key = {"kill": "process_gone", "pause": "process_stopped_s", "short_pause": "process_stopped_s",
           "terminate": "backends_terminated", "restart": "server_restarted"}[fault]
    return bool(effects.get(key))


def stalled(p, lines: pd.DataFrame, rows: pd.DataFrame, fault_ns: int | None) -> dict:
    """A stall run's figures: the stall, how old the hold of the job it hit that was oldest then was (from the
    job's start, renewed every beat of the library's STALL schedule), whether that schedule predicts the job handed
    on, whether a job the stall hit ran on another worker too (handed on) and whether another job did. {} for
    another fault."""
    if p.fault != "stall":
        return {}
    stall_s, at_s = library_runs.stall_of(p.stall)
    declared = libraries.get(p.library).STALL
    setting_s, wait_s, beat_s = declared["raced_s"], declared["write_wait_s"], library_runs.first_beat_s(p.library)
    hit = rows[rows["hit_by_fault"]]
    starts = lines[(lines["event"] == "start") & lines["job_id"].isin(hit["job_id"])
                   & (lines["at_ns"] <= (fault_ns or 0))]
    ages = [round((fault_ns - start) / 1e9, 3) for start in starts["at_ns"]]  # within its first beat: since the pick
    age = max(ages) if ages else None
    return {"stall_s": stall_s, "stall_at_s": at_s, "stall_beat_s": beat_s, "stall_write_wait_s": wait_s,
            "stall_hold_age_s": age,
            "stall_predicted_handed_on": None if age is None else stall_outcomes.predicted_handed_on(
                age, stall_s, setting_s, beat_s, wait_s),
            "stall_handed_on": bool(hit["executed_twice"].any()),
            "stall_other_twice": bool(rows[~rows["hit_by_fault"]]["executed_twice"].any())}


# --------------------------------------------------------------------------- the run


def measure(db: database.Database, p, run_id: str, progress: bool = False) -> Measured:
    library = libraries.get(p.library)
    settings = recovery(p.library, p.configuration, p.fault)
    log = faults.FaultLog()
    # what the workers send is read back from the server's log (sent); the workers go through PgBouncer where asked
    # (closed before the database is dropped), the harness's own statements to the server directly
    with runtime.library_run(db, p.library, run_id, statements=True) as run, contextlib.ExitStack() as through:
        url, logs, server_log = run.url, run.logs, run.server_log
        since_log = stale_completion._log_size(server_log)
        with database.connect(url) as conn:
            runtime.install_audit(conn, library, completions=True)
            library.enqueue(url, p.job_count, job_s(p))
            keys = runtime.job_keys(conn, library)
        via = through.enter_context(pooler.pooled(url, p.pooler, library_runs.workers_needed(p)))
        through.callback(lambda: runtime.kill_left(run.workers))  # the workers go before their pooler
        context = mp.get_context("fork")
        start = context.Event()
        supervisor = runtime.Supervisor(context, p.library, p.worker_count, via.url, logs, start, job_s(p),
                                        configuration=p.configuration,
                                        recovery_s=settings["raced_s"] if p.fault == "stall" else None)
        run.workers = workers = supervisor.processes  # every one started, restarted ones too (killed at the end)
        runtime.wait_until_ready(p.library, supervisor.readies)
        released_ns = time.time_ns()
        start.set()
        ends = time.monotonic() + bound_s(p)
        trigger = runtime.first_start(logs, released_ns, TRIGGER_TIMEOUT_S)
        effects, fault_ns = {}, None
        if trigger is not None:
            if p.fault == "stall":  # its offset into the job
                time.sleep(max(0.0, trigger["started_ns"] / 1e9 + library_runs.stall_of(p.stall)[1] - time.time()))
            with database.connect(db.url) as control:
                fault_ns = time.time_ns()
                effects = inject(p.fault, p, db, control, trigger, log)
            if p.configuration == "production" and library.declare_dead is not None:
                # what its production setting has a user do once a worker is declared dead (graphile-worker's
                # forceUnlockWorkers): the worker the fault hit, as soon as it was hit
                library.declare_dead(url, int(trigger["job_id"]))
        # until every job completed or failed for good, or the bound; a worker that exits is started again, as a
        # supervisor would
        ours = set(keys.values())  # a production setting's periodic task enqueues jobs of its own (procrastinate's)
        while time.monotonic() < ends and supervisor.tend() and not _all_decided(db.url, library, ours):
            time.sleep(0.1)
        ended_ns = time.time_ns()
        live_pids = {int(pid) for pid in runtime.read_lines(logs)["pid"].unique() if faults.alive(int(pid))}
        supervisor.tend(restart=False)  # the exits up to the bound, none started again now
        runtime.stop_workers(workers, STOP_GRACE_S)
        with database.connect(url) as conn:
            audit = runtime.read_audit(conn)
            audit = audit[audit["job_id"].isin(ours)]
            in_table = _ids_in_table(conn, library) & ours
            failed = (_ids_in_table(conn, library, library.FAILED) & ours) if library.FAILED else set()
        lines = runtime.read_lines(logs)
        errors = runtime.error_output(logs)
        sent = completions_logged(p.library, server_log, since_log)
    victim = trigger["pid"] if trigger is not None and p.fault in ("kill", "pause", "short_pause", "stall") else None
    per_job, unnamed = sent_per_job(p.library, sent, keys, others=p.configuration == "production")
    rows = ledger(audit, lines, in_table, live_pids, fault_ns, victim, failed, per_job)
    counts = totals(rows)
    summary = {"library": p.library, "version": libraries.version(p.library), "fault": p.fault, "pooler": p.pooler,
               "setting": p.configuration,
               "worker_count": p.worker_count, "jobs": p.job_count, "fault_landed": landed(p.fault, effects),
               "fault_effects": effects, **counts, "worker_exits": len(supervisor.exits),
               "worker_restarts": supervisor.restarts,
               "workers_with_errors": runtime.workers_with_errors(errors),
               "recovery_setting_s": settings["raced_s"], "recovery_default_s": settings["default_s"],
               "recovery_then_s": settings.get("then_s"),
               "recovery_mechanism": settings["mechanism"], "bound_s": bound_s(p),
               **stalled(p, lines, rows, fault_ns),
               "waited_s": (ended_ns - released_ns) / 1e9}
    checks = _checks(p, trigger is not None, unnamed, per_job, rows, audit, released_ns)
    return Measured(
        tables={"audit": audit, "executions": lines, "ledger": rows, "errors": errors,
                "completions_sent": sent if sent is not None else pd.DataFrame(columns=SENT_COLUMNS),
                "faults": pd.DataFrame(log.rows())},
        procedure=_procedure(p, library, settings, via.describe(), supervisor.exits, server_log is not None),
        checks=checks,
        results={"summary": summary, "hit": trigger or {}})


def _checks(p, started: bool, unnamed: int, per_job, rows: pd.DataFrame, audit: pd.DataFrame,
            released_ns: int) -> dict:
    checks = {"first_job_started": started,
              # a marker that matched another statement (DDL, a cancel) would count completions never sent
              "every_completion_sent_names_a_job": not unnamed,
              # and one that missed a completion statement would leave a completion applied and never sent
              "no_completion_applied_unsent": per_job is None
              or not (rows["completions"] > rows["completions_sent"]).any(),
              # before the release: a library may insert a job's row again to retry it (pg-boss)
              "every_job_enqueued_once": int(((audit["event"] == "enqueued")
                                              & (audit["at_ns"] < released_ns)).sum()) == p.job_count,
              "every_job_classified": len(rows) == p.job_count}
    return checks | {"passed": all(checks.values())}


def _procedure(p, library, settings: dict, pooled: dict, exits: list, logged: bool) -> dict:
    """How a fault run ran: the library as installed and set, its recovery, the supervisor, the fault."""
    return {"library": p.library, "version": libraries.version(p.library), "source": library.SOURCE,
            "settings": library.SETTINGS, "recovery": settings, "claimed": library.CLAIMED,
            "completed": library.COMPLETED, "job_s": job_s(p), "pooler": pooled, "stall": library.STALL,
            "supervisor": {"restart_delay_s": runtime.RESTART_DELAY_S, "max_restarts": runtime.MAX_RESTARTS,
                           "exits": exits},
            "fault": {"kind": p.fault, "trigger": "the first job start any worker logged",
                      "pause_s": paused_for_s(p),
                      "terminate_rounds": TERMINATE_ROUNDS if p.fault == "terminate" else None},
            "statements_logged": logged,  # log_statement = all on the library's database
            "workers": "one process each (forked), the library's own loop at concurrency 1, polling on an "
                       "empty queue until stopped", "bound_s": bound_s(p)}


SENT_COLUMNS = ["pid", "statement", "parameters"]
def sent_per_job(name: str, sent: pd.DataFrame | None, keys: dict[str, int],
                 others: bool = False) -> tuple[dict[int, int] | None, int]:
    """(completion statements sent per job, None where they cannot be seen; statements that named no job). others:
    a statement naming only jobs enqueued after the run's (a production setting's periodic task) is theirs, not
    one that named no job."""
    if sent is None:
        return None, 0
    which = libraries.get(name).COMPLETION_JOB
    per_job = {job: 0 for job in keys.values()}
    unnamed = 0
    for values in sent["parameters"]:
        jobs = statement_log.named_jobs(values, which, keys)
        if not jobs and others and statement_log.names_only_others(values, which, keys, -1):
            continue
        unnamed += not jobs
        for job in jobs:
            per_job[job] += 1
    return per_job, unnamed



def completions_logged(name: str, server_log: Path | None, since: int | None) -> pd.DataFrame | None:
    """Every completion statement the workers sent (the library's COMPLETION_LOGGED), as the server logged it, with
    its parameters; None where the server's log is not here (a server not started by the harness)."""
    if since is None or server_log is None or not server_log.exists():
        return None
    marker = " ".join(libraries.get(name).COMPLETION_LOGGED.split()).lower()
    return pd.DataFrame([(pid, text, values) for pid, text, values
                         in statement_log.logged_statements(server_log, since) if marker in text.lower()],
                        columns=SENT_COLUMNS)


def _all_decided(url: str, library, ours: set[int]) -> bool:
    """Every job of the run's (ours) completed, or failed for good (the library's FAILED state, which nothing in
    it leaves: Solid Queue's failed executions wait for a user's retry), so the run has nothing left to wait for."""
    try:
        with database.connect(runtime.database_url(url)) as conn:
            done = {int(r[0]) for r in conn.execute(f"SELECT DISTINCT job_id FROM {runtime.AUDIT} "
                                                     "WHERE event = 'completed'")}
            failed = _ids_in_table(conn, library, library.FAILED) if library.FAILED else set()
        return ours <= done | failed
    except Exception:  # the server restarting: not yet
        return False


def _ids_in_table(conn, library, where: str | None = None) -> set[int]:
    """The ids (as the audit counts them) of the jobs still in the library's table, in any state, or where `where`
    (a condition on the row t) holds."""
    rows = conn.execute(sql.SQL("SELECT {} FROM {} AS t WHERE {}").format(
        sql.SQL(runtime.audit_id_sql(library, "t")), runtime.jobs_table(library), sql.SQL(where or "true")))
    return {int(r[0]) for r in rows}


SHOWN = ("library", "version", "fault", "pooler", "setting", "fault_landed", "fault_effects", *CLASSES, *MARKS,
         "worker_exits",
         "workers_with_errors", "completions_sent", "completions_applied", "completions_not_applied", "recovery_s",
         "recovery_setting_s", "recovery_then_s", "recovery_default_s", "jobs_hit", "worker_count", "jobs",
         "waited_s", "bound_s", "stall_s", "stall_at_s", "stall_beat_s", "stall_hold_age_s",
         "stall_predicted_handed_on", "stall_handed_on", "stall_other_twice")


def measure_run(db: database.Database, p, run_id: str, progress: bool = False) -> Measured:
    """A libraries run: a drain (harness.experiments.libraries.drain), a probe (harness.experiments.libraries.probe), or,
    with a fault, a fault run (here)."""
    if p.probe != "none":
        if p.release != releases.INSTALLED:  # in a child Python that imports that release
            return earlier_release.measure(db, p, run_id, progress)
        return stale_completion.measure(db, p, run_id, progress)
    if p.fault == "none":
        return library_runs.measure_libraries(db, p, run_id, progress)
    return measure(db, p, run_id, progress)


def show_runs(paths, as_json: bool) -> None:
    """What `python -m harness libraries` prints: one line (or JSON object) per run, a drain's or a fault run's; a
    probe's, one per library over its runs."""
    probes = [path for path in paths if "probe" in Run(path).summary]
    if probes:
        stale_completion.show_runs(probes, as_json)
    for path in paths:
        summary = Run(path).summary
        if "probe" in summary:
            continue
        if "fault" in summary:
            show(summary, as_json)
        else:
            run_summary.show_runs([path], as_json)


def show(summary: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps({key: summary.get(key) for key in SHOWN}))
        return
    recovery_s = summary["recovery_s"]
    through = ("" if summary.get("pooler", "none") == "none" else f" via {summary['pooler']}") + \
        (" production" if summary.get("setting") == "production" else "")
    if summary["fault"] == "stall":
        through += f" {summary['stall_s']:g} s at {summary['stall_at_s']:g} s"
    print(f"{summary['library']:<16} {summary['fault'] + through:<9} "
          f"{'landed' if summary['fault_landed'] else 'NOT LANDED':<10} "
          + "  ".join(f"{name} {summary[name]}" for name in (*CLASSES, *MARKS, "worker_exits"))
          + f"  completions sent {_or_unseen(summary.get('completions_sent'))}"
          + f" applied {summary.get('completions_applied', '-')}"
          + f"  recovery {'-' if recovery_s is None else f'{recovery_s:.1f} s'}"
          + f" (setting {summary['recovery_setting_s']} s)"
          + ("" if summary["fault"] != "stall" else
             f"  hold {_or_unseen(summary['stall_hold_age_s'])} s old at the stall; handed on "
             f"{summary['stall_handed_on']}, predicted {summary['stall_predicted_handed_on']}"))


def _or_unseen(value) -> str:
    return "cannot be seen" if value is None else str(value)


# The kind as the store, the command line and the report see it (harness.experiments.registry).
KIND = Kind("libraries", library_runs.LibraryParameters, measure_run, run_summary.stored_summary,
            help=f"job libraries ({', '.join(libraries.NAMES)}) draining the same queue with their own workers, audited "
                 "on their own jobs table, or under an injected fault (--fault), with the ledger of every job (creates "
                 "and drops the database claimrace_libraries for every run)",
            show=show_runs,
            sections=("libraries", "library_faults", "library_stalls", "library_probe", "library_poolers"),
            request=library_runs.LibrarySweep, expand=library_runs.LibrarySweep.runs,
            workers=library_runs.workers_needed, check_size=library_runs.check_size,
            label=library_runs.label)
