"""The claim service's tables: runs (the queue), run_flips (the audit of every status flip) and finishes.

Dropped and recreated for every run of the production experiment, like the
race's jobs table, inside the harness's own schema (harness.server.schema
lists these objects as the harness's own, so its ownership check accepts them).
"""

from __future__ import annotations

import psycopg

from harness.config import SCHEMA
from harness.server import schema as server_schema

STATUSES = ("pending", "running", "done")

# The audit: the server records every flip of a run's status in the same transaction as the UPDATE, with
# who it was flipped for and the attempt (fencing token) the row carried, so duplicates are counted from what
# the database did, not from what a runner believes it won.
FLIP_FUNCTION_SQL = f"""
CREATE FUNCTION {SCHEMA}.record_run_flip() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {SCHEMA}.run_flips (run_id, old_status, new_status, runner, attempt, backend_pid, txid, flipped_at)
    VALUES (NEW.id, OLD.status, NEW.status,
            CASE WHEN NEW.status = 'done' THEN NEW.finished_by ELSE NEW.claimed_by END,
            NEW.attempt, pg_backend_pid(), txid_current(), clock_timestamp());
    RETURN NULL;
END
$$
"""

FLIP_TRIGGER_SQL = f"""
CREATE TRIGGER runs_flip_audit
    AFTER UPDATE OF status ON {SCHEMA}.runs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION {SCHEMA}.record_run_flip()
"""


def drop_run_queue(conn: psycopg.Connection) -> None:
    """Drop the service's tables (never the schema, never anything else)."""
    for table in ("runs", "run_flips", "finishes"):
        conn.execute(f"DROP TABLE IF EXISTS {SCHEMA}.{table}")
    conn.execute(f"DROP FUNCTION IF EXISTS {SCHEMA}.record_run_flip()")


def create_run_queue(conn: psycopg.Connection) -> None:
    """A fresh, empty runs queue with its audit and its finishes table (what was there is dropped)."""
    server_schema.ensure_schema(conn)
    drop_run_queue(conn)
    conn.execute(
        f"""CREATE TABLE {SCHEMA}.runs (
                id          bigserial PRIMARY KEY,
                status      text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'done')),
                spec        jsonb NOT NULL,
                secrets     bytea NOT NULL,          -- encrypted; the service decrypts per request
                enqueued_at timestamptz NOT NULL,    -- the intended enqueue time: the zero of pickup latency
                claimed_at  timestamptz,
                claimed_by  text,
                lease_until timestamptz,
                attempt     integer NOT NULL DEFAULT 0,  -- fencing token: +1 per claim
                finished_at timestamptz,
                finished_by text
            )""")
    conn.execute(f"CREATE INDEX runs_pending_idx ON {SCHEMA}.runs (id) WHERE status = 'pending'")
    conn.execute(
        f"""CREATE TABLE {SCHEMA}.run_flips (
                flip_seq    bigserial PRIMARY KEY,
                run_id      bigint NOT NULL,
                old_status  text NOT NULL,
                new_status  text NOT NULL,
                runner      text,
                attempt     integer NOT NULL,
                backend_pid int NOT NULL,
                txid        bigint NOT NULL,
                flipped_at  timestamptz NOT NULL
            )""")
    conn.execute(
        f"""CREATE TABLE {SCHEMA}.finishes (
                finish_seq  bigserial PRIMARY KEY,
                run_id      bigint NOT NULL,
                runner      text NOT NULL,
                attempt     integer NOT NULL,        -- the token the finishing runner held
                finished_at timestamptz NOT NULL
            )""")
    conn.execute(FLIP_FUNCTION_SQL)
    conn.execute(FLIP_TRIGGER_SQL)


def status_counts(conn: psycopg.Connection) -> dict[str, int]:
    counts = dict(conn.execute(f"SELECT status, count(*) FROM {SCHEMA}.runs GROUP BY status").fetchall())
    return {status: int(counts.get(status, 0)) for status in STATUSES}


def duplicate_claims(conn: psycopg.Connection) -> list[tuple[int, int]]:
    """(run id, flips to 'running') for every run the audit shows claimed more than once."""
    return [(int(run_id), int(count)) for run_id, count in conn.execute(
        f"""SELECT run_id, count(*) FROM {SCHEMA}.run_flips WHERE new_status = 'running'
            GROUP BY run_id HAVING count(*) > 1 ORDER BY run_id""")]
