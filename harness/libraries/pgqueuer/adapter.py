"""PgQueuer, raced with its own worker (https://github.com/janbjorge/pgqueuer, from PyPI at the
release its library.py names).

Its claim is the dequeue statement pgqueuer/adapters/persistence/qb.py builds: a CTE takes the next 'queued' jobs
of the registered entrypoints `FOR UPDATE SKIP LOCKED` (and re-picks 'picked' jobs whose heartbeat went stale),
an UPDATE sets them 'picked', in one statement per batch; a finished job is deleted and logged to pgqueuer_log.
The QueueManager waits for a NOTIFY on enqueue, or dequeue_timeout (30 s by default); in drain mode it stops once
the queue is empty and its tasks are done.

Recovery: a running job's worker updates its heartbeat every half heartbeat_timeout (30 s by default); a worker's
dequeue re-picks a 'picked' job whose heartbeat is older than heartbeat_timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from datetime import timedelta
from pathlib import Path

import psycopg
from pgqueuer.adapters.drivers.psycopg import PsycopgDriver
from pgqueuer.adapters.persistence.queries import Queries
from pgqueuer.core.qm import QueueManager
from pgqueuer.domain.types import QueueExecutionMode

from harness.libraries import enqueuers, settings
from harness import gate
from harness.libraries.pgqueuer.library import LIBRARY

NAME = "pgqueuer"
RELEASE = LIBRARY.source.release  # the release raced and read, named once in its library.py
PACKAGE = "pgqueuer"
SOURCE = f"janbjorge/pgqueuer, pgqueuer/adapters/persistence/qb.py (the dequeue query), release {RELEASE}"
JOBS_TABLE = "pgqueuer"
ID_COLUMN = "id"
CLAIM_LOGGED = "FOR UPDATE SKIP LOCKED"  # what marks its claim among the statements the server logged
# its schema's trigger sends a NOTIFY on every change of its table, which every worker LISTENs for
NOTIFIES_ON_CHANGE = True
CLAIMED = "NEW.status = 'picked' AND OLD.status IS DISTINCT FROM 'picked'"
COMPLETED = "DELETE"  # a finished job's row is deleted (and logged to pgqueuer_log)
# the stale-completion probe (harness.experiments.libraries.probe): its completion as the server logs it, and what
# its source says the probe should find
COMPLETION_LOGGED = "WITH job_status AS"
# the parameter of that statement naming the job it completes: an array of job ids, one statement for every job its
# batch finished
COMPLETION_JOB = "$1"
STALE_COMPLETION = {"expected": "accepted",
                    "checks": "the job's id only: it deletes every id it is given that did not fail",
                    "why": "a stale heartbeat hands the job on; the completion does not check who holds it",
                    "source": "pgqueuer/adapters/persistence/qb.py:677-686 (build_log_job_query), "
                              f"release {RELEASE} as installed"}
ENTRYPOINT = "noop"
SETTINGS = {"batch_size": 1, "dequeue_timeout_s": 0.1, "dequeue_timeout_default_s": 30.0, "mode": "drain",
            "max_concurrent_tasks": None}
RECOVERY = {"mechanism": "heartbeat: a worker's dequeue re-picks a picked job whose heartbeat went stale",
            "setting": "heartbeat_timeout", "default_s": 30.0, "raced_s": 2.0,
            # its worker dequeues again while a job runs, unless capped; the least cap it takes is twice the batch
            "max_concurrent_tasks": 2}
# A stall (the worker frozen, its connections kept) hands a running job on where its heartbeat, renewed on a fixed
# schedule and written once the worker's one connection is free, grows older than heartbeat_timeout
# (harness.experiments.libraries.outcomes). Raced at 6 s: at the 2 s of the fault runs a beat and the connection's
# wait already make the 2 s, and no stall could be safe.
STALL = {"beat_share": 0.5, "write_wait_s": 1.0, "raced_s": 6.0,
         "why": "a running job's heartbeat is set when it is picked and queued again every half heartbeat_timeout "
                "while it runs; the beat is written on the worker's one connection, which its NOTIFY watcher holds "
                "for up to a second at a time while no notification comes; and another worker's dequeue, on its own "
                "connection held the same way, re-picks a picked job whose heartbeat is older than heartbeat_timeout",
         "source": "pgqueuer/core/qm.py:549-553 (the beat, heartbeat_timeout / 2), core/heartbeat.py:41-51 (queued "
                   "every interval), qm.py:427-434 and core/buffers.py:54-58 (flushed once it holds batch_size**2: at "
                   "once at the batch_size of 1 raced), "
                   "adapters/drivers/psycopg.py:114-115 (the watcher: notifies(timeout=1.0) on the connection every "
                   "query shares), adapters/persistence/qb.py:431 (the re-pick) and :524 (set when picked), "
                   f"release {RELEASE} as installed"}


# PgQueuer's package (the release raced) names no prepared-statement setting for poolers (its pooler advice is about LISTEN); it
# runs here on its psycopg driver (PsycopgDriver over a connection made here), whose documented answer is psycopg's
# prepare_threshold=None (asyncpg's statement_cache_size=0 is the same for its asyncpg driver)
POOLER_SETTING = {"setting": "prepare_threshold=None", "source": "psycopg 3 docs, advanced/prepare.html (the driver's; "
                  "asyncpg's statement_cache_size=0 for PgQueuer's asyncpg driver)"}


async def _connect(url: str) -> psycopg.AsyncConnection:
    documented = {"prepare_threshold": None} if settings.pooler_setting() == "documented" else {}
    return await psycopg.AsyncConnection.connect(url, autocommit=True, **documented)


def install(url: str) -> None:
    async def run():
        async with await _connect(url) as conn:
            await Queries(PsycopgDriver(conn)).install()
    asyncio.run(run())


def enqueue(url: str, n: int, job_s: float | None = None) -> None:
    """n no-op jobs (a fault run's job_s is its workers' to keep: the job is the same)."""
    async def run():
        async with await _connect(url) as conn:
            await Queries(PsycopgDriver(conn)).enqueue([ENTRYPOINT] * n, [None] * n, [0] * n)
    asyncio.run(run())


def enqueuer(url: str, job_s: float | None = None):
    """enqueue's connection kept open: send(n, first) enqueues n no-op jobs through it."""
    @contextlib.asynccontextmanager
    async def opened():
        async with await _connect(url) as conn:
            yield Queries(PsycopgDriver(conn))

    async def send(queries, n: int, first: int) -> None:
        await queries.enqueue([ENTRYPOINT] * n, [None] * n, [0] * n)
    return enqueuers.kept_open(opened, send)


def work(url: str, log: Path, ready, start, job_s: float | None = None) -> None:
    """One worker; with job_s (a fault run) each job lasts job_s and logs its end, the worker keeps polling
    (continuous mode) until it is stopped, and heartbeat_timeout is RECOVERY's raced value."""
    async def run():
        async with await _connect(url) as conn:
            manager = QueueManager(Queries(PsycopgDriver(conn)))
            with open(log, "a", buffering=1) as out:
                @manager.entrypoint(ENTRYPOINT)
                async def noop(job) -> None:
                    out.write(f"{job.id} {time.time_ns()} {os.getpid()}\n")
                    if job_s is not None:
                        await gate.hold_async(job.id, job_s)
                        out.write(f"{job.id} {time.time_ns()} {os.getpid()} end\n")

                ready.set()
                await asyncio.to_thread(start.wait)
                if job_s is None:
                    await manager.run(dequeue_timeout=timedelta(seconds=SETTINGS["dequeue_timeout_s"]),
                                      batch_size=SETTINGS["batch_size"], mode=QueueExecutionMode.drain)
                else:
                    await manager.run(dequeue_timeout=timedelta(seconds=SETTINGS["dequeue_timeout_s"]),
                                      batch_size=SETTINGS["batch_size"], mode=QueueExecutionMode.continuous,
                                      heartbeat_timeout=timedelta(seconds=settings.recovery_s(RECOVERY["raced_s"])),
                                      max_concurrent_tasks=RECOVERY["max_concurrent_tasks"])
    asyncio.run(run())
