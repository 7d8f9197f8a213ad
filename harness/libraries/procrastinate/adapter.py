"""procrastinate, raced with its own worker (https://github.com/procrastinate-org/procrastinate, from
PyPI at the release its library.py names).

Its claim is the plpgsql function procrastinate_fetch_job_v2 in procrastinate/sql/schema.sql: a CTE picks the
oldest 'todo' job whose lock has no earlier or running job, `FOR UPDATE OF jobs SKIP LOCKED`, and an UPDATE sets
it 'doing' with the worker's id. The worker polls every fetch_job_polling_interval (5 s by default) and is woken
by LISTEN/NOTIFY on a new job; with wait=False it stops once a fetch finds nothing.

Recovery: none built in. A worker sends a heartbeat (every 10 s); a job whose worker died stays 'doing' until
the user's own code finds it (JobManager.get_stalled_jobs, workers silent for 30 s) and retries it (retry_job): its
docs' production how-to, which the probe races as PRODUCTION (--setting production).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import procrastinate

from harness.libraries import settings
from harness import gate
from harness.libraries.procrastinate.library import LIBRARY

NAME = "procrastinate"
RELEASE = LIBRARY.source.release  # the release raced and read, named once in its library.py
PACKAGE = "procrastinate"
SOURCE = (f"procrastinate-org/procrastinate, procrastinate/sql/schema.sql (procrastinate_fetch_job_v2), "
          f"release {RELEASE}")
JOBS_TABLE = "procrastinate_jobs"
ID_COLUMN = "id"
CLAIM_LOGGED = "procrastinate_fetch_job_v2"  # what marks its claim among the statements the server logged
CLAIM_FUNCTION = "procrastinate_fetch_job_v2"  # the function whose body is its claim
CLAIMED = "NEW.status = 'doing' AND OLD.status IS DISTINCT FROM 'doing'"
COMPLETED = "NEW.status = 'succeeded' AND OLD.status IS DISTINCT FROM 'succeeded'"
# the stale-completion probe (harness.experiments.libraries.probe): its completion as the server logs it, and what
# its source says the probe should find
COMPLETION_LOGGED = "SELECT procrastinate_finish_job"
# the parameter of that statement naming the job it completes: its job id
COMPLETION_JOB = "$1"
STALE_COMPLETION = {"expected": "not_handed_on",
                    "checks": "the job's id and that it is still 'todo' or 'doing'; nothing names the worker",
                    "why": "nothing built in hands a dead worker's job on",
                    "source": f"procrastinate/sql/schema.sql:264-285 (procrastinate_finish_job_v1), release {RELEASE} "
                              "as installed"}
QUEUE = "claimrace"
CONNECTIONS = 5  # its connector's pool keeps 4 per worker (min_size), and its LISTEN takes a fifth, apart from the pool
SETTINGS = {"concurrency": 1, "fetch_job_polling_interval_s": 0.1, "fetch_job_polling_interval_default_s": 5.0,
            "listen_notify": True, "wait": False}
# what brings back a job whose worker died: nothing in the library (its user's periodic retry of stalled jobs)
RECOVERY = {"mechanism": "none built in: the user's code retries stalled jobs (get_stalled_jobs, retry_job)",
            "setting": None, "default_s": None, "raced_s": None}
# What its docs set for production: the how-to's periodic task (docs/howto/production/retry_stalled_jobs.md:27-34 in
# procrastinate-org/procrastinate, the same text in every tag from 3.1.0 to 3.9.0 and at 76baeee; the snapshot read
# here has no tag for the release raced), deferred every 10 minutes, retrying the jobs of workers whose heartbeat (every 10 s) is
# older than 30 s. Raced shortened: every second, after 3 s, a heartbeat every second. (The how-to's note to adjust
# stalled_worker_timeout with them is left at its 30 s: it only prunes old workers' rows when a worker starts.) Its
# completion checks the same as ever, so a retried job's first worker, resumed, finishes the job its new worker runs.
_RACED = {"cron": "* * * * * *", "every_s": 1.0, "seconds_since_heartbeat": 3, "update_heartbeat_interval_s": 1}
_DEFAULTS = {"cron": "*/10 * * * *", "every_s": 600.0, "seconds_since_heartbeat": 30, "update_heartbeat_interval_s": 10}
PRODUCTION = {"setting": "the how-to's periodic retry_stalled_jobs task (get_stalled_jobs, then retry_job on each)",
              "source": "docs/howto/production/retry_stalled_jobs.md:27-34 (3.1.0 to 3.9.0, and 76baeee)",
              "raced": _RACED, "defaults": _DEFAULTS,
              # a job is found once its worker's heartbeat is that old, at the task's next run at most a period later
              "recovery": {"raced_s": _RACED["seconds_since_heartbeat"] + _RACED["every_s"],
                           "default_s": _DEFAULTS["seconds_since_heartbeat"] + _DEFAULTS["every_s"]},
              "stale_completion": STALE_COMPLETION | {
                  "expected": "accepted",
                  "why": "the retried job is 'doing' under its new worker, which its completion accepts"}}


# its connector passes its other arguments to psycopg_pool's AsyncConnectionPool, whose `kwargs` go to each connection
# (procrastinate/psycopg_connector.py, PsycopgConnector.__init__); psycopg's own answer to a transaction pooler is
# prepare_threshold=None (psycopg 3 docs, "Prepared statements": "disable prepared statements" with PgBouncer)
POOLER_SETTING = {"setting": "prepare_threshold=None", "source": "psycopg 3 docs, advanced/prepare.html; passed "
                  "as PsycopgConnector(kwargs={'prepare_threshold': None})"}


def _app(url: str) -> procrastinate.App:
    documented = {"kwargs": {"prepare_threshold": None}} if settings.pooler_setting() == "documented" else {}
    return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url, **documented))


def install(url: str) -> None:
    app = _app(url)
    with app.open():
        app.schema_manager.apply_schema()


def enqueue(url: str, n: int, job_s: float | None = None) -> None:
    """n no-op jobs (a fault run's job_s is its workers' to keep: the job is the same)."""
    app = _app(url)
    task = app.task(name="noop", queue=QUEUE)(_noop)
    with app.open():
        task.batch_defer(*({} for _ in range(n)))


@contextlib.contextmanager
def enqueuer(url: str, job_s: float | None = None):
    """enqueue's app kept open: send(n, first) defers n no-op jobs through it."""
    app = _app(url)
    task = app.task(name="noop", queue=QUEUE)(_noop)
    with app.open():
        yield lambda n, first: task.batch_defer(*({} for _ in range(n)))


def _noop() -> None:
    """The job the enqueue defers; the worker registers its own, which logs."""


def work(url: str, log: Path, ready, start, job_s: float | None = None) -> None:
    """One worker; with job_s (a fault run) each job lasts job_s and logs its end, and the worker keeps polling
    (wait=True) until it is stopped."""
    app = _app(url)
    with open(log, "a", buffering=1) as out:
        if job_s is None:
            @app.task(name="noop", queue=QUEUE, pass_context=True)
            def noop(context):
                out.write(f"{context.job.id} {time.time_ns()} {os.getpid()}\n")
        else:
            @app.task(name="noop", queue=QUEUE, pass_context=True)
            async def slow(context):
                out.write(f"{context.job.id} {time.time_ns()} {os.getpid()}\n")
                await gate.hold_async(context.job.id, job_s)
                out.write(f"{context.job.id} {time.time_ns()} {os.getpid()} end\n")

        production = {}
        if settings.configuration() == "production":
            raced = PRODUCTION["raced"]
            production = {"update_heartbeat_interval": raced["update_heartbeat_interval_s"]}

            # the how-to's task, on the raced period and heartbeat age
            @app.periodic(cron=raced["cron"])
            @app.task(queue=QUEUE, queueing_lock="retry_stalled_jobs", pass_context=True)
            async def retry_stalled_jobs(context, timestamp):
                stalled = await app.job_manager.get_stalled_jobs(
                    seconds_since_heartbeat=raced["seconds_since_heartbeat"])
                for job in stalled:
                    await app.job_manager.retry_job(job)

        ready.set()
        start.wait()
        app.run_worker(queues=[QUEUE], concurrency=1, wait=job_s is not None, install_signal_handlers=False,
                       fetch_job_polling_interval=SETTINGS["fetch_job_polling_interval_s"], listen_notify=True,
                       **production)


# --------------------------------------------------------------------------- wake-ups (harness.experiments.libraries.wakeups)

# A worker is woken by LISTEN/NOTIFY on a new job (listen_notify, on by default), else finds it at its next poll.
WAKEUP = {"setting": "listen_notify", "poll_s": SETTINGS["fetch_job_polling_interval_default_s"]}


def wake_install(url: str) -> None:
    install(url)


def wake_work(url: str, log: Path, ready, start, listen: bool) -> None:
    """One worker on an empty queue, until it is stopped: polling at the default interval, woken by LISTEN/NOTIFY
    where `listen`; its no-op job logs its start."""
    app = _app(url)
    with open(log, "a", buffering=1) as out:
        @app.task(name="noop", queue=QUEUE, pass_context=True)
        def noop(context):
            out.write(f"{context.job.id} {time.time_ns()} {os.getpid()}\n")

        ready.set()
        start.wait()
        app.run_worker(queues=[QUEUE], concurrency=1, wait=True, install_signal_handlers=False,
                       fetch_job_polling_interval=WAKEUP["poll_s"], listen_notify=listen)


def enqueue_paced(url: str, n: int, interval_s: float, listen: bool) -> None:
    """n no-op jobs, one at a time, interval_s apart, through one open app (its NOTIFY is sent by a trigger on the
    jobs table whatever the workers do)."""
    app = _app(url)
    task = app.task(name="noop", queue=QUEUE)(_noop)
    with app.open():
        began = time.monotonic()
        for i in range(n):
            time.sleep(max(0.0, began + i * interval_s - time.monotonic()))
            task.defer()

