"""The race: N workers, each with its own connection and its own process, released by one barrier.

A worker is a client process with one connection and its own claim loop, like
a runner instance: it sends an attempt's statements one at a time, in order,
and starts its next attempt as soon as the last result is in. The layout is the
same at every worker count (one process per worker), so a sweep compares the
server under more workers, not one client layout with another. Its reference
is pgbench with one thread per client (`python -m harness bench`): a client
that drives many connections from one loop serialises the workers' reactions
and changes who wins a race (pgbench itself moves guarded's rate by a factor
of two between one thread per client and two threads in all).

Each worker claims until its strategy reports the queue empty (in a timed
race: until its window closes), and keeps one raw record per attempt in plain
lists turned into arrays afterwards; nothing is written until the race is
over, so the bookkeeping does not slow the claims. Each result is timed when
it is read. Process start, connect and prepare happen before the barrier,
outside every measured window.

A slowed-down race (pause_ms > 0 or jitter_ms > 0) pauses between the read and
the write of a two-statement claim, where the race window is, and sleeps a
random 0..jitter_ms between attempts so the workers fall out of step; it
records when each statement started and ended.

Strategies that know more about an attempt than its outcome and job (the
rows a batch claimed, the advisory locks an attempt left behind) note it in
their own lists (claim_steps.AttemptNotes); the loop itself does not change.

A process that dies fails the whole race within a bounded time; no worker
outlives the race, nor the harness: each asks the kernel to kill it when its
parent dies (PR_SET_PDEATHSIG), SIGKILL of the harness included.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import queue
import random
import resource
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from threading import BrokenBarrierError

import numpy as np

from harness import config
from harness.children import die_with_parent
from harness.server.activity import read_schedstat, schedstat_delta
from harness.server.delay import DelayedStatements
from harness.errors import RaceError
from harness.claims.strategies import get_strategy, without_cleanup
from harness.claims.steps import AttemptNotes
from harness.experiments.race.records import NO_DEADLINE, ClaimRecords

# fork: 100 workers start in well under a second and inherit the imported modules.
_CONTEXT = mp.get_context("fork")
CLIENT_LAYOUT = "processes"  # the name a manifest and summary --json give this layout
CLIENT_LAYOUT_TEXT = "one process per worker, one connection each, blocking calls"


@dataclass
class WorkerRecord:
    """One worker's raw attempts (absolute monotonic ns; the caller rebases them)."""

    worker_index: int
    released_ns: int  # when the barrier let this worker go
    start_ns: np.ndarray
    latency_ns: np.ndarray
    outcome: np.ndarray
    job_id: np.ndarray
    backend_pid: int
    cpu_ns: int = 0  # the worker process's user + system CPU from release to the end
    max_rss_bytes: int = 0  # peak resident set of the worker's process (includes pages shared with the parent)
    private_bytes: int = 0  # memory the worker's process alone holds at the end (USS), 0 if unknown
    round_trip_ns: np.ndarray | None = None  # per attempt, time inside libpq calls (instrumented races only)
    read_end_ns: np.ndarray | None = None  # slowed-down races: when the read's result arrived (0: no read)
    write_start_ns: np.ndarray | None = None  # slowed-down races: when the write was sent (0: no write)
    # the backend's /proc/<pid>/schedstat (CPU ns, run-queue delay ns, timeslices) at release and at the end;
    # None where this host has no such process (a remote server); the caller checks the pid is the backend
    backend_schedstat_start: tuple | None = None
    backend_schedstat_end: tuple | None = None
    ended_ns: int = 0  # when this worker's loop ended
    client_run_delay_ns: int | None = None  # this worker process's own wait for a CPU over its window
    rows: np.ndarray | None = None  # batch strategies: per attempt, the jobs it claimed
    claimed_job_ids: np.ndarray | None = None  # batch strategies: every job claimed, attempt after attempt
    stray_locks: np.ndarray | None = None  # advisory_lock: per attempt, locks left on jobs it did not return


@dataclass
class RaceResult:
    strategy: str
    worker_count: int
    pause_ms: float
    jitter_ms: float
    t0_ns: int  # the first barrier release, the zero of every start time
    end_ns: int  # the last attempt's end
    workers: list[WorkerRecord]
    duration_seconds: float | None = None  # a timed race's window; None when it drained the queue
    batch: int = 1  # the most jobs one attempt may claim (batch strategies)
    client_processes: int | None = None  # None: one client process per worker

    @property
    def wall_seconds(self) -> float:
        return (self.end_ns - self.t0_ns) / 1e9

    @property
    def process_count(self) -> int:
        return self.worker_count if self.client_processes is None else self.client_processes

    @property
    def slowed(self) -> bool:
        return self.pause_ms > 0 or self.jitter_ms > 0


def _claim_loop(pgconn, claim, records: ClaimRecords, deadline_ns: int = NO_DEADLINE,
                stop_when_empty: bool = True) -> None:
    """One connection, blocking calls: one claim per attempt, the bookkeeping in records (claim_records)."""
    began, note = records.start(pgconn, deadline_ns, stop_when_empty)
    while began:
        outcome, job_id = claim(pgconn)
        began = note(began, outcome, job_id)


def _slow_loop(pgconn, claim_stepwise, pause_seconds: float, jitter_seconds: float, seed: int,
               records: ClaimRecords, reads: list, writes: list) -> None:
    """The slowed-down race: a pause between the read and the write, a random pause between attempts."""
    clock = time.monotonic_ns
    jitter = random.Random(seed)
    _, note = records.start(pgconn)  # an attempt begins after its pause, so the loop reads its own start
    while True:
        time.sleep(jitter.uniform(0.0, jitter_seconds))
        began = clock()
        outcome, job_id, read_end, write_start = claim_stepwise(pgconn, pause_seconds, clock)
        going_on = note(began, outcome, job_id)
        reads.append(read_end)
        writes.append(write_start)
        if not going_on:
            return


class _TimedConnection:
    """Wraps a libpq connection to add up the time spent inside exec_prepared (instrumented races)."""

    __slots__ = ("pgconn", "inside_ns")

    def __init__(self, pgconn):
        self.pgconn = pgconn
        self.inside_ns = 0

    def exec_prepared(self, name, params):
        clock = time.monotonic_ns
        began = clock()
        result = self.pgconn.exec_prepared(name, params)
        self.inside_ns += clock() - began
        return result

    def __getattr__(self, name):
        return getattr(self.pgconn, name)


class _UnpreparedStatements:
    """Sends each of a strategy's statements unprepared (exec_params) where its claim asks for the prepared one:
    through a pooler, the next statement may run on a server session that never prepared it (PgBouncer before
    1.21 in transaction mode)."""

    __slots__ = ("pgconn", "texts")

    def __init__(self, pgconn, statements):
        self.pgconn = pgconn
        self.texts = {name.encode(): text.encode() for name, text in statements}

    def exec_prepared(self, name, params):
        return self.pgconn.exec_params(self.texts[name], params)

    def __getattr__(self, name):
        return getattr(self.pgconn, name)


def _instrumented_claim(claim, round_trips: list):
    """claim, recording per attempt the time spent inside libpq (the rest is the client's own)."""

    def timed_claim(timed_conn):
        timed_conn.inside_ns = 0
        result = claim(timed_conn)
        round_trips.append(timed_conn.inside_ns)
        return result

    return timed_claim


def _cpu_ns() -> int:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return int((usage.ru_utime + usage.ru_stime) * 1e9)


def _private_bytes() -> int:
    """This process's unshared memory (Private_Clean + Private_Dirty), from one cheap kernel summary."""
    try:
        with open("/proc/self/smaps_rollup") as rollup:
            text = rollup.read()
    except OSError:
        return 0
    total = 0
    for line in text.splitlines():
        if line.startswith(("Private_Clean:", "Private_Dirty:")):
            total += int(line.split()[1]) * 1024
    return total


def _process_main(worker_index: int, parent_pid: int, url: str, strategy_name: str, barrier, results,
                  duration_seconds: float | None = None, instrument: bool = False, pause_seconds: float = 0.0,
                  jitter_seconds: float = 0.0, batch: int = 1, client_rtt_ms: float = 0.0,
                  pooled: bool = False) -> None:
    die_with_parent(parent_pid)
    # the loop allocates only ints and small tuples, never cycles: the collector would only add pauses
    gc.disable()
    try:
        from harness.server.database import connect

        # through a pooler: the statements as the library sends them, unprepared (any server session may run them)
        strategy = without_cleanup(strategy_name) if pooled else get_strategy(strategy_name)
        conn = connect(url, application_name=f"claimrace-worker-{worker_index}")
        pgconn = conn.pgconn
        if pooled:
            claims_conn = _UnpreparedStatements(pgconn, strategy.statements_for(batch))
        else:
            strategy.prepare(pgconn, batch)
            # the worker's own connection, or one that sleeps a round trip per statement (the cross-check)
            claims_conn = DelayedStatements(pgconn, client_rtt_ms) if client_rtt_ms else pgconn
        records = ClaimRecords()
        reads: list[int] = []
        writes: list[int] = []
        round_trips: list[int] = []
        notes = AttemptNotes()
        claim, claim_stepwise = strategy.steps(notes, batch)
        target = claims_conn
        if instrument:
            claim, target = _instrumented_claim(claim, round_trips), _TimedConnection(claims_conn)
        # through a pooler the pid is the pooler's key for the client, not a server process: none is read
        backend_pid = 0 if pooled else pgconn.backend_pid
        barrier.wait(config.BARRIER_TIMEOUT_SECONDS)
        released = time.monotonic_ns()
        cpu_at_release = _cpu_ns()
        schedstat_start = read_schedstat(backend_pid)
        own_start = read_schedstat(os.getpid())
        slowed = bool(pause_seconds or jitter_seconds)
        if slowed:
            _slow_loop(claims_conn, claim_stepwise, pause_seconds, jitter_seconds, worker_index, records, reads, writes)
        else:
            deadline = NO_DEADLINE if duration_seconds is None else released + int(duration_seconds * 1e9)
            # a drain race ends a worker at its first empty answer; a timed one keeps asking, as pgbench does
            _claim_loop(target, claim, records, deadline, stop_when_empty=duration_seconds is None)
        schedstat_end = read_schedstat(backend_pid)
        own_end = read_schedstat(os.getpid())
        ended = time.monotonic_ns()
        cpu = _cpu_ns() - cpu_at_release
        own = schedstat_delta(own_start, own_end)
        record = WorkerRecord(
            worker_index=worker_index, released_ns=released, **records.arrays(), backend_pid=backend_pid, cpu_ns=cpu,
            max_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # KiB on Linux
            private_bytes=_private_bytes(),
            round_trip_ns=np.array(round_trips, dtype=np.int64) if instrument else None,
            read_end_ns=np.array(reads, dtype=np.int64) if slowed else None,
            write_start_ns=np.array(writes, dtype=np.int64) if slowed else None,
            backend_schedstat_start=schedstat_start, backend_schedstat_end=schedstat_end, ended_ns=ended,
            client_run_delay_ns=own[1] if own else None,
            rows=np.array(notes.rows, dtype=np.int32) if strategy.batch else None,
            claimed_job_ids=np.array(notes.job_ids, dtype=np.int64) if strategy.batch else None,
            stray_locks=np.array(notes.stray_locks, dtype=np.int32) if strategy.counts_stray_locks else None)
        results.put(("ok", worker_index, record))
        conn.close()
    except BrokenBarrierError:
        results.put(("aborted", worker_index, "the start barrier was broken"))
    except BaseException as exc:  # report everything, then exit non-zero
        results.put(("error", worker_index, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        raise SystemExit(1)


def _stop_all(processes: list, barrier) -> None:
    barrier.abort()
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + 5
    for proc in processes:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(1)


def run_race(url: str, strategy_name: str, worker_count: int, timeout_seconds: float | None = None,
             duration_seconds: float | None = None, instrument: bool = False, pause_ms: float = 0.0,
             jitter_ms: float = 0.0, on_release=None, batch: int = 1, client_rtt_ms: float = 0.0,
             pooled: bool = False) -> RaceResult:
    """Race worker_count workers over the queue in url's claimrace schema until it is drained.

    duration_seconds: a timed race instead; each worker stops at its first attempt that ends
    duration_seconds after the barrier released it, and an empty answer does not stop it.
    instrument: also record each attempt's time inside libpq, to split the client's own cost
    from the round trip (a wrapper call per statement, so not for throughput figures).
    pause_ms, jitter_ms: a slowed-down race (see the module's docstring); drains only.
    on_release: called in this process once every worker is connected and waiting at the barrier,
    just before it opens (e.g. to start sampling the server).
    batch: the most jobs one attempt of a batch strategy claims (its SQL's LIMIT); 1 for every other strategy.
    client_rtt_ms: a round trip made inside each worker, half slept before each statement and half after
    (harness.server.delay.DelayedStatements); the race's own round trip is the delay proxy's, in url.
    pooled: url is a pooler's (harness.server.pooler): the statements go unprepared, without the harness's clean-up
    of advisory locks (strategies.without_cleanup), and no server process is read per worker.
    """
    strategy = get_strategy(strategy_name)
    if worker_count < 1:
        raise ValueError("worker_count must be at least 1")
    if batch < 1 or (batch != 1 and not strategy.batch):
        raise ValueError(f"batch must be at least 1, and 1 for {strategy_name}, which claims one job per attempt")
    if duration_seconds is not None and duration_seconds <= 0:
        raise ValueError("duration_seconds must be positive")
    if (pause_ms or jitter_ms) and (duration_seconds is not None or instrument):
        raise ValueError("a slowed-down race drains the queue and is not instrumented")
    if pause_ms < 0 or jitter_ms < 0 or client_rtt_ms < 0:
        raise ValueError("pauses and round trips must not be negative")
    # the harness's own process waits at the barrier too, so it knows when the workers are released
    barrier = _CONTEXT.Barrier(worker_count + 1)
    results = _CONTEXT.Queue()
    parent_pid = os.getpid()
    processes = [
        _CONTEXT.Process(target=_process_main, name=f"claimrace-worker-{i}",
                         args=(i, parent_pid, url, strategy_name, barrier, results, duration_seconds, instrument,
                               pause_ms / 1000.0, jitter_ms / 1000.0, batch, client_rtt_ms, pooled), daemon=True)
        for i in range(worker_count)
    ]
    records: dict[int, WorkerRecord] = {}
    failure: str | None = None
    exited_clean_at: dict[int, float] = {}
    deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
    try:
        for proc in processes:
            proc.start()
        failure = _wait_at_barrier(barrier, processes, results)
        if failure is None and on_release is not None:
            on_release()
        if failure is None:
            try:
                barrier.wait(config.BARRIER_TIMEOUT_SECONDS)
            except BrokenBarrierError:
                failure = "the start barrier was broken"
        while len(records) < worker_count and failure is None:
            try:
                message = results.get(timeout=0.2)
            except queue.Empty:
                message = None
            if message is not None:
                kind, index = message[0], message[1]
                if kind == "ok":
                    records[index] = message[2]
                elif kind == "error":
                    failure = f"worker {index} failed: {message[2].strip().splitlines()[0]}\n{message[2]}"
                else:
                    failure = failure or f"worker {index}: {message[2]}"
                continue
            now = time.monotonic()
            for i, proc in enumerate(processes):
                if i in records or proc.exitcode is None:
                    continue
                if proc.exitcode != 0:
                    failure = f"worker {i} (pid {proc.pid}) died with exit code {proc.exitcode} before reporting"
                    break
                # exited cleanly: its message may still be in the pipe; give it a moment
                exited_clean_at.setdefault(i, now)
                if now - exited_clean_at[i] > config.WORKER_EXIT_GRACE_SECONDS:
                    failure = f"worker {i} exited without reporting its attempts"
                    break
            if deadline is not None and now > deadline and failure is None:
                failure = f"the race did not finish within {timeout_seconds:.0f} s"
    except BaseException:
        _stop_all(processes, barrier)
        raise
    if failure is not None:
        _stop_all(processes, barrier)
        raise RaceError(failure)
    for proc in processes:
        proc.join(10)
    _stop_all(processes, barrier)  # nothing outlives the race, even a process stuck in exit
    results.close()
    workers = [records[i] for i in range(worker_count)]
    t0 = min(w.released_ns for w in workers)
    end = max(int((w.start_ns + w.latency_ns).max()) if len(w.start_ns) else w.released_ns for w in workers)
    return RaceResult(strategy_name, worker_count, pause_ms, jitter_ms, t0, end, workers, duration_seconds, batch)


def _wait_at_barrier(barrier, processes: list, results) -> str | None:
    """Until every worker waits at the barrier; a worker that fails first ends the wait with its error."""
    deadline = time.monotonic() + config.BARRIER_TIMEOUT_SECONDS
    while barrier.n_waiting < len(processes):
        try:
            kind, index, text = results.get(timeout=0.05)
            return f"worker {index} failed before the start: {text.strip().splitlines()[0]}\n{text}"
        except queue.Empty:
            pass
        for i, proc in enumerate(processes):
            if proc.exitcode is not None:
                return f"worker {i} (pid {proc.pid}) exited with code {proc.exitcode} before the start"
        if time.monotonic() > deadline:
            return f"the workers were not ready within {config.BARRIER_TIMEOUT_SECONDS:.0f} s"
    return None


def kill_a_worker_after(delay_seconds: float) -> threading.Thread:
    """Test helper: SIGKILL one live race process after a delay (the failure path, for real)."""

    def _kill():
        time.sleep(delay_seconds)
        children = [p for p in _CONTEXT.active_children() if p.name.startswith("claimrace-worker-")]
        if children:
            os.kill(children[0].pid, signal.SIGKILL)

    thread = threading.Thread(target=_kill, daemon=True)
    thread.start()
    return thread
