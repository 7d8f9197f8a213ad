"""The soak's partitioned shape: finished jobs leave the table a partition at a time.

The scheme is pgmq's partitioned queue, read in its SQL as the pgmq Python client 1.1.4 ships it
(pgmq/sql/pgmq.sql:1376-1536, pgmq.create_partitioned): the queue table is range-partitioned on its id, 10,000 ids
a partition (partition_interval '10000'), with 4 partitions made ahead (premake 4), and pg_partman's maintenance
drops the partitions past a retention of 100,000 ids (retention_interval '100000', retention_keep_table false).
pg_partman is not in the embedded server, so the maintenance is done here, and differs in two ways, both stated
on the page:

- it runs every MAINTENANCE_S, not on pg_partman's own schedule;
- it drops a partition past the retention only once every job in it is finished: pgmq's retention drops messages
  whether read or not, which a job queue cannot do.

Finished jobs stay in their partition, marked 'done', until it is dropped. A new partition is attached, which
readers and writers do not block. A DROP of a partition takes an ACCESS EXCLUSIVE lock on the partitioned table:
behind a long reader's lock (the analytics holder) it would queue every claim behind it, so the maintenance gives
up a DDL statement that waits for its lock past LOCK_TIMEOUT_MS and tries again at its next pass; each attempt and
its outcome is kept.
"""

from __future__ import annotations

import threading
import time

import pandas as pd
import psycopg

from harness.config import SCHEMA
from harness.server import database

PARTITION_IDS = 10_000  # pgmq's partition_interval default
PREMAKE = 4  # pgmq's premake default: partitions made ahead of the newest id
RETENTION_IDS = 100_000  # pgmq's retention_interval default: a partition wholly this far behind the newest id goes
MAINTENANCE_S = 5.0
LOCK_TIMEOUT_MS = 100
JOBS = f"{SCHEMA}.jobs"
EVENT_COLUMNS = ["t_s", "event", "partition", "detail"]


def partition_name(index: int) -> str:
    return f"jobs_p{index}"


def create_partition(conn, index: int, options: str = "") -> None:
    """Partition `index` holds ids index x PARTITION_IDS + 1 up to (index + 1) x PARTITION_IDS. It is made as a
    table of its own, then attached: ATTACH PARTITION takes a SHARE UPDATE EXCLUSIVE lock on the partitioned table,
    which its readers and writers do not block (CREATE TABLE ... PARTITION OF would take an ACCESS EXCLUSIVE one)."""
    low, high = index * PARTITION_IDS + 1, (index + 1) * PARTITION_IDS + 1
    table = f"{SCHEMA}.{partition_name(index)}"
    conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (LIKE {JOBS} INCLUDING DEFAULTS)"
                 + (f" WITH ({options})" if options else ""))
    conn.execute(f"ALTER TABLE {JOBS} ATTACH PARTITION {table} FOR VALUES FROM ({low}) TO ({high})")


def drop_detached(conn) -> None:
    """Drop the partitions left standing alone (made, never attached: a run ended between the two), which dropping
    the jobs table does not take with it."""
    for (name,) in conn.execute("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                                "WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname ~ '^jobs_p[0-9]+$'",
                                [SCHEMA]).fetchall():
        conn.execute(f"DROP TABLE IF EXISTS {SCHEMA}.{name}")


def create_table(conn, history_rows: int) -> int:
    """The partitioned jobs table, with partitions for the history rows and PREMAKE more; returns how many."""
    conn.execute(f"""CREATE TABLE {JOBS} (
                         id         bigint GENERATED ALWAYS AS IDENTITY,
                         status     text NOT NULL DEFAULT 'pending',
                         started_at timestamptz,
                         PRIMARY KEY (id)) PARTITION BY RANGE (id)""")
    made = history_rows // PARTITION_IDS + 1 + PREMAKE
    for index in range(made):
        create_partition(conn, index)
    return made


class Maintenance:
    """The partitions' maintenance, every MAINTENANCE_S on its own connection: make partitions PREMAKE ahead of
    the newest id (with the run's storage options: its autovacuum), and drop the oldest while all its ids are
    RETENTION_IDS or more behind the newest and every job in it is finished."""

    def __init__(self, url: str, began: float, made: int, options: str = ""):
        self.url, self.began, self.options = url, began, options
        self.partitions = list(range(made))
        self.events: list[dict] = []
        self.error: str | None = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="claimrace-soak-partitions", daemon=True)

    def start(self) -> Maintenance:
        self.thread.start()
        return self

    def _note(self, event: str, index: int, detail: str = "") -> None:
        self.events.append({"t_s": round(time.monotonic() - self.began, 3), "event": event,
                            "partition": partition_name(index), "detail": detail})

    def _ddl(self, conn, event: str, index: int, statement) -> bool:
        """Run one DDL statement within the lock timeout; False where it waited too long (tried again later)."""
        try:
            statement()
        except psycopg.errors.LockNotAvailable:
            self._note(f"{event}_waited", index, f"lock not granted within {LOCK_TIMEOUT_MS} ms")
            return False
        self._note(event, index)
        return True

    def run_once(self, conn) -> None:
        newest = int(conn.execute(f"SELECT coalesce(max(id), 0) FROM {JOBS}").fetchone()[0])
        in_use = max(newest - 1, 0) // PARTITION_IDS  # the partition the newest id is in
        for index in range(max(self.partitions) + 1, in_use + PREMAKE + 1):
            if not self._ddl(conn, "made", index, lambda: create_partition(conn, index, self.options)):
                break
            self.partitions.append(index)
        while len(self.partitions) > 1 and (self.partitions[0] + 1) * PARTITION_IDS <= newest - RETENTION_IDS:
            oldest = self.partitions[0]
            table = f"{SCHEMA}.{partition_name(oldest)}"
            if conn.execute(f"SELECT EXISTS (SELECT 1 FROM {table} WHERE status <> 'done')").fetchone()[0]:
                break
            if not self._ddl(conn, "dropped", oldest, lambda: conn.execute(f"DROP TABLE {table}")):
                break
            self.partitions.pop(0)

    def _run(self) -> None:
        try:
            with database.connect(self.url, application_name="claimrace-soak-partitions") as conn:
                conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT_MS}ms'")
                while not self.stopping.wait(MAINTENANCE_S):
                    self.run_once(conn)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}".splitlines()[0]

    def stop(self) -> pd.DataFrame:
        self.stopping.set()
        self.thread.join(10)
        return pd.DataFrame(self.events, columns=EVENT_COLUMNS)
