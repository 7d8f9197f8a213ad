"""pgmq, raced with its Python client (https://github.com/pgmq/pgmq-py, 1.1.4 from PyPI) and the SQL it ships.

pgmq is a message queue, not a job runner: its consumer is the loop its README shows, which this module runs
as written there. A worker reads one message with a visibility timeout, `pgmq.read(queue, vt, 1)`: the plpgsql
function in pgmq/pgmq's pgmq-extension/sql/pgmq.sql (the copy the client ships as pgmq/sql/pgmq.sql, at the SQL
release its library.py names) runs a CTE that takes the oldest visible message `FOR UPDATE SKIP LOCKED`, and an UPDATE that moves its `vt`
forward and counts the read (`read_ct + 1`). The message is then handled and archived (moved to the queue's
archive table), as the README's example does. A message not archived or deleted within vt is read again. The
worker stops at its first empty read.

Recovery: the visibility timeout: a message read and not archived within vt is visible again to every reader.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from pgmq import PGMQueue
from pgmq.install import get_embedded_install_sql, get_embedded_sql_version, install_pgmq_sql
from psycopg_pool import ConnectionPool

from harness.libraries import settings
from harness import gate

NAME = "pgmq"
PACKAGE = "pgmq"
SOURCE = (f"pgmq/pgmq, pgmq-extension/sql/pgmq.sql (pgmq.read), SQL {get_embedded_sql_version()} as shipped "
          "by the pgmq Python client (pgmq/sql/pgmq.sql), installed without the extension")
JOBS_SCHEMA = "pgmq"
QUEUE = "claimrace"
JOBS_TABLE = f"q_{QUEUE}"  # pgmq.format_table_name(queue, 'q')
ID_COLUMN = "msg_id"
CLAIM_LOGGED = "pgmq.read("  # what marks its claim among the statements the server logged
CLAIM_FUNCTION = "read"  # the function whose body is its claim
CLAIMED = "NEW.read_ct > OLD.read_ct"
COMPLETED = "DELETE"  # archive moves the message out of the queue's table  # every read counts; a second read of one message is a second claim
# the stale-completion probe (harness.experiments.libraries.probe): its completion as the server logs it, and what
# its source says the probe should find
COMPLETION_LOGGED = "SELECT pgmq.archive("
# the parameter of that statement naming the job it completes: the message id (an array of them for a batch)
COMPLETION_JOB = "$2"
STALE_COMPLETION = {"expected": "accepted",
                    "checks": "the message id only (archive moves it out of the queue)",
                    "why": "the visibility timeout hands the message on; the archive does not check who read it",
                    "source": "pgmq/sql/pgmq.sql:578-600 (pgmq.archive(queue_name, msg_id)), SQL "
                              f"{get_embedded_sql_version()} as its Python client ships it"}
VT_S = 30
# the loop (read one, handle, archive; stop at the first empty read) is described in the section's sentence
SETTINGS = {"vt_s": VT_S, "vt_default_s": 30.0, "qty": 1, "pool_size": 1}
RECOVERY = {"mechanism": "visibility timeout: a message not archived within vt is read again",
            "setting": "vt", "default_s": float(VT_S), "raced_s": 3.0}
IDLE_POLL_S = 0.1  # a fault run's worker, on an empty read, reads again after this


# PGMQueue takes a pool of one's own (its `pool` field, pgmq/queue.py), which is where psycopg's connection
# kwargs go: prepare_threshold=None is psycopg's answer to a transaction pooler; pgmq's docs say nothing of poolers
POOLER_SETTING = {"setting": "prepare_threshold=None", "source": "psycopg 3 docs, advanced/prepare.html; passed "
                  "as PGMQueue(pool=ConnectionPool(..., kwargs={'prepare_threshold': None}))"}


def _client(url: str) -> PGMQueue:
    if settings.pooler_setting() == "documented":
        pool = ConnectionPool(url, min_size=1, max_size=1, kwargs={"prepare_threshold": None}, open=True)
        queue = PGMQueue(conn_string=url, init_extension=False, pool_size=1, pool=pool)
    else:
        queue = PGMQueue(conn_string=url, init_extension=False, pool_size=1)
    queue.pool.wait()  # connected before the worker says it is ready
    return queue


def install(url: str) -> None:
    install_pgmq_sql(get_embedded_install_sql(), dsn=url)
    queue = _client(url)
    try:
        queue.create_queue(QUEUE)
    finally:
        queue.close()


def enqueue(url: str, n: int, job_s: float | None = None) -> None:
    """n no-op jobs (a fault run's job_s is its workers' to keep: the job is the same)."""
    queue = _client(url)
    try:
        for first in range(0, n, 1000):
            queue.send_batch(QUEUE, [{"n": i} for i in range(first, min(n, first + 1000))])
    finally:
        queue.close()


@contextlib.contextmanager
def enqueuer(url: str, job_s: float | None = None):
    """enqueue's client kept open: send(n, first) sends n messages through it, in one batch."""
    queue = _client(url)
    try:
        yield lambda n, first: queue.send_batch(QUEUE, [{"n": i} for i in range(first, first + n)])
    finally:
        queue.close()


def work(url: str, log: Path, ready, start, job_s: float | None = None) -> None:
    """One worker; with job_s (a fault run) each message is handled for job_s before it is archived, the read's
    vt is RECOVERY's raced value, and an empty read is tried again IDLE_POLL_S later until the worker is stopped."""
    queue = _client(url)
    vt = VT_S if job_s is None else int(RECOVERY["raced_s"])
    try:
        with open(log, "a", buffering=1) as out:
            ready.set()
            start.wait()
            while True:
                message = queue.read(QUEUE, vt=vt, qty=1)
                if message is None:
                    if job_s is None:
                        break
                    time.sleep(IDLE_POLL_S)
                    continue
                out.write(f"{message.msg_id} {time.time_ns()} {os.getpid()}\n")
                if job_s is not None:
                    gate.hold(message.msg_id, job_s)
                    out.write(f"{message.msg_id} {time.time_ns()} {os.getpid()} end\n")
                queue.archive(QUEUE, message.msg_id)
    finally:
        queue.close()
