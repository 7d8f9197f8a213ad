"""The job libraries this project does not run (Go, Elixir, Ruby), modelled for a fault run: each library's worker
loop and what recovers a dead worker's job, rewritten from its source at the commit its library.py
names, on a table of this project's.

A model keeps what decides a fault's outcome: the claim, what the worker writes at a job's start and its completion
and whether the completion checks that the job is still the worker's, the locks and the sessions that hold them,
and the recovery loop with its settings. Its statements are its library.py's protocol's where the fault's path is the
one the race takes; each model's module names the ones it adds (good_job's candidates that include started jobs,
Solid Queue's claimed execution and heartbeats, Que's resolve, River's and Oban's rescue). What every model
simplifies:

- the recovery loop runs in every worker process, on a connection of its own: where the library runs it on an
  elected leader only (River, Oban), a leader is always there, as if another took over at once;
- a statement that fails on a lost connection is sent again once on a new one (the libraries' pools reconnect);
  a session's advisory locks do not come back with it, as they do not in the library; a worker that cannot
  reconnect within RECONNECT_S exits. Que's locker does not reconnect: the process exits (LockerWatch);
- a worker with no job polls again after IDLE_POLL_S, as often as Solid Queue's workers do by default and more
  often than the others': a job that a dead worker's session frees (Que, good_job) or that a rescue makes pending
  waits for a library's next poll, which this shortens;
- a job the recovery hands on waits as its source says (River: its first retry's backoff, then its scheduler's pass
  every 5 s; Oban: its stager's pass every second; RECOVERY's then_s), with the scheduling pass one per interval of
  the clock (Ticks) on whichever worker comes first; no attempt limit discards one, and no retry waits longer;
- a model is never run behind a pooler: its claim's races are (CLAIM), and what its driver and its session state
  would do there is read in its source (POOLER_READ), not run.

A model (its folder's adapter.py) declares what a library's adapter does (harness.libraries) for a fault run, CLAIM
(the strategy of harness.claims.strategies its claim races as, whose pooler runs stand for it), POOLER_READ
({"defaults", "setting"}: what the library, or its driver, does behind a transaction pooler with its defaults and
what it documents instead, each cited at a release), and PROTOCOL: the statements of its worker loop (claim, start,
complete, release) and of its recovery loop (maintain); install, enqueue and work are this module's
(worker(PROTOCOL)), and its refusal of a drain too (refuse_drain).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psycopg

from harness.config import SCHEMA
from harness.libraries.declaration import JOBS
from harness.errors import UserError
from harness import gate

JOBS_SCHEMA, JOBS_TABLE, ID_COLUMN = SCHEMA, "jobs", "id"  # harness.libraries.declaration.JOBS
CLAIMED = "NEW.status = 'running' AND OLD.status IS DISTINCT FROM 'running'"
CONNECTIONS = 2  # one for the worker loop, one for the recovery loop
IDLE_POLL_S = 0.1  # a worker that finds no job polls again after this (Solid Queue's default polling_interval)
RECONNECT_S = 15.0  # how long a worker tries to reconnect before it exits (a server restart takes a few seconds)
RECONNECT_GAP_S = 0.2

# The model's table: the columns the protocols' statements use (id, status, started_at: harness.libraries.declaration),
# the process that holds a job (held_by: Solid Queue's claimed execution) and Solid Queue's processes.
TABLES = (
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
    f"CREATE TABLE {SCHEMA}.jobs (id bigint PRIMARY KEY, status text NOT NULL DEFAULT 'pending', "
    "started_at timestamptz, held_by bigint, available_at timestamptz)",
    f"CREATE INDEX jobs_status_idx ON {SCHEMA}.jobs (status, id)",
    f"CREATE TABLE {SCHEMA}.processes (id bigserial PRIMARY KEY, pid int NOT NULL, "
    "last_heartbeat_at timestamptz NOT NULL DEFAULT now())",
)


def rescue(after_s: float, retry_s: float = 0.0) -> str:
    """River's rescuer and Oban's Lifeline: every job running since more than after_s ago waits, 'retryable', until
    retry_s from now (River's retry backoff; Oban's is none), when the next scheduling pass (schedule) makes it
    pending."""
    return (f"UPDATE {JOBS} SET status = 'retryable', available_at = now() + make_interval(secs => {float(retry_s)}) "
            f"WHERE status = 'running' AND started_at < now() - make_interval(secs => {float(after_s)})")


# River's scheduler and Oban's stager: a retryable job whose time has come is pending again, for a worker to claim
SCHEDULE = f"UPDATE {JOBS} SET status = 'pending' WHERE status = 'retryable' AND available_at <= now()"


class Ticks:
    """A pass that runs once per interval_s of the clock, on whichever worker's recovery loop comes first after each
    boundary: one leader's timer, shared by every worker's loop without a leader (the model has none)."""

    def __init__(self, interval_s: float):
        self.interval_s, self.last = interval_s, None

    def due(self) -> bool:
        tick = int(time.time() // self.interval_s)
        due, self.last = tick != self.last, tick
        return due


def refuse_drain(name: str) -> None:
    raise UserError(f"{name} is modelled here for a fault run only (give --fault); its claim races as "
                    f"`python -m harness race --strategy {name}`")


def install(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in TABLES:
            conn.execute(statement)


def enqueue(url: str, n: int, job_s: float | None = None) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"INSERT INTO {SCHEMA}.jobs (id) SELECT generate_series(1, {int(n)})")


@dataclass(frozen=True)
class Protocol:
    """One library's worker loop and recovery loop, as statements on a connection.

    register(conn) -> the worker's identity (its process row, or its pid) once connected;
    claim(conn, me) -> a job id, or None where none is free;
    start(conn, job, me) -> False where the worker drops the job before running it (a re-check failed);
    complete(conn, job, me) after the job has run; on a pooled connection of its own where complete_apart (Que);
    release(conn, job, me) after the completion, on the claim's connection (an unlock);
    maintain(conn, me) every maintain_s: the recovery loop and heartbeats, where the library has them; False where
    the worker finds it has been deregistered, and shuts down as the library's does (Solid Queue);
    watch_s: where the library's worker exits as soon as the connection its claims hold is lost (Que's locker,
    which waits on it every 50 ms), how often that connection is checked; None where the worker reconnects.
    """

    claim: Callable
    complete: Callable
    start: Callable = lambda conn, job, me: True
    release: Callable = lambda conn, job, me: None
    register: Callable = lambda conn: os.getpid()
    maintain: Callable | None = None
    maintain_s: float = 1.0
    complete_apart: bool = False
    watch_s: float | None = None


class _Session:
    """A worker's connection that reconnects where it may: a statement that fails because the connection was lost
    is sent again once on a new one, within RECONNECT_S; any other error is the worker's."""

    def __init__(self, url: str, reconnects: bool = True):
        self.url, self.reconnects = url, reconnects
        self.lock = threading.Lock()  # the worker loop and LockerWatch share a locker's connection
        self.conn = self._connect()

    def _connect(self) -> psycopg.Connection:
        deadline = time.monotonic() + RECONNECT_S
        while True:
            try:
                return psycopg.connect(self.url, autocommit=True, cursor_factory=psycopg.RawCursor)  # $1, as written
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(RECONNECT_GAP_S)

    def run(self, step: Callable, *args):
        with self.lock:
            try:
                return step(self.conn, *args)
            except psycopg.OperationalError:
                if not self.reconnects or not (self.conn.broken or self.conn.closed):
                    raise  # a deadlock, a cancelled statement: not a lost connection
                self.conn.close()
                self.conn = self._connect()
                return step(self.conn, *args)

    def close(self) -> None:
        self.conn.close()


def _exit_on(error: BaseException) -> None:
    """A model's thread met what its library's worker would die of: say so and end the process."""
    traceback.print_exception(error)
    sys.stderr.flush()
    os._exit(1)


def _maintain(url: str, protocol: Protocol, me, stop: threading.Event, deregistered: threading.Event) -> None:
    """The recovery loop, on its own connection, until the worker ends; a lost connection is made again, and any
    other error ends the worker (a recovery loop that stopped would leave it claiming without heartbeats)."""
    session = None
    while not stop.is_set():
        try:
            session = session or _Session(url)
            if session.run(protocol.maintain, me) is False:
                deregistered.set()
                return
        except psycopg.OperationalError as error:
            if session is not None and not (session.conn.broken or session.conn.closed):
                _exit_on(error)
            session = None
        except Exception as error:
            _exit_on(error)
        stop.wait(protocol.maintain_s)


def _watch(session: _Session, every_s: float, stop: threading.Event) -> None:
    """LockerWatch: the locker's connection checked every every_s; lost, the process exits, as Que's does."""
    while not stop.wait(every_s):
        try:
            session.run(lambda conn: conn.execute("SELECT 1"))
        except Exception as error:
            if not stop.is_set():
                _exit_on(error)
            return


def work(protocol: Protocol, url: str, log: Path, ready, start, job_s: float) -> None:
    """One worker at concurrency 1: claim, log the start, run the job (job_s), log its end, complete; on an empty
    queue, poll again after IDLE_POLL_S until stopped."""
    session = _Session(url, reconnects=protocol.watch_s is None)
    pool = _Session(url) if protocol.complete_apart else session
    me = session.run(protocol.register)
    stop, deregistered = threading.Event(), threading.Event()
    if protocol.maintain is not None:
        threading.Thread(target=_maintain, args=(url, protocol, me, stop, deregistered), daemon=True).start()
    if protocol.watch_s is not None:
        threading.Thread(target=_watch, args=(session, protocol.watch_s, stop), daemon=True).start()
    try:
        with open(log, "a", buffering=1) as out:
            ready.set()
            start.wait()
            while not deregistered.is_set():
                job = session.run(protocol.claim, me)
                if job is None:
                    time.sleep(IDLE_POLL_S)
                    continue
                if not session.run(protocol.start, job, me):
                    session.run(protocol.release, job, me)
                    continue
                out.write(f"{job} {time.time_ns()} {os.getpid()}\n")
                gate.hold(job, job_s)
                out.write(f"{job} {time.time_ns()} {os.getpid()} end\n")
                pool.run(protocol.complete, job, me)
                session.run(protocol.release, job, me)
    finally:
        stop.set()
        session.close()
        if pool is not session:
            pool.close()


def worker(protocol: Protocol) -> Callable:
    """A model module's `work` (harness.libraries' interface): one worker running `protocol`."""
    return functools.partial(work, protocol)


def one(conn, statement: str, *args):
    """The first column of the first row a statement returns, or None."""
    row = conn.execute(statement, args or None).fetchone()
    return None if row is None else row[0]
