"""The harness's own schema: the jobs queue, the claims audit, and nothing else.

The harness creates, resets and drops only the objects listed in OWNED_OBJECTS,
inside config.SCHEMA. A schema it did not mark as its own, or one holding any
object it did not create, is refused rather than touched.
"""

from __future__ import annotations

import re
import time

import psycopg
from psycopg import sql

from harness import config
from harness.errors import UserError

SCHEMA = config.SCHEMA

# relname -> relkind ('r' table, 'i' index, 'S' sequence): everything the harness may create.
OWNED_RELATIONS = {
    "jobs": "r",
    "jobs_pkey": "i",
    "jobs_pending_idx": "i",
    "claims": "r",
    "claims_pkey": "i",
    "claims_claim_seq_seq": "S",
}
OWNED_FUNCTIONS = {"record_claim"}
# the claim service's queue (harness.service.schema), dropped and recreated by the production experiment
OWNED_RELATIONS.update({
    "runs": "r", "runs_pkey": "i", "runs_id_seq": "S", "runs_pending_idx": "i",
    "run_flips": "r", "run_flips_pkey": "i", "run_flips_flip_seq_seq": "S",
    "finishes": "r", "finishes_pkey": "i", "finishes_finish_seq_seq": "S",
})
OWNED_FUNCTIONS.add("record_run_flip")
# the soak's jobs table (harness.experiments.soak.measure) numbers the jobs it receives from an identity column, and its
# partitioned shape makes jobs a partitioned table ('p', its key a partitioned index 'I') with partitions jobs_p<N>
OWNED_RELATIONS["jobs_id_seq"] = "S"
OWNED_KINDS = {"jobs": "rp", "jobs_pkey": "iI"}  # a relation that may be of more than one kind
OWNED_PARTITION = re.compile(r"jobs_p\d+(_pkey)?")

# The audit: the database itself records every flip to 'running', in the same
# transaction as the UPDATE, so duplicates are counted from what the server did.
AUDIT_FUNCTION_SQL = f"""
CREATE FUNCTION {SCHEMA}.record_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {SCHEMA}.claims (job_id, previous_status, backend_pid, txid, claimed_at)
    VALUES (NEW.id, OLD.status, pg_backend_pid(), txid_current(), clock_timestamp());
    RETURN NULL;
END
$$
"""

AUDIT_TRIGGER_SQL = f"""
CREATE TRIGGER jobs_claim_audit
    AFTER UPDATE OF status ON {SCHEMA}.jobs
    FOR EACH ROW WHEN (NEW.status = 'running')
    EXECUTE FUNCTION {SCHEMA}.record_claim()
"""

PARTIAL_INDEX_SQL = f"CREATE INDEX jobs_pending_idx ON {SCHEMA}.jobs (id) WHERE status = 'pending'"

LOCK_KEY = 0x636C61696D  # advisory lock: one harness per schema at a time


def _all_objects(conn: psycopg.Connection) -> list[str]:
    """Every relation, function and type in the schema."""
    return _foreign_objects(conn, owned=False)


def _owned_kinds(relname: str) -> str:
    """The kinds ('r' table, 'p' partitioned table, 'i'/'I' index, 'S' sequence) the harness may create a relation
    of this name as; "" for a name it never creates."""
    if OWNED_PARTITION.fullmatch(relname):
        return "i" if relname.endswith("_pkey") else "r"
    return OWNED_KINDS.get(relname) or OWNED_RELATIONS.get(relname) or ""


def _foreign_objects(conn: psycopg.Connection, owned: bool = True) -> list[str]:
    """Objects in the schema that the harness did not create (owned False: every object in it)."""
    found = []
    for relname, relkind in conn.execute(
        """SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = %s""",
        [SCHEMA],
    ):
        allowed = _owned_kinds(relname) if owned else ""
        if not allowed or relkind not in allowed:
            found.append(f"relation {SCHEMA}.{relname}")
    for (proname,) in conn.execute(
        "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s",
        [SCHEMA],
    ):
        if not owned or proname not in OWNED_FUNCTIONS:
            found.append(f"function {SCHEMA}.{proname}")
    for (typname,) in conn.execute(
        """SELECT t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
           WHERE n.nspname = %s AND t.typrelid = 0 AND t.typelem = 0""",
        [SCHEMA],
    ):
        found.append(f"type {SCHEMA}.{typname}")
    return found


def ensure_schema(conn: psycopg.Connection) -> None:
    """Create the schema, or check that the existing one is ours and holds only our objects."""
    row = conn.execute(
        "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = %s", [SCHEMA]
    ).fetchone()
    if row is None:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(SCHEMA)))
        conn.execute(sql.SQL("COMMENT ON SCHEMA {} IS {}").format(sql.Identifier(SCHEMA),
                                                                  sql.Literal(config.SCHEMA_MARKER)))
        return
    if row[0] != config.SCHEMA_MARKER:
        # not marked as ours: even a table named "jobs" in it belongs to someone else
        held = _all_objects(conn)
        if held:
            raise UserError(f"schema {SCHEMA} exists and was not created by claimrace "
                            f"(it holds {', '.join(held[:3])}); refusing to touch it")
        # an empty schema of that name: adopt it by marking it
        conn.execute(sql.SQL("COMMENT ON SCHEMA {} IS {}").format(sql.Identifier(SCHEMA),
                                                                  sql.Literal(config.SCHEMA_MARKER)))
        return
    foreign = _foreign_objects(conn)
    if foreign:
        raise UserError(f"schema {SCHEMA} holds objects claimrace did not create ({', '.join(foreign[:3])}); "
                        "refusing to reset it: move them elsewhere or point the harness at another database")


def acquire_run_lock(conn: psycopg.Connection) -> None:
    """Refuse to share the schema with a second harness running at the same time."""
    if not conn.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY]).fetchone()[0]:
        raise UserError(f"another claimrace harness is using schema {SCHEMA} on this server; wait for it to finish")


def drop_owned(conn: psycopg.Connection) -> None:
    """Drop the tables the harness created (never the schema, never anything else)."""
    conn.execute(f"DROP TABLE IF EXISTS {SCHEMA}.jobs")
    conn.execute(f"DROP TABLE IF EXISTS {SCHEMA}.claims")
    conn.execute(f"DROP FUNCTION IF EXISTS {SCHEMA}.record_claim()")


def create_queue(conn: psycopg.Connection, job_count: int, *, partial_index: bool = False,
                 fillfactor: int = 100, payload_bytes: int = 0, audit: bool = True, autovacuum: bool = True) -> None:
    """A fresh jobs table with job_count pending rows, vacuumed and analysed.

    A fresh table per trial, so no trial inherits another's dead tuples.
    autovacuum=False sets autovacuum_enabled = off on it (the server's autovacuum skips it).
    """
    if job_count < 1:
        raise UserError(f"job count must be at least 1, not {job_count}")
    if not 10 <= fillfactor <= 100:
        raise UserError(f"fillfactor must be between 10 and 100, not {fillfactor}")
    ensure_schema(conn)
    drop_owned(conn)
    payload_column = ", payload jsonb" if payload_bytes > 0 else ""
    conn.execute(
        f"""CREATE TABLE {SCHEMA}.jobs (
                id         bigint PRIMARY KEY,
                status     text NOT NULL DEFAULT 'pending',
                started_at timestamptz{payload_column}
            ) WITH (fillfactor = {int(fillfactor)}{'' if autovacuum else ', autovacuum_enabled = off'})"""
    )
    conn.execute(
        f"""CREATE TABLE {SCHEMA}.claims (
                claim_seq       bigserial PRIMARY KEY,
                job_id          bigint NOT NULL,
                previous_status text,
                backend_pid     int NOT NULL,
                txid            bigint NOT NULL,
                claimed_at      timestamptz NOT NULL
            )"""
    )
    conn.execute(AUDIT_FUNCTION_SQL)
    if audit:
        conn.execute(AUDIT_TRIGGER_SQL)
    if payload_bytes > 0:
        # a realistic JSON payload of about payload_bytes bytes, different per row
        filler = max(payload_bytes - 40, 1)
        conn.execute(
            f"""INSERT INTO {SCHEMA}.jobs (id, payload)
                SELECT g, jsonb_build_object('job', g, 'args', repeat(md5(g::text), %s))
                FROM generate_series(1, %s) g""",
            [max(filler // 32, 1), job_count],
        )
    else:
        conn.execute(f"INSERT INTO {SCHEMA}.jobs (id) SELECT g FROM generate_series(1, %s) g", [job_count])
    if partial_index:
        conn.execute(PARTIAL_INDEX_SQL)
    conn.execute(f"VACUUM (ANALYZE) {SCHEMA}.jobs")


def status_counts(conn: psycopg.Connection) -> dict[str, int]:
    return dict(conn.execute(f"SELECT status, count(*) FROM {SCHEMA}.jobs GROUP BY status").fetchall())


def advisory_locks_held(conn: psycopg.Connection, settle_seconds: float = 0.0) -> int:
    """Advisory locks held in this database by any session, the harness's run lock aside; with settle_seconds,
    once the count has not changed for that long (at most ten times that): a pooler releases its sessions' locks
    just after their clients left."""
    def held() -> int:
        return int(conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND NOT (objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = %s)", [LOCK_KEY]).fetchone()[0])

    count, since, deadline = held(), time.monotonic(), time.monotonic() + 10 * settle_seconds
    while time.monotonic() - since < settle_seconds and time.monotonic() < deadline:
        time.sleep(0.05)
        now = held()
        if now != count:
            count, since = now, time.monotonic()
    return count


def audit_rows(conn: psycopg.Connection) -> list[tuple]:
    """The audit as the server wrote it: (claim_seq, job_id, previous_status, backend_pid, txid, claimed_at)."""
    return conn.execute(
        f"SELECT claim_seq, job_id, previous_status, backend_pid, txid, claimed_at FROM {SCHEMA}.claims ORDER BY claim_seq"
    ).fetchall()


def table_activity(conn: psycopg.Connection) -> dict:
    """What the server's statistics say happened to the jobs table: autovacuum runs, dead tuples, HOT updates.

    Read after the workers disconnected (each backend flushes its counters on
    exit); autovacuum reports a run when it ends, so one still going is
    reported as in progress.
    """
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'claimrace-worker-%%'").fetchone()[0]:
        time.sleep(0.02)  # a backend flushes its counters as it exits, just after its client closed
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        """SELECT s.autovacuum_count, s.autoanalyze_count, s.vacuum_count, s.n_dead_tup, s.n_live_tup,
                  s.n_tup_upd, s.n_tup_hot_upd, s.last_autovacuum, s.last_autoanalyze,
                  coalesce(c.reloptions::text[], '{}'),
                  EXISTS (SELECT 1 FROM pg_stat_progress_vacuum v WHERE v.relid = c.oid)
           FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
           WHERE s.schemaname = %s AND s.relname = 'jobs'""", [SCHEMA]).fetchone()
    if row is None:
        return {}
    keys = ("autovacuum_runs", "autoanalyze_runs", "manual_vacuums", "dead_tuples", "live_tuples", "updates",
            "hot_updates", "last_autovacuum", "last_autoanalyze", "reloptions", "vacuum_in_progress")
    facts = dict(zip(keys, row))
    facts["autovacuum_enabled"] = "autovacuum_enabled=off" not in facts["reloptions"]
    for key in ("last_autovacuum", "last_autoanalyze"):
        facts[key] = facts[key].isoformat() if facts[key] else None
    return facts
