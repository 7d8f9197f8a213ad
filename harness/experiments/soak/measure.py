"""A queue that runs for minutes: jobs arrive at a steady rate, workers claim, run and finish them, and from
pin_from to pin_to something holds the server's MVCC horizon, so no dead row can be removed.

One run, on a fresh table of one shape:

    history          finished jobs stay, marked 'done' (the original's table), no index on the status;
    history_indexed  the same, with the partial index on the pending jobs (schema.PARTIAL_INDEX_SQL);
    delete           finished jobs are deleted, as PgQueuer, pgmq and graphile-worker do;
    partitioned      finished jobs stay 'done' in their partition, and leave a partition at a time, as pgmq's
                     partitioned queues do (harness.experiments.soak.partitions).

`history_rows` finished jobs may be there at the start (a table that keeps its history). Processes:

    arrivals   one process inserts the jobs on schedule, open loop: job k is due at k / rate seconds, and every
               job due is inserted as soon as it is due, in one statement for those due together, whatever the
               workers do. Each job's due time and its insert's commit are kept.
    workers    `workers` processes, each on its own connection: the claim (harness.claims.strategies: guarded, the
               original's read then guarded write; skip_locked; or skip_locked_batch, up to BATCH jobs in one
               statement), then each job (job_ms) and its finish (an UPDATE to 'done', or a DELETE), in
               autocommit; a worker that finds nothing waits POLL_S.
               Each claim's return time and its statement time are kept.
    holder     from pin_from to pin_to, on connections of its own: a REPEATABLE READ snapshot, an idle
               transaction's id, staggered analytics statements, or none, the control (harness.experiments.
               soak_holders, with the mitigations that act on it: timeouts, the analytics one at a time). A holder
               whose connection is ended ends the pin early; the run records when.
    sampler    every SAMPLE_S, on its own connection: the table's live and dead tuples, its autovacuum and vacuum
               counts, heap and index bytes, the age of the oldest snapshot or transaction id a backend holds
               (transactions) and the longest open transaction holding one (s), and WAL bytes; every
               EXPLAIN_EVERY_S, the claim's read under EXPLAIN (ANALYZE, BUFFERS): the buffers one claim reads;
               and the share of this machine's CPUs that was busy.
    vacuums    with vacuum_every, a VACUUM of the jobs table every that many seconds, on its own connection
               (harness.experiments.soak.vacuums).

The mitigation "autovacuum" sets the jobs table's autovacuum to act at once (AGGRESSIVE_AUTOVACUUM: no scale
factor, a small threshold, no cost delay); the server's autovacuum_naptime, between two looks at the table, is
server-wide and left as it is.

storage "disk" puts the embedded server's data directory on a disk (harness.server.database), where each commit
waits for its WAL flush and the server times the flushes; synchronous_commit "off" lets the workers' and the
arrivals' commits go without waiting for it.

The arrivals and the workers are harness.experiments.soak.processes. The per-second series (arrivals, claims,
backlog, claim p50/p99) comes from the kept times, and the verdict from
it by harness.experiments.soak.outcomes. Every process started dies with the harness (die_with_parent), SIGKILL included; the
holder's sessions are the harness's own connections, closed with it.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness import libraries
from harness.experiments.soak import outcomes as soak_outcomes
from harness.experiments.soak import holders as soak_holders
from harness.experiments.soak import partitions as soak_partitions
from harness.experiments.soak import phases as soak_phases
from harness.experiments.soak import processes as soak_processes
from harness.experiments.soak import release as soak_release
from harness.experiments.soak import flushes as soak_flushes
from harness.experiments.soak import sampler as soak_sampler
from harness.experiments.soak import vacuums as soak_vacuums
from harness.experiments.soak.processes import BATCH, FINISH_SQL, INSERT_SQL, JOBS, POLL_S, STOP_GRACE_S
from harness.experiments.soak.sampler import EXPLAIN_EVERY_S, READ_SQL, SAMPLE_COLUMNS, SAMPLE_S, Sampler
from harness.experiments.soak.holders import HOLDERS, MITIGATIONS
from harness.experiments.soak.outcomes import ANALYTICS_S, ANALYTICS_SESSIONS
from harness.experiments.soak.phases import as_rate
from harness.config import SCHEMA
from harness.errors import UserError
from harness.libraries.catalogue import RACED_LIBRARY_STRATEGIES
from harness.experiments.contract import Measured, Option, Parameters, as_bool, as_float, as_int, one_of, setting
from harness.server import activity, database, pgstats, schema
from harness.storage import Run
from harness.claims.strategies import BATCH_CLAIM_CTE, GUARDED_CLAIM, PICK_OLDEST_PENDING, SKIP_LOCKED_CLAIM

SHAPES = ("history", "history_indexed", "delete", "partitioned")
STRATEGIES = ("guarded", "skip_locked", "skip_locked_batch")
SYNCHRONOUS_COMMIT = ("on", "off")

# what a run may ask: bounds this machine honours (2 cores, 24 GiB, the data directory on tmpfs)
MIN_RATE, MAX_RATE = 1.0, 5000.0  # jobs/s; above what 2 cores claim, a run is marked arrivals_behind
MAX_WORKERS = 16
MIN_SECONDS, MAX_SECONDS = 20.0, 4 * 3600.0
MIN_BEFORE_S = soak_outcomes.WARMUP_S + 5.0  # seconds before the pin: the warm-up, then the spread to judge by
MIN_HOLD_S = float(max(soak_outcomes.WARMUP_S, soak_outcomes.BEHIND_RUN_S))  # shorter: no live release
MAX_JOB_MS = 1000.0
MIN_ANALYTICS_S, MAX_ANALYTICS_S = 1.0, 600.0  # a statement shorter than a sample would not be seen holding
MAX_ANALYTICS_SESSIONS = 8  # a connection each, beside the workers' (workers_needed)
MAX_HISTORY_ROWS = 2_000_000
MAX_JOBS = 5_000_000  # rate x seconds + history_rows: the table stays well inside memory
MIN_SHARE, MAX_SHARE = 1.0, 200.0  # a rate asked as a share of the sustained rate (past 100 %: an overload)
SUSTAIN_S = 8.0  # how long the workers drain a full queue to measure the rate they sustain
SUSTAIN_WARMUP_S = 1.0  # its first second is not counted
SUSTAIN_JOBS = 50_000  # the full queue: more than 2 cores claim in SUSTAIN_S


CLAIM_SQL = {"guarded": f"{PICK_OLDEST_PENDING}; then {GUARDED_CLAIM}", "skip_locked": SKIP_LOCKED_CLAIM,
             "skip_locked_batch": BATCH_CLAIM_CTE.replace("{batch}", str(BATCH))}


def check_rate(rate: float) -> None:
    if not MIN_RATE <= rate <= MAX_RATE:
        raise UserError(f"rate must be between {MIN_RATE:g} and {MAX_RATE:g} jobs/s, not {rate:g}")


def check_jobs(rate: float, seconds: float, history_rows: int) -> None:
    if rate * seconds + history_rows > MAX_JOBS:
        raise UserError(f"{rate:g} jobs/s for {seconds:g} s and {history_rows:,} history rows make more than "
                        f"{MAX_JOBS:,} jobs: lower one")


ARRIVALS = ("as_due",)


def _arrivals_stored_before(stored: dict) -> str:
    return "as_due" if stored.get("library", "none") == "none" else "steps"


@dataclass(frozen=True)
class SoakParameters(Parameters):
    """One soak run: a shape, a claim, jobs arriving at `rate` for `seconds`, the horizon held from pin_from to
    pin_to by `holder`."""

    shape: str = setting("history", one_of(SHAPES, "shape"), Option(
        "--shape", "history (finished jobs stay 'done'), history_indexed (and the partial index), delete, or "
                   "partitioned (they leave a partition at a time, as pgmq's partitioned queues)"))
    strategy: str = setting("skip_locked", one_of(STRATEGIES, "strategy"), Option(
        "--strategy", "guarded (the original's read, then a guarded write), skip_locked, or skip_locked_batch "
                      f"(up to {BATCH} jobs a claim, each run and finished in turn)"))
    rate: float | str = setting("50%", as_rate, Option(
        "--rate", "jobs arriving per second, on schedule; or a share of the rate the workers sustain with nothing "
                  "pinned, measured first on the same table, like 50%%", str, default_text="50%%"))
    workers: int = setting(4, as_int, Option("--workers", "worker processes", int))
    seconds: float = setting(120.0, as_float, Option("--seconds", "the run's length", float))
    pin_from: float = setting(40.0, as_float, Option("--pin-from", "when the holder takes the horizon (s)", float))
    pin_to: float = setting(80.0, as_float, Option("--pin-to", "when it lets go (s)", float))
    holder: str = setting("repeatable_read", one_of(HOLDERS, "holder"), Option(
        "--holder", "repeatable_read, idle_in_transaction, analytics, or none (the control)"))
    job_ms: float = setting(5.0, as_float, Option("--job-ms", "each job's length (ms)", float))
    history_rows: int = setting(0, as_int, Option("--history-rows", "finished jobs in the table at the start", int))
    mitigation: str = setting("none", one_of(MITIGATIONS, "mitigation"), Option(
        "--mitigation", "none, autovacuum (the table's, at once), idle_timeout, statement_timeout, "
                        "transaction_timeout (PostgreSQL 17+), or one_analytics (the analytics one at a time)"))
    storage: str = setting("tmpfs", one_of(database.STORAGES, "storage"), Option(
        "--storage", "where the embedded server keeps its data: tmpfs, or disk (every commit waits for its WAL "
                     "flush)"))
    synchronous_commit: str = setting("on", one_of(SYNCHRONOUS_COMMIT, "synchronous commit"), Option(
        "--synchronous-commit", "on, or off: the workers' and the arrivals' commits do not wait for the flush"))
    library: str = setting("none", one_of(("none", *RACED_LIBRARY_STRATEGIES), "library"), Option(
        "--library", "a job library's own workers on its own table instead of shape and strategy "
                     "(harness.experiments.soak.library): " + ", ".join(RACED_LIBRARY_STRATEGIES)),
        added_later=True)
    hold_until_failure: bool = setting(False, as_bool, Option(
        "--hold-until-failure", "hold from --pin-from until the queue falls behind (outcomes.BEHIND_RUN_S seconds "
                                "of backlog above its level), or for --hold-max at most; --pin-to is not read",
        given=True), added_later=True)
    hold_max: float = setting(120.0, as_float, Option(
        "--hold-max", "with --hold-until-failure, the longest hold (s)", float), added_later=True)
    analytics_s: float = setting(ANALYTICS_S, as_float, Option(
        "--analytics-s", "with --holder analytics, each statement's length (s); each session starts the length / "
                         "--analytics-sessions after the one before", float), added_later=True)
    analytics_sessions: int = setting(ANALYTICS_SESSIONS, as_int, Option(
        "--analytics-sessions", "with --holder analytics, the sessions running statements side by side, each "
                                "starting the length / sessions after the one before (3, with --analytics-s 120: "
                                "PlanetScale's case)", int), added_later=True)
    phases: tuple = setting((), soak_phases.as_phases, Option(
        "--phases", "the run as phases, label=kind:seconds separated by commas (harness.experiments.soak.phases): "
                    "warmup, clean, hold or hold(holder), ramp(rate), recovery; --seconds, --pin-from and --pin-to "
                    "are not read", metavar="PHASES"), added_later=True)
    vacuum_every: float = setting(0.0, as_float, Option(
        "--vacuum-every", "VACUUM the jobs table every this many seconds on a connection of its own, as a scheduled "
                          "job would (harness.experiments.soak.vacuums); 0 for none", float), added_later=True)
    # a library's arrivals: each job as it falls due, through its enqueue kept open (soak.library); its runs stored
    # before sent them in steps of 0.2 s, a call each, and are not found for it (the soak's own: always as due)
    arrivals: str = setting("as_due", one_of(ARRIVALS, "arrivals"), added_later=_arrivals_stored_before)
    repeat: int = setting(0, as_int)

    def plan(self) -> list[soak_phases.Phase]:
        """The run's phases: as asked, or made from seconds, pin_from and the hold's end (its cap with
        hold_until_failure)."""
        if self.phases:
            return soak_phases.parse(self.phases, self.holder)
        return soak_phases.classic(self.seconds, self.pin_from, self.release_at, self.holder)

    @property
    def release_at(self) -> float:
        """When the hold ends at the latest: pin_to, or with hold_until_failure its cap; with phases, the first hold
        or ramp's end."""
        if self.phases:
            return soak_phases.first_judged(self.plan()).end_s
        return self.pin_from + self.hold_max if self.hold_until_failure else self.pin_to

    @property
    def length_s(self) -> float:
        return soak_phases.length(self.plan()) if self.phases else self.seconds

    def check(self) -> None:
        if not 1 <= self.workers <= MAX_WORKERS:
            raise UserError(f"workers must be between 1 and {MAX_WORKERS}, not {self.workers}")
        if isinstance(self.rate, str):
            share = float(self.rate[:-1])
            if not MIN_SHARE <= share <= MAX_SHARE:
                raise UserError(f"a rate as a share of the sustained rate must be between {MIN_SHARE:g}% and "
                                f"{MAX_SHARE:g}%, not {self.rate}")
        else:
            check_rate(self.rate)
        if not MIN_SECONDS <= self.seconds <= MAX_SECONDS:
            raise UserError(f"seconds must be between {MIN_SECONDS:g} and {MAX_SECONDS:g}, not {self.seconds:g}")
        if self.phases:
            self._check_phases()
        elif self.hold_until_failure:
            self._check_hold_max()
        elif not MIN_BEFORE_S <= self.pin_from < self.pin_to < self.seconds:
            raise UserError(f"the pin must start at {MIN_BEFORE_S:g} s or later and end before the run's "
                            f"{self.seconds:g} s, after it starts: not {self.pin_from:g} to {self.pin_to:g} s")
        if self.holder not in soak_holders.APPLIES_TO[self.mitigation]:
            raise UserError(f"mitigation {self.mitigation} does nothing to holder {self.holder} (it acts on "
                            f"{' or '.join(soak_holders.APPLIES_TO[self.mitigation])})")
        if not MIN_ANALYTICS_S <= self.analytics_s <= MAX_ANALYTICS_S:
            raise UserError(f"analytics s must be between {MIN_ANALYTICS_S:g} and {MAX_ANALYTICS_S:g}, not "
                            f"{self.analytics_s:g}")
        if not 1 <= self.analytics_sessions <= MAX_ANALYTICS_SESSIONS:
            raise UserError(f"analytics sessions must be between 1 and {MAX_ANALYTICS_SESSIONS}, not "
                            f"{self.analytics_sessions}")
        if not 0 <= self.job_ms <= MAX_JOB_MS:
            raise UserError(f"job ms must be between 0 and {MAX_JOB_MS:g}, not {self.job_ms:g}")
        if not 0 <= self.history_rows <= MAX_HISTORY_ROWS:
            raise UserError(f"history rows must be between 0 and {MAX_HISTORY_ROWS:,}, not {self.history_rows}")
        if not isinstance(self.rate, str) and not self.phases:
            check_jobs(self.rate, self.seconds, self.history_rows)
        if self.vacuum_every and not soak_vacuums.EVERY_S[0] <= self.vacuum_every <= soak_vacuums.EVERY_S[1]:
            raise UserError(f"vacuum every must be 0 (none) or between {soak_vacuums.EVERY_S[0]:g} and "
                            f"{soak_vacuums.EVERY_S[1]:g} s, not {self.vacuum_every:g}")
        if self.library != "none":
            self._check_library()

    def _check_phases(self) -> None:
        phases = self.plan()
        soak_phases.check(phases)
        if not MIN_SECONDS <= soak_phases.length(phases) <= MAX_SECONDS:
            raise UserError(f"the phases must last between {MIN_SECONDS:g} and {MAX_SECONDS:g} s, not "
                            f"{soak_phases.length(phases):g}")
        for phase in phases:
            if isinstance(phase.rate, str) and not MIN_SHARE <= float(phase.rate[:-1]) <= MAX_SHARE:
                raise UserError(f"phase {phase.label}: a share of the sustained rate must be between "
                                f"{MIN_SHARE:g}% and {MAX_SHARE:g}%, not {phase.rate}")
            if phase.rate is not None and not isinstance(phase.rate, str):
                check_rate(phase.rate)
            if phase.kind == "hold" and phase.holder not in soak_holders.APPLIES_TO[self.mitigation]:
                raise UserError(f"mitigation {self.mitigation} does nothing to phase {phase.label}'s holder "
                                f"{phase.holder}")
        if not soak_phases.needs_sustained(phases) and not isinstance(self.rate, str):
            check_jobs(max(soak_phases.rates(phases, self.rate, None)), soak_phases.length(phases),
                       self.history_rows)
        if self.hold_until_failure or self.library != "none":
            raise UserError(f"{'--hold-until-failure' if self.hold_until_failure else '--library'} is not raced "
                            "with --phases")

    def _check_hold_max(self) -> None:
        if not MIN_BEFORE_S <= self.pin_from < self.seconds:
            raise UserError(f"the hold must start at {MIN_BEFORE_S:g} s or later and before the run's "
                            f"{self.seconds:g} s, not at {self.pin_from:g} s")
        if not MIN_HOLD_S <= self.hold_max <= self.seconds - self.pin_from:
            raise UserError(f"hold max must be between {MIN_HOLD_S:g} s (the rule's {soak_outcomes.BEHIND_RUN_S} "
                            f"s of backlog, past the {soak_outcomes.WARMUP_S:g} s warm-up) and the "
                            f"{self.seconds - self.pin_from:g} s the run has after --pin-from, not "
                            f"{self.hold_max:g}")
        if self.library != "none":
            raise UserError("--hold-until-failure is not raced with --library: a library's hold is fixed")

    def _check_library(self) -> None:
        """What a library's run cannot take: its table is its own, made by its own migrations."""
        if self.history_rows:
            raise UserError(f"a library's table starts empty: history rows must be 0 with --library, not "
                            f"{self.history_rows}")
        if self.mitigation == "autovacuum" or self.vacuum_every:
            raise UserError(f"{'mitigation autovacuum' if self.mitigation == 'autovacuum' else '--vacuum-every'} "
                            "sets the soak's own table: it is not raced with --library")
        if libraries.version(self.library) is None:
            raise UserError(f"{self.library} is not installed here: {libraries.install_hint(self.library)}")


def workers_needed(p: SoakParameters) -> int:
    # the workers, the arrivals, the holder's sessions, the sampler's two, the partitions' maintenance, the
    # VACUUMs' if asked, the backends' watch, and the wal counters read at the end
    return p.workers + 1 + holder_sessions(p) + 2 + 1 + bool(p.vacuum_every) + 1 + 1


def holder_sessions(p) -> int:
    """The connections the holders open at most: every hold phase's holder connects as the run starts, one per
    analytics session, one for any other holder; at least two (a classic run's analytics default)."""
    sessions = {"analytics": p.analytics_sessions, "none": 0}
    return max(2, sum(sessions.get(phase.holder, 1) for phase in p.plan() if phase.kind == "hold"))


def label(p: SoakParameters) -> str:
    if p.library != "none":
        return f"{p.library} {p.holder} {p.rate if isinstance(p.rate, str) else f'{p.rate:g}/s'}"
    return f"{p.shape} {p.strategy} {p.holder} {p.rate if isinstance(p.rate, str) else f'{p.rate:g}/s'}" \
        + (f" in {len(p.phases)} phases" if p.phases else "") \
        + (f" vacuumed every {p.vacuum_every:g} s" if p.vacuum_every else "")


# --------------------------------------------------------------------------- the table


AGGRESSIVE_AUTOVACUUM = {"autovacuum_vacuum_scale_factor": 0, "autovacuum_vacuum_threshold": 500,
                         "autovacuum_vacuum_insert_scale_factor": 0, "autovacuum_vacuum_insert_threshold": 500,
                         "autovacuum_vacuum_cost_delay": 0}


def autovacuum_options(mitigation: str) -> str:
    """The storage options a table (or a partition) of the run takes: the aggressive autovacuum, or none."""
    if mitigation != "autovacuum":
        return ""
    return ", ".join(f"{name} = {value}" for name, value in AGGRESSIVE_AUTOVACUUM.items())


def set_autovacuum(conn, options: str) -> None:
    """The jobs table, or each of its partitions (a partitioned table takes no storage options), vacuumed once 500
    rows changed whatever its size, at full speed."""
    partitions = [f"{SCHEMA}.{name}" for (name,) in conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        f"WHERE i.inhparent = '{JOBS}'::regclass")]
    for table in partitions or [JOBS]:
        conn.execute(f"ALTER TABLE {table} SET ({options})")


def create_table(conn, shape: str, history_rows: int, mitigation: str = "none") -> int:
    """A fresh jobs table of the shape; returns its partitions made (0 where it has none)."""
    schema.ensure_schema(conn)
    schema.drop_owned(conn)
    soak_partitions.drop_detached(conn)
    made = 0
    if shape == "partitioned":
        made = soak_partitions.create_table(conn, history_rows)
    else:
        conn.execute(f"""CREATE TABLE {JOBS} (
                             id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                             status     text NOT NULL DEFAULT 'pending',
                             started_at timestamptz)""")
    if history_rows:
        conn.execute(f"INSERT INTO {JOBS} (status, started_at) SELECT 'done', now() "
                     "FROM generate_series(1, %s)", [history_rows])
    if shape == "history_indexed":
        conn.execute(schema.PARTIAL_INDEX_SQL)
    if autovacuum_options(mitigation):  # the partitions made later take it too (soak_partitions.Maintenance)
        set_autovacuum(conn, autovacuum_options(mitigation))
    conn.execute(f"VACUUM ANALYZE {JOBS}")
    return made


def _workers(context, parent: int, url: str, p: SoakParameters, start, stop, results, counts=None) -> list:
    return [context.Process(target=soak_processes.worker_main,
                            args=(i, parent, url, p.shape, p.strategy, p.job_ms / 1000, p.synchronous_commit, start,
                                  stop, results, counts),
                            name=f"claimrace-soak-worker-{i}", daemon=True) for i in range(p.workers)]


# what this process measured already, per server and table setup: arms that differ only in what holds the horizon
# (a control and its held arm, a timeout on the same hold) run at one rate
_SUSTAINED: dict[tuple, dict] = {}


def sustained_rate(db: database.Database, p: SoakParameters, run_id: str = "") -> dict:
    """The rate the run's workers sustain on its table with nothing pinned, measured once per server and table
    setup (shape, claim, history, workers, job length, storage, commits, the table's autovacuum) in a process;
    `measured_for` names the run it was measured for."""
    key = (db.url, p.shape, p.strategy, p.history_rows, p.workers, p.job_ms, p.storage, p.synchronous_commit,
           p.mitigation == "autovacuum")
    if key not in _SUSTAINED:
        _SUSTAINED[key] = _measure_sustained(db, p) | {"measured_for": run_id}
    return _SUSTAINED[key]


def _measure_sustained(db: database.Database, p: SoakParameters) -> dict:
    """The rate the run's workers sustain on its table with nothing pinned: SUSTAIN_JOBS pending jobs (after its
    history rows), drained for SUSTAIN_S, the claims after its first SUSTAIN_WARMUP_S counted. A queue drained dry
    first makes it a lower bound (lower_bound)."""
    with db.connect() as conn:
        made = create_table(conn, p.shape, p.history_rows, p.mitigation)
        if made:  # partitions for the full queue too
            for index in range(made, (p.history_rows + SUSTAIN_JOBS) // soak_partitions.PARTITION_IDS + 1):
                soak_partitions.create_partition(conn, index)
        conn.execute(f"INSERT INTO {JOBS} (status) SELECT 'pending' FROM generate_series(1, %s)", [SUSTAIN_JOBS])
        conn.execute(f"ANALYZE {JOBS}")
    context = mp.get_context("fork")
    start, stop, results = context.Event(), context.Event(), context.Queue()
    processes = _workers(context, os.getpid(), db.url, p, start, stop, results)
    try:
        for proc in processes:
            proc.start()
        time.sleep(1.0)
        began = time.time_ns()
        start.set()
        time.sleep(SUSTAIN_S)
        stop.set()
        got = soak_processes.collect(results, len(processes), STOP_GRACE_S + 10)
    finally:
        soak_processes.stop_all(processes, stop)
    if got["errors"] or len(got["workers"]) != p.workers:
        raise RuntimeError("a worker failed while the sustained rate was measured: "
                           + (got["errors"] or ["it did not report"])[0])
    returned = np.concatenate([w[2] for w in got["workers"]])
    counted = returned[(returned >= began + SUSTAIN_WARMUP_S * 1e9) & (returned < began + SUSTAIN_S * 1e9)]
    return {"sustained_rate": float(len(counted) / (SUSTAIN_S - SUSTAIN_WARMUP_S)),
            "lower_bound": len(returned) >= SUSTAIN_JOBS, "sustain_s": SUSTAIN_S, "sustain_jobs": SUSTAIN_JOBS}


def check_server(major: int, p: SoakParameters) -> None:
    """What this server cannot do of what the run asks, in one line, before any of the run starts."""
    if p.mitigation == "transaction_timeout" and major < soak_holders.TRANSACTION_TIMEOUT_SINCE:
        raise UserError(f"transaction_timeout needs PostgreSQL {soak_holders.TRANSACTION_TIMEOUT_SINCE} or later; "
                        f"this server is {major} (--pg-version 18 for the embedded one)")


def measure(db: database.Database, p: SoakParameters, run_id: str, progress: bool = False) -> Measured:
    with db.connect() as conn:  # the server's own version: one named by its URL may not be the one asked for
        check_server(pgstats.server_major(conn), p)
    plan = p.plan()
    sustained = sustained_rate(db, p, run_id) if isinstance(p.rate, str) or soak_phases.needs_sustained(plan) \
        else None
    rate = p.rate if not isinstance(p.rate, str) else sustained["sustained_rate"] * float(p.rate[:-1]) / 100
    phase_rates = soak_phases.rates(plan, rate, sustained and sustained["sustained_rate"])
    schedule = soak_phases.schedule(plan, phase_rates)
    if sustained is not None:  # known only now: the bounds a fixed rate is checked against before anything starts
        for each in phase_rates:
            check_rate(each)
        check_jobs(max(phase_rates), p.length_s, p.history_rows)
    with db.connect() as conn:
        made = create_table(conn, p.shape, p.history_rows, p.mitigation)
        settings = {name: conn.execute(f"SHOW {name}").fetchone()[0]
                    for name in ("fsync", "track_wal_io_timing", "autovacuum_naptime",
                                 "autovacuum_vacuum_scale_factor", "autovacuum_vacuum_threshold")}
        local = activity.server_is_local(conn)
        wal_before = soak_flushes.wal_syncs(conn)
    context = mp.get_context("fork")
    start, stop, results = context.Event(), context.Event(), context.Queue()
    parent = os.getpid()
    clock = context.Value("q", 0)  # the run's start (ns), set before the start: the arrivals' schedule counts from it
    counts = context.Array("q", 2)  # (arrived, claimed) so far, read live: hold_until_failure's release
    processes = [context.Process(target=soak_processes.arrivals_main,
                                 args=(parent, db.url, schedule, p.synchronous_commit, clock, start, stop, results,
                                       counts),
                                 name="claimrace-soak-arrivals", daemon=True)]
    processes += _workers(context, parent, db.url, p, start, stop, results, counts)
    holder = sampler = bar = maintenance = vacuums = None
    backends = clients = None
    try:
        for proc in processes:
            proc.start()
        watch_url = db.url
        backends = activity.BackendWatch(lambda: _backends(watch_url), 0.5).start() if local else None
        clients = activity.BackendWatch(lambda: [proc.pid for proc in processes if proc.pid], 0.5).start()
        time.sleep(1.0)  # every process connected and prepared before the clock starts
        began = time.monotonic()
        start_ns = time.time_ns()
        clock.value = start_ns
        start.set()
        holder = soak_holders.Holders([soak_holders.Holder(db.url, phase.holder, phase.start_s, phase.end_s, began,
                                                           p.mitigation, analytics_s=p.analytics_s,
                                                           analytics_sessions=p.analytics_sessions)
                                       for phase in plan if phase.kind == "hold"])
        holder.start()
        sampler = Sampler(db.url, began).start()
        vacuums = soak_vacuums.Vacuums(db.url, began, p.vacuum_every).start() if p.vacuum_every else None
        maintenance = soak_partitions.Maintenance(db.url, began, made, autovacuum_options(p.mitigation)).start() \
            if made else None
        bar = _progress(p, progress)
        release = soak_release.run_until_done(p, began, counts, holder, processes, bar)
        ended_s = time.monotonic() - began
        stop.set()
        got = soak_processes.collect(results, len(processes), STOP_GRACE_S + 10)
        with db.connect() as conn:
            wal_after = soak_flushes.wal_syncs(conn)
    finally:
        # first: a pass left running would vacuum the next run's table
        vacuumed = vacuums.stop() if vacuums is not None else pd.DataFrame(columns=soak_vacuums.COLUMNS)
        soak_processes.stop_all(processes, stop)
        events = holder.stop() if holder is not None else []
        samples = sampler.stop() if sampler is not None else pd.DataFrame(columns=SAMPLE_COLUMNS)
        partitions = maintenance.stop() if maintenance is not None \
            else pd.DataFrame(columns=soak_partitions.EVENT_COLUMNS)
        server_share = backends.stop() if backends is not None else activity.share_split([])
        client_share = clients.stop() if clients is not None else activity.share_split([])
        if bar is not None:
            bar.close()
    if got["errors"]:
        raise RuntimeError("a soak process failed: " + got["errors"][0])
    flushes = soak_flushes.flush_figures(db, settings, wal_before, wal_after)
    errors = {"sampler": sampler.error if sampler is not None else None,
              "samples_missed": dict(sampler.missed) if sampler is not None else None,
              "partitions": maintenance.error if maintenance is not None else None}
    return _measured(p, (plan, rate, phase_rates, schedule), sustained, got, events, samples,
                     (partitions, vacuumed), start_ns, ended_s, settings | flushes, client_share, server_share, errors,
                     release)


def _backends(url: str) -> list[int]:
    with database.connect(url, application_name="claimrace-soak-watch") as conn:
        return [int(r[0]) for r in conn.execute("SELECT pid FROM pg_stat_activity "
                                                "WHERE application_name LIKE 'claimrace-soak-worker-%'")]


def _progress(p: SoakParameters, progress: bool):
    if not progress:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=int(math.ceil(p.length_s)), desc=f"soak {label(p)}", unit="s", leave=False)


def _measured(p: SoakParameters, planned: tuple, sustained: dict | None, got: dict, events: list[dict],
              samples: pd.DataFrame, maintained: tuple, start_ns: int, ended_s: float, settings: dict,
              client_share: dict, server_share: dict, errors: dict, release: dict) -> Measured:
    plan, rate, phase_rates, schedule = planned  # the phases, the arm's rate, each phase's, the arrivals' schedule
    partitions, vacuumed = maintained  # the partitions' maintenance and the arm's own VACUUMs, each pass kept
    ids, due, committed = got.get("arrivals", (np.array([], np.int64),) * 3)
    workers = got["workers"]
    job_ids = np.concatenate([w[1] for w in workers]) if workers else np.array([], np.int64)
    returned = np.concatenate([w[2] for w in workers]) if workers else np.array([], np.int64)
    took_ms = np.concatenate([w[3] for w in workers]) / 1e6 if workers else np.array([], float)
    claims = pd.DataFrame({"worker": np.concatenate([np.full(len(w[1]), w[0]) for w in workers])
                           if workers else np.array([], int),
                           "job_id": job_ids, "returned_ns": returned, "claim_ms": took_ms})
    arrivals = pd.DataFrame({"job_id": ids, "due_ns": due, "committed_ns": committed})
    series = soak_outcomes.per_second(committed, returned, took_ms, start_ns, ended_s)
    pin_to = release["at_s"]  # the release: pin_to, or where hold_until_failure let go
    seconds = (returned - start_ns) / 1e9
    first = soak_phases.first_judged(plan)  # the window the one-window rule reads: the hold, or the first ramp
    pin_from = first.start_s
    window_ms = {"before": took_ms[(seconds >= soak_outcomes.WARMUP_S) & (seconds < pin_from)],
                 "during": took_ms[(seconds >= pin_from) & (seconds < pin_to)],
                 "after": took_ms[seconds >= pin_to]}
    shares = (client_share["runnable_share"], client_share["running_share"], server_share["runnable_share"])
    behind = soak_outcomes.arrivals_behind(series, rate, scheduled=[schedule.due_by(t + 1) for t in series["second"]])
    judged = soak_outcomes.judge(series, pin_from, pin_to, ended_s, behind, activity.cpu_bound(*shares),
                                 held=first.holder != "none")
    samples = samples[samples["t_s"] <= ended_s]  # not the seconds the processes took to stop
    # pickup: a claimed job's claim return minus its due time (open loop: lateness of the arrivals counts)
    due_by_id = pd.Series(due, index=ids)
    pickup_ms = (claims["returned_ns"] - claims["job_id"].map(due_by_id)) / 1e6
    claims["pickup_ms"] = pickup_ms
    parts = soak_outcomes.windows(series, pin_from, pin_to)
    phased = soak_outcomes.judge_phases(series, [phase.as_dict() | {"rate": each} for phase, each in
                                                 zip(plan, phase_rates)], behind, activity.cpu_bound(*shares), samples)
    ended_early = [e for e in events if e["event"] == "ended_early"]
    summary = {
        "shape": p.shape, "strategy": p.strategy, "library": None, "rate": rate, "rate_asked": p.rate,
        "sustained_rate": sustained["sustained_rate"] if sustained else None,
        "sustained_rate_is_lower_bound": sustained["lower_bound"] if sustained else None, "workers": p.workers,
        "seconds": p.length_s, "holder": p.holder, "pin_from": pin_from, "pin_to": pin_to,
        "pin_s": pin_to - pin_from, "hold_until_failure": p.hold_until_failure,
        "hold_asked": p.release_at - pin_from, "released_because": release["because"],
        # the run as phases (harness.experiments.soak.phases), each judged against the clean one before it
        "phases": list(p.phases), "phase_results": phased,
        "job_ms": p.job_ms, "history_rows": p.history_rows, "analytics_s": p.analytics_s,
        "analytics_sessions": p.analytics_sessions,
        "mitigation": p.mitigation, "repeat": p.repeat, **soak_vacuums.summary(vacuumed, p.vacuum_every),
        "mitigation_setting": soak_holders.SESSION_SETTINGS.get(p.mitigation),  # the server setting it is, if one
        # a server not started here keeps its own storage: what it is is not known here
        "storage": settings["storage_found"] or "not known (a server not started here)",
        "filesystem": settings["filesystem"], "synchronous_commit": p.synchronous_commit,
        "fsync": settings["fsync"], "wal_syncs": settings["wal_syncs"],
        "wal_sync_ms_per_sync": settings["wal_sync_ms_per_sync"], "pg_test_fsync_ms": settings["pg_test_fsync_ms"],
        "jobs_arrived": int(len(ids)), "jobs_claimed": int(len(job_ids)),
        "duplicate_jobs": int(len(job_ids) - len(np.unique(job_ids))),
        "lost_races": int(sum(w[4] for w in workers)), "empty_polls": int(sum(w[5] for w in workers)),
        "claim_errors": int(sum(w[6] for w in workers)),
        "backlog_max": int(series["backlog"].max()) if len(series) else 0,
        "backlog_at_end": int(series["backlog"].iloc[-1]) if len(series) else 0,
        **{f"{what}_per_s_{window}": rate_of(parts[window], what) for window in ("before", "during", "after")
           for what in ("arrived", "claimed")},
        **{f"claim_p99_ms_{window}": quantile(window_ms[window], 99) for window in window_ms},
        "pickup_p99_ms": quantile(pickup_ms.dropna().to_numpy(), 99),
        **soak_sampler.summary(samples, pin_from), **soak_outcomes.cpu_mark(samples, pin_from, pin_to),
        "pin_ended_early_s": ended_early[0]["t_s"] if ended_early else None,
        "partitions_dropped": int((partitions["event"] == "dropped").sum()) if p.shape == "partitioned" else None,
        "partition_ddl_waited": int(partitions["event"].str.endswith("_waited").sum())
        if p.shape == "partitioned" else None,
        **{key: judged[key] for key in soak_outcomes.judged_keys()},
        **{f"{column}_at_fall_behind": soak_sampler.at(samples, pin_from + judged["seconds_to_fall_behind"], column)
           if judged["seconds_to_fall_behind"] is not None else None
           for column in ("buffers_per_claim", "horizon_age_s", "n_dead_tup")},
        "arrivals_behind": behind,
        "client_runnable_share": shares[0], "client_running_share": shares[1], "backend_runnable_share": shares[2],
        "cpu_bound": activity.cpu_bound(*shares), "cpu_bound_side": activity.cpu_bound_side(*shares),
        "ended_s": ended_s}
    checks = {"every_process_reported": "arrivals" in got and len(workers) == p.workers,
              "no_job_claimed_twice": summary["duplicate_jobs"] == 0,
              "every_claimed_job_arrived": bool(claims["pickup_ms"].notna().all()),
              "sampled": soak_sampler.covered(samples, ended_s),
              "partitions_kept": errors["partitions"] is None}
    checks["passed"] = all(checks.values())
    return Measured(
        tables={"claims": claims, "arrivals": arrivals, "series": series, "samples": samples,
                "holder": pd.DataFrame(events, columns=["t_s", "session", "event", "detail"]),
                "partitions": partitions, "vacuums": vacuumed},
        procedure={"shape": p.shape, "claim": CLAIM_SQL[p.strategy], "finish": FINISH_SQL[p.shape],
                   "sustained": sustained,
                   "arrivals": INSERT_SQL, "read_explained": READ_SQL, "holder": p.holder,
                   "analytics_s": p.analytics_s if p.holder == "analytics" else None,
                   "analytics_sessions": p.analytics_sessions if p.holder == "analytics" else None,
                   "analytics": soak_holders.analytics_sql() if p.holder == "analytics" else None, "poll_s": POLL_S,
                   "sample_s": SAMPLE_S, "explain_every_s": EXPLAIN_EVERY_S, "server_settings": settings,
                   "verdict_rule": soak_outcomes.rule_settings(),
                   "partitions": {"ids_each": soak_partitions.PARTITION_IDS, "premake": soak_partitions.PREMAKE,
                                  "maintenance_s": soak_partitions.MAINTENANCE_S,
                                  "lock_timeout_ms": soak_partitions.LOCK_TIMEOUT_MS} if p.shape == "partitioned"
                   else None,
                   "errors": errors},
        checks=checks,
        results={"summary": summary, "judged": judged})


def rate_of(window: pd.DataFrame, column: str) -> float | None:
    return float(window[column].sum() / len(window)) if len(window) else None


def quantile(values, q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def summarise(run: Run) -> dict:
    return run.results["summary"]
