"""chancy, raced with its own worker (https://github.com/TkTech/chancy, from PyPI at the release
its library.py names).

Its claim is Worker.fetch_jobs in chancy/worker.py: in one transaction, a CTE picks the queue's next 'pending'
jobs `FOR UPDATE OF jobs SKIP LOCKED`, up to the executor's free slots, and an UPDATE sets them 'running' with a
fresh `claim_id` and the worker's id. A completion is not written per job: the worker queues it and writes its
queued completions together once a second. A queue is polled every `polling_interval` (5 s by default), woken
early by a NOTIFY when a job is pushed, and with `eager_polling` also as soon as one of its jobs completes. The
worker never stops on an empty queue: the harness sends it SIGTERM, its own graceful stop, once every job ran.

Recovery: the Recovery plugin (on by default) runs on the cluster's leader (the Leadership plugin) every
poll_interval (60 s) and sets back to 'pending' every running job whose worker has not been seen for
heartbeat_timeout (90 s; a worker's heartbeat every 30 s), with a new claim: the old holder's completion is
refused. The Leadership and Recovery plugins are among its default plugins (chancy/app.py:236-242), so a user
adds neither, and the release raced takes no advisory locks.

A lost connection: the worker's loops retry a database error with a backoff, without limit by default
(backoff_max_retries None, chancy/worker.py:135-137 and 153, chancy/retry.py:51), so nothing in the loops seen
here ends the process on one; the exits its workers showed in fault runs are not explained here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

from chancy import Chancy, Job, Queue, Worker
from chancy.plugins.leadership import Leadership
from chancy.plugins.recovery import Recovery

from harness import gate
from harness.libraries import enqueuers
from harness.libraries.chancy.library import LIBRARY

NAME = "chancy"
RELEASE = LIBRARY.source.release  # the release raced and read, named once in its library.py
PACKAGE = "chancy"
SOURCE = f"TkTech/chancy, chancy/worker.py (Worker.fetch_jobs), release {RELEASE}"
JOBS_TABLE = "chancy_jobs"
ID_COLUMN = "id"
AUDIT_ID_SQL = "(NEW.kwargs->>'n')::bigint"  # its job id is a uuid: the audit and the log use the job's n
CLAIM_LOGGED = "claim_id = gen_random_uuid()"  # what marks its claim among the statements the server logged
CLAIMED = "NEW.state = 'running' AND OLD.state IS DISTINCT FROM 'running'"
COMPLETED = "NEW.state = 'succeeded' AND OLD.state IS DISTINCT FROM 'succeeded'"
# the stale-completion probe (harness.experiments.libraries.probe): its completion as the server logs it, and what
# its source says the probe should find
# (the end of its SET list and the job's id: the same in 0.25.0, whose statement stops there, and in the release raced, which
# adds the claim_id)
COMPLETION_LOGGED = "max_attempts = $8 WHERE id = $9"
# the parameter of that statement naming the job it completes: the job's uuid, one statement per job in its second's
# flush
COMPLETION_JOB = "$9"
STALE_COMPLETION = {"expected": "refused",
                    "checks": "the job's id and the claim_id its own fetch set; a later fetch sets a new one",
                    "why": "Recovery hands the job on; the completion names the holder's claim",
                    "source": f"chancy/worker.py:684-698 (Worker.flush), release {RELEASE} as installed"}
# the release before the guard, which the probe can race too (harness.libraries.releases: --library chancy==0.25.0):
# its completion is the same UPDATE without the claim_id (added by chancy/migrations/v8.py in the release raced)
EARLIER_RELEASES = {"0.25.0": {"expected": "accepted",
                               "checks": "the job's id alone",
                               "why": "Recovery hands the job on; the completion names no claim",
                               "source": "chancy/worker.py:506-518 (Worker._maintain_updates), release 0.25.0"}}
STOPS_ON_ITS_OWN = False
# the worker declares the 'default' queue at start without replacing one already declared: the jobs go there,
# declared at install with these settings
QUEUE = "default"
EAGER_POLLING = True
SETTINGS = {"concurrency": 1, "executor": "async (default process)", "polling_interval_s": 1,
            "polling_interval_default_s": 5, "eager_polling": f"{'on' if EAGER_POLLING else 'off'} (default off)", "notifications": True,
            # its fetches, its completions, its heartbeat and its plugins share one pool; 2 so that 32 workers fit
            # the server's connections
            "connection_pool": "1 to 2 (default 1 to 10)", "plugins": "chancy's defaults"}

# a fault run shortens all four: the leader's term and poll, the recovery poll, and the heartbeat and its timeout
RECOVERY = {"mechanism": "the Recovery plugin, on the leader, resets running jobs of workers not seen within "
                         "heartbeat_timeout",
            "setting": "heartbeat_timeout + Recovery poll_interval", "default_s": 90.0 + 60.0, "raced_s": 3.0 + 1.0,
            "raced": {"heartbeat_timeout_s": 3, "heartbeat_poll_interval_s": 1, "recovery_poll_interval_s": 1,
                      "leadership_poll_interval_s": 1, "leadership_timeout_s": 3},
            "defaults": {"heartbeat_timeout_s": 90, "heartbeat_poll_interval_s": 30, "recovery_poll_interval_s": 60,
                         "leadership_poll_interval_s": 60, "leadership_timeout_s": 120}}

_log = None  # the worker process's execution log, for the job below


async def noop(n: int) -> None:
    """The job: logs the n it was queued with."""
    _log.write(f"{n} {time.time_ns()} {os.getpid()}\n")


async def slow(n: int, job_s: float) -> None:
    """A fault run's job: logs its start, lasts job_s, logs its end."""
    _log.write(f"{n} {time.time_ns()} {os.getpid()}\n")
    await gate.hold_async(n, job_s)
    _log.write(f"{n} {time.time_ns()} {os.getpid()} end\n")


# chancy builds its pools itself (Chancy.pool, chancy/app.py) from the DSN and pool sizes alone: no connection
# kwargs reach psycopg, so prepare_threshold cannot be set through it, and its docs name no setting for poolers
POOLER_SETTING = None


def _app(url: str, recovery: bool = False) -> Chancy:
    logger = logging.getLogger("claimrace.chancy")
    logger.setLevel(logging.WARNING)  # its default logger says every job it pulls, on stderr
    raced = RECOVERY["raced"]
    plugins = [Leadership(poll_interval=raced["leadership_poll_interval_s"], timeout=raced["leadership_timeout_s"]),
               Recovery(poll_interval=raced["recovery_poll_interval_s"])] if recovery else None
    return Chancy(url, min_connection_pool_size=1, max_connection_pool_size=2, log=logger,  # SETTINGS says so
                  **({"plugins": plugins} if plugins else {}))


def install(url: str) -> None:
    async def run():
        async with _app(url) as chancy:
            await chancy.migrate()
            await chancy.declare(Queue(name=QUEUE, concurrency=SETTINGS["concurrency"],
                                       executor=Chancy.Executor.Async,
                                       polling_interval=SETTINGS["polling_interval_s"],
                                       eager_polling=EAGER_POLLING))
    asyncio.run(run())


def _job(i: int, job_s: float | None) -> Job:
    """Job number i: a no-op, or with job_s (a fault run) one that lasts job_s."""
    if job_s is None:
        return Job(func=f"{__name__}.noop", kwargs={"n": i}, queue=QUEUE)
    return Job(func=f"{__name__}.slow", kwargs={"n": i, "job_s": job_s}, queue=QUEUE)


async def _push(chancy: Chancy, n: int, first: int, job_s: float | None) -> None:
    async for _ in chancy.push_many([_job(i, job_s) for i in range(first, first + n)]):
        pass


def enqueue(url: str, n: int, job_s: float | None = None, first: int = 0) -> None:
    """n no-op jobs, numbered from first (the number the audit and the log read); with job_s (a fault run), jobs
    that last job_s."""
    async def run():
        async with _app(url) as chancy:
            await _push(chancy, n, first, job_s)
    asyncio.run(run())


def enqueuer(url: str, job_s: float | None = None):
    """enqueue's app kept open: send(n, first) pushes n jobs numbered from first through it."""
    return enqueuers.kept_open(lambda: _app(url), lambda chancy, n, first: _push(chancy, n, first, job_s))


def work(url: str, log: Path, ready, start, job_s: float | None = None) -> None:
    """One worker; with job_s (a fault run) its recovery settings are RECOVERY's raced values."""
    global _log
    raced = RECOVERY["raced"]
    heartbeat = {} if job_s is None else {"heartbeat_poll_interval": raced["heartbeat_poll_interval_s"],
                                          "heartbeat_timeout": raced["heartbeat_timeout_s"]}

    async def run():
        async with _app(url, recovery=job_s is not None) as chancy:
            await chancy.pool.wait()  # connected before the worker says it is ready
            ready.set()
            await asyncio.to_thread(start.wait)
            # SIGTERM is its own graceful stop (register_signal_handlers): it flushes the queued completions
            async with Worker(chancy, **heartbeat) as worker:
                await worker.wait_for_shutdown()

    with open(log, "a", buffering=1) as _log:
        asyncio.run(run())


# --------------------------------------------------------------------------- wake-ups (harness.experiments.libraries.wakeups)

# A worker is woken by a NOTIFY its app sends on a push (notifications, on by default), else finds the job at its
# queue's next poll: the default polling_interval, and eager_polling off, as declared by default.
WAKEUP = {"setting": "notifications", "poll_s": float(SETTINGS["polling_interval_default_s"])}


def wake_install(url: str) -> None:
    async def run():
        async with _app(url) as chancy:
            await chancy.migrate()
            await chancy.declare(Queue(name=QUEUE, concurrency=SETTINGS["concurrency"],
                                       executor=Chancy.Executor.Async, polling_interval=WAKEUP["poll_s"]))
    asyncio.run(run())


def _wake_app(url: str, listen: bool) -> Chancy:
    logger = logging.getLogger("claimrace.chancy")
    logger.setLevel(logging.WARNING)
    return Chancy(url, min_connection_pool_size=1, max_connection_pool_size=2, log=logger, notifications=listen)


def wake_work(url: str, log: Path, ready, start, listen: bool) -> None:
    """One worker on an empty queue, until it is stopped (SIGTERM): polling at the queue's interval, woken by a
    NOTIFY where `listen`; its no-op job logs its start."""
    global _log

    async def run():
        async with _wake_app(url, listen) as chancy:
            await chancy.pool.wait()
            ready.set()
            await asyncio.to_thread(start.wait)
            async with Worker(chancy) as worker:
                await worker.wait_for_shutdown()

    with open(log, "a", buffering=1) as _log:
        asyncio.run(run())


def enqueue_paced(url: str, n: int, interval_s: float, listen: bool) -> None:
    """n no-op jobs, one push at a time, interval_s apart, through one app that sends a NOTIFY with each push
    where `listen`."""
    async def run():
        async with _wake_app(url, listen) as chancy:
            began = time.monotonic()
            for i in range(n):
                await asyncio.sleep(max(0.0, began + i * interval_s - time.monotonic()))
                await chancy.push(Job(func=f"{__name__}.noop", kwargs={"n": i}, queue=QUEUE))
    asyncio.run(run())

