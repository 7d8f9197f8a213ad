"""Reading the server's own counters about the jobs table, once they are complete.

PostgreSQL's cumulative statistics lag on purpose: a backend keeps its counts
in local memory and flushes them at most once a second (or when it goes idle
after a forced flush, or when it exits), and a reading transaction caches what
it saw. Every reading here therefore first makes the writers flush (or waits
for them to exit) and clears the reader's snapshot, so a figure never misses
updates that already happened.

Also the sizes in pages, and the pgstattuple figures where that extension is
installed or installable (the embedded server ships without it).
"""

from __future__ import annotations

import time

import psycopg
from psycopg import conninfo

from harness.config import SCHEMA

JOBS = f"{SCHEMA}.jobs"

# pg_stat_user_tables columns read after every measurement; n_tup_newpage_upd exists from PostgreSQL 16.
TABLE_COUNTERS = ("n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_live_tup", "n_dead_tup", "n_mod_since_analyze",
                  "vacuum_count", "autovacuum_count", "analyze_count", "autoanalyze_count")
CUMULATIVE_COUNTERS = ("n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_newpage_upd", "vacuum_count",
                       "autovacuum_count", "analyze_count", "autoanalyze_count")


def force_flush(conn: psycopg.Connection) -> None:
    """Make this connection's backend publish its pending counters now.

    pg_stat_force_next_flush() marks the next report as forced; the backend
    reports when it goes idle, before it answers, so the counts are public
    once this call returns.
    """
    conn.execute("SELECT pg_stat_force_next_flush()")


def wait_for_backends_to_exit(conn: psycopg.Connection, pids: list[int], timeout_seconds: float = 15.0) -> None:
    """A backend flushes its counters when it exits: wait until these have (closing a client does not wait)."""
    pids = [int(p) for p in pids if p]
    if not pids:
        return
    deadline = time.monotonic() + timeout_seconds
    while True:
        alive = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [pids]).fetchone()[0]
        if alive == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{alive} backends still running {timeout_seconds:.0f} s after their clients closed")
        time.sleep(0.02)


def table_counters(conn: psycopg.Connection, table: str = JOBS) -> dict:
    """The table's counters as they stand after every flushed report (the reader's cache cleared first)."""
    force_flush(conn)  # our own reads and DDL count too
    conn.execute("SELECT pg_stat_clear_snapshot()")
    newpage = ", n_tup_newpage_upd" if server_major(conn) >= 16 else ", NULL::bigint AS n_tup_newpage_upd"
    row = conn.execute(
        f"""SELECT {', '.join(TABLE_COUNTERS)}{newpage}, last_autovacuum, last_vacuum, last_autoanalyze
            FROM pg_stat_user_tables WHERE relid = %s::regclass""",
        [table],
    ).fetchone()
    if row is None:
        raise RuntimeError(f"no statistics entry for {table}")
    names = (*TABLE_COUNTERS, "n_tup_newpage_upd", "last_autovacuum", "last_vacuum", "last_autoanalyze")
    return dict(zip(names, row))


def reset_table_counters(conn: psycopg.Connection, table: str = JOBS) -> bool:
    """Zero the table's counters; False when the role may not (the caller then works from a baseline).

    Pending counts are flushed first, or they would land after the reset. The
    reset also zeroes n_live_tup and n_dead_tup; a VACUUM afterwards sets them
    again from what it finds.
    """
    force_flush(conn)
    try:
        conn.execute("SELECT pg_stat_reset_single_table_counters(%s::regclass)", [table])
    except psycopg.errors.InsufficientPrivilege:
        return False
    return True


def counter_deltas(before: dict, after: dict) -> dict:
    """How much each cumulative counter grew between two readings."""
    deltas = {}
    for name in CUMULATIVE_COUNTERS:
        if after.get(name) is None or before.get(name) is None:
            deltas[name] = None
        else:
            deltas[name] = int(after[name]) - int(before[name])
    return deltas


def server_major(conn: psycopg.Connection) -> int:
    return int(conn.execute("SHOW server_version_num").fetchone()[0]) // 10000


def relation_pages(conn: psycopg.Connection) -> dict:
    """Heap and index sizes of the jobs table, in pages."""
    rows = conn.execute(
        """SELECT c.relname, pg_relation_size(c.oid) / current_setting('block_size')::int
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = %s AND c.relname IN ('jobs', 'jobs_pkey', 'jobs_pending_idx')""",
        [SCHEMA],
    ).fetchall()
    sizes = dict(rows)
    return {
        "heap_pages": sizes.get("jobs"),
        "pkey_pages": sizes.get("jobs_pkey"),
        "partial_index_pages": sizes.get("jobs_pending_idx"),
    }


def pgstattuple_ready(conn: psycopg.Connection, may_install: bool) -> bool:
    """Whether pgstattuple can be called: installed already, or installable on a server we own."""
    installed = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pgstattuple'").fetchone()
    if installed:
        return True
    available = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pgstattuple'").fetchone()
    if not (available and may_install):
        return False
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
    except psycopg.Error:
        return False
    return True


def pgstattuple(conn: psycopg.Connection, table: str = JOBS) -> dict:
    """Exact live/dead tuple counts and free space, by reading every page (no estimate)."""
    row = conn.execute(
        "SELECT tuple_count, dead_tuple_count, dead_tuple_len, free_space, free_percent FROM pgstattuple(%s::regclass)",
        [table],
    ).fetchone()
    return dict(zip(("pgstattuple_live_tuples", "pgstattuple_dead_tuples", "pgstattuple_dead_bytes",
                     "pgstattuple_free_bytes", "pgstattuple_free_percent"), row))


PROBE_CHANNEL = "claimrace_probe"


def transactions(conn: psycopg.Connection) -> int:
    """Transactions the current database counted so far (every backend's counts flushed first)."""
    force_flush(conn)
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return int(conn.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database "
                            "WHERE datname = current_database()").fetchone()[0])


def notification_transactions(url: str, listeners: int, notifications: int, timeout_s: float = 30.0) -> dict:
    """What idle listening sessions cost in transactions: `notifications` NOTIFYs, each its own transaction, to
    `listeners` idle sessions that LISTEN, against the same NOTIFYs to none. PostgreSQL has a listening backend
    read its notifications inside a transaction of its own, so the difference counts those reads (fewer than one
    per notification where a read finds several waiting). The listeners' counts are complete once they exited."""
    # the wait for the listeners to exit polls from another database, so its own statements are not counted here
    waiter_url = conninfo.make_conninfo(url, dbname="postgres")

    def send(to: int) -> int:
        sessions = [psycopg.connect(url, autocommit=True) for _ in range(to)]
        try:
            for session in sessions:
                session.execute(f"LISTEN {PROBE_CHANNEL}")
                force_flush(session)  # its LISTEN counted before the window opens
            pids = [s.info.backend_pid for s in sessions]
            with psycopg.connect(url, autocommit=True) as sender:
                before = transactions(sender)
                for i in range(notifications):
                    sender.execute("SELECT pg_notify(%s, %s)", (PROBE_CHANNEL, str(i)))
                for session in sessions:  # each has read every one before its count is taken
                    received = sum(1 for _ in session.notifies(timeout=timeout_s, stop_after=notifications))
                    if received < notifications:
                        raise RuntimeError(f"a listener got {received} of {notifications} notifications")
                for session in sessions:
                    session.close()
                with psycopg.connect(waiter_url, autocommit=True) as waiter:
                    wait_for_backends_to_exit(waiter, pids)
                return transactions(sender) - before
        finally:
            for session in sessions:
                session.close()

    alone, listened = send(0), send(listeners)
    return {"listeners": listeners, "notifications": notifications, "transactions": listened - alone}
