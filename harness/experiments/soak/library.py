"""The soak (harness.experiments.soak.measure) with a job library's own workers on its own table: jobs arriving at a steady
rate through the library's own enqueue, its workers claiming, running and finishing them, and from pin_from to
pin_to something holding the MVCC horizon on the library's database.

One run, in a database made for it (harness.experiments.library_runtime), the library's schema from its own migrations:

    arrivals   one process sends each job through the library's enqueue, opened once before the run (its
               `enqueuer`: a Node library's script kept running), as the job falls due (job k at k / rate seconds,
               open loop): a call still going when the next jobs fall due sends them all in its next call. The
               jobs last job_ms, as a fault run's do.
    workers    `workers` processes, each the library's own loop at concurrency 1, polling on an empty queue until
               stopped, with its raced settings (harness.libraries: SETTINGS, RECOVERY), started again if one exits
               (runtime.Supervisor).
    holder     as the soak's (harness.experiments.soak.holders), on the library's database: a snapshot or an
               idle transaction in another database holds no row of this one.
    sampler    as the soak's, on the library's jobs table; its claim is the library's, not explained.

Each job's enqueue and its claim are the audit trigger's (runtime.install_audit): the server's clock, in the
enqueue's and the claim's own transactions. The per-second series counts the jobs enqueued and claimed, and its p50
and p99 are of each job's pickup, its claim minus its enqueue (soak_outcomes.per_second, latency "pickup"): what a
library's user waits, polling included. The verdict is the soak's rule on that series.

A rate asked as a share is of the rate the library's workers sustain on a full queue in a database of their own,
SUSTAIN_S, its first SUSTAIN_WARMUP_S not counted (SUSTAIN_JOBS queued: a queue drained dry makes it a lower bound),
measured once for the arms of one library in a process: a held arm and its control get the same rate.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import time
import traceback
from pathlib import Path

import numpy as np
import pandas as pd

from harness import libraries, stats
from harness.experiments.soak import outcomes as soak_outcomes
from harness.children import die_with_parent
from harness.experiments.soak import flushes as soak_flushes
from harness.experiments.soak import measure as soak
from harness.experiments.soak import holders as soak_holders
from harness.experiments.soak import sampler as soak_sampler
from harness.experiments.contract import Measured
from harness.experiments import library_runtime as runtime
from harness.server import activity, database, pgstats

SUSTAIN_S = 8.0
SUSTAIN_WARMUP_S = 1.0
SUSTAIN_JOBS = 8000  # more than 4 workers run in SUSTAIN_S at jobs of 5 ms (800 a second at most)
STOP_GRACE_S = 5.0
READY_GRACE_S = 1.0  # after every worker said it is ready: their first polls


ARRIVALS_CONNECTIONS = 4  # the most a library's enqueue opens at once (procrastinate's pool; a Node script's: 2)


def workers_needed(p) -> int:
    """The server connections a run holds: the library's per worker, the arrivals', the holder's, the sampler's
    two, the watch and the harness's own reader."""
    return p.workers * runtime.connections_per_worker(p.library) + ARRIVALS_CONNECTIONS + soak.holder_sessions(p) \
        + 2 + 1 + 1


def finished_jobs(name: str) -> str:
    """What the library does with a finished job's row: "deleted" (its COMPLETED is the row's DELETE), or "kept"
    (marked finished, in its table)."""
    return "deleted" if libraries.get(name).COMPLETED == "DELETE" else "kept"


def _arrivals_main(parent_pid: int, name: str, url: str, rate: float, job_s: float, start, stop, results) -> None:
    """Enqueue every job as it falls due, through the library's enqueue kept open (numbered from 0, where the
    library numbers them); put the calls (at ns, jobs, took ns) on results."""
    die_with_parent(parent_pid)
    try:
        calls = []
        with libraries.get(name).enqueuer(url, job_s) as send:
            start.wait()
            began = time.monotonic()
            sent = 0
            while not stop.is_set():
                owed = int((time.monotonic() - began) * rate) + 1 - sent
                if owed <= 0:  # until the next job falls due
                    stop.wait(max(0.0, sent / rate - (time.monotonic() - began)))
                    continue
                called = time.monotonic()
                send(owed, sent)
                calls.append((time.time_ns(), owed, int((time.monotonic() - called) * 1e9)))
                sent += owed
        results.put(("arrivals", calls))
    except BaseException as exc:
        results.put(("error", f"arrivals: {type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        raise SystemExit(1)


def _children(pid: int) -> list[int]:
    """A process's children (a Node library's worker runs its script as one): /proc's list, empty once it exited."""
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


OWN = "claimrace-soak-%"  # the harness's own sessions on the library's database: none is the library's


def _connect(url: str):
    return database.connect(url, application_name="claimrace-soak-harness")


def _server_ns(conn) -> int:
    """Now, on the server's clock: the audit's times are the server's."""
    return int(conn.execute("SELECT (extract(epoch FROM clock_timestamp()) * 1e9)::bigint").fetchone()[0])


# what this process measured already, per server and library setup: arms measured together run at one rate
_SUSTAINED: dict[tuple, dict] = {}


def sustained_rate(db: database.Database, p, run_id: str) -> dict:
    """The rate the library's workers sustain with nothing pinned, measured once per server, library, workers, job
    length and commit setting in a process (`measured_for` names the run it was measured for): the arms of one
    library made together run at one rate; an arm made in another build has its own."""
    key = (db.url, p.library, p.workers, p.job_ms, p.synchronous_commit)
    if key not in _SUSTAINED:
        _SUSTAINED[key] = _measure_sustained(db, p, run_id) | {"measured_for": run_id}
    return _SUSTAINED[key]


def _measure_sustained(db: database.Database, p, run_id: str) -> dict:
    """SUSTAIN_JOBS queued, drained for SUSTAIN_S, the jobs the audit saw claimed after the first SUSTAIN_WARMUP_S
    counted; a worker that exited or wrote an error fails the measurement."""
    library = libraries.get(p.library)
    commit = {"synchronous_commit": "off"} if p.synchronous_commit == "off" else {}
    with runtime.library_run(db, p.library, f"{run_id}-sustain", audit={}, database_settings=commit) as run:
        url, logs = run.url, run.logs
        library.enqueue(url, SUSTAIN_JOBS, p.job_ms / 1000)
        context = mp.get_context("fork")
        start = context.Event()
        supervisor = runtime.Supervisor(context, p.library, p.workers, url, logs, start, p.job_ms / 1000)
        run.workers = workers = supervisor.processes
        runtime.wait_until_ready(p.library, supervisor.readies)
        time.sleep(READY_GRACE_S)
        with _connect(url) as conn:
            began = _server_ns(conn)
            start.set()
            time.sleep(SUSTAIN_S)
            claims = conn.execute(
                f"SELECT count(DISTINCT job_id) FILTER (WHERE at >= to_timestamp(%s) AND at < to_timestamp(%s)), "
                f"count(DISTINCT job_id) FROM {runtime.AUDIT} WHERE event = 'claimed'",
                [began / 1e9 + SUSTAIN_WARMUP_S, began / 1e9 + SUSTAIN_S]).fetchone()
        supervisor.tend(restart=False)
        runtime.stop_workers(workers, STOP_GRACE_S)
        failed = runtime.workers_with_errors(runtime.error_output(logs))
        if supervisor.exits or failed:
            raise RuntimeError(f"{p.library}: while its sustained rate was measured, {len(supervisor.exits)} "
                               f"worker(s) exited and {failed} wrote an error")
    return {"sustained_rate": float(claims[0] / (SUSTAIN_S - SUSTAIN_WARMUP_S)),
            "lower_bound": int(claims[1]) >= SUSTAIN_JOBS, "sustain_s": SUSTAIN_S, "sustain_jobs": SUSTAIN_JOBS}


def measure(db: database.Database, p, run_id: str, progress: bool = False) -> Measured:
    library = libraries.get(p.library)
    with db.connect() as conn:
        soak.check_server(pgstats.server_major(conn), p)
    sustained = sustained_rate(db, p, run_id) if isinstance(p.rate, str) else None
    rate = p.rate if sustained is None else sustained["sustained_rate"] * float(p.rate[:-1]) / 100
    if sustained is not None:
        soak.check_rate(rate)
        soak.check_jobs(rate, p.seconds, 0)
    table_name = table_name_of(library)
    context = mp.get_context("fork")
    start, stop, results = context.Event(), context.Event(), context.Queue()
    arrivals = holder = sampler = bar = backends = clients = None
    commit = {"synchronous_commit": "off"} if p.synchronous_commit == "off" else {}  # its sessions take it
    with runtime.library_run(db, p.library, run_id, audit={}, database_settings=commit) as run:
        try:
            url, logs = run.url, run.logs
            with _connect(url) as conn:
                settings = {name: conn.execute(f"SHOW {name}").fetchone()[0]
                            for name in ("fsync", "track_wal_io_timing", "autovacuum_naptime", "synchronous_commit")}
                local = activity.server_is_local(conn)
                wal_before = soak_flushes.wal_syncs(conn)
            supervisor = runtime.Supervisor(context, p.library, p.workers, url, logs, start, p.job_ms / 1000)
            run.workers = workers = supervisor.processes
            arrivals = context.Process(target=_arrivals_main, args=(os.getpid(), p.library, url, rate,
                                                                     p.job_ms / 1000, start, stop, results),
                                       name="claimrace-soak-arrivals", daemon=True)
            arrivals.start()
            runtime.wait_until_ready(p.library, supervisor.readies)
            time.sleep(READY_GRACE_S)
            backends = activity.BackendWatch(lambda: _library_backends(db.url), 0.5).start() if local else None
            # the workers (and a Node library's script under each) and the arrivals, as the soak's own clients
            clients = activity.BackendWatch(lambda: [pid for process in [arrivals, *supervisor.processes]
                                                     if process.pid for pid in (process.pid, *_children(process.pid))],
                                            0.5).start()
            with _connect(url) as conn:
                start_ns = _server_ns(conn)
            began = time.monotonic()
            start.set()
            holder = soak_holders.Holder(url, p.holder, p.pin_from, p.pin_to, began, p.mitigation, table_name,
                                         p.analytics_s, p.analytics_sessions).start()
            sampler = soak_sampler.Sampler(url, began, table_name, None).start()
            bar = _progress(p, progress)
            while (left := p.seconds - (time.monotonic() - began)) > 0:
                time.sleep(min(1.0, left))
                supervisor.tend()
                if bar is not None:
                    bar.update(1)
                if not arrivals.is_alive():
                    break
            ended_s = time.monotonic() - began
            stop.set()
            got = _arrivals_result(results)
            supervisor.tend(restart=False)
            runtime.stop_workers(workers, STOP_GRACE_S)
            with _connect(url) as conn:
                audit = runtime.read_audit(conn)
                wal_after = soak_flushes.wal_syncs(conn)
            lines = runtime.read_lines(logs)
            errors = runtime.error_output(logs)
        finally:  # every process and session of the run's ends before its database is dropped
            stop.set()
            runtime.kill_left(run.workers)
            if arrivals is not None:
                arrivals.join(STOP_GRACE_S)
                if arrivals.is_alive():
                    arrivals.kill()
                    arrivals.join(1)
            events = holder.stop() if holder is not None else []
            samples = sampler.stop() if sampler is not None else pd.DataFrame(columns=soak_sampler.SAMPLE_COLUMNS)
            server_share = backends.stop() if backends is not None else activity.share_split([])
            client_share = clients.stop() if clients is not None else activity.share_split([])
            if bar is not None:
                bar.close()
    if "error" in got:
        raise RuntimeError("the arrivals failed: " + got["error"])
    flushes = soak_flushes.flush_figures(db, settings, wal_before, wal_after)
    return _measured(p, library, rate, sustained, got["calls"], audit, lines, errors, events, samples, start_ns,
                     ended_s, settings | flushes, client_share, server_share, supervisor, sampler.error)


def _arrivals_result(results) -> dict:
    try:
        item = results.get(timeout=STOP_GRACE_S + 30)  # the call under way ends first (a Node script: seconds)
    except Exception:
        return {"error": "the arrivals did not report"}
    return {"calls": item[1]} if item[0] == "arrivals" else {"error": item[1]}


def _library_backends(url: str) -> list[int]:
    """The library's sessions on its database, its workers' and its enqueue's (the arrivals call the library, whose
    sessions are named as it names them): every client backend there but the harness's own (OWN)."""
    with database.connect(url, application_name="claimrace-soak-watch") as conn:
        return [int(r[0]) for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend' "
            "AND application_name NOT LIKE %s", [runtime.DATABASE, OWN])]


def _progress(p, progress: bool):
    if not progress:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=int(math.ceil(p.seconds)), desc=f"soak {soak.label(p)}", unit="s", leave=False)


def _measured(p, library, rate: float, sustained: dict | None, calls: list, audit: pd.DataFrame,
              lines: pd.DataFrame, errors: pd.DataFrame, events: list[dict], samples: pd.DataFrame, start_ns: int,
              ended_s: float, settings: dict, client_share: dict, server_share: dict, supervisor,
              sampler_error: str | None) -> Measured:
    enqueued = audit[audit["event"] == "enqueued"].groupby("job_id")["at_ns"].min()
    claim_events = audit[audit["event"] == "claimed"]
    claimed = claim_events.groupby("job_id")["at_ns"].min()
    claims = pd.DataFrame({"job_id": claimed.index.to_numpy(), "claimed_ns": claimed.to_numpy()})
    claims["pickup_ms"] = (claims["claimed_ns"] - claims["job_id"].map(enqueued)) / 1e6
    series = soak_outcomes.per_second(enqueued.to_numpy(), claims["claimed_ns"].to_numpy(),
                                      claims["pickup_ms"].to_numpy(), start_ns, ended_s, latency="pickup")
    end_ns = start_ns + int(ended_s * 1e9)
    seconds = (claims["claimed_ns"] - start_ns) / 1e9
    pickup = claims["pickup_ms"]
    window_ms = {"before": pickup[(seconds >= soak_outcomes.WARMUP_S) & (seconds < p.pin_from)],
                 "during": pickup[(seconds >= p.pin_from) & (seconds < p.pin_to)],
                 "after": pickup[(seconds >= p.pin_to) & (seconds < ended_s)]}
    # a job not claimed by the run's end waited at least until then: a lower bound, counted at it (censored)
    waiting = enqueued[~enqueued.index.isin(claimed[claimed <= end_ns].index) & (enqueued < end_ns)]
    censored_ms = (end_ns - waiting.to_numpy()) / 1e6
    overall, overall_is_bound = stats.censored_percentile(pickup[claims["claimed_ns"] <= end_ns].dropna(),
                                                          censored_ms, 99)
    shares = (client_share["runnable_share"], client_share["running_share"], server_share["runnable_share"])
    # the arrivals trail their schedule by a call by design: a job due while a call runs waits for it to end
    calls_frame = pd.DataFrame(calls, columns=["at_ns", "jobs", "took_ns"])
    lag_s = float(calls_frame["took_ns"].median()) / 1e9 if len(calls_frame) else 0.0
    behind = soak_outcomes.arrivals_behind(series, rate, lag_s)
    judged = soak_outcomes.judge(series, p.pin_from, p.pin_to, ended_s, behind, activity.cpu_bound(*shares),
                                 soak_outcomes.step_of(ended_s, len(calls_frame)), held=p.holder != "none")
    samples = samples[samples["t_s"] <= ended_s]
    parts = soak_outcomes.windows(series, p.pin_from, p.pin_to)
    ended_early = [e for e in events if e["event"] == "ended_early"]
    starts = lines[lines["event"] == "start"] if len(lines) else lines
    runs_per_job = starts.groupby("job_id").size() if len(starts) else pd.Series(dtype=int)
    summary = {
        "shape": None, "strategy": None, "library": p.library, "library_version": libraries.version(p.library),
        "finished_jobs": finished_jobs(p.library), "latency": "pickup",
        "rate": rate, "rate_asked": p.rate,
        "sustained_rate": sustained["sustained_rate"] if sustained else None,
        "sustained_rate_is_lower_bound": sustained["lower_bound"] if sustained else None, "workers": p.workers,
        "seconds": p.seconds, "holder": p.holder, "pin_from": p.pin_from, "pin_to": p.pin_to,
        "pin_s": p.pin_to - p.pin_from, "hold_until_failure": False, "hold_asked": p.pin_to - p.pin_from,
        "released_because": "pin_to", "job_ms": p.job_ms, "history_rows": 0, "mitigation": p.mitigation,
        "repeat": p.repeat, "mitigation_setting": soak_holders.SESSION_SETTINGS.get(p.mitigation),
        "storage": settings["storage_found"] or "not known (a server not started here)",
        "filesystem": settings["filesystem"], "synchronous_commit": p.synchronous_commit,
        "fsync": settings["fsync"], "wal_syncs": settings["wal_syncs"],
        "wal_sync_ms_per_sync": settings["wal_sync_ms_per_sync"], "pg_test_fsync_ms": settings["pg_test_fsync_ms"],
        "jobs_arrived": int(len(enqueued)), "jobs_claimed": int(len(claimed)),
        # a job claimed again (a recovery that fired, an expired lease) or started twice by the workers
        "jobs_claimed_again": int((claim_events.groupby("job_id").size() > 1).sum()),
        "duplicate_jobs": int((runs_per_job > 1).sum()),
        "enqueue_calls": int(len(calls_frame)),
        "enqueue_call_ms_max": float(calls_frame["took_ns"].max() / 1e6) if len(calls_frame) else None,
        "arrivals_lag_s": lag_s,
        "backlog_max": int(series["backlog"].max()) if len(series) else 0,
        "backlog_at_end": int(series["backlog"].iloc[-1]) if len(series) else 0,
        **{f"{what}_per_s_{window}": soak.rate_of(parts[window], what) for window in ("before", "during", "after")
           for what in ("arrived", "claimed")},
        **{f"pickup_p99_ms_{window}": soak.quantile(window_ms[window].dropna().to_numpy(), 99)
           for window in window_ms},
        # over the run, the jobs still waiting at its end counted at their wait so far
        "pickup_p99_ms": None if np.isnan(overall) else overall, "pickup_p99_ms_is_lower_bound": overall_is_bound,
        "jobs_waiting_at_end": int(len(waiting)),
        **soak_sampler.summary(samples, p.pin_from), **soak_outcomes.cpu_mark(samples, p.pin_from, p.pin_to),
        "pin_ended_early_s": ended_early[0]["t_s"] if ended_early else None,
        **{key: judged[key] for key in soak_outcomes.judged_keys("pickup")},
        "arrivals_behind": behind,
        "client_runnable_share": shares[0], "client_running_share": shares[1], "backend_runnable_share": shares[2],
        "cpu_bound": activity.cpu_bound(*shares), "cpu_bound_side": activity.cpu_bound_side(*shares),
        "worker_exits": len(supervisor.exits), "worker_restarts": supervisor.restarts,
        "workers_with_errors": runtime.workers_with_errors(errors), "ended_s": ended_s}
    checks = {"every_claimed_job_enqueued": bool(claims["pickup_ms"].notna().all()),
              # as many jobs in the audit as the arrivals enqueued: numbers the library reuses would merge jobs
              "every_job_enqueued_once": int(len(enqueued)) == int(calls_frame["jobs"].sum())
              and int((audit["event"] == "enqueued").sum()) == int(calls_frame["jobs"].sum()),
              "sampled": soak_sampler.covered(samples, ended_s)}
    checks["passed"] = all(checks.values())
    return Measured(
        tables={"claims": claims, "enqueue_calls": calls_frame, "series": series, "samples": samples,
                "holder": pd.DataFrame(events, columns=["t_s", "session", "event", "detail"]),
                "executions": lines, "errors": errors},
        procedure={"library": p.library, "version": libraries.version(p.library), "source": library.SOURCE,
                   "settings": library.SETTINGS, "recovery": library.RECOVERY, "claimed": library.CLAIMED,
                   "jobs_table": table_name_of(library), "finished_jobs": finished_jobs(p.library),
                   "sustained": sustained, "arrivals": p.arrivals, "holder": p.holder,
                   "sample_s": soak_sampler.SAMPLE_S,
                   "analytics": soak_holders.analytics_sql(table_name_of(library))
                   if p.holder == "analytics" else None,
                   "latency": "pickup: the audit's claim of a job minus its enqueue, on the server's clock",
                   "server_settings": settings,
                   "verdict_rule": soak_outcomes.rule_settings(),
                   "errors": {"sampler": sampler_error}},
        checks=checks,
        results={"summary": summary, "judged": judged})


def table_name_of(library) -> str:
    schema = library.JOBS_SCHEMA
    return f"{schema}.{library.JOBS_TABLE}" if schema else library.JOBS_TABLE
