"""The drains that make the plans' table states: a fresh table, its prefix consumed by one bulk UPDATE, by
claims one at a time or by a race of connections; and the server's counters after each kind of drain.
"""

from __future__ import annotations

import threading
import time
from contextlib import closing

from harness.experiments.plans.explain import SKIP_LOCKED
from harness.server import database, schema
from harness.server.pgstats import relation_pages, table_counters
from harness.experiments.plans.outcomes import RACE_DRAIN_WORKERS

CONSUMED_STATUS = "done"

# The setup step that stands for the jobs a drain has already consumed (not a claim: nothing races it).
CONSUME_PREFIX_SQL = f"UPDATE {schema.SCHEMA}.jobs SET status = '{CONSUMED_STATUS}', started_at = now() WHERE id <= %s"


def fresh_table(conn, job_count: int, partial_index: bool) -> None:
    """A fresh table of pending jobs that autovacuum leaves alone, so the states change only by our hand."""
    schema.create_queue(conn, job_count, partial_index=partial_index, audit=False)
    conn.execute(f"ALTER TABLE {schema.SCHEMA}.jobs SET (autovacuum_enabled = false)")


def flip_prefix(conn, consumed: int) -> None:
    """The drain: one committed UPDATE of the first `consumed` ids, then what autoanalyze would do first."""
    conn.execute(CONSUME_PREFIX_SQL, [consumed])
    conn.execute(f"ANALYZE {schema.SCHEMA}.jobs")


def drained_table(conn, job_count: int, consumed: int, partial_index: bool) -> None:
    fresh_table(conn, job_count, partial_index)
    flip_prefix(conn, consumed)


def claim_prefix(conn, consumed: int) -> int:
    """The drain by claims: the skip_locked claim, prepared and run `consumed` times on this connection, each in
    its own transaction, then what autoanalyze would do first. Returns the jobs claimed."""
    claimed = 0
    for _ in range(consumed):
        row = conn.execute(SKIP_LOCKED.sql, prepare=True).fetchone()
        if row is None:
            break
        claimed += 1
    conn.execute(f"ANALYZE {schema.SCHEMA}.jobs")
    return claimed


def race_prefix(db: database.Database, consumed: int, workers: int = RACE_DRAIN_WORKERS) -> int:
    """The drain by a race: `workers` connections, each in its own thread, run the skip_locked claim (each claim
    committed) until `consumed` claims are taken between them, then ANALYZE. A claim is only made on a ticket
    below `consumed`, so the race takes exactly the prefix: a claim takes the lowest pending id nobody holds, and
    every lower id is held by a claim that commits. Returns the jobs claimed."""
    tickets = iter(range(consumed))
    handing_out = threading.Lock()
    claimed: list[int] = []
    failures: list[BaseException] = []

    pids: list[int] = []

    def claimer() -> None:
        try:
            with closing(db.connect()) as own:
                own.autocommit = True
                pids.append(own.info.backend_pid)
                while True:
                    with handing_out:
                        if next(tickets, None) is None:
                            return
                    row = own.execute(SKIP_LOCKED.sql, prepare=True).fetchone()
                    if row is not None:
                        claimed.append(int(row[0]))
        except BaseException as exc:  # reported below: a drain that stopped short is not the state described
            failures.append(exc)

    threads = [threading.Thread(target=claimer, name=f"race-drain-{n}") for n in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    with closing(db.connect()) as conn:
        wait_gone(conn, pids)
        conn.execute(f"ANALYZE {schema.SCHEMA}.jobs")
    return len(claimed)


GONE_WITHIN_S = 10.0


def wait_gone(conn, pids: list[int]) -> None:
    """Wait until the drain's backends have exited, up to GONE_WITHIN_S: a backend reports its table counters as it
    exits, after its client has closed, so counters read sooner can miss its last claims (a fresh clone's test
    run read 4,742 updates for 5,000 claims)."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while pids and time.monotonic() < deadline:
        if not conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [pids]).fetchone()[0]:
            return
        time.sleep(0.05)


def first_pending(conn) -> int | None:
    row = conn.execute(f"SELECT min(id) FROM {schema.SCHEMA}.jobs WHERE status = 'pending'").fetchone()
    return None if row is None or row[0] is None else int(row[0])


def drain_counters(conn, drain: str, partial_index: bool, consumed: int) -> dict:
    """The server's account of a drain: the table's updates, HOT updates and dead tuples, and its pages."""
    counters = table_counters(conn)
    return {"drain": drain, "partial_index": partial_index, "consumed_jobs": consumed,
            **{name: None if counters.get(name) is None else int(counters[name])
               for name in ("n_tup_upd", "n_tup_hot_upd", "n_dead_tup")},
            **relation_pages(conn)}
