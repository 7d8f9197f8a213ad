"""The race as a kind of experiment: one trial per run; a sweep is a list of trials.

Each trial starts from a freshly created table, so trials do not inherit each
other's dead tuples: reset the queue, race, read the audit, check. The run
store writes what `measure_race` returns; `harness.experiments.registry` runs
the trials a sweep lacks on one server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from harness import config
from harness.errors import RaceError, UserError
from harness.experiments.contract import Kind
from harness.experiments.race.summary import summarise_run
from harness.experiments.contract import (REQUIRED, Measured, Option, Parameters, as_bool, as_bools_or_one, as_float,
                                          as_floats_or_one, as_int, as_ints, as_strategies, as_strategy, int_list,
                                          number_list, on_off, setting)
from harness.experiments.contract import one_of
from harness.experiments.limits import check_race_size
from harness.experiments.race import asyncio_client as race_asyncio
from harness.experiments.race.workers import CLIENT_LAYOUT, CLIENT_LAYOUT_TEXT, RaceResult, run_race
from harness.server import activity, cpus, database, delay, pooler, schema
from harness.experiments.race.outcomes import spread_by_point
from harness.stats import jsonable, summarise_runs
from harness.storage import ACTIVITY_SCHEMA, ATTEMPT_SCHEMA, CLAIM_SCHEMA, WORKER_SCHEMA
from harness.claims.strategies import ORIGINAL_STRATEGIES, STRATEGIES, get_strategy, parse_strategies, without_cleanup
from harness.claims.steps import DEFAULT_BATCH, EMPTY, MAX_BATCH, OUTCOME_NAMES, WON

CLIENT_LAYOUTS = (CLIENT_LAYOUT, race_asyncio.CLIENT_LAYOUT)
MAX_PAUSE_MS = 10_000.0  # a slowed-down race is for watching; longer pauses only make it last for ever
MAX_JOB_COUNT = 10_000_000  # and limits.check_race_size bounds jobs x workers by this machine's memory
LOCKS_SETTLE_SECONDS = 0.5  # through a pooler, the advisory locks held at the end once the count is stable this long


as_cpu_layout = one_of(cpus.CPU_LAYOUTS, "cpus")


as_client_layout = one_of(CLIENT_LAYOUTS, "client")


def as_clients(name: str, values) -> tuple[str, ...]:
    """A list of client layouts, or one standing for a list of one."""
    values = (values,) if isinstance(values, str) else tuple(values)
    if not values:
        raise UserError("give at least one client layout")
    return tuple(as_client_layout("client", v) for v in values)


def client_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


as_pooler_mode = one_of(pooler.MODES, "pooler")


def as_poolers(name: str, values) -> tuple[str, ...]:
    """A list of pooler modes, or one standing for a list of one."""
    values = (values,) if isinstance(values, str) else tuple(values)
    if not values:
        raise UserError("give at least one pooler mode")
    return tuple(as_pooler_mode("pooler", v) for v in values)


def _check_trial(worker_count: int, job_count: int, fillfactor: int, pause_ms: float, jitter_ms: float) -> None:
    if worker_count < 1:
        raise UserError(f"worker count must be at least 1, not {worker_count}")
    if job_count < 1:
        raise UserError(f"job count must be at least 1, not {job_count}")
    if job_count > MAX_JOB_COUNT:
        raise UserError(f"job count must be at most {MAX_JOB_COUNT:,}, not {job_count:,} "
                        "(every attempt is kept in memory until the race ends)")
    if not 10 <= fillfactor <= 100:
        raise UserError(f"fillfactor must be between 10 and 100, not {fillfactor}")
    for name, value in (("pause", pause_ms), ("jitter", jitter_ms)):
        if not 0 <= value <= MAX_PAUSE_MS:
            raise UserError(f"{name} must be between 0 and {MAX_PAUSE_MS:g} ms, not {value:g}")


@dataclass(frozen=True)
class RaceParameters(Parameters):
    """One race trial: a fresh queue of job_count jobs drained by worker_count workers with one strategy."""

    strategy: str = setting(REQUIRED, as_strategy)
    worker_count: int = setting(REQUIRED, as_int)
    job_count: int = setting(config.DEFAULT_JOB_COUNT, as_int)
    repeat: int = setting(0, as_int)  # which repeat of its point: repeats are separate runs
    partial_index: bool = setting(False, as_bool)
    fillfactor: int = setting(100, as_int)
    pause_ms: float = setting(0.0, as_float)  # slowed-down races: pause between the read and the write
    jitter_ms: float = setting(0.0, as_float)  # slowed-down races: random pause of up to this between attempts
    autovacuum: bool = setting(True, as_bool)  # autovacuum_enabled on the race's table
    audit: bool = setting(True, as_bool)  # the audit trigger; without it, wins are what the claims returned
    # the most jobs one attempt claims: a batch strategy's LIMIT, 1 for every other strategy. Runs stored
    # before it existed claimed one job per attempt, so a stored run without it has the default.
    batch: int = setting(1, as_int, added_later=True)
    # a network round trip between each worker and the server (the delay proxy); runs stored before it had none
    rtt_ms: float = setting(0.0, as_float, added_later=True)
    # rtt 0 through the delay proxy all the same (a round-trip sweep's baseline); runs stored before had no proxy at 0
    proxy_at_zero: bool = setting(False, as_bool, added_later=True)
    # the wait-event sampler (one extra connection reading pg_stat_activity); runs stored before it could be
    # turned off ran with it
    sampler: bool = setting(True, as_bool, added_later=True)
    # where the processes run: every CPU shared, or the server and the clients on separate halves (server.cpus)
    cpus: str = setting("shared", as_cpu_layout, added_later=True)
    # the client layout: one process per worker, or one asyncio process driving every connection (race_asyncio)
    client: str = setting("processes", as_client_layout, added_later=True)
    # PgBouncer between the workers and the server (harness.server.pooler), in one of its modes; none before it
    pooler: str = setting("none", as_pooler_mode, added_later=True)
    # where the embedded server keeps its data: tmpfs, or a disk where every commit waits for its WAL flush
    storage: str = setting("tmpfs", one_of(database.STORAGES, "storage"), added_later=True)

    def check(self) -> None:
        _check_trial(self.worker_count, self.job_count, self.fillfactor, self.pause_ms, self.jitter_ms)
        delay.check_rtt(self.rtt_ms)
        _check_pooler(self.pooler, self.rtt_ms or self.proxy_at_zero, self.client)
        if self.client == "asyncio":
            race_asyncio.check_strategy(self.strategy)
            if self.pause_ms or self.jitter_ms:
                raise UserError("the asyncio client races the tight loop only, without pauses")
        if get_strategy(self.strategy).protocol and (self.pause_ms or self.jitter_ms):
            raise UserError(f"{self.strategy} is a job library's protocol: it races the tight loop only, without "
                            "pauses")
        if self.proxy_at_zero and self.rtt_ms:
            raise UserError("proxy_at_zero is for a round trip of 0 ms: a longer one always goes through the proxy")
        if self.repeat < 0:
            raise UserError(f"repeat must not be negative, not {self.repeat}")
        _check_batch(self.batch)
        if self.batch != 1 and not get_strategy(self.strategy).batch:
            raise UserError(f"{self.strategy} claims one job per attempt: its batch is 1, not {self.batch}")


def _check_pooler(mode: str, proxied: bool, client: str) -> None:
    pooler.check_mode(mode, installed=False)  # pgbouncer itself is looked for when a race starts it
    if mode != "none" and (proxied or client != CLIENT_LAYOUT):
        raise UserError("a race through the pooler has no delay proxy and one process per worker")


def _check_batch(batch: int) -> None:
    if not 1 <= batch <= MAX_BATCH:
        raise UserError(f"batch must be between 1 and {MAX_BATCH}, not {batch}")



def _as_in_a_trial(name: str, option: Option):
    """A sweep's setting that every trial shares: the trial's default and type, declared once, with a flag."""
    spec = RaceParameters.__dataclass_fields__[name]
    return setting(spec.default, spec.metadata["convert"], option)


@dataclass(frozen=True)
class RaceSweep(Parameters):
    """Every strategy at every worker count, `repeats` times: what `python -m harness race` and a params section ask."""

    strategies: tuple = setting(ORIGINAL_STRATEGIES, as_strategies, Option(
        "--strategy", f"one of {', '.join(STRATEGIES)}; a comma list, where libraries stands for every job library's "
                      f"protocol; or all (the original three: {', '.join(ORIGINAL_STRATEGIES)})", parse_strategies,
        default_text="all"))
    worker_counts: tuple = setting(config.DEFAULT_WORKER_COUNTS, as_ints, Option(
        "--workers", "worker counts, comma-separated: a sweep", int_list))
    job_count: int = _as_in_a_trial("job_count", Option("--jobs", "jobs queued per trial", int))
    repeats: int = setting(1, as_int, Option("--repeat", "trials per strategy and worker count", int))
    # worker counts from this one up are raced once whatever `repeats` says: on a small machine they are
    # CPU-bound, decide nothing, and cost most of a sweep's time (0: every count is raced `repeats` times)
    once_from_workers: int = setting(0, as_int, Option(
        "--once-from-workers", "race worker counts at or above this once, whatever --repeat says (0: never)", int),
        added_later=True)
    # with and without the partial index, a sweep like the round trips: `partial_index: [false, true]` races
    # every point both ways; each trial stores one
    partial_index: tuple = setting((False,), as_bools_or_one, Option(
        "--partial-index", "add jobs (id) WHERE status = 'pending'", given=(True,)))
    fillfactor: int = _as_in_a_trial("fillfactor", Option("--fillfactor", "the jobs table's fillfactor", int))
    pause_ms: float = _as_in_a_trial("pause_ms", Option(
        "--pause-ms", "a slowed-down race: pause between the read and the write of a claim", float))
    jitter_ms: float = _as_in_a_trial("jitter_ms", Option(
        "--jitter-ms", "a slowed-down race: random pause of up to this between a worker's attempts", float))
    autovacuum: bool = _as_in_a_trial("autovacuum", Option(
        "--autovacuum", "autovacuum on the race's table (on is the server's default)", on_off,
        default_text="on", metavar="{on,off}"))
    audit: bool = _as_in_a_trial("audit", Option(
        "--no-audit", "no audit trigger: wins counted from what the claims returned (measures the audit's cost)",
        given=False))
    # the batch strategies' k; the others claim one job per attempt whatever it says
    batch: int = setting(DEFAULT_BATCH, as_int, Option(
        "--batch", "the most jobs one attempt of skip_locked_batch or skip_locked_batch_in claims", int))
    # round trips between each worker and the server (the delay proxy), a sweep like the worker counts; each
    # trial stores one, so a trial stored before this was a list is found as it was
    rtt_ms: tuple = setting((0.0,), as_floats_or_one, Option(
        "--rtt-ms", "network round trips between each worker and the server, made by a delay proxy, "
                    "comma-separated: a sweep", number_list, default_text="0"))
    sampler: bool = _as_in_a_trial("sampler", Option(
        "--sampler", "the wait-event sampler: one extra connection reading pg_stat_activity about every 10 ms "
                     "(off measures what it costs)", on_off, default_text="on", metavar="{on,off}"))
    cpus: str = _as_in_a_trial("cpus", Option(
        "--cpus", "shared: server and workers on every CPU; split: the server on the first half of the CPUs, the "
                  "workers on the rest (a server on this machine only)", str, metavar="{shared,split}"))
    # the client layouts, a sweep like the round trips: `client: [processes, asyncio]` races every point both ways
    clients: tuple = setting(("processes",), as_clients, Option(
        "--client", "processes: one process per worker; asyncio: one process driving every connection from one "
                    "event loop, as the original did (naive, guarded and skip_locked only); a comma list races both",
        client_list, default_text="processes", metavar="{processes,asyncio}"))
    # the pooler's modes, a sweep like the client layouts: `pooler: [session, transaction]` races every point both
    poolers: tuple = setting(("none",), as_poolers, Option(
        "--pooler", "PgBouncer between the workers and the server: transaction or session mode (none: directly); a "
                    "comma list races each", client_list, default_text="none", metavar="{none,transaction,session}"))
    storage: str = _as_in_a_trial("storage", Option(
        "--storage", "where the embedded server keeps its data: tmpfs, or disk (every commit waits for its WAL "
                     "flush)", str, metavar="{tmpfs,disk}"))

    def check(self) -> None:
        if not self.rtt_ms:
            raise UserError("give at least one round trip")
        if not self.partial_index:
            raise UserError("give true, false or both for the partial index")
        for rtt_ms in self.rtt_ms:
            delay.check_rtt(rtt_ms)
        if not self.worker_counts:
            raise UserError("give at least one worker count")
        if self.repeats < 1:
            raise UserError(f"repeat must be at least 1, not {self.repeats}")
        if self.once_from_workers < 0:
            raise UserError(f"once from workers must be 0 (never) or a worker count, not {self.once_from_workers}")
        for count in self.worker_counts:
            _check_trial(count, self.job_count, self.fillfactor, self.pause_ms, self.jitter_ms)
        if "asyncio" in self.clients:
            for strategy in self.strategies:
                race_asyncio.check_strategy(strategy)
        _check_batch(self.batch)
        for mode in self.poolers:
            for rtt_ms, proxy_at_zero in self.networks():
                for client in self.clients:
                    _check_pooler(mode, rtt_ms or proxy_at_zero, client)

    def networks(self) -> list[tuple[float, bool]]:
        """(round trip, proxy at 0) per network the sweep races: a sweep with a real round trip races 0 ms twice,
        straight and through the proxy, so its baseline differs from the longer round trips only by the delay."""
        proxied = any(rtt > 0 for rtt in self.rtt_ms)
        networks = []
        for rtt_ms in self.rtt_ms:
            networks.append((rtt_ms, False))
            if rtt_ms == 0 and proxied:
                networks.append((0.0, True))
        return networks

    def repeats_at(self, worker_count: int) -> int:
        """Trials per strategy at one worker count: once from `once_from_workers` up, else `repeats`."""
        return 1 if 0 < self.once_from_workers <= worker_count else self.repeats

    def trials(self) -> list[RaceParameters]:
        # repeats outermost: a slow drift of the machine spreads over every point instead of biasing one
        return [RaceParameters(strategy, worker_count, self.job_count, repeat, partial_index, self.fillfactor,
                               self.pause_ms, self.jitter_ms, self.autovacuum, self.audit,
                               batch=self.batch if get_strategy(strategy).batch else 1, rtt_ms=rtt_ms,
                               proxy_at_zero=proxy_at_zero, sampler=self.sampler, cpus=self.cpus,
                               client=client, pooler=mode, storage=self.storage)
                for repeat in range(self.repeats) for strategy in self.strategies
                for worker_count in self.worker_counts if repeat < self.repeats_at(worker_count)
                for partial_index in self.partial_index
                for rtt_ms, proxy_at_zero in self.networks() for client in self.clients for mode in self.poolers]



def workers_needed(parameters: RaceParameters) -> int:
    return parameters.worker_count


def check_size(trials: list[RaceParameters], local: bool) -> None:
    """Before any server or process starts: one line if this machine cannot run the largest race."""
    check_race_size(max(t.worker_count for t in trials), max(t.job_count for t in trials), local)


def trial_label(parameters: RaceParameters) -> str:
    network = f" {parameters.rtt_ms:g}ms" if parameters.rtt_ms else " 0ms via proxy" if parameters.proxy_at_zero else ""
    index = " +index" if parameters.partial_index else ""
    sampler = "" if parameters.sampler else " no-sampler"
    cpus = "" if parameters.cpus == "shared" else f" cpus:{parameters.cpus}"
    client = "" if parameters.client == "processes" else f" {parameters.client}"
    client += "" if parameters.pooler == "none" else f" pgbouncer:{parameters.pooler}"
    client += "" if parameters.storage == "tmpfs" else f" {parameters.storage}"
    return (f"{parameters.strategy} x{parameters.worker_count}{index}{network}{sampler}{cpus}{client} "
            f"r{parameters.repeat}")


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
    rows = claimed_rows(result)
    if all(w.claimed_job_ids is not None for w in result.workers) and result.workers:
        offsets = np.concatenate([[0], np.cumsum(rows, dtype=np.int64)]).astype(np.int32)
        claimed = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(
            [w.claimed_job_ids for w in result.workers]), type=pa.int64()))
    else:
        claimed = pa.nulls(total, type=pa.list_(pa.int64()))
    if all(w.stray_locks is not None for w in result.workers) and result.workers:
        stray = pa.array(np.concatenate([w.stray_locks for w in result.workers]).astype(np.int32))
    else:
        stray = pa.nulls(total, type=pa.int32())
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
            "rows": pa.array(rows.astype(np.int32)),
            "job_ids": claimed,
            "stray_locks": stray,
        },
        schema=ATTEMPT_SCHEMA,
    )


def claimed_rows(result: RaceResult) -> np.ndarray:
    """Per attempt, worker after worker: the jobs it claimed (a batch's row count; else 1 for a win, 0 otherwise)."""
    parts = [w.rows if w.rows is not None else (w.outcome == WON).astype(np.int32) for w in result.workers]
    return np.concatenate(parts) if parts else np.array([], dtype=np.int32)


def won_job_ids(result: RaceResult) -> np.ndarray:
    """Every job the workers claimed, as they saw it (a batch's every row), sorted."""
    parts = [w.claimed_job_ids if w.claimed_job_ids is not None else w.job_id[w.outcome == WON]
             for w in result.workers]
    return np.sort(np.concatenate(parts)) if parts else np.array([], dtype=np.int64)


def early_empty_answers(result: RaceResult) -> int:
    """Empty answers given while a job was still to be had: some attempt that started after one ended won.

    A job never returns to pending, so an attempt that wins after an empty answer claims a job that was
    pending when that answer was given; for a locking claim it may have been held by an attempt already
    under way, but such an attempt started before the answer ended. An answer that fails this test was
    empty for another reason, such as advisory locks left on jobs no attempt was claiming.
    """
    starts = np.concatenate([w.start_ns for w in result.workers]) if result.workers else np.array([], np.int64)
    outcomes = np.concatenate([w.outcome for w in result.workers]) if result.workers else np.array([], np.int8)
    ends = starts + (np.concatenate([w.latency_ns for w in result.workers]) if result.workers else 0)
    won = outcomes == WON
    if not won.any():
        return 0
    last_win_start = starts[won].max()
    return int(((outcomes == EMPTY) & (ends < last_win_start)).sum())


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


def activity_table(samples, result: RaceResult) -> pa.Table:
    """The sampler's rows taken inside their worker's window, times rebased to the barrier."""
    frame = samples.copy()
    frame["sample_ns"] = frame["sample_ns"].astype("int64") - result.t0_ns
    frame = activity.within_windows(frame, worker_windows(result))
    return pa.Table.from_pandas(frame, schema=ACTIVITY_SCHEMA, preserve_index=False)


def worker_windows(result: RaceResult) -> dict:
    """backend pid -> its worker's (released, ended), rebased to the barrier as the stored samples are."""
    return {w.backend_pid: (w.released_ns - result.t0_ns, w.ended_ns - result.t0_ns) for w in result.workers}


def claims_table(rows: list[tuple]) -> pa.Table:
    names = CLAIM_SCHEMA.names
    return pa.table({name: [r[i] for r in rows] for i, name in enumerate(names)}, schema=CLAIM_SCHEMA)


def conservation_checks(cfg: RaceParameters, result: RaceResult, audit: list[tuple], status: dict) -> dict:
    """What must hold after any drained race, checked against the server's own records.

    With the audit trigger off, the server keeps no record of who flipped what:
    the wins the workers saw must then cover every job, and the final statuses
    must show none pending.
    """
    outcomes = np.concatenate([w.outcome for w in result.workers])
    counts = {name: int((outcomes == code).sum()) for code, name in enumerate(OUTCOME_NAMES)}
    attempts = int(len(outcomes))
    won_jobs = won_job_ids(result)
    rows = claimed_rows(result)
    checks = {"attempts": attempts, **counts, "outcomes_add_up": attempts == sum(counts.values()),
              "final_status": status, "audit": cfg.audit,
              # what an attempt may do that is worth showing, not a reason to refuse the run
              "batch": cfg.batch, "max_rows_per_attempt": int(rows.max()) if len(rows) else 0,
              "attempts_over_batch": int((rows > cfg.batch).sum()),
              "rows_match_wins": bool(len(won_jobs) == int(rows.sum()) and not (rows[outcomes != WON] > 0).any()),
              "early_empty_answers": early_empty_answers(result)}
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
        checks["passed"] = checks["outcomes_add_up"] and checks["rows_match_wins"] and \
            checks["every_job_claimed"] and checks["worker_wins_match_audit"]
    else:
        distinct_won = int(len(np.unique(won_jobs)))
        checks.update({"distinct_jobs_claimed": distinct_won,
                       "every_job_claimed": distinct_won == cfg.job_count and nothing_pending})
        checks["passed"] = checks["outcomes_add_up"] and checks["rows_match_wins"] and checks["every_job_claimed"]
    return checks


def measure_race(db: database.Database, parameters: RaceParameters, run_id: str, progress: bool = False) -> Measured:
    """One race on a fresh queue: the raw attempts, the audit, the workers' CPU, the sampled wait events."""
    cfg = parameters
    pooled = cfg.pooler != "none"
    # through a pooler the workers send the strategy as its library does (strategies.without_cleanup)
    strategy = without_cleanup(cfg.strategy) if pooled else get_strategy(cfg.strategy)
    with db.connect() as conn:
        schema.create_queue(conn, cfg.job_count, partial_index=cfg.partial_index, fillfactor=cfg.fillfactor,
                            audit=cfg.audit, autovacuum=cfg.autovacuum)
        local = activity.server_is_local(conn)  # only then is /proc/<backend pid> the backend
        # a batch claim's row count depends on its plan (strategies.BATCH_CLAIM_IN): keep the one it starts with
        plan = claim_plan(conn, strategy, cfg.batch) if strategy.batch else None
        # the sampler's thread starts once the workers are forked and waiting (forking beside a thread is unsafe)
        sampler = activity.ActivitySampler(db.url) if cfg.sampler else None
        try:
            # the workers reach the server through the delay proxy (rtt 0: directly); the sampler directly
            with cpus.pinned(conn, cfg.cpus, local) as client_cpus, \
                    delay.network_delay(db.url, cfg.rtt_ms, cfg.proxy_at_zero) as network, \
                    pooler.pooled(network.url, cfg.pooler, cfg.worker_count) as through:
                on_release = sampler.start if sampler else None
                if cfg.client == race_asyncio.CLIENT_LAYOUT:
                    result = race_asyncio.run_race_asyncio(network.url, cfg.strategy, cfg.worker_count,
                                                           on_release=on_release)
                else:
                    result = run_race(through.url, cfg.strategy, cfg.worker_count, pause_ms=cfg.pause_ms,
                                      jitter_ms=cfg.jitter_ms, on_release=on_release, batch=cfg.batch,
                                      pooled=pooled)
                # the advisory locks still held once every worker has gone: through a transaction pooler, held by
                # its server sessions, which outlive the clients that took them
                advisory_locks_at_end = schema.advisory_locks_held(conn, LOCKS_SETTLE_SECONDS if pooled else 0.0)
        finally:
            if sampler is not None:
                sampler.stop()
        if sampler is not None and sampler.error is not None:
            raise RaceError(f"the wait-event sampler failed during the race: {sampler.error}")
        samples = sampler.samples() if sampler is not None else activity.samples_frame()
        audit = schema.audit_rows(conn) if cfg.audit else []
        status = schema.status_counts(conn)
        table = schema.table_activity(conn)
    return Measured(
        tables={"attempts": attempts_table(run_id, result), "claims": claims_table(audit),
                "workers": workers_table(result, local), "activity": activity_table(samples, result)},
        procedure={"sql": strategy.sql_for(cfg.batch), "statements": dict(strategy.statements_for(cfg.batch)),
                   "isolation": strategy.isolation,
                   # a job library's protocol: the order its statements go in, and where it was read
                   **({"protocol": [name for name, _ in strategy.protocol], "library_source": strategy.library_source}
                      if strategy.protocol else {}),
                   "queue": "a fresh claimrace.jobs of job_count pending jobs per trial (create_queue), with the "
                            "audit trigger unless audit is off"},
        checks=conservation_checks(cfg, result, audit, status),
        results={
            "wall_seconds": result.wall_seconds,
            "client_layout": cfg.client,
            "client_layout_text": CLIENT_LAYOUT_TEXT if cfg.client == CLIENT_LAYOUT else race_asyncio.CLIENT_LAYOUT_TEXT,
            # split: the CPUs the workers ran on (the server had the others); shared: null
            "client_cpus": sorted(client_cpus) if client_cpus else None,
            "client_processes": result.process_count,
            # what autovacuum did to the race's table while it ran (the table is new for every trial)
            "table_activity": table,
            # the wait-event sampler as it ran (its samples are activity.parquet; CPU and run queue workers.parquet)
            "activity": {"sampler": sampler.stats() if sampler is not None else None},
            **({"claim_plan": plan} if plan is not None else {}),
            # the round trip added between workers and server, and the proxy's own account (None at rtt 0)
            "network": {"rtt_ms": cfg.rtt_ms, "delay_proxy": network.proxy},
            "pooler": {**through.describe(), "advisory_locks_held_at_end": advisory_locks_at_end},
        })


def claim_plan(conn, strategy, batch: int) -> str:
    """EXPLAIN (COSTS OFF) of a one-statement claim on the fresh queue: the plan its workers start with."""
    [(_, text)] = strategy.statements_for(batch)
    return "\n".join(line for (line,) in conn.execute(f"EXPLAIN (COSTS OFF) {text}"))


# --------------------------------------------------------------------------- command line

SUMMARY_COLUMNS = ("strategy", "worker_count", "batch_size", "rtt_ms", "pooler", "repeat", "attempts", "wins", "lost",
                   "aborts", "duplicate_jobs", "unclaimed_jobs", "losses_per_win", "claims_per_second", "p50_ms",
                   "p99_ms", "wall_seconds", "advisory_locks_at_end")


def print_summary(frame, as_json: bool, per_run: bool = True) -> None:
    """Stored races as a table: one line per run, or per point with median and min-max over its repeats."""
    if as_json:
        for record in frame.to_dict(orient="records"):
            print(json.dumps(jsonable(record), default=str))
        return
    if not len(frame):
        print("no runs stored yet")
        return
    if per_run:
        print(frame.loc[:, list(SUMMARY_COLUMNS)].to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
        return
    spread = spread_by_point(frame)
    table = spread[["strategy", "worker_count", "batch_size", "rtt_ms", "job_count", "partial_index", "repeats"]].copy()
    for figure, digits in (("claims_per_second", 0), ("losses_per_win", 2), ("duplicate_jobs", 0), ("p99_ms", 2)):
        table[figure] = [f"{m:,.{digits}f} [{lo:,.{digits}f}-{hi:,.{digits}f}]"
                         for m, lo, hi in zip(spread[f"{figure}_median"], spread[f"{figure}_min"],
                                              spread[f"{figure}_max"])]
    print("median [min-max] over the repeats of each point")
    print(table.to_string(index=False))


def show_runs(paths, as_json: bool) -> None:
    """What `python -m harness race` prints: one line (or JSON object) per race it ran."""
    print_summary(summarise_runs(run_paths=paths), as_json)


__all__ = ["RaceParameters", "RaceSweep", "measure_race", "conservation_checks", "print_summary"]


# The kind as the store, the command line and the report see it (harness.experiments.registry).
KIND = Kind("race", RaceParameters, measure_race, summarise_run,
            help="race claim strategies over a fresh queue (drops and recreates claimrace.jobs and claimrace.claims "
                 "before every trial)",
            show=show_runs,
            sections=("races", "slow_race", "original_size", "other_strategies", "latency", "indexed_race", "pg18_race",
                      "others_indexed", "pg18_others", "split_cpus", "no_sampler", "client_layouts",
                      "library_claims", "pooler_claims", "disk_race"),
            request=RaceSweep,
            expand=RaceSweep.trials, workers=workers_needed,
            check_size=lambda sets, local, pg_version: check_size(sets, local),
            label=trial_label, storage=lambda parameters: parameters.storage)
