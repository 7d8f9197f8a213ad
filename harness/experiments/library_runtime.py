"""What every run of a library's own workers shares (the libraries' drain, faults, probe and wake-ups, and the soak's
library arm): its lifecycle (library_run: the run's own database with the library's schema and the audit trigger on
its jobs table, a folder for its workers' logs, and the teardown however the run ends), the worker processes and
their start barrier, their logs and error output, stopping them, and the supervisor that starts an exited worker
again.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from psycopg import conninfo, sql

from harness import gate, scratch
from harness.children import die_with_parent
from harness.libraries import get
from harness.libraries.settings import CONFIGURATION_ENV, POOLER_SETTING_ENV, RECOVERY_ENV
from harness.server import activity, database

DATABASE = "claimrace_libraries"  # made afresh for every run, dropped after it

AUDIT = "claimrace_audit"

READY_TIMEOUT_S = 120.0


def connections_per_worker(name: str) -> int:
    """The server connections one of a library's workers may hold (its CONNECTIONS, else 2: one to claim, one to
    LISTEN): what a run needs of the server, and the pooler's server connections per worker."""
    return get(name).CONNECTIONS


def database_url(url: str, name: str = DATABASE) -> str:
    return conninfo.make_conninfo(url, dbname=name)


def fresh_database(conn, name: str = DATABASE) -> None:
    drop_database(conn, name)
    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def drop_database(conn, name: str = DATABASE) -> None:
    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@dataclass
class LibraryRun:
    """One run of a library's own workers, as library_run set it up: the library's name, its database's URL, the folder
    its workers log to, the server's log where it records every statement sent to that database (else None), and
    the worker processes started (the teardown kills any still alive)."""

    name: str
    url: str
    logs: Path
    server_log: Path | None
    workers: list = field(default_factory=list)

    def fork_workers(self, count: int, target, url: str, *extra) -> tuple:
        """count worker processes forked, each target(name, url, its log, its ready event, start, this pid, *extra)
        and held at the start barrier: (start, the ready events). url: the database's, or its pooler's."""
        context = mp.get_context("fork")  # as the race's workers: no resource tracker outlives the run
        start, readies = context.Event(), []
        for i in range(count):
            ready = context.Event()
            process = context.Process(target=target, daemon=True, args=(
                self.name, url, str(self.logs / f"{i}.log"), ready, start, os.getpid(), *extra))
            process.start()
            self.workers.append(process)
            readies.append(ready)
        return start, readies


@contextlib.contextmanager
def library_run(db: database.Database, name: str, run_id: str, audit: dict | None = None,
                statements: bool = False, keep_logs: bool = False, database_settings: dict | None = None,
                install=None):
    """A library run's lifecycle. Before: its own database, made afresh (with database_settings, and
    log_statement = all where `statements` and the server's log can be read here), the library's schema from its
    own migrations (`install`, else its adapter's), and the audit trigger on its jobs table (install_audit's
    options, where `audit` is given). After, however the run ends: its workers killed, its database dropped, its
    workers' logs removed (kept for the caller to read where keep_logs, unless the run failed)."""
    library = get(name)
    server_log = Path(db.details["data_dir"]) / "server.log" if statements and db.details.get("data_dir") else None
    run = LibraryRun(name, database_url(db.url), scratch.folder(f"{run_id}-executions"), server_log)
    settings = dict(database_settings or {}) | ({"log_statement": "all"} if server_log is not None else {})
    failed = False
    try:
        with db.connect() as admin:
            fresh_database(admin)
            for setting, value in settings.items():
                admin.execute(sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                    sql.Identifier(DATABASE), sql.Identifier(setting), sql.Literal(value)))
        (install or library.install)(run.url)
        if audit is not None:
            with database.connect(run.url) as conn:
                install_audit(conn, library, **audit)
        yield run
    except BaseException:
        failed = True
        raise
    finally:
        kill_left(run.workers)  # first: a live worker would write into its logs while they are removed
        if failed or not keep_logs:
            shutil.rmtree(run.logs, ignore_errors=True)
        with db.connect() as admin:
            drop_database(admin)


def jobs_table(library) -> sql.Identifier:
    """The library's jobs table, in its own schema where it has one (JOBS_SCHEMA)."""
    schema = library.JOBS_SCHEMA
    return sql.Identifier(schema, library.JOBS_TABLE) if schema else sql.Identifier(library.JOBS_TABLE)


def audit_id_sql(library, row: str = "NEW") -> str:
    """The job's id as the workers log it, on `row` (NEW, OLD or a table alias): its id column, or AUDIT_ID_SQL
    where the id is not a number (pg-boss, chancy)."""
    expression = library.AUDIT_ID_SQL or f'NEW."{library.ID_COLUMN}"'
    return expression.replace("NEW.", f"{row}.")


def job_keys(conn, library) -> dict[str, int]:
    """Every job in the library's table, its id as its statements send it (text: a number, a uuid) to its id as
    the audit counts it: read once the jobs are enqueued, so a statement's parameter can be read as a job."""
    rows = conn.execute(sql.SQL("SELECT t.{}::text, {} FROM {} AS t").format(
        sql.Identifier(library.ID_COLUMN), sql.SQL(audit_id_sql(library, "t")), jobs_table(library)))
    return {key: int(job) for key, job in rows}


def install_audit(conn, library, completions: bool = False, updates: bool = False) -> None:
    """Every enqueue and every claim of the library's jobs table, as the server saw it; with completions (a fault
    run), every completion too: its COMPLETED transition, or the row's DELETE where finishing deletes it; with
    updates (the stale-completion probe), every other UPDATE of a row as 'updated', so a completion that rewrites a
    row already finished leaves a trace."""
    table = jobs_table(library)
    job_id = sql.SQL(audit_id_sql(library))
    conn.execute(sql.SQL("CREATE TABLE {} (seq bigserial PRIMARY KEY, job_id bigint NOT NULL, event text NOT NULL, "
                         "at timestamptz NOT NULL DEFAULT clock_timestamp(), "
                         "txid bigint NOT NULL DEFAULT txid_current(), "
                         "pid int NOT NULL DEFAULT pg_backend_pid())").format(sql.Identifier(AUDIT)))
    completed = library.COMPLETED if completions else None
    on_delete = sql.SQL("ELSIF TG_OP = 'DELETE' THEN INSERT INTO {audit} (job_id, event) VALUES ({id}, 'completed'); ")\
        .format(audit=sql.Identifier(AUDIT), id=sql.SQL(audit_id_sql(library, "OLD"))) \
        if completed == "DELETE" else sql.SQL("")
    on_update = sql.SQL("ELSIF TG_OP = 'UPDATE' AND {completed} THEN INSERT INTO {audit} (job_id, event) "
                        "VALUES ({id}, 'completed'); ").format(
        audit=sql.Identifier(AUDIT), id=job_id, completed=sql.SQL(completed)) \
        if completed not in (None, "DELETE") else sql.SQL("")
    if updates:
        on_update += sql.SQL("ELSIF TG_OP = 'UPDATE' THEN INSERT INTO {audit} (job_id, event) VALUES ({id}, 'updated'); ")\
            .format(audit=sql.Identifier(AUDIT), id=job_id)
    body = sql.SQL(
        "BEGIN IF TG_OP = 'INSERT' THEN INSERT INTO {audit} (job_id, event) VALUES ({id}, 'enqueued'); "
        "{on_delete}"
        "ELSIF TG_OP = 'UPDATE' AND {claimed} THEN INSERT INTO {audit} (job_id, event) VALUES ({id}, 'claimed'); "
        "{on_update}END IF; "
        "RETURN NULL; END").format(audit=sql.Identifier(AUDIT), id=job_id, claimed=sql.SQL(library.CLAIMED),
                                   on_delete=on_delete, on_update=on_update)
    conn.execute(sql.SQL("CREATE FUNCTION claimrace_audit() RETURNS trigger LANGUAGE plpgsql AS {}").format(
        sql.Literal(body.as_string(conn))))
    events = sql.SQL("INSERT OR UPDATE OR DELETE" if completed == "DELETE" else "INSERT OR UPDATE")
    conn.execute(sql.SQL("CREATE TRIGGER claimrace_audit AFTER {} ON {} FOR EACH ROW "
                         "EXECUTE FUNCTION claimrace_audit()").format(events, table))


def read_audit(conn) -> pd.DataFrame:
    """The audit as the server wrote it, in order: job_id, event, at_ns, txid, pid."""
    return pd.DataFrame(conn.execute(
        f"SELECT job_id, event, (extract(epoch FROM at) * 1e9)::bigint AS at_ns, txid, pid FROM {AUDIT} "
        "ORDER BY seq").fetchall(), columns=["job_id", "event", "at_ns", "txid", "pid"])


class _Release:
    """The start barrier as a library's worker sees it: waiting on it records when this worker was released."""

    def __init__(self, event):
        self.event, self.released_ns, self.at_release = event, None, None

    def wait(self, timeout=None):
        released = self.event.wait(timeout)
        self.released_ns, self.at_release = time.time_ns(), activity.read_schedstat(os.getpid())
        return released


def worker_process(name: str, url: str, log: str, ready, start, parent_pid: int,
                   job_s: float | None = None, pooler_setting: str = "default", gate_dir: str | None = None,
                   configuration: str = "default", recovery_s: float | None = None) -> None:
    """One worker process: dies with the harness, runs the library's loop, then writes its own timing beside its
    execution log. job_s: a fault run's (harness.experiments.libraries.faults) job length. pooler_setting
    "documented": the library's worker applies its POOLER_SETTING (told through the environment, which its Node
    process inherits). gate_dir: each job runs until the harness opens its gate there (harness.gate, the
    stale-completion probe). configuration "production": its library's worker runs as its PRODUCTION says.
    recovery_s: the recovery setting it runs with, where not its library's raced one (a stall run's). Its error
    output (and its node process's) goes to a file beside its log, kept with the run (error_output)."""
    die_with_parent(parent_pid)
    os.environ[POOLER_SETTING_ENV] = pooler_setting
    os.environ[CONFIGURATION_ENV] = configuration
    if recovery_s is not None:
        os.environ[RECOVERY_ENV] = str(recovery_s)
    if gate_dir is not None:
        os.environ[gate.GATE_ENV] = gate_dir
    os.dup2(os.open(f"{log}.stderr", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644), 2)
    release = _Release(start)
    work = get(name).work
    # a library whose worker is another process (Node) returns that process's scheduler readings
    readings = (work(url, Path(log), ready, release) if job_s is None
                else work(url, Path(log), ready, release, job_s)) or {}
    at_release = readings.get("at_release", release.at_release)
    ended = readings.get("at_end") or activity.read_schedstat(os.getpid())
    Path(f"{log}.json").write_text(json.dumps({"pid": os.getpid(), "released_ns": release.released_ns,
                                               "ended_ns": time.time_ns(), "at_release": at_release,
                                               "at_end": ended}))


def wait_until_ready(name: str, readies) -> None:
    """Every worker connected (its ready event set), within READY_TIMEOUT_S in all."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    for ready in readies:
        if not ready.wait(max(0.0, deadline - time.monotonic())):
            raise RuntimeError(f"{name}: a worker was not ready after {READY_TIMEOUT_S:.0f} s")


def stop_workers(workers: list, grace_s: float = 5.0) -> None:
    """SIGCONT and SIGTERM to every worker still alive (its library's own stop, or the default's), then SIGKILL to
    any still alive after grace_s: a paused worker is woken so it can stop."""
    for process in workers:
        if process.is_alive():
            os.kill(process.pid, signal.SIGCONT)
            process.terminate()
    deadline = time.monotonic() + grace_s
    for process in workers:
        process.join(max(0.0, deadline - time.monotonic()))
    kill_left(workers)


def kill_left(workers: list) -> None:
    """SIGKILL to every worker process still alive, each waited for: what a run's end leaves of its workers."""
    for process in workers:
        if process.is_alive():
            process.kill()
            process.join(10)


RESTART_DELAY_S = 1.0  # how long an exited worker stays down before it is started again

MAX_RESTARTS = 20  # per run: a worker that cannot start is not started for ever


class Supervisor:
    """The run's worker processes, each started again RESTART_DELAY_S after it exits (as systemd's Restart= or a
    Kubernetes pod would), up to MAX_RESTARTS in all: a library's worker that exits on a lost connection is part
    of what a fault does, not the end of the run. Worker slot i's g-th process logs to (g * worker_count + i).log."""

    def __init__(self, context, library: str, worker_count: int, url: str, logs: Path, start, job_s: float,
                 gate_dir: Path | None = None, configuration: str = "default", recovery_s: float | None = None):
        self.context, self.library, self.worker_count = context, library, worker_count
        self.configuration, self.recovery_s = configuration, recovery_s
        self.gate_dir = None if gate_dir is None else str(gate_dir)
        self.url, self.logs, self.start, self.job_s = url, logs, start, job_s
        self.processes, self.readies, self.exits, self.restarts = [], [], [], 0
        self.slots = [self._start(i, 0) for i in range(worker_count)]
        self.down_since: dict[int, float] = {}

    def _start(self, slot: int, generation: int):
        ready = self.context.Event()
        process = self.context.Process(target=worker_process, args=(
            self.library, self.url, str(self.logs / f"{generation * self.worker_count + slot}.log"), ready,
            self.start, os.getpid(), self.job_s, "default", self.gate_dir, self.configuration, self.recovery_s),
            daemon=True)
        process.start()
        self.processes.append(process)
        self.readies.append(ready)
        return process, generation

    def tend(self, restart: bool = True) -> bool:
        """Note exits and start again what has been down long enough (unless not to restart); False once no worker
        runs and none may start again."""
        now = time.monotonic()
        for slot, (process, generation) in enumerate(self.slots):
            if process.is_alive():
                continue
            if slot not in self.down_since:
                self.down_since[slot] = now
                self.exits.append({"slot": slot, "pid": process.pid, "exitcode": process.exitcode})
            elif restart and now - self.down_since[slot] >= RESTART_DELAY_S and self.restarts < MAX_RESTARTS:
                del self.down_since[slot]
                self.restarts += 1
                self.slots[slot] = self._start(slot, generation + 1)
        return any(process.is_alive() for process, _ in self.slots) or self.restarts < MAX_RESTARTS


def read_lines(logs: Path) -> pd.DataFrame:
    """Every start and end the workers logged: job, at_ns, pid, event ('start' or 'end'), worker. A line not yet
    ended by its newline is left for the next read."""
    rows = []
    for log in sorted(logs.glob("*.log"), key=lambda path: int(path.stem)):
        for line in log.read_text().split("\n")[:-1]:
            fields = line.split()
            if len(fields) >= 3:
                rows.append((int(fields[0]), int(fields[1]), int(fields[2]),
                             "end" if fields[-1] == "end" else "start", int(log.stem)))
    return pd.DataFrame(rows, columns=["job_id", "at_ns", "pid", "event", "worker"])


def first_start(logs: Path, since_ns: int, timeout: float, job: int | None = None, other_than: int | None = None,
                tend=lambda: None) -> dict | None:
    """The first start a worker logged after since_ns, within timeout (tend() between reads, a supervisor's): of
    `job` where given, by a process other than other_than where given; its job_id, pid, worker and started_ns."""
    deadline = time.monotonic() + timeout
    while True:
        lines = read_lines(logs)
        starts = lines[(lines["event"] == "start") & (lines["at_ns"] >= since_ns)]
        if job is not None:
            starts = starts[starts["job_id"] == job]
        if other_than is not None:
            starts = starts[starts["pid"] != other_than]
        if len(starts):
            first = starts.sort_values("at_ns").iloc[0]
            return {"job_id": int(first["job_id"]), "pid": int(first["pid"]), "worker": int(first["worker"]),
                    "started_ns": int(first["at_ns"])}
        if time.monotonic() >= deadline:
            return None
        tend()
        time.sleep(0.02)


ERROR_TAIL_CHARS = 4000


def error_output(logs: Path) -> pd.DataFrame:
    """What each worker (and its node process) wrote to its error output: worker, the last ERROR_TAIL_CHARS."""
    rows = [(int(path.name.split(".")[0]), path.read_text(errors="replace")[-ERROR_TAIL_CHARS:])
            for path in sorted(logs.glob("*.log.stderr"))]
    return pd.DataFrame(rows, columns=["worker", "text"])


# What marks an error in a worker's error output: a Python traceback, a Node error or its stack, an ERROR log line;
# a warning or a deprecation notice is not one
ERROR_MARK = re.compile(r"Traceback \(most recent call last\)|\b\w*(Error|Exception)\b[:(]|^\s+at .+:\d+:\d+\)?$"
                        r"|\bERROR\b", re.MULTILINE)


def workers_with_errors(errors: pd.DataFrame) -> int:
    """The workers whose error output holds an error (ERROR_MARK)."""
    return int(errors["text"].map(lambda text: bool(ERROR_MARK.search(text or ""))).sum())
