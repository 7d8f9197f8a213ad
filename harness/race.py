"""The race: N worker processes, each with its own connection, released by one barrier.

Each worker claims in a loop until its strategy reports the queue empty (or,
in a timed race, until its window closes), and keeps one raw record per attempt
in plain lists turned into arrays afterwards; nothing is written until the race
is over, so the bookkeeping does not slow the claims. Process start, connect and
prepare happen before the barrier, outside every measured window.
A worker that dies fails the whole race within a bounded time, and no worker
process outlives the race.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import resource
import threading
import time
import traceback
from dataclasses import dataclass
from threading import BrokenBarrierError

import numpy as np

from harness import config
from harness.errors import RaceError
from harness.strategies import EMPTY, ERROR, WON, get_strategy

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
    cpu_ns: int = 0  # the worker's user + system CPU time from release to its last attempt
    max_rss_bytes: int = 0  # peak resident set (includes pages still shared with the parent)
    private_bytes: int = 0  # memory this worker alone holds at the end (USS), 0 if unknown
    round_trip_ns: np.ndarray | None = None  # per attempt, time inside libpq calls (instrumented races only)


@dataclass
class RaceResult:
    strategy: str
    worker_count: int
    think_ms: float
    t0_ns: int  # the first barrier release, the zero of every start time
    end_ns: int  # the last attempt's end
    workers: list[WorkerRecord]
    duration_seconds: float | None = None  # a timed race's window; None when it drained the queue

    @property
    def wall_seconds(self) -> float:
        return (self.end_ns - self.t0_ns) / 1e9


def _claim_loop(pgconn, claim, think_seconds: float, deadline_ns: int,
                starts: list, ends: list, outcomes: list, jobs: list) -> None:
    """The tight loop: two clock reads, one claim, four list appends per attempt.

    list.append costs a third of a numpy item store and never needs a capacity
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
            if outcome == EMPTY:
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
        text = open("/proc/self/smaps_rollup").read()
    except OSError:
        return 0
    total = 0
    for line in text.splitlines():
        if line.startswith(("Private_Clean:", "Private_Dirty:")):
            total += int(line.split()[1]) * 1024
    return total


def _worker_main(worker_index: int, url: str, strategy_name: str, think_seconds: float,
                 barrier, results, duration_seconds: float | None = None, instrument: bool = False) -> None:
    try:
        from harness.database import connect

        conn = connect(url, application_name=f"claimrace-worker-{worker_index}")
        pgconn = conn.pgconn
        strategy = get_strategy(strategy_name)
        strategy.prepare(pgconn)
        backend_pid = pgconn.backend_pid
        claim, target = strategy.claim, pgconn
        round_trips: list[int] = []
        if instrument:
            claim, target = _instrumented_claim(claim, round_trips), _TimedConnection(pgconn)
        starts: list[int] = []
        ends: list[int] = []
        outcomes: list[int] = []
        jobs: list[int] = []
        barrier.wait(config.BARRIER_TIMEOUT_SECONDS)
        released = time.monotonic_ns()
        cpu_at_release = _cpu_ns()
        deadline = _NO_DEADLINE if duration_seconds is None else released + int(duration_seconds * 1e9)
        _claim_loop(target, claim, think_seconds, deadline, starts, ends, outcomes, jobs)
        cpu_used = _cpu_ns() - cpu_at_release
        start = np.array(starts, dtype=np.int64)
        latency = np.array(ends, dtype=np.int64) - start
        del starts, ends
        max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        results.put(("ok", worker_index, released, backend_pid, start, latency,
                     np.array(outcomes, dtype=np.int8), np.array(jobs, dtype=np.int64),
                     cpu_used, max_rss, _private_bytes(),
                     np.array(round_trips, dtype=np.int64) if instrument else None))
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


def run_race(url: str, strategy_name: str, worker_count: int, think_ms: float = 0.0,
             timeout_seconds: float | None = None, duration_seconds: float | None = None,
             instrument: bool = False) -> RaceResult:
    """Race worker_count processes over the queue in url's claimrace schema until it is drained.

    duration_seconds: a timed race instead; each worker stops at its first attempt that ends
    duration_seconds after the barrier released it (or at an empty queue, whichever comes first).
    instrument: also record each attempt's time inside libpq, to split the client's own cost
    from the round trip (adds a wrapper call per statement, so not for throughput figures).
    """
    get_strategy(strategy_name)
    if worker_count < 1:
        raise ValueError("worker_count must be at least 1")
    if duration_seconds is not None and duration_seconds <= 0:
        raise ValueError("duration_seconds must be positive")
    barrier = _CONTEXT.Barrier(worker_count)
    results = _CONTEXT.Queue()
    processes = [
        _CONTEXT.Process(target=_worker_main, name=f"claimrace-worker-{i}",
                         args=(i, url, strategy_name, think_ms / 1000.0, barrier, results, duration_seconds,
                               instrument), daemon=True)
        for i in range(worker_count)
    ]
    records: dict[int, WorkerRecord] = {}
    failure: str | None = None
    exited_clean_at: dict[int, float] = {}
    deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
    try:
        for proc in processes:
            proc.start()
        while len(records) < worker_count and failure is None:
            try:
                message = results.get(timeout=0.2)
            except queue.Empty:
                message = None
            if message is not None:
                kind, index = message[0], message[1]
                if kind == "ok":
                    (_, _, released, backend_pid, start, latency, outcome, job, cpu_used, max_rss, private,
                     round_trips) = message
                    records[index] = WorkerRecord(index, released, start, latency, outcome, job, backend_pid,
                                                  cpu_used, max_rss, private, round_trips)
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
        raise RaceError(failure.splitlines()[0] if "\n" not in failure else failure)
    for proc in processes:
        proc.join(10)
    _stop_all(processes, barrier)  # nothing outlives the race, even a worker stuck in exit
    results.close()
    workers = [records[i] for i in range(worker_count)]
    t0 = min(w.released_ns for w in workers)
    end = max(int((w.start_ns + w.latency_ns).max()) if len(w.start_ns) else w.released_ns for w in workers)
    return RaceResult(strategy_name, worker_count, think_ms, t0, end, workers, duration_seconds)


def kill_a_worker_after(delay_seconds: float) -> threading.Thread:
    """Test helper: SIGKILL one live race worker after a delay (the failure path, for real)."""
    import signal

    def _kill():
        time.sleep(delay_seconds)
        children = [p for p in _CONTEXT.active_children() if p.name.startswith("claimrace-worker-")]
        if children:
            os.kill(children[0].pid, signal.SIGKILL)

    thread = threading.Thread(target=_kill, daemon=True)
    thread.start()
    return thread
