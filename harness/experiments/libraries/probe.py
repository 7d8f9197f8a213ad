"""The stale-completion probe: does a library let a worker that lost its job complete it while another runs it?

One run (a LibraryParameters with probe "stale_completion"): a fresh database, the library's own schema, the audit
trigger (every enqueue, claim, completion, and any other UPDATE of a row), one job, and two workers running the
library's own loop at concurrency 1, whose job runs until the harness opens its gate (harness.libraries.gate):

1. worker A starts job J (the first start either logs);
2. A loses J: frozen (SIGSTOP), or, for a library whose hold on a job is its session's advisory lock
   (HOLDS_BY_SESSION: a frozen worker keeps its lock), its sessions cut (pg_terminate_backend), A left running;
3. the harness waits until J is handed to a second holder B *and B is inside J* (B's start logged), at most
   hand_on_bound_s: the library's raced recovery (and what it adds after it: libraries.recovers_within_s) a fifth
   longer and HAND_ON_MARGIN_S, or NOT_SET_WAIT_S where nothing recovers within a run;
4. A is resumed, runs on RESUME_S, and its gate opens: A finishes J and sends its completion while B still runs
   J. The harness waits for it (SETTLE_S at most after A's end);
5. then B's gate opens, and B finishes and completes J the same way.

What each holder's completion did is read twice: sent, from the statements the server logged for the library's
database in that holder's window (its COMPLETION_LOGGED; a server started here only, else "cannot be seen"), and
applied, from the whole run's audit: the job's completion (its finished state, or its row deleted) by the backends
that logged that holder's statements, and, for B, its UPDATEs of the row once it was finished. A completion by a
backend neither holder logged from is counted apart (completions_unattributed) and fails the run's check. A run's
outcome: not_handed_on (no B within the bound), accepted (A's completion changed the row B was running),
refused (A sent its completion and nothing changed), not_sent (A sent none: Que's worker ends when its session is
lost) or not_applied (nothing changed, and the sending cannot be seen); over a library's repeats, the outcome every
repeat agrees on, else varies (harness.experiments.libraries.outcomes, which the article reads too).

Beside it, what the library's source says its completion checks and so what the probe should find
(STALE_COMPLETION in its module: expected, checks, source with file and lines at the release); agrees_with_source
compares the two, and a disagreement is shown, not smoothed over.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import time
from pathlib import Path

import pandas as pd

from harness import libraries
from harness.experiments.libraries import statements as statement_log
from harness.experiments.contract import Measured
from harness import gate
from harness.experiments.libraries import outcomes as probe_outcomes
from harness.experiments import library_runtime as runtime
from harness.libraries import releases
from harness.server import database, faults
from harness.storage import Run

JOB_S = 1.0  # the job's length where no gate holds it (never, in a probe: every job is gated)
TRIGGER_TIMEOUT_S = 60.0
# how long the probe waits for J to reach B: the library's raced recovery a fifth longer and HAND_ON_MARGIN_S
# (its poll, its maintenance loop, a worker's restart; J reached B 0.1-1.0 s after the raced recovery here)
HAND_ON_FACTOR, HAND_ON_MARGIN_S = 1.2, 4.0
NOT_SET_WAIT_S = 6.0  # for a library with nothing set that recovers within the run: past every raced recovery here
RESUME_S = 0.5  # A runs on this long after it is resumed before its job ends: a stale holder's job outlasts its wake
# after a holder's job ended, how long its completion may take (chancy writes its completions once a second); 3 s
# was too short once under the test suite's load (2026-12-06: chancy's completion not seen, "not sent"). The wait
# ends as soon as the completion is logged or the holder's process is gone, so a longer one costs only where neither
SETTLE_S = 6.0
APPLIED_S = 0.5  # after a completion statement was logged, how long the harness waits for its commit
# after a holder's process is gone, how long its last statements may take to reach the server's log: looked for
# until then (1 s, a single look, saw not_sent where other runs saw refused, again in a loaded fresh-clone suite of
# 2026-12-07; that the lag was its cause is not shown)
LOG_LAG_S = 3.0
STOP_GRACE_S = 5.0
NOT_SEEN = None  # a count the run could not see (no server log here)


def hand_on_bound_s(name: str, configuration: str = "default") -> float:
    within = libraries.recovers_within_s(name, configuration)
    return NOT_SET_WAIT_S if within is None else HAND_ON_FACTOR * within + HAND_ON_MARGIN_S


def holds_by_session(name: str) -> bool:
    return libraries.get(name).HOLDS_BY_SESSION


def cuts_sessions(p) -> bool:
    """Whether the run cuts the first holder's sessions (its library's hold is its session, and it was not asked
    to hang: --lost-by frozen), rather than freezing it."""
    return holds_by_session(p.library) and p.lost_by == "default"


def expected(name: str, release: str = releases.INSTALLED, configuration: str = "default",
             hung: bool = False) -> dict:
    """What the library's source at the release probed says: expected (an outcome), checks (what its completion
    checks), source (file and lines at the release); in production, what its PRODUCTION says; for a hung worker
    still connected (a library whose hold is its session), what its HUNG says."""
    if hung:
        return libraries.get(name).HUNG
    if configuration == "production":
        return libraries.get(name).PRODUCTION["stale_completion"]
    return releases.expected(name, release)


# --------------------------------------------------------------------------- the run's steps


def _log_size(server_log: Path | None) -> int | None:
    return server_log.stat().st_size if server_log is not None and server_log.exists() else None


def _completions_logged(name: str, server_log: Path | None, since: int | None, keys: dict,
                        job: int) -> list[int] | None:
    """The backends that logged the library's completion statement of job since byte `since`, one entry per
    statement: a completion whose parameter names other jobs only (a periodic task's, under a production setting)
    is not the probe's."""
    if since is None:
        return NOT_SEEN
    library = libraries.get(name)
    marker = " ".join(library.COMPLETION_LOGGED.split()).lower()
    return [pid for pid, text, values in statement_log.logged_statements(server_log, since)
            if marker in text.lower() and not statement_log.names_only_others(values, library.COMPLETION_JOB, keys, job)]


def finish(name: str, logs: Path, gates: Path, server_log: Path | None, holder: dict, job: int, tend,
           keys: dict) -> dict:
    """Open holder's gate and wait for its completion: the completion statements logged in its window (None where
    the server's log is not here), by which backends, and the window; what they applied is read from the audit at
    the run's end (applied)."""
    since_log, began_ns = _log_size(server_log), time.time_ns()
    gate.open_gate(gates, job, holder["pid"])
    # until its completion is logged; else SETTLE_S after its job ended (its process gone: nothing more can come),
    # and at most SETTLE_S + MAX_HOLD_MARGIN_S in all
    began, ended_at, ended, sent = time.monotonic(), None, False, None
    while True:
        sent = _completions_logged(name, server_log, since_log, keys, job)
        if sent or not faults.alive(holder["pid"]):
            break
        if ended_at is None and _ended(logs, job, holder["pid"], began_ns):
            ended, ended_at = True, time.monotonic()
        now = time.monotonic()
        if (ended_at is not None and now - ended_at >= SETTLE_S) or now - began >= SETTLE_S + MAX_HOLD_MARGIN_S:
            break
        tend()
        time.sleep(0.05)
    if sent is not None and not sent and not faults.alive(holder["pid"]):
        # its process is gone, but what it sent before it went may not be in the server's log yet: the logging
        # collector writes the backends' lines after them
        gone = time.monotonic()
        while not sent and time.monotonic() - gone < LOG_LAG_S:
            time.sleep(0.1)
            sent = _completions_logged(name, server_log, since_log, keys, job)
    if sent:
        time.sleep(APPLIED_S)
        sent = _completions_logged(name, server_log, since_log, keys, job)
    return {"pid": holder["pid"], "ended": ended or _ended(logs, job, holder["pid"], began_ns),
            "completions_sent": None if sent is None else len(sent), "backends_sent": sorted(set(sent or [])),
            "window_ns": [began_ns, time.time_ns()]}


def unattributed_completions(audit: pd.DataFrame, job: int, holders: list[dict | None]) -> int:
    """The job's completions by a backend from which neither holder logged a completion statement: a marker
    (COMPLETION_LOGGED) that missed one, or a completion by something else than the holders."""
    seen = {pid for done in holders if done for pid in done["backends_sent"]}
    return int(((audit["job_id"] == job) & (audit["event"] == "completed") & ~audit["pid"].isin(seen)).sum())


def applied(audit: pd.DataFrame, job: int, done: dict, rewrites: bool) -> dict:
    """What one holder's completions changed, from the whole run's audit: the job's completions (its finished
    state, or its row deleted) by the backends that logged this holder's completion statements, whenever they
    committed; with rewrites (the live holder), also its UPDATEs of the row once it was finished. Without the
    server's log, the completions inside the holder's window, and no rewrite (a heartbeat could not be told from
    one)."""
    events = audit[audit["job_id"] == job]
    completed = events[events["event"] == "completed"]
    if done["completions_sent"] is None:
        start, end = done["window_ns"]
        mine = completed[(completed["at_ns"] >= start) & (completed["at_ns"] <= end)]
        rewrote = events.iloc[:0]
    else:
        mine = completed[completed["pid"].isin(done["backends_sent"])]
        first = completed["at_ns"].min() if len(completed) else None
        rewrote = events[(events["event"] == "updated") & events["pid"].isin(done["backends_sent"])
                         & (events["at_ns"] > first)] if rewrites and first is not None else events.iloc[:0]
    return {"completions_applied": int(len(mine) + len(rewrote)), "completed": int(len(mine)),
            "rewrote": int(len(rewrote))}


# a holder whose job's end is never logged (chancy's stale one; its worker writes its claim's outcome all the same,
# 1 s after the gate on a quiet machine, later on a loaded one) is waited for this much longer
MAX_HOLD_MARGIN_S = 7.0


def _ended(logs: Path, job: int, pid: int, since_ns: int) -> bool:
    """Whether the process pid logged the end of job since since_ns."""
    lines = runtime.read_lines(logs)
    return bool(len(lines[(lines["event"] == "end") & (lines["job_id"] == job) & (lines["pid"] == pid)
                          & (lines["at_ns"] >= since_ns)]))


# --------------------------------------------------------------------------- the run


def measure(db: database.Database, p, run_id: str, progress: bool = False) -> Measured:
    library = libraries.get(p.library)
    log = faults.FaultLog()
    a_holder = b_holder = None
    a_done = b_done = None
    effects: dict = {}
    lost_by = "sessions cut" if cuts_sessions(p) else "frozen"
    with runtime.library_run(db, p.library, run_id, audit={"completions": True, "updates": True},
                             statements=True) as run:
        url, logs, server_log = run.url, run.logs, run.server_log
        gates = logs / "gates"  # a job's gate, opened by the harness (harness.gate)
        gates.mkdir()
        with database.connect(url) as conn:
            library.enqueue(url, p.job_count, JOB_S)
            keys = runtime.job_keys(conn, library)  # the job's id as its statements send it
        context = mp.get_context("fork")
        start = context.Event()
        supervisor = runtime.Supervisor(context, p.library, p.worker_count, url, logs, start, JOB_S, gates,
                                        p.configuration)
        run.workers = workers = supervisor.processes
        runtime.wait_until_ready(p.library, supervisor.readies)
        released_ns = time.time_ns()
        start.set()
        a_holder = runtime.first_start(logs, released_ns, TRIGGER_TIMEOUT_S, tend=supervisor.tend)
        if a_holder is not None:
            a_done, b_holder, b_done = _lose_and_complete(p, library, db, url, logs, gates, server_log, supervisor,
                                                          keys, a_holder, released_ns, log, effects)
        ended_ns = time.time_ns()
        supervisor.tend(restart=False)
        runtime.stop_workers(workers, STOP_GRACE_S)
        with database.connect(url) as conn:
            audit = runtime.read_audit(conn)
        lines = runtime.read_lines(logs)
        errors = runtime.error_output(logs)
    lost = bool(effects.get("sessions_cut") or effects.get("process_stopped"))
    job = a_holder["job_id"] if a_holder is not None else None
    a_done = a_done and a_done | applied(audit, job, a_done, rewrites=False)
    b_done = b_done and b_done | applied(audit, job, b_done, rewrites=True)
    unattributed = unattributed_completions(audit, job, [a_done, b_done]) \
        if server_log is not None and job is not None else None
    outcome = probe_outcomes.run_outcome(a_holder is not None and lost, b_holder is not None, a_done)
    source = expected(p.library, p.release, p.configuration, hung=p.lost_by == "frozen")
    recovery = library.PRODUCTION["recovery"] if p.configuration == "production" else library.RECOVERY
    summary = {"library": p.library, "version": libraries.version(p.library), "release": p.release,
               "configuration": p.configuration, "hung": p.lost_by == "frozen", "probe": p.probe,
               "production_setting": library.PRODUCTION["setting"] if p.configuration == "production" else None,
               "repeat": p.repeat, "lost_by": lost_by, "fault_landed": lost, "fault_effects": effects,
               "handed_on": b_holder is not None, "stale_completion": outcome,
               "stale_completions_sent": None if a_done is None else a_done["completions_sent"],
               "stale_completions_applied": None if a_done is None else a_done["completions_applied"],
               "live_completions_sent": None if b_done is None else b_done["completions_sent"],
               "live_completions_applied": None if b_done is None else b_done["completions_applied"],
               "completions_unattributed": unattributed,
               "hand_on_bound_s": hand_on_bound_s(p.library, p.configuration),
               "hand_on_s": None if b_holder is None else (b_holder["started_ns"] - a_holder["started_ns"]) / 1e9,
               "expected_from_source": source["expected"], "source_checks": source["checks"],
               "source_ref": source["source"], "agrees_with_source": None if outcome is None
               else outcome == source["expected"],
               "recovery_setting_s": recovery["raced_s"], "recovery_default_s": recovery["default_s"],
               "worker_exits": len(supervisor.exits), "workers_with_errors": runtime.workers_with_errors(errors),
               "waited_s": (ended_ns - released_ns) / 1e9}
    checks = {"first_job_started": a_holder is not None, "fault_landed": lost,
              "completions_seen": server_log is not None, "every_completion_attributed": not unattributed}
    checks["passed"] = checks["first_job_started"] and checks["fault_landed"] \
        and checks["every_completion_attributed"]
    return Measured(
        tables={"audit": audit, "executions": lines, "errors": errors,
                "faults": pd.DataFrame(log.rows())},
        procedure={"library": p.library, "version": libraries.version(p.library), "release": p.release,
                   "configuration": p.configuration,
                   "production": library.PRODUCTION if p.configuration == "production" else None,
                   "source": library.SOURCE,
                   "settings": library.SETTINGS, "recovery": library.RECOVERY, "probe": p.probe,
                   "steps": "A starts J; A is " + lost_by + "; J handed to B and B inside J (bound "
                            f"{hand_on_bound_s(p.library, p.configuration)} s); A resumed, its job ends {RESUME_S} s later and it "
                            "completes; then B's job ends and B completes",
                   "completion_logged": library.COMPLETION_LOGGED, "settle_s": SETTLE_S,
                   "holders": {"a": a_done, "b": b_done}, "expected": source},
        checks=checks,
        results={"summary": summary, "holders": {"a": a_holder or {}, "b": b_holder or {}}})


def _lose_and_complete(p, library, db, url, logs, gates, server_log, supervisor, keys, a_holder, released_ns, log,
                       effects):
    """A, which started the job, loses it (its sessions cut, or frozen); the job is handed to B within its bound, or
    not; A resumes and completes, then B: (A's completion, B's start, B's completion), each None where not seen.
    What the fault did is added to effects."""
    b_holder = b_done = None
    job, a_pid = a_holder["job_id"], a_holder["pid"]
    target = f"worker {a_holder['worker']} (pid {a_pid})"
    stopped = contextlib.nullcontext({})
    with database.connect(db.url) as control:
        if cuts_sessions(p):
            effects["sessions_cut"] = len(faults.cut_sessions_of(control, a_pid, log, target, job=job))
        else:
            stopped = faults.stopped(a_pid, log, target, job=job)
    with stopped as entry:
        if not cuts_sessions(p):
            time.sleep(0.05)
            effects["process_stopped"] = int(faults.stop_state(a_pid) == "T")
        if p.configuration == "production" and library.declare_dead is not None:
            library.declare_dead(url, job)  # its production setting's step once a worker is declared dead
            effects["declared_dead"] = 1
        b_holder = runtime.first_start(logs, released_ns, hand_on_bound_s(p.library, p.configuration),
                                        job=job, other_than=a_pid, tend=supervisor.tend)
    if entry:
        effects["process_stopped_s"] = round(entry["paused_seconds"], 3)
    time.sleep(RESUME_S)
    a_done = finish(p.library, logs, gates, server_log, a_holder, job, supervisor.tend, keys)
    if b_holder is not None:
        b_done = finish(p.library, logs, gates, server_log, b_holder, job, supervisor.tend, keys)
    return a_done, b_holder, b_done


def show_runs(paths, as_json: bool) -> None:
    """What `python -m harness libraries --probe` prints: one line (or JSON object) per library, over its runs."""
    for row in probe_outcomes.per_library([Run(path).summary for path in paths]):
        if as_json:
            print(json.dumps(row))
            continue
        sent = "-" if row["stale_completions_sent"] is None else row["stale_completions_sent"]
        name = f"{row['library']} {row['version']}" + (" production setting" if row["setting"] == "production"
                                                        else "") + (" hung" if row["hung"] else "")
        print(f"{name:<40} {row['stale_completion'] or 'NOT LANDED':<14} "
              f"handed on {row['handed_on']}/{row['landed']}  stale completions sent {sent} applied "
              f"{row['stale_completions_applied']}  source: {row['expected_from_source']} "
              f"({'agrees' if row['agrees_with_source'] else 'DISAGREES' if row['agrees_with_source'] is False else '-'})")
