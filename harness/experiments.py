"""Race trials and sweeps: reset the queue, race, read the audit, check, store.

Each trial starts from a freshly created table, so trials do not inherit each
other's dead tuples. Importable from notebooks (a tqdm bar over the sweep) and
used by the CLI.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
from tqdm.auto import tqdm

from harness import config, database, schema
from harness.errors import ConservationError, UserError
from harness.manifest import client_facts, utc_now
from harness.race import RaceResult, run_race
from harness.storage import ATTEMPT_SCHEMA, CLAIM_SCHEMA, RunWriter, ensure_writable
from harness.strategies import OUTCOME_NAMES, STRATEGIES, WON, get_strategy


@dataclass(frozen=True)
class RaceConfig:
    """What one race trial was asked to do (recorded in its manifest, and the cache key)."""

    strategy: str
    worker_count: int
    job_count: int = config.DEFAULT_JOB_COUNT
    repeat: int = 0
    partial_index: bool = False
    fillfactor: int = 100
    think_ms: float = 0.0


@dataclass
class SweepPlan:
    strategies: list[str]
    worker_counts: list[int]
    job_count: int = config.DEFAULT_JOB_COUNT
    repeats: int = 1
    partial_index: bool = False
    fillfactor: int = 100
    think_ms: float = 0.0
    configs: list[RaceConfig] = field(default_factory=list)

    def __post_init__(self):
        validate(self.strategies, self.worker_counts, self.job_count, self.repeats, self.fillfactor, self.think_ms)
        self.configs = [
            RaceConfig(s, w, self.job_count, r, self.partial_index, self.fillfactor, self.think_ms)
            for r in range(self.repeats) for s in self.strategies for w in self.worker_counts
        ]


def validate(strategies, worker_counts, job_count, repeats, fillfactor, think_ms) -> None:
    for name in strategies:
        get_strategy(name)
    if not worker_counts:
        raise UserError("give at least one worker count")
    for count in worker_counts:
        if count < 1:
            raise UserError(f"worker count must be at least 1, not {count}")
    if job_count < 1:
        raise UserError(f"job count must be at least 1, not {job_count}")
    if repeats < 1:
        raise UserError(f"repeat must be at least 1, not {repeats}")
    if not 10 <= fillfactor <= 100:
        raise UserError(f"fillfactor must be between 10 and 100, not {fillfactor}")
    if think_ms < 0:
        raise UserError(f"think time must not be negative, not {think_ms}")


def check_capacity(conn, worker_counts) -> None:
    """One line, before anything runs, if the server cannot hold the largest race."""
    free = database.free_connection_slots(conn)
    needed = max(worker_counts) + config.HARNESS_CONNECTIONS - 1  # the control connection is already open
    if needed > free:
        raise UserError(f"{max(worker_counts)} workers need {needed} more connections but the server allows "
                        f"only {free} more (raise max_connections or use fewer workers)")


def new_run_id(cfg: RaceConfig) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}-{cfg.strategy}-w{cfg.worker_count}-j{cfg.job_count}-r{cfg.repeat}-{secrets.token_hex(3)}"


def attempts_table(run_id: str, result: RaceResult) -> pa.Table:
    """Every worker's raw attempts as one Arrow table, start times rebased to the barrier."""
    columns = {name: [] for name in ("worker_index", "attempt_seq", "start_ns", "latency_ns", "outcome", "job_id")}
    for w in result.workers:
        n = len(w.start_ns)
        columns["worker_index"].append(np.full(n, w.worker_index, dtype=np.int32))
        columns["attempt_seq"].append(np.arange(n, dtype=np.int64))
        columns["start_ns"].append(w.start_ns - result.t0_ns)
        columns["latency_ns"].append(w.latency_ns)
        columns["outcome"].append(w.outcome)
        columns["job_id"].append(w.job_id)
    merged = {k: np.concatenate(v) if v else np.array([], dtype=np.int64) for k, v in columns.items()}
    total = len(merged["start_ns"])
    outcome_codes = merged["outcome"].astype(np.int8)
    job_ids = merged["job_id"]
    return pa.table(
        {
            "run_id": pa.DictionaryArray.from_arrays(pa.array(np.zeros(total, dtype=np.int8)), [run_id]),
            "strategy": pa.DictionaryArray.from_arrays(pa.array(np.zeros(total, dtype=np.int8)), [result.strategy]),
            "worker_count": pa.array(np.full(total, result.worker_count, dtype=np.int32)),
            "worker_index": pa.array(merged["worker_index"].astype(np.int32)),
            "attempt_seq": pa.array(merged["attempt_seq"]),
            "start_ns": pa.array(merged["start_ns"]),
            "latency_ns": pa.array(merged["latency_ns"]),
            "outcome": pa.DictionaryArray.from_arrays(pa.array(outcome_codes), list(OUTCOME_NAMES)),
            "job_id": pa.array(job_ids, mask=job_ids == 0),
        },
        schema=ATTEMPT_SCHEMA,
    )


def claims_table(rows: list[tuple]) -> pa.Table:
    names = CLAIM_SCHEMA.names
    return pa.table({name: [r[i] for r in rows] for i, name in enumerate(names)}, schema=CLAIM_SCHEMA)


def conservation_checks(cfg: RaceConfig, result: RaceResult, audit: list[tuple], status: dict) -> dict:
    """What must hold after any drained race, checked against the server's own records."""
    outcomes = np.concatenate([w.outcome for w in result.workers])
    counts = {name: int((outcomes == code).sum()) for code, name in enumerate(OUTCOME_NAMES)}
    attempts = int(len(outcomes))
    won_jobs = np.sort(np.concatenate([w.job_id[w.outcome == WON] for w in result.workers]))
    audit_jobs = np.sort(np.array([r[1] for r in audit], dtype=np.int64))
    distinct_audited = int(len(np.unique(audit_jobs)))
    checks = {
        "attempts": attempts,
        **counts,
        "outcomes_add_up": attempts == sum(counts.values()),
        "audit_claims": int(len(audit_jobs)),
        "distinct_jobs_claimed": distinct_audited,
        "every_job_claimed": distinct_audited == cfg.job_count and status.get("pending", 0) == 0,
        "final_status": status,
        "worker_wins_match_audit": bool(len(won_jobs) == len(audit_jobs) and np.array_equal(won_jobs, audit_jobs)),
    }
    checks["passed"] = checks["outcomes_add_up"] and checks["every_job_claimed"] and checks["worker_wins_match_audit"]
    return checks


def run_trial(db: database.Database, cfg: RaceConfig, data_dir: Path, server: dict | None = None,
              client: dict | None = None) -> Path:
    """One race on a fresh queue; returns the folder of the stored run."""
    started_at = utc_now()
    with db.connect() as conn:
        server = server or database.server_facts(conn)
        schema.create_queue(conn, cfg.job_count, partial_index=cfg.partial_index, fillfactor=cfg.fillfactor)
        result = run_race(db.url, cfg.strategy, cfg.worker_count, cfg.think_ms)
        audit = schema.audit_rows(conn)
        status = schema.status_counts(conn)
    run_id = new_run_id(cfg)
    checks = conservation_checks(cfg, result, audit, status)
    manifest = {
        "run_id": run_id,
        "kind": "race",
        "config": asdict(cfg),
        "sql": get_strategy(cfg.strategy).sql,
        "isolation": "read committed, autocommit, one statement per round trip",
        # workers are connections; this many client processes drove them (see race.process_count_for)
        "client_processes": result.process_count,
        "started_at": started_at,
        "finished_at": utc_now(),
        "wall_seconds": result.wall_seconds,
        "server": {"source": db.source, "url": database.redact(db.url), **db.details, **server},
        "client": client or client_facts(),
        "checks": checks,
    }
    races = config.races_dir(data_dir)
    with RunWriter(races, run_id) as writer:
        writer.table("attempts", attempts_table(run_id, result))
        writer.table("claims", claims_table(audit))
        writer.json("manifest", manifest)
        if not checks["passed"]:
            failed = writer.parent / ".failed"
            failed.mkdir(exist_ok=True)
            kept = failed / run_id
            writer.staging.rename(kept)
            raise ConservationError(f"run {run_id} broke an invariant (kept in {kept}): "
                                    f"{ {k: v for k, v in checks.items() if k != 'final_status'} }")
        return writer.commit()


def run_sweep(plan: SweepPlan, data_dir: Path = config.DATA_DIR, db: str | None = None,
              pg_version: int = config.DEFAULT_PG_VERSION, progress: bool = True,
              database_handle: database.Database | None = None) -> list[Path]:
    """Every trial of the plan on one server; one progress bar over the trials."""
    data_dir = ensure_writable(Path(data_dir))
    max_connections = max(plan.worker_counts) + config.HARNESS_CONNECTIONS + 10
    if database_handle is not None:
        return _sweep_on(database_handle, plan, data_dir, progress)
    with database.open_database(db, pg_version, max_connections) as handle:
        return _sweep_on(handle, plan, data_dir, progress)


def _sweep_on(handle: database.Database, plan: SweepPlan, data_dir: Path, progress: bool) -> list[Path]:
    with handle.connect() as conn:
        schema.ensure_schema(conn)
        schema.acquire_run_lock(conn)  # held for the sweep; released when conn closes
        check_capacity(conn, plan.worker_counts)
        server = database.server_facts(conn)
        client = client_facts()
        stored = []
        bar = tqdm(plan.configs, desc="races", unit="race", disable=not progress)
        for cfg in bar:
            bar.set_postfix_str(f"{cfg.strategy} x{cfg.worker_count} r{cfg.repeat}")
            began = time.monotonic()
            stored.append(run_trial(handle, cfg, data_dir, server, client))
            bar.set_postfix_str(f"{cfg.strategy} x{cfg.worker_count} done in {time.monotonic() - began:.1f}s")
        return stored


__all__ = ["RaceConfig", "SweepPlan", "run_trial", "run_sweep", "STRATEGIES"]
