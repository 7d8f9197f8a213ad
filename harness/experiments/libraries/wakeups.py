"""Wake-ups: how long a job waits for an idle worker when the worker is woken by LISTEN/NOTIFY, against polling only.

For the job libraries that offer both (a module with WAKEUP: procrastinate's listen_notify, chancy's
notifications). One run: a fresh database, the library's own schema with its default poll interval, an audit
trigger that records when each job was enqueued, `worker_count` worker processes at concurrency 1 that wait on
the empty queue, released together and left idle for SETTLE_S; then `job_count` no-op jobs enqueued one at a time
through the library's API, `interval_s` apart (a low or a high arrival rate), and the workers stopped once every
job has started, or at the bound (the last enqueue, two poll intervals and BOUND_MARGIN_S more).

Per job, its pickup: its first start in the workers' logs minus its enqueue in the audit (the server's clock; on a
server on another machine the two clocks differ, and the summary says the server was not local). A job not started
by the bound counts at the bound, and every figure of the run is then a lower bound (a job's true pickup is no
shorter than the one counted, so no quantile is either). The server's transactions per
second over the run are what the waiting workers and the arrivals cost it: counted once every worker's backend has
exited, since an idle backend publishes its counts late.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from harness import libraries
from harness.children import die_with_parent
from harness.errors import UserError
from harness.experiments.contract import Kind
from harness.experiments.libraries import summary as run_summary
from harness.experiments.contract import (Measured, Option, Parameters, as_float, as_floats, as_int, check_each,
                                          int_list, number_list, one_of, setting)
from harness.experiments import library_runtime as runtime
from harness.storage import Run
from harness.server import activity, database, pgstats

WAKES = ("listen", "poll")
SETTLE_S = 1.0  # idle workers before the first job: listening, and their polls out of step with the enqueues
BOUND_MARGIN_S = 5.0
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.005, 30.0
MAX_JOBS, MAX_WORKERS = 500, 8
MAX_ENQUEUE_S = 300.0  # job_count x interval_s: a run's arrivals end within this


def offering() -> tuple[str, ...]:
    """The libraries with both wake-ups (a WAKEUP in their module), installed here or not."""
    return tuple(name for name in libraries.NAMES if libraries.get(name).WAKEUP is not None)


def as_wake_library(name: str, value) -> str:
    if value not in offering():
        raise UserError(f"{name} must be one of {', '.join(offering())} (the libraries that can both listen and "
                        f"poll), not {value!r}")
    return str(value)


as_wake = one_of(WAKES, "wake")


@dataclass(frozen=True)
class WakeupParameters(Parameters):
    """One run: worker_count idle workers of one library, job_count jobs arriving interval_s apart."""

    library: str = setting("procrastinate", as_wake_library)
    wake: str = setting("listen", as_wake)
    interval_s: float = setting(2.0, as_float)
    job_count: int = setting(10, as_int)
    worker_count: int = setting(2, as_int)
    repeat: int = setting(0, as_int)

    def check(self) -> None:
        check_each([self.worker_count], "worker count", 1, MAX_WORKERS)
        check_each([self.job_count], "job count", 1, MAX_JOBS)
        check_each([self.interval_s], "interval between jobs (s)", MIN_INTERVAL_S, MAX_INTERVAL_S)
        if self.job_count * self.interval_s > MAX_ENQUEUE_S:
            raise UserError(f"{self.job_count} jobs {self.interval_s:g} s apart take more than {MAX_ENQUEUE_S:.0f} s "
                            "to arrive: give fewer jobs or a shorter interval")
        if libraries.version(self.library) is None:
            raise UserError(f"{self.library} is not installed here: {libraries.install_hint(self.library)}")


def _names(text: str) -> tuple[str, ...]:
    """One name or a comma-separated list, or 'all': every library that can both listen and poll (offering())."""
    return offering() if text.strip() == "all" else tuple(t.strip() for t in text.split(",") if t.strip())


def as_wake_libraries(name: str, values) -> tuple[str, ...]:
    """A list of libraries that can both listen and poll, or text as the command line takes it (`all`: every one)."""
    return tuple(as_wake_library(name, x) for x in (_names(values) if isinstance(values, str) else values))


@dataclass(frozen=True)
class WakeupSweep(Parameters):
    """Every library, wake-up and arrival interval: what `python -m harness wakeups` asks."""

    libraries: tuple = setting("all", as_wake_libraries, Option(
        "--library", f"{' or '.join(offering())} (the libraries that can both listen and poll); a comma list; or all",
        _names, default_text="all"))
    wakes: tuple = setting(WAKES, lambda name, v: tuple(as_wake(name, x) for x in ((v,) if isinstance(v, str) else v)),
                           Option("--wake", "listen (LISTEN/NOTIFY, then polls) or poll (polls only); a comma list",
                                  lambda text: tuple(t.strip() for t in text.split(",") if t.strip()),
                                  default_text="listen,poll"))
    intervals_s: tuple = setting((2.0, 0.02), as_floats, Option(
        "--interval", "seconds between two jobs' arrivals, comma-separated: a sweep (2: a low rate, 0.02: a high one)",
        number_list, default_text="2,0.02"))
    job_count: int | None = setting(None, lambda name, v: None if v is None else as_int(name, v), Option(
        "--jobs", "jobs per run", int, default_text="10 at an interval of 1 s or more, else 200"))
    worker_counts: tuple = setting((2,), lambda name, v: tuple(as_int(name, x) for x in (
        (v,) if isinstance(v, int) else v)), Option("--workers", "idle worker processes, comma-separated", int_list))
    repeats: int = setting(1, as_int, Option("--repeat", "runs per point", int))

    def check(self) -> None:
        check_each([self.repeats], "repeats", 1, 20)
        for one in self.runs():
            one.check()

    def jobs_at(self, interval_s: float) -> int:
        return self.job_count if self.job_count is not None else (10 if interval_s >= 1 else 200)

    def runs(self) -> list[WakeupParameters]:
        return [WakeupParameters(library, wake, interval, self.jobs_at(interval), workers, repeat)
                for library in self.libraries for interval in self.intervals_s for wake in self.wakes
                for workers in self.worker_counts for repeat in range(self.repeats)]



def workers_needed(parameters: WakeupParameters) -> int:
    return runtime.connections_per_worker(parameters.library) * parameters.worker_count + 2  # and the enqueuer


def label(parameters: WakeupParameters) -> str:
    return f"{parameters.library} {parameters.wake}, a job every {parameters.interval_s:g} s"


def bound_s(p: WakeupParameters) -> float:
    """From the first enqueue: the arrivals, two poll intervals and a margin."""
    return p.job_count * p.interval_s + 2 * libraries.get(p.library).WAKEUP["poll_s"] + BOUND_MARGIN_S


# --------------------------------------------------------------------------- a run


def worker_process(name: str, url: str, log: str, ready, start, parent_pid: int, listen: bool) -> None:
    """One idle worker: dies with the harness, its error output beside its log."""
    die_with_parent(parent_pid)
    os.dup2(os.open(f"{log}.stderr", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644), 2)
    libraries.get(name).wake_work(url, Path(log), ready, start, listen)


def _started(logs: Path) -> pd.DataFrame:
    """Every start the workers logged (runtime.read_lines: a wake-up's job logs its start only)."""
    return runtime.read_lines(logs)[["job_id", "at_ns", "worker"]]


def pickups(audit: pd.DataFrame, starts: pd.DataFrame, ended_ns: int) -> pd.DataFrame:
    """Per job enqueued: when, its first start, its pickup (ms), and whether it was censored (not started by the
    end: its pickup counts up to the end)."""
    enqueued = audit[audit["event"] == "enqueued"].groupby("job_id")["at_ns"].min()
    first = starts.groupby("job_id")["at_ns"].min()
    times = starts.groupby("job_id").size()
    rows = []
    for job, at in enqueued.items():
        start = first.get(job)
        rows.append({"job_id": int(job), "enqueued_ns": int(at), "started_ns": None if start is None else int(start),
                     "pickup_ms": ((start if start is not None else ended_ns) - at) / 1e6,
                     "censored": start is None, "starts": int(times.get(job, 0))})
    return pd.DataFrame(rows, columns=["job_id", "enqueued_ns", "started_ns", "pickup_ms", "censored", "starts"])


def summarise(p: WakeupParameters, jobs: pd.DataFrame, transactions: int, window_s: float, local: bool) -> dict:
    censored = int(jobs["censored"].sum())
    waits = jobs["pickup_ms"].to_numpy(dtype=float)
    return {"library": p.library, "version": libraries.version(p.library), "wake": p.wake,
            "setting": libraries.get(p.library).WAKEUP["setting"], "poll_s": libraries.get(p.library).WAKEUP["poll_s"],
            "interval_s": p.interval_s, "jobs": p.job_count, "worker_count": p.worker_count, "repeat": p.repeat,
            "started": int((~jobs["censored"]).sum()), "not_started": censored,
            "executed_twice": int((jobs["starts"] > 1).sum()),
            "pickup_p50_ms": float(np.percentile(waits, 50)) if len(waits) else None,
            "pickup_p99_ms": float(np.percentile(waits, 99)) if len(waits) else None,
            "pickup_max_ms": float(waits.max()) if len(waits) else None,
            "pickup_is_lower_bound": censored > 0,
            "transactions_per_s": transactions / window_s if window_s > 0 else None, "local_server": local}


def measure(db: database.Database, p: WakeupParameters, run_id: str, progress: bool = False) -> Measured:
    library = libraries.get(p.library)
    with runtime.library_run(db, p.library, run_id, audit={}, install=library.wake_install) as run:
        url, logs = run.url, run.logs
        with database.connect(url) as conn:
            local = activity.server_is_local(conn)
        start, readies = run.fork_workers(p.worker_count, worker_process, url, p.wake == "listen")
        runtime.wait_until_ready(p.library, readies)
        start.set()
        time.sleep(SETTLE_S)
        with database.connect(url) as conn:
            backends = [int(r[0]) for r in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")]
            before = pgstats.transactions(conn)
            began_ns = time.time_ns()
            ends = time.monotonic() + bound_s(p)
            library.enqueue_paced(url, p.job_count, p.interval_s, p.wake == "listen")
            while time.monotonic() < ends and _started(logs)["job_id"].nunique() < p.job_count:
                time.sleep(0.05)
            ended_ns = time.time_ns()
            audit = runtime.read_audit(conn)
            runtime.stop_workers(run.workers)
            # an idle backend publishes its counts late; one that exits, at once: the counts after every worker's
            pgstats.wait_for_backends_to_exit(conn, backends)
            after = pgstats.transactions(conn)
        starts = _started(logs)
        errors = runtime.error_output(logs)
    jobs = pickups(audit, starts[starts["at_ns"] >= began_ns], ended_ns)
    summary = summarise(p, jobs, after - before, (ended_ns - began_ns) / 1e9, local)
    summary["workers_with_errors"] = runtime.workers_with_errors(errors)
    checks = {"every_job_enqueued_once": len(jobs) == p.job_count and int((audit["event"] == "enqueued").sum())
              == p.job_count}
    checks["passed"] = all(checks.values())
    return Measured(
        tables={"jobs": jobs, "starts": starts, "audit": audit, "errors": errors},
        procedure={"library": p.library, "version": libraries.version(p.library), "source": library.SOURCE,
                   "wakeup": library.WAKEUP, "listen": p.wake == "listen", "settle_s": SETTLE_S, "bound_s": bound_s(p),
                   "enqueue": "one job at a time through the library's API, interval_s apart, from one open app",
                   "workers": "one process each (forked), the library's own loop at concurrency 1, idle on the empty "
                              "queue until stopped"},
        checks=checks, results={"summary": summary})


# --------------------------------------------------------------------------- what the command prints


SHOWN = ("library", "version", "wake", "setting", "poll_s", "interval_s", "jobs", "worker_count", "started",
         "not_started", "executed_twice", "pickup_p50_ms", "pickup_p99_ms", "pickup_max_ms", "pickup_is_lower_bound",
         "transactions_per_s", "workers_with_errors")


def show_runs(paths, as_json: bool) -> None:
    for path in paths:
        summary = Run(path).summary
        if as_json:
            print(json.dumps({key: summary.get(key) for key in SHOWN}))
            continue
        at_least = "≥" if summary["pickup_is_lower_bound"] else ""
        print(f"{summary['library']:<14} {summary['wake']:<6} a job every {summary['interval_s']:g} s  "
              f"{summary['started']}/{summary['jobs']} started  pickup p50 {at_least}{summary['pickup_p50_ms']:8.1f} ms  "
              f"p99 {at_least}{summary['pickup_p99_ms']:8.1f} ms  max {at_least}{summary['pickup_max_ms']:8.1f} ms  "
              f"{summary['transactions_per_s']:6.1f} transactions/s (polling every {summary['poll_s']:g} s)")


# The kind as the store, the command line and the report see it (harness.experiments.registry).
KIND = Kind("wakeups", WakeupParameters, measure, run_summary.stored_summary,
            help=f"pickup of jobs arriving one at a time for idle workers woken by LISTEN/NOTIFY or by polling only, "
                 f"for the libraries that offer both ({', '.join(offering())}) (creates and drops the database "
                 "claimrace_libraries for every run)",
            show=show_runs, sections=("wakeups",), request=WakeupSweep, expand=WakeupSweep.runs,
            workers=workers_needed, label=label)
