"""What the claims do to the table: HOT updates, dead tuples, page pruning, size.

Two experiments, read from the server's own counters (pg_stat_user_tables,
after every writer has flushed; see pgstats.py):

matrix
    fillfactor x partial index x row width. For each setup the queue is built
    fresh with `updates` jobs (default 1,000), vacuumed, its counters reset,
    and then drained by the skip_locked claim: once by one connection claiming
    in a loop (sequential), and once per race worker count through the
    concurrent race (harness.experiments.race.run_race). Draining a queue of exactly
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

    measure_churn(db, fillfactors=(100, 90, 70, 50), payload_bytes=(0, 400), partial_index=(False, True),
                  updates=1000, race_worker_counts=(4, 16), data_dir=config.DATA_DIR, progress=True,
                  pruning=True, bulk=True, pruning_job_count=10_000, pruning_claims=5_002,
                  settle_seconds=75, quiet_seconds=5) -> Path
    run_churn(..., db=None, pg_version=16) -> Path     # starts and stops its own server
    load_churn(run_dir) -> DataFrame      # one row per setup and mode (sequential, race x N, bulk)
    load_pruning(run_dir) -> DataFrame    # one row per autovacuum arm and phase
    latest_run(data_dir) -> Path | None

Stored as data/churn/<run_id>/{matrix,pruning}.parquet and manifest.json.
"""

from __future__ import annotations

import json
import secrets
import time
from contextlib import closing
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from harness import config
from harness.server import database, pgstats, schema
from harness.errors import UserError
from harness.experiments.race_trials import check_capacity
from harness.manifest import client_facts, utc_now
from harness.experiments.race import run_race
from harness.storage import RunWriter, ensure_writable, latest_run_dir
from harness.strategies import EMPTY, ERROR, WON, get_strategy

KIND = "churn"
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


def churn_dir(data_dir: Path) -> Path:
    return Path(data_dir) / KIND


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


def validate(fillfactors, payload_bytes, partial_index, updates, race_worker_counts) -> None:
    if not fillfactors:
        raise UserError("give at least one fillfactor")
    for value in fillfactors:
        if not 10 <= value <= 100:
            raise UserError(f"fillfactor must be between 10 and 100, not {value}")
    if not payload_bytes:
        raise UserError("give at least one payload size")
    for value in payload_bytes:
        if not 0 <= value <= MAX_PAYLOAD_BYTES:
            raise UserError(f"payload bytes must be between 0 and {MAX_PAYLOAD_BYTES}, not {value}")
    if not partial_index:
        raise UserError("give at least one partial-index setting")
    if updates < 1:
        raise UserError(f"updates must be at least 1, not {updates}")
    for count in race_worker_counts:
        if count < 1:
            raise UserError(f"race worker count must be at least 1, not {count}")


def new_run_id() -> str:
    return f"{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S')}-{KIND}-{secrets.token_hex(3)}"


INTEGER_COLUMNS = ("worker_count", "job_count", "claims", "audit_claims", "heap_pages_before", "updates",
                   "hot_updates", "newpage_updates", "dead_tuples", "live_tuples", "mod_since_analyze",
                   "autovacuum_runs", "autoanalyze_runs", "heap_pages", "pkey_pages", "partial_index_pages")


def _frame(rows: list[dict]) -> pa.Table:
    frame = pd.DataFrame(rows)
    for column in INTEGER_COLUMNS:
        if column in frame:
            frame[column] = frame[column].astype("Int64")  # nullable: no partial index has no pages
    return pa.Table.from_pandas(frame, preserve_index=False)


def measure_churn(db: database.Database, fillfactors=DEFAULT_FILLFACTORS, payload_bytes=DEFAULT_PAYLOAD_BYTES,
                  partial_index=DEFAULT_PARTIAL_INDEX, updates: int = DEFAULT_UPDATES,
                  race_worker_counts=DEFAULT_RACE_WORKER_COUNTS, data_dir: Path = config.DATA_DIR,
                  progress: bool = True, pruning: bool = True, pruning_job_count: int = PRUNING_JOB_COUNT,
                  pruning_claims: int = PRUNING_CLAIMS, settle_seconds: float = SETTLE_SECONDS,
                  quiet_seconds: float = QUIET_SECONDS, bulk: bool = True) -> Path:
    """The matrix (and, unless pruning=False, the pruning experiment) on an open server.

    Drops and recreates claimrace.jobs and claimrace.claims for every setup.
    """
    fillfactors = [int(v) for v in fillfactors]
    payload_bytes = [int(v) for v in payload_bytes]
    partial_index = [bool(v) for v in partial_index]
    race_worker_counts = [int(v) for v in race_worker_counts]
    validate(fillfactors, payload_bytes, partial_index, updates, race_worker_counts)
    if settle_seconds < 0 or quiet_seconds < 0:
        raise UserError("settle and quiet times must not be negative")
    if pruning and not 1 <= pruning_claims <= pruning_job_count:
        raise UserError(f"pruning claims must be between 1 and the pruning job count ({pruning_job_count})")
    data_dir = ensure_writable(Path(data_dir))
    started_at = utc_now()
    began = time.monotonic()
    matrix_rows: list[dict] = []
    pruning_rows: list[dict] = []
    with closing(db.connect()) as conn:
        schema.ensure_schema(conn)
        schema.acquire_run_lock(conn)  # held until conn closes
        if race_worker_counts:
            check_capacity(conn, race_worker_counts)
        server = database.server_facts(conn)
        stattuple = pgstats.pgstattuple_ready(conn, may_install=db.source in ("embedded", "docker"))
        runs = [("sequential", 1), *[("race", count) for count in race_worker_counts]]
        if bulk:
            runs.append(("bulk", 1))
        setups = [TableSetup(f, p, i) for p in payload_bytes for i in partial_index for f in fillfactors]
        bar = tqdm(total=len(setups) * len(runs) + (2 if pruning else 0), desc="churn", unit="drain",
                   disable=not progress)
        with bar:
            for setup in setups:
                for mode, worker_count in runs:
                    bar.set_postfix_str(f"ff {setup.fillfactor}, payload {setup.payload_bytes} B, "
                                        f"{'partial index' if setup.partial_index else 'no index'}, "
                                        f"{mode}{'' if mode == 'sequential' else f' x{worker_count}'}")
                    matrix_rows.append(measure_setup(conn, db, setup, mode, worker_count, updates, stattuple))
                    bar.update()
            if pruning:
                for autovacuum in (True, False):
                    label = f"pruning, autovacuum {'on' if autovacuum else 'off'}"
                    bar.set_postfix_str(f"{label}: {pruning_claims:,} claims")

                    def waiting(seconds, acted, label=label):
                        bar.set_postfix_str(f"{label}: settling {seconds:.0f}s"
                                            f"{', autovacuum came' if acted else ''}")

                    pruning_rows.extend(measure_pruning(conn, db, autovacuum, pruning_job_count, pruning_claims,
                                                        settle_seconds, quiet_seconds, stattuple, waiting))
                    bar.update()
    run_id = new_run_id()
    for row in (*matrix_rows, *pruning_rows):
        row["run_id"] = run_id
    manifest = {
        "run_id": run_id,
        "kind": KIND,
        "parameters": {"fillfactors": fillfactors, "payload_bytes": payload_bytes, "partial_index": partial_index,
                       "updates": updates, "race_worker_counts": race_worker_counts, "strategy": STRATEGY,
                       "bulk": bulk, "pruning": pruning, "pruning_job_count": pruning_job_count,
                       "pruning_claims": pruning_claims, "settle_seconds": settle_seconds,
                       "quiet_seconds": quiet_seconds},
        "procedure": {
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
        "pgstattuple_available": server.get("pgstattuple_available", False),
        "pgstattuple_used": stattuple,
        "started_at": started_at,
        "finished_at": utc_now(),
        "wall_seconds": time.monotonic() - began,
        "server": {"source": db.source, "url": database.redact(db.url), **db.details, **server},
        "client": client_facts(),
    }
    with RunWriter(churn_dir(data_dir), run_id) as writer:
        writer.table("matrix", _frame(matrix_rows))
        if pruning_rows:
            writer.table("pruning", _frame(pruning_rows))
        writer.json("manifest", manifest)
        return writer.commit()


def run_churn(fillfactors=DEFAULT_FILLFACTORS, payload_bytes=DEFAULT_PAYLOAD_BYTES, partial_index=DEFAULT_PARTIAL_INDEX,
              updates: int = DEFAULT_UPDATES, race_worker_counts=DEFAULT_RACE_WORKER_COUNTS,
              data_dir: Path = config.DATA_DIR, db: str | None = None, pg_version: int = config.DEFAULT_PG_VERSION,
              progress: bool = True, **options) -> Path:
    """measure_churn on a server of its own (embedded by default), stopped afterwards."""
    validate([int(v) for v in fillfactors], [int(v) for v in payload_bytes], list(partial_index), updates,
             [int(v) for v in race_worker_counts])
    ensure_writable(Path(data_dir))
    max_connections = max(race_worker_counts, default=1) + config.HARNESS_CONNECTIONS + 10
    with database.open_database(db, pg_version, max_connections) as handle:
        return measure_churn(handle, fillfactors, payload_bytes, partial_index, updates, race_worker_counts,
                             data_dir, progress, **options)


# --------------------------------------------------------------------------- reading runs back


def latest_run(data_dir: Path = config.DATA_DIR) -> Path | None:
    return latest_run_dir(churn_dir(data_dir))


def load_churn(run_dir: Path) -> pd.DataFrame:
    """One row per table setup and mode: updates, HOT and new-page updates, dead and live tuples, pages."""
    return pq.read_table(Path(run_dir) / "matrix.parquet").to_pandas()


def load_pruning(run_dir: Path) -> pd.DataFrame:
    """One row per autovacuum arm (on, off) and phase (immediate, settled, after_read); empty if not run."""
    path = Path(run_dir) / "pruning.parquet"
    if not path.exists():
        return pd.DataFrame()
    return pq.read_table(path).to_pandas()


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


def _command(args) -> int:
    partial = {"both": (False, True), "on": (True,), "off": (False,)}[args.partial_index]
    path = run_churn(args.fillfactor, args.payload_bytes, partial, args.updates, args.race_workers, args.data_dir,
                     args.db, args.pg_version, progress=not args.quiet, pruning=not args.no_pruning,
                     bulk=not args.no_bulk, settle_seconds=args.settle_seconds)
    _print(load_churn(path), load_pruning(path), args.json)
    if not args.json:
        print(f"stored in {path}")
    return 0


def _worker_list(text: str) -> list[int]:
    from harness.cli import int_list

    return [] if text.strip() in ("", "none") else int_list(text)


def register_cli(subparsers) -> None:
    from harness.cli import add_server_options, int_list

    parser = subparsers.add_parser(
        "churn", help="HOT updates, dead tuples and pruning under the claims, per fillfactor, row width and "
                      "partial index (drops and recreates claimrace.jobs and claimrace.claims for every drain)")
    parser.add_argument("--fillfactor", type=int_list, default=list(DEFAULT_FILLFACTORS),
                        help="fillfactors, comma-separated (default 100,90,70,50)")
    parser.add_argument("--payload-bytes", type=int_list,
                        default=list(DEFAULT_PAYLOAD_BYTES),
                        help="row payload sizes in bytes; 0 = the bare id, status, started_at table (default 0,400)")
    parser.add_argument("--partial-index", choices=("both", "on", "off"), default="both",
                        help="with, without, or both (default both)")
    parser.add_argument("--updates", type=int, default=DEFAULT_UPDATES,
                        help="jobs per drain = status updates per measurement (default 1000)")
    parser.add_argument("--race-workers", type=_worker_list, default=list(DEFAULT_RACE_WORKER_COUNTS),
                        help="worker counts of the concurrent drains, or none (default 4,16)")
    parser.add_argument("--no-bulk", action="store_true", help="skip the one-statement drains")
    parser.add_argument("--no-pruning", action="store_true", help="skip the pruning experiment")
    parser.add_argument("--settle-seconds", type=float, default=SETTLE_SECONDS,
                        help="longest wait for the statistics to settle in the pruning experiment (default 75)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per measured point")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_server_options(parser)
    parser.set_defaults(handler=_command)


__all__ = ["measure_churn", "run_churn", "load_churn", "load_pruning", "latest_run", "measure_setup",
           "measure_pruning", "claim_sequentially", "TableSetup"]
