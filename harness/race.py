"""The race: N workers, each with its own connection, released by one barrier.

A worker is a connection with its own claim loop: it sends an attempt's
statements one at a time, in order, and starts its next attempt when the last
result is in, like a runner instance. Workers run in client processes: one
process per worker when there are no more workers than CPUs (or when workers
think between attempts), otherwise one process per CPU (more past 8
connections each, see `process_count_for`), each driving its share of the
connections with libpq's asynchronous calls, as pgbench's threads do. A
process per connection spent most of its CPU switching between processes at 8
and more workers on two cores, CPU the server then lacked (measured by
`python -m harness bench`).

Each worker claims until its strategy reports the queue empty (in a timed
race: until its window closes), and keeps one raw record per attempt in plain
lists turned into arrays afterwards; nothing is written until the race is
over, so the bookkeeping does not slow the claims. Process start, connect and
prepare happen before the barrier, outside every measured window. A process
that dies fails the whole race within a bounded time, and no process outlives
the race.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import resource
import select
import threading
import time
import traceback
from dataclasses import dataclass
from threading import BrokenBarrierError

import numpy as np

from harness import config
from harness.errors import RaceError
from harness.strategies import EMPTY, ERROR, OK_STATUSES, WON, failed_statement, get_strategy

# fork: 100 workers start in well under a second and inherit the imported modules.
_CONTEXT = mp.get_context("fork")
_MAX_CONSECUTIVE_ERRORS = 1000  # a worker that only errors is broken, not racing
_NO_DEADLINE = 2**63 - 1  # a drain race: the loop's deadline test never fires


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
    cpu_ns: int = 0  # user + system CPU from release to the end, the process's split evenly over its workers
    max_rss_bytes: int = 0  # peak resident set of the worker's process (includes pages shared with the parent)
    private_bytes: int = 0  # memory the worker's process alone holds at the end (USS), 0 if unknown
    round_trip_ns: np.ndarray | None = None  # per attempt, time inside libpq calls (instrumented races only)
    process_index: int = 0
    workers_in_process: int = 1


@dataclass
class RaceResult:
    strategy: str
    worker_count: int
    think_ms: float
    t0_ns: int  # the first barrier release, the zero of every start time
    end_ns: int  # the last attempt's end
    workers: list[WorkerRecord]
    duration_seconds: float | None = None  # a timed race's window; None when it drained the queue
    process_count: int = 0  # client processes that drove the workers' connections

    @property
    def wall_seconds(self) -> float:
        return (self.end_ns - self.t0_ns) / 1e9


CONNECTIONS_PER_PROCESS = 8  # beyond this many, a process reacts too slowly to its own workers


def process_count_for(worker_count: int, think_ms: float = 0.0) -> int:
    """Client processes for a race: one per worker up to the CPU count; beyond that one per CPU,
    and more once a process would drive over CONNECTIONS_PER_PROCESS connections.

    Fewer processes cost less CPU (a process switch per statement is what made a
    process per connection slow); fewer connections per process react faster,
    which decides who wins under contention (guarded at 32 workers: 2 processes
    won 0.7 of pgbench's claims per second, 4 processes about 0.85).
    Workers that think between attempts mostly sleep, so each keeps its own process.
    """
    if think_ms > 0:
        return worker_count
    cpus = os.cpu_count() or 1
    return max(1, min(worker_count, cpus), -(-worker_count // CONNECTIONS_PER_PROCESS))


def _claim_loop(pgconn, claim, think_seconds: float, deadline_ns: int,
                starts: list, ends: list, outcomes: list, jobs: list, stop_when_empty: bool = True) -> None:
    """One connection, blocking calls: two clock reads, one claim, four list appends per attempt.

    list.append costs half a numpy item store and never needs a capacity
    check; the lists become arrays after the race. The end time is stored, not
    the latency, to keep the subtraction out of the loop.
    """
    clock = time.monotonic_ns
    add_start, add_end, add_outcome, add_job = starts.append, ends.append, outcomes.append, jobs.append
    consecutive_errors = 0
    ended = 0
    while ended < deadline_ns:
        began = clock()
        outcome, job_id = claim(pgconn)
        ended = clock()
        add_start(began)
        add_end(ended)
        add_outcome(outcome)
        add_job(job_id)
        if outcome > WON:  # rare paths only: lost, empty, error
            if outcome == EMPTY and stop_when_empty:
                return
            if outcome == ERROR:
                consecutive_errors += 1
                if consecutive_errors >= _MAX_CONSECUTIVE_ERRORS:
                    raise RuntimeError(f"{consecutive_errors} consecutive failed claims: "
                                       f"{pgconn.get_error_message().decode(errors='replace').strip()}")
            else:
                consecutive_errors = 0
        else:
            consecutive_errors = 0
        if think_seconds:
            time.sleep(think_seconds)


def _finish_sending(pgconn) -> None:
    """psycopg's connections are non-blocking: if a statement did not fit the socket, wait until it is out."""
    while pgconn.flush():
        select.select([], [pgconn.socket], [], 1.0)


def _send(pgconn, name: bytes, params) -> None:
    pgconn.send_query_prepared(name, params)
    if pgconn.flush():
        _finish_sending(pgconn)


def _multiplexed_loop(pgconns: list, strategy, deadline_ns: int, records: list, stop_when_empty: bool = True) -> None:
    """Many connections, one process: each connection still runs its attempts one statement at a time.

    Each wake-up reads every result that is complete, then sends the next
    statements: first for the workers that are half-way through an attempt
    (a picked id goes straight to its UPDATE, so the window between read and
    write stays as short as in a process of its own), then the next attempts,
    then the bookkeeping. Under contention the time from a result to the next
    statement decides who wins the next job, so the loop keeps it short: bound
    methods looked up once, the attempt recorded after the next statement is
    on its way. records[i] holds worker i's four lists.
    """
    clock = time.monotonic_ns
    names = [name.encode() for name, _ in strategy.statements]
    first, last_step = names[0], len(names) - 1
    settle = strategy.settle
    ok = OK_STATUSES
    count = len(pgconns)
    consume = [c.consume_input for c in pgconns]
    busy = [c.is_busy for c in pgconns]
    get = [c.get_result for c in pgconns]
    send = [c.send_query_prepared for c in pgconns]
    flush = [c.flush for c in pgconns]
    record = [(starts.append, ends.append, outcomes.append, jobs.append) for starts, ends, outcomes, jobs in records]
    step = [0] * count
    began = [0] * count
    picked = [None] * count
    held = [None] * count  # a result read before its ReadyForQuery arrived
    errors = [0] * count
    poller = select.epoll()
    by_socket = {}
    try:
        for i, pgconn in enumerate(pgconns):
            by_socket[pgconn.socket] = i
            poller.register(pgconn.socket, select.EPOLLIN)
        for i, pgconn in enumerate(pgconns):
            began[i] = clock()
            _send(pgconn, first, None)
        live = count
        poll = poller.poll
        while live:
            finished = []  # (worker, result, when it was read) for attempts that end with this result
            for fd, _ in poll():
                i = by_socket[fd]
                consume[i]()
                if busy[i]():
                    continue
                result = held[i]
                if result is None:
                    result = get[i]()
                    if busy[i]():  # the statement's end has not arrived yet
                        held[i] = result
                        continue
                else:
                    held[i] = None
                if get[i]() is not None:
                    raise RuntimeError("a claim statement returned more than one result")
                s = step[i]
                if s < last_step and result.ntuples and result.status in ok:
                    value = result.get_value(0, 0)  # the picked id is the next statement's $1
                    picked[i] = value
                    step[i] = s + 1
                    send[i](names[s + 1], (value,))
                    if flush[i]():
                        _finish_sending(pgconns[i])
                else:
                    finished.append((i, result, clock()))
            for i, result, ended in finished:
                if result.status not in ok:
                    outcome, job_id = failed_statement(pgconns[i], picked[i])
                elif step[i] < last_step:
                    outcome, job_id = EMPTY, 0
                else:
                    outcome, job_id = settle(result, picked[i])
                attempt_began = began[i]
                step[i] = 0
                picked[i] = None
                if ended < deadline_ns and (outcome != EMPTY or not stop_when_empty):
                    began[i] = clock()
                    send[i](first, None)
                    if flush[i]():
                        _finish_sending(pgconns[i])
                else:
                    poller.unregister(pgconns[i].socket)
                    live -= 1
                add_start, add_end, add_outcome, add_job = record[i]
                add_start(attempt_began)
                add_end(ended)
                add_outcome(outcome)
                add_job(job_id)
                if outcome == ERROR:
                    errors[i] += 1
                    if errors[i] >= _MAX_CONSECUTIVE_ERRORS:
                        raise RuntimeError(f"{errors[i]} consecutive failed claims: "
                                           f"{pgconns[i].get_error_message().decode(errors='replace').strip()}")
                elif errors[i]:
                    errors[i] = 0
    finally:
        poller.close()


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


def _process_main(process_index: int, worker_indexes: list[int], url: str, strategy_name: str,
                  think_seconds: float, barrier, results, duration_seconds: float | None = None,
                  instrument: bool = False) -> None:
    try:
        from harness.database import connect

        strategy = get_strategy(strategy_name)
        conns = [connect(url, application_name=f"claimrace-worker-{i}") for i in worker_indexes]
        pgconns = [conn.pgconn for conn in conns]
        for pgconn in pgconns:
            strategy.prepare(pgconn)
        records = [([], [], [], []) for _ in worker_indexes]
        round_trips: list[int] = []
        claim, target = strategy.claim, pgconns[0]
        if instrument:
            claim, target = _instrumented_claim(claim, round_trips), _TimedConnection(pgconns[0])
        barrier.wait(config.BARRIER_TIMEOUT_SECONDS)
        released = time.monotonic_ns()
        cpu_at_release = _cpu_ns()
        deadline = _NO_DEADLINE if duration_seconds is None else released + int(duration_seconds * 1e9)
        # a drain race ends a worker at its first empty answer; a timed one keeps asking, as pgbench does
        stop_when_empty = duration_seconds is None
        if len(pgconns) == 1:
            _claim_loop(target, claim, think_seconds, deadline, *records[0], stop_when_empty)
        else:
            _multiplexed_loop(pgconns, strategy, deadline, records, stop_when_empty)
        cpu_share = (_cpu_ns() - cpu_at_release) // len(pgconns)
        max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        private = _private_bytes()
        reports = []
        for worker_index, pgconn, (starts, ends, outcomes, jobs) in zip(worker_indexes, pgconns, records):
            start = np.array(starts, dtype=np.int64)
            reports.append(WorkerRecord(
                worker_index=worker_index, released_ns=released, start_ns=start,
                latency_ns=np.array(ends, dtype=np.int64) - start, outcome=np.array(outcomes, dtype=np.int8),
                job_id=np.array(jobs, dtype=np.int64), backend_pid=pgconn.backend_pid, cpu_ns=cpu_share,
                max_rss_bytes=max_rss, private_bytes=private,
                round_trip_ns=np.array(round_trips, dtype=np.int64) if instrument else None,
                process_index=process_index, workers_in_process=len(worker_indexes)))
        results.put(("ok", process_index, reports))
        for conn in conns:
            conn.close()
    except BrokenBarrierError:
        results.put(("aborted", process_index, "the start barrier was broken"))
    except BaseException as exc:  # report everything, then exit non-zero
        results.put(("error", process_index, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
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


def _describe(indexes: list[int]) -> str:
    return f"worker {indexes[0]}" if len(indexes) == 1 else f"workers {indexes[0]}-{indexes[-1]}"


def run_race(url: str, strategy_name: str, worker_count: int, think_ms: float = 0.0,
             timeout_seconds: float | None = None, duration_seconds: float | None = None,
             instrument: bool = False, process_count: int | None = None) -> RaceResult:
    """Race worker_count workers over the queue in url's claimrace schema until it is drained.

    duration_seconds: a timed race instead; each worker stops at its first attempt that ends
    duration_seconds after the barrier released it, and an empty answer does not stop it.
    instrument: also record each attempt's time inside libpq, to split the client's own cost
    from the round trip (a wrapper call per statement, so not for throughput figures; one worker
    per process only). process_count: client processes (default `process_count_for`).
    """
    get_strategy(strategy_name)
    if worker_count < 1:
        raise ValueError("worker_count must be at least 1")
    if duration_seconds is not None and duration_seconds <= 0:
        raise ValueError("duration_seconds must be positive")
    process_count = min(worker_count, process_count or process_count_for(worker_count, think_ms))
    if think_ms > 0 and process_count < worker_count:
        raise ValueError("workers that think between attempts need a process each")
    if instrument and process_count < worker_count:
        raise ValueError("an instrumented race needs a process per worker")
    sizes = [worker_count // process_count + (p < worker_count % process_count) for p in range(process_count)]
    bounds = np.cumsum([0, *sizes])
    shares = [list(range(bounds[p], bounds[p + 1])) for p in range(process_count)]  # contiguous, as even as they divide
    barrier = _CONTEXT.Barrier(process_count)
    results = _CONTEXT.Queue()
    processes = [
        _CONTEXT.Process(target=_process_main, name=f"claimrace-worker-{share[0]}",
                         args=(p, share, url, strategy_name, think_ms / 1000.0, barrier, results, duration_seconds,
                               instrument), daemon=True)
        for p, share in enumerate(shares)
    ]
    records: dict[int, WorkerRecord] = {}
    reported: set[int] = set()
    failure: str | None = None
    exited_clean_at: dict[int, float] = {}
    deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
    try:
        for proc in processes:
            proc.start()
        while len(reported) < process_count and failure is None:
            try:
                message = results.get(timeout=0.2)
            except queue.Empty:
                message = None
            if message is not None:
                kind, index = message[0], message[1]
                if kind == "ok":
                    for record in message[2]:
                        records[record.worker_index] = record
                    reported.add(index)
                elif kind == "error":
                    failure = (f"{_describe(shares[index])} failed: {message[2].strip().splitlines()[0]}\n"
                               f"{message[2]}")
                else:
                    failure = failure or f"{_describe(shares[index])}: {message[2]}"
                continue
            now = time.monotonic()
            for i, proc in enumerate(processes):
                if i in reported or proc.exitcode is None:
                    continue
                if proc.exitcode != 0:
                    failure = (f"{_describe(shares[i])} (pid {proc.pid}) died with exit code {proc.exitcode} "
                               "before reporting")
                    break
                # exited cleanly: its message may still be in the pipe; give it a moment
                exited_clean_at.setdefault(i, now)
                if now - exited_clean_at[i] > config.WORKER_EXIT_GRACE_SECONDS:
                    failure = f"{_describe(shares[i])} exited without reporting its attempts"
                    break
            if deadline is not None and now > deadline and failure is None:
                failure = f"the race did not finish within {timeout_seconds:.0f} s"
    except BaseException:
        _stop_all(processes, barrier)
        raise
    if failure is not None:
        _stop_all(processes, barrier)
        raise RaceError(failure.splitlines()[0] if "\n" not in failure else failure)
    for proc in processes:
        proc.join(10)
    _stop_all(processes, barrier)  # nothing outlives the race, even a process stuck in exit
    results.close()
    workers = [records[i] for i in range(worker_count)]
    t0 = min(w.released_ns for w in workers)
    end = max(int((w.start_ns + w.latency_ns).max()) if len(w.start_ns) else w.released_ns for w in workers)
    return RaceResult(strategy_name, worker_count, think_ms, t0, end, workers, duration_seconds, process_count)


def kill_a_worker_after(delay_seconds: float) -> threading.Thread:
    """Test helper: SIGKILL one live race process after a delay (the failure path, for real)."""
    import signal

    def _kill():
        time.sleep(delay_seconds)
        children = [p for p in _CONTEXT.active_children() if p.name.startswith("claimrace-worker-")]
        if children:
            os.kill(children[0].pid, signal.SIGKILL)

    thread = threading.Thread(target=_kill, daemon=True)
    thread.start()
    return thread
