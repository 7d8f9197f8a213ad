"""The job libraries raced with their own workers: N worker processes drain the same queue through each library.

One run: a fresh database, the library's own schema (its migrations), an audit
trigger on its jobs table that records every enqueue and every claim (the
library's own transition to its claimed state), `job_count` no-op jobs enqueued
through its API, then `worker_count` processes, each running the library's own
fetch-and-complete loop at concurrency 1 (harness.libraries.<name>.adapter.work), held
at a start barrier until all are connected and released together. The no-op
job appends the id it was handed to its worker's execution log; a worker stops
when the library finds the queue empty, or is killed at the run's bound.

What a run measures, per job where it says so:

- executed twice: ids in more than one execution (the workers' logs);
  claimed twice: ids with more than one claim in the audit;
- jobs per second: distinct jobs executed / the drain (release to the last execution); the workers' own shutdown
  after it (a library noticing the queue is empty) is reported apart;
- pickup: each job's first claim after the release (all jobs were queued before it);
- statements: lines the server logged for the library's database (log_statement = all, a server started here
  only), and transactions (pg_stat_database) for any server;
- WAL bytes: pg_current_wal_lsn() over the window (the audit's own rows included);
- updates, HOT updates and dead tuples of the jobs table (pg_stat_user_tables);
- server CPU: the whole server's over the window, background processes included (a server on this machine); the
  workers' own run-queue share marks the run CPU-bound (harness.server.activity.cpu_bound);
- advisory locks still held at the end (pg_locks);
- for a library whose table sends a NOTIFY on every change (NOTIFIES_ON_CHANGE), what a notification costs its
  worker_count idle listening sessions in transactions (harness.server.pgstats.notification_transactions), after
  the run.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from psycopg import sql

from harness import libraries
from harness.libraries import models, releases, settings
from harness.errors import UserError
from harness.experiments.contract import (Measured, Option, Parameters, as_int, as_ints, check_each, int_list, one_of,
                                         setting)
from harness.experiments.limits import check_race_size
from harness.experiments.race.trials import as_pooler_mode, as_poolers, client_list
from harness.server import activity, database, pgstats, pooler
from harness.experiments import library_runtime as runtime
from harness.experiments.libraries import statements as statement_log
from harness.experiments.libraries import summary as run_summary

MAX_WORKERS = 64
MAX_JOBS = 100_000
# a run's bound: a library that has not drained by then is stopped, and its unexecuted jobs are counted as such
MIN_BOUND_S = 60.0
BOUND_S_PER_JOB = 0.05
PROBE_NOTIFICATIONS = 100  # NOTIFYs the listener probe sends (NOTIFIES_ON_CHANGE)


def as_library(name: str, value) -> str:
    return libraries.get(str(value)).NAME


def as_release_of(name: str, value) -> str:
    """A library, or an earlier release of it the probe may race ("chancy==0.25.0": harness.libraries.releases)."""
    library, release = releases.split(str(value))
    library = as_library(name, library)
    releases.check(library, release)
    return library if release == releases.INSTALLED else f"{library}=={release}"


as_configuration = one_of(settings.CONFIGURATIONS, "setting")
LOSSES = ("default", "frozen")
as_loss = one_of(LOSSES, "lost by")


def as_release(name: str, value) -> str:
    return str(value)  # checked against its library in LibraryParameters.check


def as_libraries(name: str, values) -> tuple[str, ...]:
    if isinstance(values, str):
        values = parse_libraries(values)
    names = tuple(as_release_of(name, v) for v in values)
    if not names:
        raise UserError("give at least one library")
    return names


def parse_libraries(text: str) -> tuple[str, ...]:
    """One name or a comma-separated list, where 'all' stands for every library raced here with its own workers
    (a sweep leaves out those not installed, with one line each) and 'models' for every library modelled for a
    fault run: the command's --library, and a params section's `libraries` given as text (`libraries: all`)."""
    names = []
    for token in (t.strip() for t in text.split(",") if t.strip()):
        names += libraries.NAMES if token == "all" else libraries.MODELS if token == "models" else [token]
    names = list(dict.fromkeys(names))
    for name in names:
        libraries.get(releases.split(name)[0])
    return tuple(names)


# a fault run (harness.experiments.libraries.faults): one fault injected into a library's workers, then its ledger
FAULTS = ("kill", "pause", "short_pause", "stall", "terminate", "restart")
# a stall (--fault stall --stall SECONDS@OFFSET): the worker running a job frozen OFFSET seconds into it for SECONDS
# (0: the control, nothing frozen), its jobs STALL_JOB_S long so a stall can begin beats into one; only for a library
# whose hold on a running job is a heartbeat on a fixed schedule (its STALL)
STALL_JOB_S = 4.0
MAX_STALL_S = 10.0


def as_stall(name: str, value) -> str:
    """SECONDS@OFFSET (both in seconds, the stall within a job with a second of it left), or none."""
    text = str(value).strip()
    if text == "none":
        return text
    try:
        seconds, offset = (float(part) for part in text.split("@"))
    except ValueError:
        raise UserError(f"a stall is SECONDS@OFFSET, the worker frozen OFFSET seconds into its job for SECONDS "
                        f"(like 1.5@0.9), not {text!r}") from None
    if not 0 <= seconds <= MAX_STALL_S or not 0 <= offset <= STALL_JOB_S - 1:
        raise UserError(f"a stall lasts 0 to {MAX_STALL_S:g} s and begins 0 to {STALL_JOB_S - 1:g} s into its "
                        f"{STALL_JOB_S:g} s job, not {text}")
    return f"{seconds:g}@{offset:g}"


def stall_of(text: str) -> tuple[float, float] | None:
    """(seconds, offset) of a stall, None for none."""
    return None if text == "none" else tuple(float(part) for part in text.split("@"))
# short_pause freezes the worker for this share of its library's raced recovery setting, short of it, so that no
# outcome hinges on a pause that outlasts the recovery; a library with nothing set to recover a job within
# a run (libraries.recovers_within_s) has no setting to pause short of, and no short_pause run
SHORT_PAUSE_SHARE = 0.5


def short_pause_s(name: str) -> float | None:
    """How long short_pause freezes a worker of this library; None where nothing is set to recover its job."""
    if libraries.recovers_within_s(name) is None:
        return None
    return SHORT_PAUSE_SHARE * libraries.get(name).RECOVERY["raced_s"]


def first_beat_s(name: str) -> float:
    """When a stall run's job's hold is first renewed, counted from its start: a beat of its STALL's setting."""
    declared = libraries.get(name).STALL
    return declared["beat_share"] * declared["raced_s"]


def stallable() -> list[str]:
    """The libraries a stall is raced on: those whose hold on a running job is a heartbeat on a schedule (STALL)."""
    return [name for name in libraries.NAMES if libraries.get(name).STALL is not None]


# under a library's production setting, the faults whose recovery it sets: a dead worker and one stopped past it
PRODUCTION_FAULTS = ("kill", "pause")
FAULT_MIN_WORKERS, FAULT_MAX_WORKERS = 2, 8  # one to hit, one to recover
FAULT_MAX_JOBS = 50  # each job lasts a second
FAULT_WORKERS, FAULT_JOBS = (3,), 6  # a fault run's defaults
# a probe (harness.experiments.libraries.probe): one job, a worker to lose it and one to take it on
PROBES = ("stale_completion",)
PROBE_MIN_WORKERS, PROBE_WORKERS, PROBE_JOBS = 2, (2,), 1


def _one_or_none(choices: tuple[str, ...], what: str):
    """A validator: one of choices, or none."""
    def one(name: str, value) -> str:
        if value not in ("none", *choices):
            raise UserError(f"{what} must be one of {', '.join(choices)} (or none), not {value!r}")
        return str(value)
    return one


def _several(one, refusal: str):
    """A validator of a list (or one value) whose every item `one` accepts; `refusal` for an empty one."""
    def several(name: str, values) -> tuple[str, ...]:
        values = (values,) if isinstance(values, str) else tuple(values)
        if not values:
            raise UserError(refusal)
        return tuple(one(name, v) for v in values)
    return several


as_probe = _one_or_none(PROBES, "probe")
as_probes = _several(as_probe, "give a probe, or none")
as_pooler_setting = one_of(settings.POOLER_SETTINGS, "pooler setting")
as_pooler_settings = _several(as_pooler_setting, "give at least one pooler setting")
as_configurations = _several(as_configuration, "give at least one setting")
as_losses = _several(as_loss, "give at least one way to lose the job")
as_fault = _one_or_none(FAULTS, "fault")
as_faults = _several(as_fault, "give at least one fault, or none")
as_stalls = _several(as_stall, "give at least one stall, or none")


# what --fault all races: every fault but the stall, which is asked with its own --stall
ALL_FAULTS = tuple(fault for fault in FAULTS if fault != "stall")


def parse_faults(text: str) -> tuple[str, ...]:
    """'all' (every fault but the stall), one fault, or a comma-separated list."""
    return ALL_FAULTS if text.strip() == "all" else tuple(t.strip() for t in text.split(",") if t.strip())


@dataclass(frozen=True)
class LibraryParameters(Parameters):
    """One run: worker_count processes drain job_count no-op jobs through one library's own worker; or, with a
    fault, job_count one-second jobs under that fault (harness.experiments.libraries.faults)."""

    library: str = setting("procrastinate", as_library)
    worker_count: int = setting(4, as_int)
    job_count: int = setting(500, as_int)
    repeat: int = setting(0, as_int)
    fault: str = setting("none", as_fault, added_later=True)
    # PgBouncer between the workers and the server (harness.server.pooler); none before it
    pooler: str = setting("none", as_pooler_mode, added_later=True)
    # through the pooler with the library's defaults, or with what it documents for a transaction pooler
    # (harness.libraries: POOLER_SETTING); default before it
    pooler_setting: str = setting("default", as_pooler_setting, added_later=True)
    # a probe instead of a drain or a fault run (harness.experiments.libraries.probe); none before it
    probe: str = setting("none", as_probe, added_later=True)
    # the release probed: the one installed, or an earlier one (harness.libraries.releases); installed before it
    release: str = setting(releases.INSTALLED, as_release, added_later=True)
    # the library as it comes, or as its own docs set it for production (its PRODUCTION); default before it
    configuration: str = setting("default", as_configuration, added_later=True)
    # how the probe's first holder loses its job: as the library's hold says (frozen, or its sessions cut where its
    # hold is its session), or frozen with its sessions kept (a hung worker still connected); default before it
    lost_by: str = setting("default", as_loss, added_later=True)
    # a stall fault run's stall, SECONDS@OFFSET (as_stall); none before it
    stall: str = setting("none", as_stall, added_later=True)

    def check(self) -> None:
        check_each([self.worker_count], "worker count", 1, MAX_WORKERS)
        if self.probe != "none":
            if self.fault != "none" or self.pooler != "none":
                raise UserError("a probe runs on its own: no --fault, no --pooler")
            if not PROBE_MIN_WORKERS <= self.worker_count <= FAULT_MAX_WORKERS:
                raise UserError(f"a probe takes {PROBE_MIN_WORKERS} to {FAULT_MAX_WORKERS} workers (one to lose the "
                                f"job, one to take it on), not {self.worker_count}")
            if self.job_count != PROBE_JOBS:
                raise UserError(f"a probe races one job, not {self.job_count}")
        if self.lost_by == "frozen":
            if not libraries.get(self.library).HOLDS_BY_SESSION:
                raise UserError(f"{self.library}'s probe freezes its first holder already: --lost-by frozen is for "
                                "a library whose hold is its session (its sessions are cut by default)")
            if self.probe == "none":
                raise UserError("--lost-by is the probe's: add --probe stale_completion")
        if self.configuration == "production":
            if libraries.get(self.library).PRODUCTION is None:
                raise UserError(f"{self.library} declares no production setting beyond its defaults (PRODUCTION)")
            if self.probe == "none" and self.fault not in PRODUCTION_FAULTS:
                raise UserError(f"the production setting is raced by the probe and by a fault run of "
                                f"{' or '.join(PRODUCTION_FAULTS)}, not by {self.fault}")
        if self.release != releases.INSTALLED:
            releases.check(self.library, self.release)
            if self.probe == "none":
                raise UserError(f"an earlier release ({self.library}=={self.release}) is raced by the probe only: "
                                "add --probe stale_completion")
        if self.pooler_setting == "documented":
            if self.pooler == "none":
                raise UserError("the documented pooler setting is for a run through the pooler, not directly")
            if self.pooler != "transaction":  # a session-mode run would be shown as the transaction arm
                raise UserError("the documented pooler setting is raced through the transaction pooler only")
            if self.fault != "none":
                raise UserError("the documented pooler setting is raced in a drain, not a fault run")
            if libraries.documented_setting(self.library) is None:
                raise UserError(f"{self.library} documents no setting for a pooler")
        check_each([self.job_count], "job count", 1, MAX_JOBS)
        if self.fault == "none" and self.probe == "none" and libraries.is_model(self.library):
            models.refuse_drain(self.library)
        if self.fault != "none":
            if not FAULT_MIN_WORKERS <= self.worker_count <= FAULT_MAX_WORKERS:
                raise UserError(f"a fault run takes {FAULT_MIN_WORKERS} to {FAULT_MAX_WORKERS} workers (one to hit, "
                                f"one to recover), not {self.worker_count}")
            if not self.worker_count <= self.job_count <= FAULT_MAX_JOBS:
                raise UserError(f"a fault run takes between the worker count ({self.worker_count}) and "
                                f"{FAULT_MAX_JOBS} jobs, not {self.job_count}")
            if self.fault == "short_pause" and short_pause_s(self.library) is None:
                raise UserError(f"{self.library} has no recovery set within a run to pause short of: no short_pause")
        if (self.fault == "stall") != (self.stall != "none"):
            raise UserError("a stall run takes --fault stall and --stall SECONDS@OFFSET, each with the other")
        if self.fault == "stall" and libraries.get(self.library).STALL is None:
            raise UserError(f"{self.library} declares no heartbeat schedule to stall against (STALL): a stall is "
                            f"raced on {', '.join(stallable())}")
        if self.fault == "stall" and stall_of(self.stall)[1] >= first_beat_s(self.library):
            raise UserError(f"a stall of {self.library} begins within its job's first beat, before "
                            f"{first_beat_s(self.library):g} s (its hold was then last written when it was picked), "
                            f"not at {stall_of(self.stall)[1]:g} s")
        if libraries.version(self.library) is None:
            raise UserError(f"{self.library} is not installed here: {libraries.install_hint(self.library)}")


_SAID_NOT_INSTALLED: set = set()


@dataclass(frozen=True)
class LibrarySweep(Parameters):
    """Every library at every worker count, `repeats` times: what `python -m harness libraries` and a params
    section ask."""

    libraries: tuple = setting(libraries.NAMES, as_libraries, Option(
        "--library", f"one of {', '.join(libraries.NAMES)}; a comma list; or all (every one; one not installed here "
                     "is left out, with a line saying what to install); with a "
                     f"fault also {', '.join(libraries.MODELS)} or models (modelled from their sources)",
        parse_libraries, default_text="all"))
    worker_counts: tuple | None = setting(None, lambda name, v: None if v is None else as_ints(name, v), Option(
        "--workers", "worker processes, comma-separated: a sweep", int_list,
        default_text=f"1,4,16,32; with a fault {','.join(map(str, FAULT_WORKERS))}"))
    job_count: int | None = setting(None, lambda name, v: None if v is None else as_int(name, v), Option(
        "--jobs", "jobs queued per run", int, default_text=f"500; with a fault {FAULT_JOBS}"))
    repeats: int = setting(1, as_int, Option("--repeat", "runs per library and worker count", int))
    faults: tuple = setting(("none",), as_faults, Option(
        "--fault", f"{', '.join(FAULTS)}: inject it into the workers and keep the ledger of every job, instead of "
                   "a drain; a comma list; or all", parse_faults, default_text="none"))
    poolers: tuple = setting(("none",), as_poolers, Option(
        "--pooler", "PgBouncer between the workers and the server: transaction or session mode (none: directly); a "
                    "comma list runs each", client_list, default_text="none", metavar="{none,transaction,session}"))
    pooler_settings: tuple = setting(("default",), as_pooler_settings, Option(
        "--pooler-setting", "default: each library as it comes; documented: also in transaction mode with what the "
                            "library documents for a transaction pooler (prepared statements off), for each library "
                            "that documents one; a comma list runs each", client_list, default_text="default",
        metavar="{default,documented}"))
    configurations: tuple = setting(("default",), as_configurations, Option(
        "--setting", "default: each library as it comes; production: as its own docs set it for production "
                     "(procrastinate's periodic retry of stalled jobs), each library whose docs set more than its "
                     "defaults; default,production runs both", client_list, default_text="default",
        metavar="{default,production}"))
    losses: tuple = setting(("default",), as_losses, Option(
        "--lost-by", "default: the probe's first holder loses its job as its library's hold says (frozen; its "
                     "sessions cut where its hold is its session); frozen: frozen with its sessions kept, a hung "
                     "worker still connected, each library whose hold is its session; default,frozen runs both",
        client_list, default_text="default", metavar="{default,frozen}"))
    stalls: tuple = setting(("none",), as_stalls, Option(
        "--stall", "with --fault stall, SECONDS@OFFSET: the worker running a job frozen OFFSET seconds into its "
                   f"{STALL_JOB_S:g} s job for SECONDS (0: the control); a comma list runs each",
        client_list, default_text="none", metavar="SECONDS@OFFSET"))
    probes: tuple = setting(("none",), as_probes, Option(
        "--probe", f"{', '.join(PROBES)}: one job whose first holder loses it and completes it while a second "
                   "holder runs it, per library (models too), instead of a drain",
        client_list, default_text="none", metavar="{stale_completion}"))

    def check(self) -> None:
        faulted, probed = self.faults != ("none",), self.probes != ("none",)
        if self.worker_counts is None:  # the default of the kind of run asked
            object.__setattr__(self, "worker_counts", PROBE_WORKERS if probed else FAULT_WORKERS if faulted
                               else (1, 4, 16, 32))
        if self.job_count is None:
            object.__setattr__(self, "job_count", PROBE_JOBS if probed else FAULT_JOBS if faulted else 500)
        if probed and "none" in self.probes:
            raise UserError("a sweep is either probes or not, not both")
        if faulted and "none" in self.faults:
            raise UserError("a sweep is either drains (fault none) or faults, not both")
        if ("stall" in self.faults) != (self.stalls != ("none",)) or (len(self.stalls) > 1 and "none" in self.stalls):
            raise UserError("--fault stall takes --stall SECONDS@OFFSET (a comma list runs each), and --stall takes "
                            "--fault stall")
        check_each(self.worker_counts, "worker count", 1, MAX_WORKERS)
        check_each([self.repeats], "repeats", 1, 20)
        for mode in self.poolers:
            pooler.check_mode(mode, installed=False)  # pgbouncer itself is looked for when a run starts it
        for one in self.runs():
            one.check()

    def runs(self) -> list[LibraryParameters]:
        """One run per library installed here, worker count and repeat; a library not installed is left out,
        with one line saying what to install (the rest of a report still builds)."""
        installed = [name for name in self.libraries if libraries.version(releases.split(name)[0]) is not None]
        for name in self.libraries:
            if name not in installed and name not in _SAID_NOT_INSTALLED:
                _SAID_NOT_INSTALLED.add(name)  # once per process: the sweep's runs are listed more than once
                print(f"{name} not raced: {libraries.install_hint(releases.split(name)[0])}", file=sys.stderr)
        if not installed:
            raise UserError(f"none of {', '.join(self.libraries)} is installed here: "
                            f"{'; '.join(libraries.install_hint(releases.split(n)[0]) for n in self.libraries)}")
        # a library whose worker paces itself (JOB_CAP) gets at most that many jobs, so a run ends in seconds
        # a fault run's jobs each last a second, so no cap
        # the documented setting is raced in transaction mode only (session mode keeps prepared statements working),
        # and only for a library that documents one
        # a short pause leaves out the libraries with nothing to pause short of, and a stall those without a
        # heartbeat schedule (STALL), unless none asked has one: then they stay, so that their check refuses the sweep
        # in one line rather than it running nothing
        # an earlier release (chancy==0.25.0) is a library of its own here; its check refuses it outside a probe
        # the production setting is raced for a library whose docs set one (the rest run as they come), unless none
        # asked has one: then they stay, so that their check refuses the sweep in one line
        pausable = any(short_pause_s(releases.split(name)[0]) is not None for name in installed)
        produced = any(libraries.get(releases.split(name)[0]).PRODUCTION is not None for name in installed)
        by_session = any(libraries.get(releases.split(name)[0]).HOLDS_BY_SESSION for name in installed)
        stalls = any(libraries.get(releases.split(name)[0]).STALL is not None for name in installed)
        return [LibraryParameters(library, workers, self.job_count if fault != "none" else min(
                    self.job_count, libraries.get(library).JOB_CAP or self.job_count), repeat, fault, mode,
                    chosen, probe, release, configuration, loss, stall)
                for probe in self.probes for chosen in self.pooler_settings for mode in self.poolers for fault in self.faults
                for stall in (self.stalls if fault == "stall" else ("none",))
                for configuration in self.configurations for loss in self.losses
                for library, release in map(releases.split, installed)
                for workers in self.worker_counts for repeat in range(self.repeats)
                if configuration == "default" or libraries.get(library).PRODUCTION is not None or not produced
                if configuration == "default" or fault == "none" or fault in PRODUCTION_FAULTS
                if loss == "default" or libraries.get(library).HOLDS_BY_SESSION or not by_session
                if (chosen == "default" or (mode == "transaction" and fault == "none"
                                            and libraries.documented_setting(library) is not None))
                and (fault != "short_pause" or short_pause_s(library) is not None or not pausable)
                and (fault != "stall" or libraries.get(library).STALL is not None or not stalls)]


def workers_needed(parameters: LibraryParameters) -> int:
    return runtime.connections_per_worker(parameters.library) * parameters.worker_count


def check_size(sets: list[LibraryParameters], local: bool, pg_version: int) -> None:
    check_race_size(max(s.worker_count for s in sets), None, local)
    if not local and any(s.fault == "restart" for s in sets):
        raise UserError("the restart fault needs the embedded server (it stops and starts PostgreSQL)")


def label(parameters: LibraryParameters) -> str:
    fault = "" if parameters.fault == "none" else f", {parameters.fault}"
    fault += "" if parameters.probe == "none" else f", {parameters.probe} probe"
    through = "" if parameters.pooler == "none" else f", via {parameters.pooler} pooler"
    if parameters.pooler_setting == "documented":
        through += " with its documented setting"
    release = "" if parameters.release == releases.INSTALLED else f"=={parameters.release}"
    through += "" if parameters.configuration == "default" else f", {parameters.configuration} setting"
    through += "" if parameters.lost_by == "default" else f", lost by {parameters.lost_by}"
    through += "" if parameters.stall == "none" else f" {parameters.stall}"
    return f"{parameters.library}{release} x{parameters.worker_count}{fault}{through}"


# --------------------------------------------------------------------------- measuring


def _counters(conn, library) -> dict:
    pgstats.force_flush(conn)
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT pg_current_wal_lsn(), d.xact_commit + d.xact_rollback, t.n_tup_upd, t.n_tup_hot_upd, t.n_dead_tup "
        "FROM pg_stat_database d LEFT JOIN pg_stat_user_tables t ON t.relname = %s "
        "WHERE d.datname = current_database()", (library.stats_table,)).fetchone()
    return {"lsn": str(row[0]), "transactions": int(row[1]), "updates": int(row[2] or 0),
            "hot_updates": int(row[3] or 0), "dead_tuples": int(row[4] or 0)}


def _log_size(log: Path | None) -> int | None:
    return log.stat().st_size if log is not None and log.exists() else None


def measure_libraries(db: database.Database, parameters: LibraryParameters, run_id: str,
                      progress: bool = False) -> Measured:
    p = parameters
    library = libraries.get(p.library)
    # the workers through PgBouncer where asked (closed before the database is dropped); the harness's own
    # statements go to the server directly
    with runtime.library_run(db, p.library, run_id, audit={}, statements=True, keep_logs=True) as run, \
            contextlib.ExitStack() as through:
        url, logs, server_log = run.url, run.logs, run.server_log
        via = through.enter_context(pooler.pooled(url, p.pooler, workers_needed(p)))
        through.callback(lambda: runtime.kill_left(run.workers))  # the workers go before their pooler
        # the watch reads pg_stat_activity from another database: the library's logs every statement sent to it
        with database.connect(url) as conn, db.connect() as watching:
            local = activity.server_is_local(conn)
            library.enqueue(url, p.job_count)
            start, readies = run.fork_workers(p.worker_count, runtime.worker_process, via.url, None, p.pooler_setting)
            workers = run.workers
            runtime.wait_until_ready(p.library, readies)
            list_backends = _backends_of(watching, {conn.pgconn.backend_pid, watching.pgconn.backend_pid})
            backends = list_backends()
            before = _counters(conn, library)
            server_cpu_before = activity.server_cpu_ns(conn)
            log_from = _log_size(server_log)  # after the harness's own statements on this database
            # the backends' wait for a CPU, beside the workers' own (their timings): either side marks a run
            watch = activity.BackendWatch(list_backends).start() if local else None
            released_ns = time.time_ns()
            start.set()
            bound_s = max(MIN_BOUND_S, BOUND_S_PER_JOB * p.job_count)
            ends = time.monotonic() + bound_s
            at_bound = []
            if library.STOPS_ON_ITS_OWN:
                for process in workers:
                    process.join(max(0.0, ends - time.monotonic()))
            else:
                at_bound = _stop_once_every_job_ran(workers, logs, p.job_count, ends)
            stopped = [w for w in workers if w.is_alive()]
            stopped += [w for w in at_bound if w not in stopped]
            runtime.kill_left(stopped)
            ended_ns = time.time_ns()
            backend_shares = watch.stop() if watch else {}
            through.close()  # a pooler's server sessions end with it, once every worker has gone
            statements = statement_log.statements_logged(server_log, log_from)
            pgstats.wait_for_backends_to_exit(conn, backends)
            server_cpu_after = activity.server_cpu_ns(conn)
            after = _counters(conn, library)
            wal_bytes = int(conn.execute("SELECT pg_wal_lsn_diff(%s, %s)", (after["lsn"], before["lsn"])).fetchone()[0])
            audit = runtime.read_audit(conn)
            advisory_locks = int(conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())").fetchone()[0])
            left = int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
                runtime.jobs_table(library))).fetchone()[0])
        # a library whose every change sends a NOTIFY to its listening workers: what those cost the server, apart
        probe = (pgstats.notification_transactions(url, p.worker_count, PROBE_NOTIFICATIONS)
                 if library.NOTIFIES_ON_CHANGE else None)
    errors = runtime.error_output(logs)
    executions, timings = _read_logs(logs)  # and removes them
    server_cpu_ms = ((server_cpu_after - server_cpu_before) / 1e6
                     if server_cpu_before is not None and server_cpu_after is not None else None)
    summary = run_summary.summarise(p, audit, executions, timings, released_ns, ended_ns, wal_bytes, before, after,
                        None if statements is None else int(statements["calls"].sum()),
                        server_cpu_ms, advisory_locks, len(stopped), backend_shares)
    summary |= {"probe_listeners": probe and probe["listeners"], "probe_notifications": probe and probe["notifications"],
                "probe_transactions": probe and probe["transactions"], "pooler": p.pooler,
                "pooler_setting": p.pooler_setting,
                "workers_with_errors": runtime.workers_with_errors(errors)}
    # a worker stopped at the bound is censored, not refused: its jobs count as not executed
    checks = {"every_job_enqueued_once": int((audit["event"] == "enqueued").sum()) == p.job_count}
    checks["passed"] = all(checks.values())
    return Measured(
        tables={"audit": audit, "executions": executions, "workers": timings, "errors": errors,
                **({"statements": statements} if statements is not None else {})},
        procedure=_procedure(p, library, bound_s, server_log is not None, via.describe()),
        checks=checks,
        results={"summary": summary, "jobs_left_in_table": left, "local_server": local})


def _procedure(p: LibraryParameters, library, bound_s: float, logged: bool, pooled: dict) -> dict:
    """How a drain ran: the library as installed and set, its workers, the bound, the statements' log, the pooler."""
    return {"library": p.library, "version": libraries.version(p.library), "source": library.SOURCE,
            "settings": library.SETTINGS, "claimed": library.CLAIMED, "jobs_table": library.JOBS_TABLE,
            "workers": "one process each (forked), the library's own loop at concurrency 1, "
                       "held at a start barrier until every worker was connected",
            "bound_s": bound_s, "statements": "lines logged with log_statement = all for the library's "
                                              "database" if logged else None,
            "pooler": pooled,
            "pooler_setting": {"chosen": p.pooler_setting,
                               **((libraries.documented_setting(p.library) or {})
                                  if p.pooler_setting == "documented" else {})}}


def _backends_of(watching, harness_own: set[int]):
    """Lists the backends on the library's database (runtime.DATABASE), but the harness's own."""
    def listed() -> list[int]:
        return [int(r[0]) for r in watching.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (runtime.DATABASE,)) if int(r[0]) not in harness_own]

    return listed


STOP_GRACE_S = 10.0  # how long a worker asked to stop may take before it is killed (and counted as stopped)


def _jobs_logged(logs: Path) -> int:
    """Distinct job ids the workers have logged so far."""
    ids = set()
    for log in logs.glob("*.log"):
        ids.update(line.split(maxsplit=1)[0] for line in log.read_text().splitlines() if line.strip())
    return len(ids)


def _stop_once_every_job_ran(workers: list, logs: Path, job_count: int, ends: float) -> list:
    """For a library whose worker never stops on an empty queue (STOPS_ON_ITS_OWN = False): once every job has
    been logged, or at the bound, SIGTERM to every worker (its library's own graceful stop), then wait for them
    all, together, up to STOP_GRACE_S. Returns the workers stopped at the bound (censored), none if every job ran."""
    while time.monotonic() < ends and any(w.is_alive() for w in workers) and _jobs_logged(logs) < job_count:
        time.sleep(0.05)
    at_bound = [w for w in workers if w.is_alive()] if _jobs_logged(logs) < job_count else []
    for process in workers:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for process in workers:
        process.join(max(0.0, deadline - time.monotonic()))
    return at_bound


def _read_logs(logs: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every execution the workers logged (job id, worker) and each worker's timing; the files are removed."""
    executions, timings = [], []
    for log in sorted(logs.glob("*.log"), key=lambda path: int(path.stem)):
        worker = int(log.stem)
        # a line is "job at_ns [pid]": the job's start (a fault run also logs "job at_ns pid end", not read here)
        executions += [(int(fields[0]), worker, int(fields[1])) for fields in
                       (line.split() for line in log.read_text().splitlines() if line.strip())
                       if fields[-1] != "end"]
        timing = log.with_name(f"{log.name}.json")
        if timing.exists():
            t = json.loads(timing.read_text())
            delta = activity.schedstat_delta(t["at_release"], t["at_end"])
            timings.append({"worker": worker, "pid": t["pid"], "released_ns": t["released_ns"],
                            "ended_ns": t["ended_ns"], "cpu_ns": delta[0] if delta else None,
                            "run_delay_ns": delta[1] if delta else None})
            timing.unlink()
        log.unlink()
    for errors in logs.glob("*.log.stderr"):  # read before (error_output)
        errors.unlink()
    logs.rmdir()
    return (pd.DataFrame(executions, columns=["job_id", "worker", "at_ns"]),
            pd.DataFrame(timings, columns=["worker", "pid", "released_ns", "ended_ns", "cpu_ns", "run_delay_ns"]))
