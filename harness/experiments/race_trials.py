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

from harness.server import activity, database, schema
from harness import config
from harness.errors import ConservationError, RaceError, UserError
from harness.manifest import client_facts, utc_now
from harness.experiments.limits import check_race_size, server_on_this_machine
from harness.experiments.race import CLIENT_LAYOUT, RaceResult, run_race
from harness.storage import ACTIVITY_SCHEMA, ATTEMPT_SCHEMA, CLAIM_SCHEMA, WORKER_SCHEMA, RunWriter, ensure_writable
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
    pause_ms: float = 0.0  # slowed-down races: pause between the read and the write
    jitter_ms: float = 0.0  # slowed-down races: random pause of up to this between attempts
    autovacuum: bool = True  # autovacuum_enabled on the race's table
    audit: bool = True  # the audit trigger; without it, wins are counted from what the claims returned


@dataclass
class SweepPlan:
    strategies: list[str]
    worker_counts: list[int]
    job_count: int = config.DEFAULT_JOB_COUNT
    repeats: int = 1
    partial_index: bool = False
    fillfactor: int = 100
    pause_ms: float = 0.0
    jitter_ms: float = 0.0
    autovacuum: bool = True
    audit: bool = True
    configs: list[RaceConfig] = field(default_factory=list)

    def __post_init__(self):
        validate(self.strategies, self.worker_counts, self.job_count, self.repeats, self.fillfactor,
                 self.pause_ms, self.jitter_ms)
        # repeats outermost: a slow drift of the machine spreads over every point instead of biasing one
        self.configs = [
            RaceConfig(s, w, self.job_count, r, self.partial_index, self.fillfactor, self.pause_ms, self.jitter_ms,
                       self.autovacuum, self.audit)
            for r in range(self.repeats) for s in self.strategies for w in self.worker_counts
        ]


MAX_PAUSE_MS = 10_000.0
MAX_JOB_COUNT = 10_000_000  # and limits.check_race_size bounds jobs x workers by this machine's memory  # a slowed-down race is for watching; longer pauses only make it last for ever


def validate(strategies, worker_counts, job_count, repeats, fillfactor, pause_ms=0.0, jitter_ms=0.0) -> None:
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
    if job_count > MAX_JOB_COUNT:
        raise UserError(f"job count must be at most {MAX_JOB_COUNT:,}, not {job_count:,} "
                        "(every attempt is kept in memory until the race ends)")
    for name, value in (("pause", pause_ms), ("jitter", jitter_ms)):
        if not 0 <= value <= MAX_PAUSE_MS:
            raise UserError(f"{name} must be between 0 and {MAX_PAUSE_MS:g} ms, not {value:g}")


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
    """Every worker's raw attempts as one Arrow table, times rebased to the barrier."""
    names = ("worker_index", "attempt_seq", "start_ns", "latency_ns", "outcome", "job_id", "read_end_ns",
             "write_start_ns")
    columns = {name: [] for name in names}
    for w in result.workers:
        n = len(w.start_ns)
        columns["worker_index"].append(np.full(n, w.worker_index, dtype=np.int32))
        columns["attempt_seq"].append(np.arange(n, dtype=np.int64))
        columns["start_ns"].append(w.start_ns - result.t0_ns)
        columns["latency_ns"].append(w.latency_ns)
        columns["outcome"].append(w.outcome)
        columns["job_id"].append(w.job_id)
        for name in ("read_end_ns", "write_start_ns"):
            stamps = getattr(w, name)
            stamps = np.zeros(n, dtype=np.int64) if stamps is None else np.where(stamps > 0, stamps - result.t0_ns, -1)
            columns[name].append(stamps)
    merged = {k: np.concatenate(v) if v else np.array([], dtype=np.int64) for k, v in columns.items()}
    total = len(merged["start_ns"])
    job_ids = merged["job_id"]
    stamped = {name: pa.array(merged[name], mask=merged[name] <= 0 if result.slowed else np.ones(total, bool))
               for name in ("read_end_ns", "write_start_ns")}
    return pa.table(
        {
            "run_id": pa.DictionaryArray.from_arrays(pa.array(np.zeros(total, dtype=np.int8)), [run_id]),
            "strategy": pa.DictionaryArray.from_arrays(pa.array(np.zeros(total, dtype=np.int8)), [result.strategy]),
            "worker_count": pa.array(np.full(total, result.worker_count, dtype=np.int32)),
            "worker_index": pa.array(merged["worker_index"].astype(np.int32)),
            "attempt_seq": pa.array(merged["attempt_seq"]),
            "start_ns": pa.array(merged["start_ns"]),
            "latency_ns": pa.array(merged["latency_ns"]),
            "outcome": pa.DictionaryArray.from_arrays(pa.array(merged["outcome"].astype(np.int8)),
                                                      list(OUTCOME_NAMES)),
            "job_id": pa.array(job_ids, mask=job_ids == 0),
            **stamped,
        },
        schema=ATTEMPT_SCHEMA,
    )


def workers_table(result: RaceResult, local: bool) -> pa.Table:
    """One row per worker: its process's CPU, its backend's CPU and run-queue delay (local servers only)."""
    rows = []
    for w in result.workers:
        backend = activity.schedstat_delta(w.backend_schedstat_start, w.backend_schedstat_end) if local else None
        rows.append({
            "worker_index": w.worker_index, "backend_pid": w.backend_pid,
            "released_ns": w.released_ns - result.t0_ns, "ended_ns": w.ended_ns - result.t0_ns,
            "attempts": len(w.start_ns), "client_cpu_ns": w.cpu_ns, "client_run_delay_ns": w.client_run_delay_ns,
            "client_private_bytes": w.private_bytes,
            **dict(zip(("backend_cpu_ns", "backend_run_delay_ns", "backend_timeslices"), backend or (None,) * 3)),
        })
    return pa.Table.from_pylist(rows, schema=WORKER_SCHEMA)


def activity_table(samples, t0_ns: int) -> pa.Table:
    """The sampler's raw rows, times rebased to the barrier."""
    frame = samples.copy()
    frame["sample_ns"] = frame["sample_ns"].astype("int64") - t0_ns
    return pa.Table.from_pandas(frame, schema=ACTIVITY_SCHEMA, preserve_index=False)


def claims_table(rows: list[tuple]) -> pa.Table:
    names = CLAIM_SCHEMA.names
    return pa.table({name: [r[i] for r in rows] for i, name in enumerate(names)}, schema=CLAIM_SCHEMA)


def conservation_checks(cfg: RaceConfig, result: RaceResult, audit: list[tuple], status: dict) -> dict:
    """What must hold after any drained race, checked against the server's own records.

    With the audit trigger off, the server keeps no record of who flipped what:
    the wins the workers saw must then cover every job, and the final statuses
    must show none pending.
    """
    outcomes = np.concatenate([w.outcome for w in result.workers])
    counts = {name: int((outcomes == code).sum()) for code, name in enumerate(OUTCOME_NAMES)}
    attempts = int(len(outcomes))
    won_jobs = np.sort(np.concatenate([w.job_id[w.outcome == WON] for w in result.workers]))
    checks = {"attempts": attempts, **counts, "outcomes_add_up": attempts == sum(counts.values()),
              "final_status": status, "audit": cfg.audit}
    nothing_pending = status.get("pending", 0) == 0
    if cfg.audit:
        audit_jobs = np.sort(np.array([r[1] for r in audit], dtype=np.int64))
        distinct_audited = int(len(np.unique(audit_jobs)))
        checks.update({
            "audit_claims": int(len(audit_jobs)),
            "distinct_jobs_claimed": distinct_audited,
            "every_job_claimed": distinct_audited == cfg.job_count and nothing_pending,
            "worker_wins_match_audit": bool(len(won_jobs) == len(audit_jobs)
                                            and np.array_equal(won_jobs, audit_jobs)),
        })
        checks["passed"] = checks["outcomes_add_up"] and checks["every_job_claimed"] and \
            checks["worker_wins_match_audit"]
    else:
        distinct_won = int(len(np.unique(won_jobs)))
        checks.update({"distinct_jobs_claimed": distinct_won,
                       "every_job_claimed": distinct_won == cfg.job_count and nothing_pending})
        checks["passed"] = checks["outcomes_add_up"] and checks["every_job_claimed"]
    return checks


def run_trial(db: database.Database, cfg: RaceConfig, data_dir: Path, server: dict | None = None,
              client: dict | None = None) -> Path:
    """One race on a fresh queue; returns the folder of the stored run."""
    started_at = utc_now()
    with db.connect() as conn:
        server = server or database.server_facts(conn)
        schema.create_queue(conn, cfg.job_count, partial_index=cfg.partial_index, fillfactor=cfg.fillfactor,
                            audit=cfg.audit, autovacuum=cfg.autovacuum)
        local = activity.server_is_local(conn)  # only then is /proc/<backend pid> the backend
        # the sampler's thread starts once the workers are forked and waiting (forking beside a thread is unsafe)
        sampler = activity.ActivitySampler(db.url)
        try:
            result = run_race(db.url, cfg.strategy, cfg.worker_count, pause_ms=cfg.pause_ms, jitter_ms=cfg.jitter_ms,
                              on_release=sampler.start)
        finally:
            sampler.stop()
        if sampler.error is not None:
            raise RaceError(f"the wait-event sampler failed during the race: {sampler.error}")
        audit = schema.audit_rows(conn) if cfg.audit else []
        status = schema.status_counts(conn)
        table = schema.table_activity(conn)
    run_id = new_run_id(cfg)
    checks = conservation_checks(cfg, result, audit, status)
    samples = sampler.samples()
    manifest = {
        "run_id": run_id,
        "kind": "race",
        "config": asdict(cfg),
        "sql": get_strategy(cfg.strategy).sql,
        "isolation": "read committed, autocommit, one statement per round trip",
        "client_layout": CLIENT_LAYOUT,
        "client_processes": result.process_count,
        "started_at": started_at,
        "finished_at": utc_now(),
        "wall_seconds": result.wall_seconds,
        "server": {"source": db.source, "url": database.redact(db.url), **db.details, **server},
        "client": client or client_facts(),
        # what autovacuum did to the race's table while it ran (the table is new for every trial)
        "table_activity": table,
        # the wait-event sampler as it ran (its samples are activity.parquet; CPU and run queue workers.parquet)
        "activity": {"sampler": sampler.stats()},
        "checks": checks,
    }
    races = config.races_dir(data_dir)
    with RunWriter(races, run_id) as writer:
        writer.table("attempts", attempts_table(run_id, result))
        writer.table("claims", claims_table(audit))
        writer.table("workers", workers_table(result, local))
        writer.table("activity", activity_table(samples, result.t0_ns))
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
    # before any server or process starts: one line if this machine cannot run the largest race
    local = server_on_this_machine(db) if database_handle is None else database_handle.source != "url"
    check_race_size(max(plan.worker_counts), plan.job_count, local)
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
