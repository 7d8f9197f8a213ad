"""What the claims do to the table: HOT updates, dead tuples, page pruning, size.

Two experiments, read from the server's own counters (pg_stat_user_tables,
after every writer has flushed; see pgstats.py):

matrix
    fillfactor x partial index x row width. For each setup the queue is built
    fresh with `updates` jobs (default 1,000), vacuumed, its counters reset,
    and then drained by the skip_locked claim: once by one connection claiming
    in a loop (sequential), and once per race worker count through the
    concurrent race (harness.experiments.race.workers.run_race). Draining a queue of exactly
    `updates` jobs makes every mode perform the same number of status flips.
    A third mode, bulk, flips them all with one UPDATE in one transaction and
    sets only the status, as the study's skip_locked statement does: no page
    can be pruned between two of its updates and the row does not grow. That
    is the situation the study's HOT figures (0 and 448 of 1,000) describe.
    Autovacuum is switched off for these tables (ALTER TABLE ... SET
    (autovacuum_enabled = off)) so the counters are the claims' doing alone;
    autovacuum's part is what the pruning experiment measures.
pruning
    the plain table at default settings (fillfactor 100, no index, no payload):
    5,002 sequential claims on 10,000 jobs, then n_dead_tup right away, after
    the statistics settle, and after one reader has visited every page; once
    with autovacuum on (the server default) and once with it switched off for
    the table. "Settled" means: no counter changed for `quiet_seconds`, and,
    when the table qualifies for autovacuum or autoanalyze, autovacuum has
    visited it (or `settle_seconds` passed; the default outlasts
    autovacuum_naptime, so autovacuum gets its turn).

How n_dead_tup moves: every update adds one dead version; page pruning frees
dead versions as pages are read, but subtracts from n_dead_tup only the
heap-only (HOT) versions it frees, because a pruned non-HOT version leaves a
dead line pointer that only VACUUM can remove (its index entries point at it).
An ANALYZE (auto or not) replaces n_dead_tup with the dead rows it counts.

Public API::

    ChurnParameters(fillfactors=(100, 90, 70, 50), payload_bytes=(0, 400), partial_index=(False, True),
                    updates=1000, race_worker_counts=(4, 16), bulk=True, pruning=True, pruning_job_count=10_000,
                    pruning_claims=5_002, settle_seconds=75, quiet_seconds=5)
    measure_churn(db, parameters, run_id, progress) -> Measured   # through harness.experiments.registry
    Run(run_dir).summary -> DataFrame                 # one row per setup and mode (sequential, race x N, bulk)
    Run(run_dir).table("pruning", absent_ok=True)   # one row per autovacuum arm and phase

Stored as data/churn/<run_id>/{matrix,pruning}.parquet and manifest.json.
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import closing
from dataclasses import asdict, dataclass

import pandas as pd
import pyarrow as pa
from tqdm.auto import tqdm

from harness.errors import UserError
from harness.experiments.contract import Kind
from harness.experiments.contract import (Measured, Option, check_each, Parameters, as_bool, as_bools, as_float, as_int, as_ints,
                                          int_list, int_list_or_none, setting)
from harness.experiments.limits import check_race_size
from harness.experiments.race.workers import run_race
from harness.server import database, pgstats, schema
from harness.storage import Run
from harness.claims.strategies import get_strategy
from harness.claims.steps import EMPTY, ERROR, WON

STRATEGY = "skip_locked"
DEFAULT_FILLFACTORS = (100, 90, 70, 50)
DEFAULT_PAYLOAD_BYTES = (0, 400)
DEFAULT_PARTIAL_INDEX = (False, True)
DEFAULT_UPDATES = 1000
DEFAULT_RACE_WORKER_COUNTS = (4, 16)
PRUNING_JOB_COUNT = 10_000
PRUNING_CLAIMS = 5_002
SETTLE_SECONDS = 75.0  # longer than the default autovacuum_naptime (1 min)
QUIET_SECONDS = 5.0
MAX_PAYLOAD_BYTES = 1500  # stays below the TOAST threshold: the row itself carries it
RACE_TIMEOUT_SECONDS = 300.0
JOBS = f"{schema.SCHEMA}.jobs"
# Not a claim (nothing races it): every row flipped at once, status only, for the bulk mode.
BULK_UPDATE_SQL = f"UPDATE {JOBS} SET status = 'running' WHERE status = 'pending'"


@dataclass(frozen=True)
class TableSetup:
    fillfactor: int = 100
    payload_bytes: int = 0
    partial_index: bool = False


# --------------------------------------------------------------------------- building blocks


def prepare_table(conn, job_count: int, setup: TableSetup, autovacuum: bool) -> dict:
    """A fresh, vacuumed queue with zeroed counters; returns the baseline reading."""
    schema.create_queue(conn, job_count, partial_index=setup.partial_index, fillfactor=setup.fillfactor,
                        payload_bytes=setup.payload_bytes)
    if not autovacuum:
        conn.execute(f"ALTER TABLE {JOBS} SET (autovacuum_enabled = off)")
    reset = pgstats.reset_table_counters(conn)
    conn.execute(f"VACUUM {JOBS}")  # after the reset: sets n_live_tup and n_dead_tup from the table again
    baseline = pgstats.table_counters(conn)
    return {"counters": baseline, "pages": pgstats.relation_pages(conn), "counters_reset": reset}


def claim_sequentially(url: str, strategy_name: str, max_claims: int | None) -> tuple[int, int, float]:
    """One connection claims in a loop until the queue is empty or max_claims were won.

    Returns (claims won, backend pid, seconds). The backend's counters are
    flushed before the connection closes.
    """
    strategy = get_strategy(strategy_name)
    won = 0
    with closing(database.connect(url, application_name="claimrace-sequential")) as conn:
        pgconn = conn.pgconn
        strategy.prepare(pgconn)
        began = time.monotonic()
        while max_claims is None or won < max_claims:
            outcome, _ = strategy.claim(pgconn)
            if outcome == WON:
                won += 1
            elif outcome == EMPTY:
                break
            elif outcome == ERROR:
                raise RuntimeError(f"claim failed: {pgconn.get_error_message().decode(errors='replace').strip()}")
        seconds = time.monotonic() - began
        pid = pgconn.backend_pid
        pgstats.force_flush(conn)
    return won, pid, seconds


def _audit_count(conn) -> int:
    return int(conn.execute(f"SELECT count(*) FROM {schema.SCHEMA}.claims").fetchone()[0])


def _tuple_figures(conn, counters: dict, baseline: dict, pages: dict, pgstattuple_ready: bool) -> dict:
    deltas = pgstats.counter_deltas(baseline, counters)
    updates = deltas["n_tup_upd"]
    figures = {
        "updates": updates,
        "hot_updates": deltas["n_tup_hot_upd"],
        "newpage_updates": deltas["n_tup_newpage_upd"],
        "hot_fraction": (deltas["n_tup_hot_upd"] / updates) if updates else None,
        "dead_tuples": int(counters["n_dead_tup"]),
        "live_tuples": int(counters["n_live_tup"]),
        "mod_since_analyze": int(counters["n_mod_since_analyze"]),
        "autovacuum_runs": deltas["autovacuum_count"],
        "autoanalyze_runs": deltas["autoanalyze_count"],
        "last_autovacuum": None if counters["last_autovacuum"] is None else str(counters["last_autovacuum"]),
        **pages,
    }
    if pgstattuple_ready:
        figures.update(pgstats.pgstattuple(conn))
    return figures


def measure_setup(conn, db: database.Database, setup: TableSetup, mode: str, worker_count: int, updates: int,
                  pgstattuple_ready: bool = False) -> dict:
    """Drain a fresh queue of `updates` jobs once (sequentially or as a race) and read the counters."""
    prepared = prepare_table(conn, updates, setup, autovacuum=False)
    if mode == "sequential":
        claims, pid, seconds = claim_sequentially(db.url, STRATEGY, None)
        pids = [pid]
    elif mode == "bulk":
        began = time.monotonic()
        claims = conn.execute(BULK_UPDATE_SQL).rowcount
        seconds = time.monotonic() - began
        pids = []
    else:
        result = run_race(db.url, STRATEGY, worker_count, timeout_seconds=RACE_TIMEOUT_SECONDS)
        claims = int(sum(int((w.outcome == WON).sum()) for w in result.workers))
        pids = [w.backend_pid for w in result.workers]
        seconds = result.wall_seconds
    pgstats.wait_for_backends_to_exit(conn, pids)  # a backend's last counts arrive when it exits
    counters = pgstats.table_counters(conn)
    row = {
        "experiment": "matrix",
        **asdict(setup),
        "mode": mode,
        "worker_count": worker_count,
        "strategy": "bulk update" if mode == "bulk" else STRATEGY,
        "job_count": updates,
        "claims": claims,
        "audit_claims": _audit_count(conn),
        "heap_pages_before": prepared["pages"]["heap_pages"],
        "counters_reset": prepared["counters_reset"],
        "claim_seconds": seconds,
        **_tuple_figures(conn, counters, prepared["counters"], pgstats.relation_pages(conn), pgstattuple_ready),
    }
    row["updates_match_claims"] = row["updates"] == claims
    return row


def autovacuum_thresholds(conn) -> dict:
    """When autovacuum would vacuum or analyze the jobs table, from the server's settings and reltuples."""
    settings = dict(conn.execute(
        """SELECT name, setting::float8 FROM pg_settings WHERE name IN (
               'autovacuum_vacuum_threshold', 'autovacuum_vacuum_scale_factor',
               'autovacuum_analyze_threshold', 'autovacuum_analyze_scale_factor')""").fetchall())
    reltuples = float(conn.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [JOBS]).fetchone()[0])
    return {
        "reltuples": reltuples,
        "vacuum_after_dead_tuples": settings["autovacuum_vacuum_threshold"]
        + settings["autovacuum_vacuum_scale_factor"] * reltuples,
        "analyze_after_modifications": settings["autovacuum_analyze_threshold"]
        + settings["autovacuum_analyze_scale_factor"] * reltuples,
    }


def measure_pruning(conn, db: database.Database, autovacuum: bool, job_count: int = PRUNING_JOB_COUNT,
                    claims: int = PRUNING_CLAIMS, settle_seconds: float = SETTLE_SECONDS,
                    quiet_seconds: float = QUIET_SECONDS, pgstattuple_ready: bool = False,
                    on_wait=None) -> list[dict]:
    """One arm of the pruning experiment: rows for phases immediate, settled and after_read."""
    prepared = prepare_table(conn, job_count, TableSetup(), autovacuum=autovacuum)
    baseline = prepared["counters"]
    won, pid, seconds = claim_sequentially(db.url, STRATEGY, claims)
    pgstats.wait_for_backends_to_exit(conn, [pid])
    finished = time.monotonic()
    thresholds = autovacuum_thresholds(conn)
    common = {"experiment": "pruning", **asdict(TableSetup()), "mode": "sequential", "worker_count": 1,
              "strategy": STRATEGY, "job_count": job_count, "claims": won, "autovacuum": autovacuum,
              "claim_seconds": seconds, "heap_pages_before": prepared["pages"]["heap_pages"],
              "counters_reset": prepared["counters_reset"], **thresholds}

    def reading(phase: str) -> dict:
        counters = pgstats.table_counters(conn)
        return {**common, "phase": phase, "seconds_after_claims": time.monotonic() - finished,
                **_tuple_figures(conn, counters, baseline, pgstats.relation_pages(conn), pgstattuple_ready)}

    rows = [reading("immediate")]
    first = rows[0]
    expect_autovacuum = autovacuum and (first["dead_tuples"] > thresholds["vacuum_after_dead_tuples"]
                                        or first["mod_since_analyze"] > thresholds["analyze_after_modifications"])
    last_state = None
    last_change = time.monotonic()
    while True:
        current = reading("settled")
        state = (current["dead_tuples"], current["live_tuples"], current["autovacuum_runs"],
                 current["autoanalyze_runs"])
        now = time.monotonic()
        if state != last_state:
            last_state, last_change = state, now
        acted = (current["autovacuum_runs"] or 0) > 0 or (current["autoanalyze_runs"] or 0) > 0
        waited = now - finished
        if on_wait is not None:
            on_wait(waited, acted)
        if (acted or not expect_autovacuum) and now - last_change >= quiet_seconds:
            break
        if waited >= settle_seconds:
            break
        time.sleep(1.0)
    current["autovacuum_expected"] = expect_autovacuum
    rows.append(current)
    # a reader that visits every page prunes what the claims' own page visits left behind
    conn.execute(f"SELECT count(*) FROM {JOBS}")
    rows.append(reading("after_read"))
    for row in rows:
        row.setdefault("autovacuum_expected", expect_autovacuum)
    return rows


# --------------------------------------------------------------------------- the run


def index_settings(text: str) -> tuple[bool, ...]:
    """--partial-index: both, on or off."""
    settings = {"both": (False, True), "on": (True,), "off": (False,)}
    if text not in settings:
        raise argparse.ArgumentTypeError(f"expected both, on or off, got {text!r}")
    return settings[text]


@dataclass(frozen=True)
class ChurnParameters(Parameters):
    """The matrix's table setups and drains, and the pruning experiment's size and waits."""

    fillfactors: tuple = setting(DEFAULT_FILLFACTORS, as_ints, Option(
        "--fillfactor", "fillfactors, comma-separated", int_list))
    payload_bytes: tuple = setting(DEFAULT_PAYLOAD_BYTES, as_ints, Option(
        "--payload-bytes", "row payload sizes in bytes; 0 = the bare id, status, started_at table", int_list))
    partial_index: tuple = setting(DEFAULT_PARTIAL_INDEX, as_bools, Option(
        "--partial-index", "with the partial index, without, or both", index_settings,
        default_text="both", metavar="{both,on,off}"))
    updates: int = setting(DEFAULT_UPDATES, as_int, Option(
        "--updates", "jobs per drain = status updates per measurement", int))
    race_worker_counts: tuple = setting(DEFAULT_RACE_WORKER_COUNTS, as_ints, Option(
        "--race-workers", "worker counts of the concurrent drains, or none", int_list_or_none))
    bulk: bool = setting(True, as_bool, Option("--no-bulk", "skip the one-statement drains", given=False))
    pruning: bool = setting(True, as_bool, Option("--no-pruning", "skip the pruning experiment", given=False))
    pruning_job_count: int = setting(PRUNING_JOB_COUNT, as_int)  # the original's 5,002 claims on 10,000 rows
    pruning_claims: int = setting(PRUNING_CLAIMS, as_int)
    settle_seconds: float = setting(SETTLE_SECONDS, as_float, Option(
        "--settle-seconds", "longest wait for the statistics to settle in the pruning experiment", float))
    quiet_seconds: float = setting(QUIET_SECONDS, as_float)  # how long the counters must stay still to count as settled

    def check(self) -> None:
        check_each(self.fillfactors, "fillfactor", 10, 100)
        check_each(self.payload_bytes, "payload bytes", 0, MAX_PAYLOAD_BYTES, none_given="payload size")
        if not self.partial_index:
            raise UserError("give at least one partial-index setting")
        if self.updates < 1:
            raise UserError(f"updates must be at least 1, not {self.updates}")
        for count in self.race_worker_counts:
            if count < 1:
                raise UserError(f"race worker count must be at least 1, not {count}")
        if self.settle_seconds < 0 or self.quiet_seconds < 0:
            raise UserError("settle and quiet times must not be negative")
        if self.pruning and not 1 <= self.pruning_claims <= self.pruning_job_count:
            raise UserError(f"pruning claims must be between 1 and the pruning job count ({self.pruning_job_count})")

    @property
    def drains(self) -> list[tuple[str, int]]:
        """(mode, worker count) of every drain of one setup, in the order they run."""
        return [("sequential", 1), *[("race", count) for count in self.race_worker_counts],
                *([("bulk", 1)] if self.bulk else [])]

    @property
    def setups(self) -> list[TableSetup]:
        return [TableSetup(f, p, i) for p in self.payload_bytes for i in self.partial_index for f in self.fillfactors]


def workers_needed(parameters: ChurnParameters) -> int:
    return max(parameters.race_worker_counts, default=1)


def check_size(parameter_sets: list[ChurnParameters], local: bool) -> None:
    """Before any server or process starts: one line if this machine cannot run the largest racing drain."""
    for parameters in parameter_sets:
        if parameters.race_worker_counts:
            check_race_size(max(parameters.race_worker_counts), parameters.updates, local)


def churn_checks(matrix: list[dict], pruning: list[dict], parameters: ChurnParameters) -> dict:
    """What must hold for a churn run to count.

    every_drain_measured: one row per table setup and drain.
    server_counted_every_flip: in every drain the server's update counter equals the claims won, so the
    HOT and dead-tuple figures describe exactly those updates.
    audit_saw_every_flip: the audit trigger recorded as many flips as there were claims.
    pruning_counted_every_claim: the same for the pruning experiment's claims (True when it did not run).
    """
    checks = {
        "every_drain_measured": len(matrix) == len(parameters.setups) * len(parameters.drains),
        "server_counted_every_flip": all(row["updates"] == row["claims"] for row in matrix),
        "audit_saw_every_flip": all(row["audit_claims"] == row["claims"] for row in matrix),
        "pruning_counted_every_claim": all(row["updates"] == row["claims"] for row in pruning),
    }
    checks["passed"] = all(checks.values())
    return checks


INTEGER_COLUMNS = ("worker_count", "job_count", "claims", "audit_claims", "heap_pages_before", "updates",
                   "hot_updates", "newpage_updates", "dead_tuples", "live_tuples", "mod_since_analyze",
                   "autovacuum_runs", "autoanalyze_runs", "heap_pages", "pkey_pages", "partial_index_pages")


def _frame(rows: list[dict]) -> pa.Table:
    frame = pd.DataFrame(rows)
    for column in INTEGER_COLUMNS:
        if column in frame:
            frame[column] = frame[column].astype("Int64")  # nullable: no partial index has no pages
    return pa.Table.from_pandas(frame, preserve_index=False)


def measure_churn(db: database.Database, parameters: ChurnParameters, run_id: str, progress: bool = True) -> Measured:
    """The matrix (and, unless parameters.pruning is off, the pruning experiment) on an open server.

    Drops and recreates claimrace.jobs and claimrace.claims for every setup.
    """
    p = parameters
    began = time.monotonic()
    matrix_rows: list[dict] = []
    pruning_rows: list[dict] = []
    with closing(db.connect()) as conn:
        stattuple = pgstats.pgstattuple_ready(conn, may_install=db.source in ("embedded", "docker"))
        runs, setups = p.drains, p.setups
        bar = tqdm(total=len(setups) * len(runs) + (2 if p.pruning else 0), desc="churn", unit="drain",
                   disable=not progress)
        with bar:
            for setup in setups:
                for mode, worker_count in runs:
                    bar.set_postfix_str(f"ff {setup.fillfactor}, payload {setup.payload_bytes} B, "
                                        f"{'partial index' if setup.partial_index else 'no index'}, "
                                        f"{mode}{'' if mode == 'sequential' else f' x{worker_count}'}")
                    matrix_rows.append(measure_setup(conn, db, setup, mode, worker_count, p.updates, stattuple))
                    bar.update()
            if p.pruning:
                for autovacuum in (True, False):
                    label = f"pruning, autovacuum {'on' if autovacuum else 'off'}"
                    bar.set_postfix_str(f"{label}: {p.pruning_claims:,} claims")

                    def waiting(seconds, acted, label=label):
                        bar.set_postfix_str(f"{label}: settling {seconds:.0f}s"
                                            f"{', autovacuum came' if acted else ''}")

                    pruning_rows.extend(measure_pruning(conn, db, autovacuum, p.pruning_job_count, p.pruning_claims,
                                                        p.settle_seconds, p.quiet_seconds, stattuple, waiting))
                    bar.update()
    for row in (*matrix_rows, *pruning_rows):
        row["run_id"] = run_id
    return Measured(
        tables={"matrix": _frame(matrix_rows), **({"pruning": _frame(pruning_rows)} if pruning_rows else {})},
        procedure={
            "strategy": STRATEGY,
            "matrix": "fresh queue of `updates` jobs per setup and mode (create_queue, then VACUUM after the "
                      "counters were reset); drained by one connection (sequential) or by run_race; "
                      "autovacuum_enabled = off on these tables; counters read from pg_stat_user_tables after "
                      "the claiming backends flushed (forced flush, then exit)",
            "pruning": "default table (fillfactor 100, no index, no payload), autovacuum on (server default) "
                       "or off for the table; phases: immediate (right after the claims), settled (no counter "
                       "change for quiet_seconds and, if the table qualifies, after autovacuum/autoanalyze came, "
                       "or settle_seconds), after_read (after SELECT count(*) visited every page)",
            "bulk_update_sql": BULK_UPDATE_SQL,
            "audit_trigger": True,
        },
        checks=churn_checks(matrix_rows, pruning_rows, p),
        results={"pgstattuple_used": stattuple,
                 "wall_seconds": time.monotonic() - began})


# --------------------------------------------------------------------------- reading runs back


def summarise(run: Run) -> pd.DataFrame:
    """The `matrix` table: one row per table setup and mode: updates, HOT and new-page updates, dead and live
    tuples, pages. (The `pruning` table, one row per autovacuum arm and phase, is absent where it was not run.)"""
    return run.table("matrix")


# --------------------------------------------------------------------------- command line

JSON_COLUMNS = ("experiment", "fillfactor", "partial_index", "payload_bytes", "mode", "worker_count", "updates",
                "hot_updates", "newpage_updates", "dead_tuples", "live_tuples", "heap_pages", "heap_pages_before",
                "claims")
PRUNING_JSON_COLUMNS = ("autovacuum", "phase", "seconds_after_claims", "autovacuum_runs", "autoanalyze_runs")


def _plain(value):
    if hasattr(value, "item"):
        value = value.item()
    if value is pd.NA or (isinstance(value, float) and value != value):
        return None
    return value


def _print(matrix: pd.DataFrame, pruning: pd.DataFrame, as_json: bool) -> None:
    if as_json:
        for record in matrix.to_dict(orient="records"):
            print(json.dumps({k: _plain(record[k]) for k in (*JSON_COLUMNS, "run_id")}))
        for record in pruning.to_dict(orient="records"):
            print(json.dumps({k: _plain(record[k]) for k in (*JSON_COLUMNS, *PRUNING_JSON_COLUMNS, "run_id")}))
        return
    columns = ["fillfactor", "payload_bytes", "partial_index", "mode", "worker_count", "updates", "hot_updates",
               "newpage_updates", "dead_tuples", "heap_pages_before", "heap_pages"]
    print(matrix.loc[:, columns].to_string(index=False))
    if len(pruning):
        print()
        print(pruning.loc[:, ["autovacuum", "phase", "seconds_after_claims", "updates", "hot_updates", "dead_tuples",
                              "autovacuum_runs", "autoanalyze_runs", "heap_pages"]]
              .to_string(index=False, float_format=lambda v: f"{v:,.1f}"))


def show_runs(paths, as_json: bool) -> None:
    """What `python -m harness churn` prints: the matrix and the pruning phases, or one JSON object per point."""
    for path in paths:
        run = Run(path)
        _print(run.summary, run.table("pruning", absent_ok=True), as_json)
        if not as_json:
            print(f"stored in {path}")


__all__ = ["ChurnParameters", "measure_churn", "churn_checks", "summarise", "measure_setup",
           "measure_pruning", "claim_sequentially", "TableSetup"]


# The kind as the store, the command line and the report see it (harness.experiments.registry).
KIND = Kind("churn", ChurnParameters, measure_churn, summarise,
            help="HOT updates, dead tuples and pruning under the claims, per fillfactor, row width and partial index "
                 "(drops and recreates claimrace.jobs and claimrace.claims for every drain)",
            show=show_runs, sections=("churn",), workers=workers_needed,
            check_size=lambda sets, local, pg_version: check_size(sets, local))
