"""The race: N worker processes, each with its own connection, released by one barrier.

Each worker claims in a loop until its strategy reports the queue empty, and
keeps one raw record per attempt in preallocated arrays; nothing is written
until the race is over, so the bookkeeping does not slow the claims.
A worker that dies fails the whole race within a bounded time, and no worker
process outlives the race.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import threading
import time
import traceback
from dataclasses import dataclass
from threading import BrokenBarrierError

import numpy as np

from harness import config
from harness.errors import RaceError
from harness.strategies import EMPTY, ERROR, get_strategy

# fork: 100 workers start in well under a second and inherit the imported modules.
_CONTEXT = mp.get_context("fork")
_INITIAL_CAPACITY = 4096
_MAX_CONSECUTIVE_ERRORS = 1000  # a worker that only errors is broken, not racing


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


@dataclass
class RaceResult:
    strategy: str
    worker_count: int
    think_ms: float
    t0_ns: int  # the first barrier release, the zero of every start time
    end_ns: int  # the last attempt's end
    workers: list[WorkerRecord]

    @property
    def wall_seconds(self) -> float:
        return (self.end_ns - self.t0_ns) / 1e9


class _Buffer:
    """Growable int64 columns; appends are cheap, growth is rare (doubling)."""

    __slots__ = ("size", "start", "latency", "outcome", "job")

    def __init__(self, capacity: int = _INITIAL_CAPACITY):
        self.size = 0
        self.start = np.empty(capacity, dtype=np.int64)
        self.latency = np.empty(capacity, dtype=np.int64)
        self.outcome = np.empty(capacity, dtype=np.int8)
        self.job = np.empty(capacity, dtype=np.int64)

    def grow(self) -> None:
        capacity = len(self.start) * 2
        for name in ("start", "latency", "outcome", "job"):
            old = getattr(self, name)
            new = np.empty(capacity, dtype=old.dtype)
            new[: self.size] = old[: self.size]
            setattr(self, name, new)


def _claim_loop(pgconn, claim, think_seconds: float, buffer: _Buffer) -> None:
    """The tight loop. Kept small: two clock reads, one claim, four stores per attempt."""
    clock = time.monotonic_ns
    sleep = time.sleep
    consecutive_errors = 0
    # plain Python lists of the arrays' views would be no faster; index stores into numpy are ~50 ns
    while True:
        if buffer.size == len(buffer.start):
            buffer.grow()
        start, latency, outcomes, jobs = buffer.start, buffer.latency, buffer.outcome, buffer.job
        i = buffer.size
        began = clock()
        outcome, job_id = claim(pgconn)
        ended = clock()
        start[i] = began
        latency[i] = ended - began
        outcomes[i] = outcome
        jobs[i] = job_id
        buffer.size = i + 1
        if outcome == EMPTY:
            return
        if outcome == ERROR:
            consecutive_errors += 1
            if consecutive_errors >= _MAX_CONSECUTIVE_ERRORS:
                raise RuntimeError(f"{consecutive_errors} consecutive failed claims: "
                                   f"{pgconn.get_error_message().decode(errors='replace').strip()}")
        else:
            consecutive_errors = 0
        if think_seconds:
            sleep(think_seconds)


def _worker_main(worker_index: int, url: str, strategy_name: str, think_seconds: float,
                 barrier, results) -> None:
    try:
        from harness.database import connect

        conn = connect(url, application_name=f"claimrace-worker-{worker_index}")
        pgconn = conn.pgconn
        strategy = get_strategy(strategy_name)
        strategy.prepare(pgconn)
        backend_pid = pgconn.backend_pid
        buffer = _Buffer()
        barrier.wait(config.BARRIER_TIMEOUT_SECONDS)
        released = time.monotonic_ns()
        _claim_loop(pgconn, strategy.claim, think_seconds, buffer)
        n = buffer.size
        results.put(("ok", worker_index, released, backend_pid, buffer.start[:n].copy(), buffer.latency[:n].copy(),
                     buffer.outcome[:n].copy(), buffer.job[:n].copy()))
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
             timeout_seconds: float | None = None) -> RaceResult:
    """Race worker_count processes over the queue in url's claimrace schema until it is drained."""
    get_strategy(strategy_name)
    if worker_count < 1:
        raise ValueError("worker_count must be at least 1")
    barrier = _CONTEXT.Barrier(worker_count)
    results = _CONTEXT.Queue()
    processes = [
        _CONTEXT.Process(target=_worker_main, name=f"claimrace-worker-{i}",
                         args=(i, url, strategy_name, think_ms / 1000.0, barrier, results), daemon=True)
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
                    _, _, released, backend_pid, start, latency, outcome, job = message
                    records[index] = WorkerRecord(index, released, start, latency, outcome, job, backend_pid)
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
    return RaceResult(strategy_name, worker_count, think_ms, t0, end, workers)


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
