"""What a claim costs inside the server: EXPLAIN (ANALYZE, BUFFERS) at queue fill levels.

For every queue size, fill level and index setup, fresh jobs tables are built
and their first k ids (the consumed prefix) are flipped to 'done' by one committed
UPDATE, followed by the ANALYZE autoanalyze would run. 'done', not 'running': the
head of a queue that has been draining for a while is finished work, and any
status other than 'pending' is filtered the same way. Autovacuum is switched off
for these tables, so every change between two states is the claims' own doing or
our VACUUM's. The claims are explained in these table states (TABLE_STATES):

first_scan
    the very first EXPLAIN ANALYZE after the prefix flip, with no other session
    holding a snapshot: what the first claim after a real drain pays. That scan
    finds the prefix's old row versions and their index entries all in place;
    because nothing older needs them, it marks the index entries it steps over
    dead and prunes the heap pages it visits. Only one scan of a table can be its
    first, so every repetition gets a fresh table of its own.
steady
    the scans after that first one, still with no other session holding a
    snapshot and before any VACUUM: what the later claims of a drained queue pay
    until vacuum comes. The repetitions are consecutive scans of one table,
    right after its own first scan.
held_snapshot
    the same drain while a second session holds a REPEATABLE READ snapshot taken
    before the prefix was flipped: what a long-running transaction does to the
    queue. The old versions stay visible to it, so no scan may mark their index
    entries dead or prune them, and every claim keeps paying what the first one
    did (or more). Measured on a table of its own.
vacuumed
    the held_snapshot table once the snapshot is released and VACUUM (ANALYZE)
    has run: what autovacuum leaves behind.
after_claims
    at the reference point only: a fresh table whose prefix was consumed by the
    skip_locked claim itself, one committed claim at a time on one connection,
    then ANALYZE. The states above flip the prefix with one bulk UPDATE (the
    original's figures match that state, so it likely did the same); claims made
    one at a time are largely HOT updates, and each claim's scan prunes the pages
    and marks dead the index entries it steps over, so this queue is not the bulk
    one. The server's counters (updates, HOT updates, dead tuples, pages) after
    each kind of drain are stored beside the plans (results.drain_counters).
after_race
    at the reference point only: the same, with the prefix claimed by
    RACE_DRAIN_WORKERS connections racing, as a queue with several workers is
    drained; each claim's scan then also steps over rows other claims hold.

Every repetition records other_snapshot_backends: how many other backends of
the server had a snapshot (pg_stat_activity.backend_xmin set) just before and
just after its EXPLAIN, the larger of the two. The server's own evidence that
nothing held the horizon back: it is 0 for first_scan and steady, and at least 1
(the holder) for held_snapshot.

Every EXPLAIN ANALYZE runs in a transaction that is rolled back, so the table
keeps its state (the claim's own aborted row version stays behind as a dead
tuple until the next vacuum; the churn measurements never see it, because they
build their own tables and reset their counters). The tables have no audit
trigger here: the plans are about the claim statement alone.

EXPLAIN's times are wall-clock, so on a busy machine they include time the
backend spent waiting for a CPU. With the embedded server (a process of this
host) each repetition also records the backend's own CPU time and its
run-queue wait from /proc/<pid>/schedstat.

At one reference point (10,000 jobs if measured, the fill level nearest half
drained) every statement of every strategy is explained as well, the guarded
UPDATE with the id its pick returned: its plan shows the status re-check as a
Filter on the primary-key Index Scan.

Public API (what the notebooks call)::

    PlansParameters(job_counts=(10_000, 100_000), consumed_fractions=(0, .25, .5, .75, .99), repetitions=5)
    measure_plans(db, parameters, run_id, progress) -> Measured   # through harness.experiments.registry
    Run(run_dir).summary -> DataFrame                # one row per point and statement (medians)
    Run(run_dir).table("repetitions") -> DataFrame   # one row per EXPLAIN ANALYZE
    sections.plans.plan_texts(Run(run_dir)) -> dict[str, str]   # the article's reader of the plans' texts
    explain.explain(conn, sql, params=(), fmt="json")   # one rolled-back EXPLAIN (ANALYZE, BUFFERS)
    TABLE_STATES                            # (name, label, description) of each table state, in order

Stored as data/plans/<run_id>/{points,repetitions,explains}.parquet and manifest.json.
"""

from __future__ import annotations

import json
import statistics
import time
from contextlib import closing
from dataclasses import dataclass

import pandas as pd
from tqdm.auto import tqdm

from harness.errors import UserError
from harness.experiments.plans import drains as plan_drains
from harness.experiments.contract import Kind
from harness.experiments.contract import Measured, Option, check_each, Parameters, as_floats, as_int, as_ints, fraction_list, \
    int_list, setting
from harness.experiments.plans.explain import SKIP_LOCKED, PlannedStatement, explain, explain_on_cpu, plan_metrics, \
    strategy_statements
from harness.server import database, schema
from harness.server.activity import server_is_local
from harness.server.pgstats import relation_pages
from harness.storage import Run
from harness.experiments.plans.outcomes import (AFTER_CLAIMS, AFTER_RACE, EVERY_POINT_STATES, FIRST_SCAN, HELD_SNAPSHOT,
                                  RACE_DRAIN_WORKERS, REFERENCE_ONLY_STATES, STEADY, TABLE_STATE_NAMES, TABLE_STATES,
                                  UNHELD_STATES, VACUUMED)


# What `plans --json` calls each state: the bulk UPDATE's states say how their prefix was consumed.
JSON_STATE_NAMES = {FIRST_SCAN: "after_bulk_update", STEADY: "after_bulk_update_later_scans",
                    HELD_SNAPSHOT: "after_bulk_update_held_snapshot", VACUUMED: "after_bulk_update_vacuumed",
                    AFTER_CLAIMS: "after_claims", AFTER_RACE: "after_race"}
DEFAULT_JOB_COUNTS = (10_000, 100_000)
DEFAULT_CONSUMED_FRACTIONS = (0, 0.25, 0.5, 0.75, 0.99)
DEFAULT_REPETITIONS = 5
REFERENCE_JOB_COUNT = 10_000
MAX_JOB_COUNT = 10_000_000


# --------------------------------------------------------------------------- the sweep


def consumed_jobs(job_count: int, fraction: float) -> int:
    return int(round(job_count * fraction))


@dataclass(frozen=True)
class PlansParameters(Parameters):
    """Which queue sizes and fill levels to explain the claims at, and how often."""

    job_counts: tuple = setting(DEFAULT_JOB_COUNTS, as_ints, Option("--jobs", "queue sizes, comma-separated", int_list))
    consumed_fractions: tuple = setting(DEFAULT_CONSUMED_FRACTIONS, as_floats, Option(
        "--consumed", "fractions of the queue already consumed, comma-separated", fraction_list))
    repetitions: int = setting(DEFAULT_REPETITIONS, as_int, Option(
        "--repetitions", "EXPLAIN ANALYZE runs per point; times are their median", int))

    def check(self) -> None:
        check_each(self.job_counts, "job count", 1, MAX_JOB_COUNT, bounds=f"1 and {MAX_JOB_COUNT:,}")
        check_each(self.consumed_fractions, "consumed fraction", 0, 1)
        if self.repetitions < 1:
            raise UserError(f"repetitions must be at least 1, not {self.repetitions}")


def reference_point(job_counts, consumed_fractions) -> tuple[int, float]:
    """Where every strategy's statements are explained: 10,000 jobs if measured, the fill nearest half drained."""
    job_count = REFERENCE_JOB_COUNT if REFERENCE_JOB_COUNT in job_counts else min(job_counts)
    return job_count, min(consumed_fractions, key=lambda f: (abs(f - 0.5), f))


def first_pending_id(job_count: int, consumed: int) -> int | None:
    """The id a pick finds after the prefix flip (ids run 1..job_count), without a scan that would change the table."""
    return consumed + 1 if consumed < job_count else None


# Other backends of this server holding a snapshot: any of them can keep the prefix's old versions needed.
OTHER_SNAPSHOTS_SQL = "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_xmin IS NOT NULL"


def other_snapshot_backends(conn) -> int:
    """How many other backends hold a snapshot now (each autocommit statement reads pg_stat_activity afresh)."""
    return int(conn.execute(OTHER_SNAPSHOTS_SQL).fetchone()[0])


class _Recorder:
    """Collects the repetition rows and captured plans of one run."""

    def __init__(self, local_backend: bool):
        self.local_backend = local_backend
        self.repetition_rows: list[dict] = []
        self.explain_rows: list[dict] = []

    def json_plan(self, conn, keys: dict, planned: PlannedStatement, params: tuple, repetition: int) -> None:
        before = other_snapshot_backends(conn)
        document, cpu_ns, wait_ns = explain_on_cpu(conn, planned.sql, params, "json", self.local_backend)
        others = max(before, other_snapshot_backends(conn))
        self.repetition_rows.append({**keys, "repetition": repetition, **plan_metrics(document),
                                     "backend_cpu_ms": None if cpu_ns is None else cpu_ns / 1e6,
                                     "backend_wait_ms": None if wait_ns is None else wait_ns / 1e6,
                                     "other_snapshot_backends": others})
        self.explain_rows.append({**keys, "repetition": repetition, "format": "json", "plan": json.dumps(document)})

    def text_plan(self, conn, keys: dict, planned: PlannedStatement, params: tuple, repetition: int) -> None:
        self.explain_rows.append({**keys, "repetition": repetition, "format": "text",
                                  "plan": explain(conn, planned.sql, params, "text")})


def _keys(point: dict, state: str, conn, planned: PlannedStatement, job_id: int | None) -> dict:
    return {**point, "table_state": state, **relation_pages(conn), "strategy": planned.strategy,
            "statement": planned.statement, "job_id_param": job_id if planned.needs_job_id else None}


def _measure_state(conn, point: dict, state: str, job_id: int | None, statements: list[PlannedStatement],
                   repetitions: int, recorder: _Recorder) -> None:
    """Every statement on the table as it stands: `repetitions` JSON plans, then one text plan."""
    for planned in statements:
        if planned.needs_job_id and job_id is None:
            continue  # nothing pending: a pick found no id to claim
        params = (job_id,) if planned.needs_job_id else ()
        keys = _keys(point, state, conn, planned, job_id)
        for repetition in range(repetitions):
            recorder.json_plan(conn, keys, planned, params, repetition)
        recorder.text_plan(conn, keys, planned, params, repetitions)


def _measure_after_drain(conn, point: dict, job_id: int | None, statements: list[PlannedStatement],
                         repetitions: int, recorder: _Recorder) -> None:
    """first_scan and steady: fresh drained tables, no other session holding a snapshot.

    Each statement gets `repetitions` fresh tables whose first scan is its JSON
    first_scan repetition, then one more fresh table whose first scan is the text
    plan; on that last table the steady repetitions follow (scans 2, 3, ...) and
    the steady text plan.
    """
    job_count, consumed, partial_index = point["job_count"], point["consumed_jobs"], point["partial_index"]
    for planned in statements:
        if planned.needs_job_id and job_id is None:
            continue
        params = (job_id,) if planned.needs_job_id else ()
        for repetition in range(repetitions):
            plan_drains.drained_table(conn, job_count, consumed, partial_index)
            recorder.json_plan(conn, _keys(point, FIRST_SCAN, conn, planned, job_id), planned, params, repetition)
        plan_drains.drained_table(conn, job_count, consumed, partial_index)
        recorder.text_plan(conn, _keys(point, FIRST_SCAN, conn, planned, job_id), planned, params, repetitions)
        keys = _keys(point, STEADY, conn, planned, job_id)
        for repetition in range(repetitions):
            recorder.json_plan(conn, keys, planned, params, repetition)
        recorder.text_plan(conn, keys, planned, params, repetitions)


def _measure_after_claims(conn, db: database.Database, point: dict, statements, repetitions: int,
                          recorder: _Recorder) -> list[dict]:
    """after_claims and after_race: the prefix consumed by real claims, on one connection and by a race; and the
    server's counters after each kind of drain, with the first pending id each left (the prefix's end)."""
    job_count, consumed, partial_index = point["job_count"], point["consumed_jobs"], point["partial_index"]
    plan_drains.drained_table(conn, job_count, consumed, partial_index)
    counters = [plan_drains.drain_counters(conn, "bulk_update", partial_index, consumed)]
    for state, drain, claim_prefix in ((AFTER_CLAIMS, "claims", lambda: plan_drains.claim_prefix(conn, consumed)),
                                       (AFTER_RACE, "race", lambda: plan_drains.race_prefix(db, consumed))):
        plan_drains.fresh_table(conn, job_count, partial_index)
        claimed = claim_prefix()
        first = plan_drains.first_pending(conn)
        counters.append({**plan_drains.drain_counters(conn, drain, partial_index, claimed), "first_pending_id": first})
        # the claims took the lowest ids, as the bulk UPDATE did: the first pending id is the same
        _measure_state(conn, point, state, first, statements, repetitions, recorder)
    counters[0]["first_pending_id"] = first_pending_id(job_count, consumed)
    return [{**c, "job_count": job_count, "prefix_jobs": consumed} for c in counters]


def _measure_point(conn, db: database.Database, job_count: int, fraction: float, partial_index: bool, statements,
                   repetitions: int, recorder: _Recorder, by_claims: bool = False) -> list[dict]:
    consumed = consumed_jobs(job_count, fraction)
    point = {"job_count": job_count, "consumed_fraction": float(fraction), "consumed_jobs": consumed,
             "partial_index": partial_index}
    job_id = first_pending_id(job_count, consumed)
    counters = _measure_after_claims(conn, db, point, statements, repetitions, recorder) if by_claims else []
    _measure_after_drain(conn, point, job_id, statements, repetitions, recorder)

    # held_snapshot: the holder connects for this state only, so it is no other state's neighbour
    plan_drains.fresh_table(conn, job_count, partial_index)
    with closing(db.connect(application_name="claimrace-snapshot")) as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT 1")  # takes the snapshot that keeps the prefix's old versions in place
        try:
            plan_drains.flip_prefix(conn, consumed)
            _measure_state(conn, point, HELD_SNAPSHOT, job_id, statements, repetitions, recorder)
        finally:
            holder.execute("ROLLBACK")
    conn.execute(f"VACUUM (ANALYZE) {schema.SCHEMA}.jobs")
    _measure_state(conn, point, VACUUMED, job_id, statements, repetitions, recorder)
    return counters


NULLABLE_INT_COLUMNS = ("job_id_param", "heap_pages", "pkey_pages", "partial_index_pages")
POINT_KEYS = ("job_count", "consumed_fraction", "consumed_jobs", "partial_index", "table_state", "strategy",
              "statement")


def aggregate(repetitions: pd.DataFrame) -> pd.DataFrame:
    """One row per point and statement: medians over the repetitions, with the spread of the buffer counts."""
    rows = []
    for keys, group in repetitions.groupby(list(POINT_KEYS), sort=False, dropna=False):
        first = group.iloc[0]
        row = dict(zip(POINT_KEYS, keys))
        row.update({
            "repetitions": int(len(group)),
            "job_id_param": first["job_id_param"],
            "heap_pages": first["heap_pages"],
            "pkey_pages": first["pkey_pages"],
            "partial_index_pages": first["partial_index_pages"],
            "top_node": first["top_node"],
            "inner_node": first["inner_node"],
            "index_used": first["index_used"],
            "inner_filter": first["inner_filter"],
            "rows_returned": int(first["rows_returned"]),
        })
        for column in ("shared_hit_blocks", "shared_read_blocks", "shared_dirtied_blocks", "inner_shared_hit_blocks",
                       "inner_shared_read_blocks", "rows_removed_by_filter", "planning_shared_hit_blocks"):
            row[column] = int(round(statistics.median(group[column])))
        row["other_snapshot_backends_max"] = int(group["other_snapshot_backends"].max())
        row["shared_hit_blocks_min"] = int(group["shared_hit_blocks"].min())
        row["shared_hit_blocks_max"] = int(group["shared_hit_blocks"].max())
        row["execution_ms"] = float(statistics.median(group["execution_ms"]))
        row["execution_ms_min"] = float(group["execution_ms"].min())
        row["execution_ms_max"] = float(group["execution_ms"].max())
        row["planning_ms"] = float(statistics.median(group["planning_ms"]))
        for column in ("backend_cpu_ms", "backend_wait_ms"):
            values = group[column].dropna()
            row[column] = float(statistics.median(values)) if len(values) else None
        rows.append(row)
    frame = pd.DataFrame(rows)
    for column in NULLABLE_INT_COLUMNS:
        frame[column] = frame[column].astype("Int64")
    return frame


def plan_checks(points: pd.DataFrame, repetitions: pd.DataFrame, parameters: PlansParameters,
                counters: list[dict] = ()) -> dict:
    """What must hold for a plans run to count.

    every_point_measured: the skip_locked claim at every size, fill level, index setting and table state.
    every_claim_found_a_job: where jobs were pending, every explained skip_locked claim returned one row.
    snapshot_holder_seen: every held_snapshot repetition saw the holder's snapshot (the count can see one).
    drains_took_the_prefix: every drain by claims (one connection or a race) claimed exactly the prefix, as the
    bulk UPDATE flips it: as many jobs, and the first pending id right after them.
    """
    claims = points[points["strategy"] == "skip_locked"]
    # every state at every point, and the drains by claims at the reference point with and without the index
    expected = (len(set(parameters.job_counts)) * 2 * len(set(parameters.consumed_fractions)) * len(EVERY_POINT_STATES)
                + 2 * len(REFERENCE_ONLY_STATES))
    pending = claims[claims["consumed_jobs"] < claims["job_count"]]
    held = repetitions[repetitions["table_state"] == HELD_SNAPSHOT]
    checks = {
        "every_point_measured": bool(len(claims.drop_duplicates(list(POINT_KEYS))) == expected),
        "every_claim_found_a_job": bool((pending["rows_returned"] == 1).all()),
        "snapshot_holder_seen": bool(len(held) > 0 and (held["other_snapshot_backends"] >= 1).all()),
        "drains_took_the_prefix": all(c["consumed_jobs"] == c["prefix_jobs"]
                                      and c["first_pending_id"] == first_pending_id(c["job_count"], c["prefix_jobs"])
                                      for c in counters),
    }
    checks["passed"] = all(checks.values())
    return checks


def measure_plans(db: database.Database, parameters: PlansParameters, run_id: str, progress: bool = True) -> Measured:
    """Explain the claims over the whole matrix on an open server.

    Drops and recreates claimrace.jobs and claimrace.claims several times for every point.
    """
    job_counts, consumed_fractions = list(parameters.job_counts), list(parameters.consumed_fractions)
    repetitions = parameters.repetitions
    began = time.monotonic()
    reference = reference_point(job_counts, consumed_fractions)
    every_statement = strategy_statements()
    counters: list[dict] = []
    with closing(db.connect()) as conn:
        # only an embedded server's backends are processes of this host whose /proc we can read
        local_backend = server_is_local(conn)  # only then is /proc/<backend pid> the backend
        recorder = _Recorder(local_backend)
        points = [(c, p, f) for c in job_counts for p in (False, True) for f in consumed_fractions]
        bar = tqdm(points, desc="plans", unit="point", disable=not progress)
        for job_count, partial_index, fraction in bar:
            bar.set_postfix_str(f"{job_count:,} jobs, {fraction:.0%} consumed, "
                                f"{'partial index' if partial_index else 'no index'}")
            at_reference = (job_count, fraction) == reference
            statements = every_statement if at_reference else [SKIP_LOCKED]
            counters += _measure_point(conn, db, job_count, fraction, partial_index, statements, repetitions, recorder,
                                       by_claims=at_reference)
    raw = pd.DataFrame(recorder.repetition_rows)
    for column in NULLABLE_INT_COLUMNS:
        raw[column] = raw[column].astype("Int64")
    points_frame = aggregate(raw)
    raw.insert(0, "run_id", run_id)
    points_frame.insert(0, "run_id", run_id)
    explains = pd.DataFrame(recorder.explain_rows)
    for column in NULLABLE_INT_COLUMNS:
        explains[column] = explains[column].astype("Int64")
    explains.insert(0, "run_id", run_id)
    unheld = raw[raw["table_state"].isin(UNHELD_STATES)]
    return Measured(
        tables={"points": points_frame, "repetitions": raw, "explains": explains},
        procedure={
            "statements": {p.label: p.sql for p in every_statement},
            "partial_index": [False, True],
            "consumed_status": plan_drains.CONSUMED_STATUS,
            "consume_prefix_sql": plan_drains.CONSUME_PREFIX_SQL,
            "drain": "a fresh table (autovacuum off for it), the prefix flipped by one committed UPDATE, then ANALYZE; "
                     "after_claims: the prefix claimed by the skip_locked claim one job at a time, then ANALYZE; "
                     f"after_race: the same claim by {RACE_DRAIN_WORKERS} connections racing, then ANALYZE",
            "table_states": {state.name: state.description for state in TABLE_STATES},
            "other_snapshot_backends": "per repetition: other backends with pg_stat_activity.backend_xmin set just "
                                       "before or just after the EXPLAIN (the larger count)",
            "explain": "EXPLAIN (ANALYZE, BUFFERS[, FORMAT JSON]) inside BEGIN ... ROLLBACK; parameters bound "
                       "through the extended protocol",
            "audit_trigger": False,
            "aggregation": "median over repetitions; shared_hit_blocks_min/max keep the spread",
            "backend_cpu": "backend_cpu_ms and backend_wait_ms: the backend's time on a CPU and waiting for one "
                           "during each EXPLAIN, from /proc/<pid>/schedstat (embedded server only)",
        },
        checks=plan_checks(points_frame, raw, parameters, counters),
        results={
            "reference_point": {"job_count": reference[0], "consumed_fraction": reference[1]},
            # the server's counters after the prefix was consumed by one bulk UPDATE and by claims one at a time
            "drain_counters": counters,
            "table_states": list(TABLE_STATE_NAMES),
            "backend_cpu_measured": local_backend,
            # the first and later scans claim no other snapshot was held; this is the server's count of them
            "unheld_other_snapshot_backends_max": int(unheld["other_snapshot_backends"].max()) if len(unheld) else 0,
            "wall_seconds": time.monotonic() - began,
        })


# --------------------------------------------------------------------------- reading runs back


def summarise(run: Run) -> pd.DataFrame:
    """The `points` table: one row per point and statement, medians of execution and planning time, buffer counts,
    index used. (`repetitions`: one row per EXPLAIN ANALYZE, the raw values behind them; `explains`: every
    captured plan, JSON and text, with its point.)"""
    return run.table("points")


# --------------------------------------------------------------------------- command line

JSON_COLUMNS = ("job_count", "consumed_fraction", "consumed_jobs", "partial_index", "table_state", "strategy",
                "statement", "shared_hit_blocks", "shared_read_blocks", "inner_shared_hit_blocks",
                "rows_removed_by_filter", "execution_ms", "planning_ms", "backend_cpu_ms", "index_used", "heap_pages",
                "other_snapshot_backends_max")


def _print_points(frame: pd.DataFrame, as_json: bool) -> None:
    if as_json:
        for record in frame.to_dict(orient="records"):
            state = JSON_STATE_NAMES.get(record["table_state"], record["table_state"])
            buffers = int(record["shared_hit_blocks"]) + int(record["shared_read_blocks"])
            print(json.dumps({"state": state, "buffers": buffers,
                              **{k: _plain(record[k]) for k in (*JSON_COLUMNS, "run_id")}}))
        return
    shown = frame[(frame["strategy"] == "skip_locked")]
    columns = ["job_count", "consumed_fraction", "partial_index", "table_state", "shared_hit_blocks",
               "rows_removed_by_filter", "execution_ms", "backend_cpu_ms", "index_used", "other_snapshot_backends_max"]
    print(shown.loc[:, columns].to_string(index=False, float_format=lambda v: f"{v:,.3f}"))


def _plain(value):
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    return value


def show_runs(paths, as_json: bool) -> None:
    """What `python -m harness plans` prints: the skip_locked claim's figures per point, or every point as JSON."""
    for path in paths:
        _print_points(Run(path).summary, as_json)
        if not as_json:
            print(f"stored in {path}")


__all__ = ["TABLE_STATES", "TABLE_STATE_NAMES", "PlansParameters", "measure_plans", "plan_checks", "summarise"]


# The kind as the store, the command line and the report see it (harness.experiments.registry).
KIND = Kind("plans", PlansParameters, measure_plans, summarise,
            help="EXPLAIN (ANALYZE, BUFFERS) of the claims at queue fill levels, with and without the partial index "
                 "(drops and recreates claimrace.jobs and claimrace.claims several times for every point)",
            show=show_runs, sections=("plans",),
            workers=lambda parameters: 1)  # the session that holds a snapshot
