"""The original's client layout: one process, one asyncio loop, every connection a task of its own.

The original write-up drove all its connections from one asynchronous process.
A loop that serves many connections reacts to them one after another, and that
decides who reaches the head of the queue first, so this layout is raced as a
named arm beside the default (one process per worker, `harness.experiments.race.workers`)
and recorded in every manifest (`client_layout`).

The process is forked, asks to die with the harness (SIGKILL included), opens
and prepares every connection, waits at the same kind of barrier, then starts
every task at once. Each task runs one statement at a time on its connection,
through libpq's non-blocking calls and psycopg's waiting functions, and keeps
the same raw records as a worker process, noted by the same bookkeeping and
stopped by the same rule (`claim_records.ClaimRecords`, then a `WorkerRecord`);
its CPU and run-queue figures are the one process's, since every task shares it. Only the original
three strategies are raced this way: their attempts are one or two statements
whose outcome the same settle functions decide.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing as mp
import os
import queue
import time
import traceback

from psycopg import generators, waiting

from harness import config
from harness.errors import RaceError, UserError
from harness.children import die_with_parent
from harness.experiments.race.workers import RaceResult, WorkerRecord
from harness.server.activity import read_schedstat, schedstat_delta
from harness.claims.strategies import ORIGINAL_STRATEGIES, get_strategy, settle_for
from harness.claims.steps import EMPTY, failed_statement
from harness.experiments.race.records import ClaimRecords

_CONTEXT = mp.get_context("fork")
_TUPLES_OK = 2  # pq.ExecStatus.TUPLES_OK
_OK = (1, 2)  # COMMAND_OK, TUPLES_OK
CLIENT_LAYOUT = "asyncio"
CLIENT_LAYOUT_TEXT = "one process, one asyncio loop, every connection a task of its own"


def check_strategy(strategy_name: str) -> None:
    if strategy_name not in ORIGINAL_STRATEGIES:
        raise UserError(f"the asyncio client races {', '.join(ORIGINAL_STRATEGIES)} only, not {strategy_name}")


async def _execute(pgconn, name: bytes, params):
    """One prepared statement on a non-blocking connection; the loop serves the other tasks while it waits."""
    pgconn.send_query_prepared(name, params)
    results = await waiting.wait_async(generators.execute(pgconn), pgconn.socket)
    return results[-1]


def _claim_for(strategy_name: str):
    """The attempt of one of the original three, as a coroutine: the same statements, the same settle rule."""
    settle = settle_for(strategy_name)
    if strategy_name == "skip_locked":
        async def claim(pgconn):
            claimed = await _execute(pgconn, b"claim", None)
            if claimed.status != _TUPLES_OK:
                return failed_statement(pgconn, 0)
            return settle(claimed, None)
        return claim

    async def claim(pgconn):
        picked = await _execute(pgconn, b"pick", None)
        if picked.status != _TUPLES_OK:
            return failed_statement(pgconn, 0)
        if picked.ntuples == 0:
            return EMPTY, 0
        job_id = picked.get_value(0, 0)
        claimed = await _execute(pgconn, b"claim", (job_id,))
        if claimed.status not in _OK:
            return failed_statement(pgconn, job_id)
        return settle(claimed, job_id)
    return claim


async def _task(index: int, pgconn, claim, released: list, records: dict) -> None:
    """One connection's loop: one awaited claim per attempt, the bookkeeping in ClaimRecords (claim_records)."""
    attempts = ClaimRecords()
    backend_pid = pgconn.backend_pid
    released[index] = time.monotonic_ns()
    schedstat_start = read_schedstat(backend_pid)
    began, note = attempts.start(pgconn)
    while began:
        outcome, job_id = await claim(pgconn)
        began = note(began, outcome, job_id)
    records[index] = (attempts, backend_pid, schedstat_start, read_schedstat(backend_pid), time.monotonic_ns())


def _client_main(parent_pid: int, url: str, strategy_name: str, worker_count: int, barrier, results) -> None:
    die_with_parent(parent_pid)
    gc.disable()
    try:
        from harness.server.database import connect

        strategy = get_strategy(strategy_name)
        connections = [connect(url, application_name=f"claimrace-worker-{i}") for i in range(worker_count)]
        for conn in connections:
            strategy.prepare(conn.pgconn, 1)
            conn.pgconn.nonblocking = 1
        claim = _claim_for(strategy_name)
        barrier.wait(config.BARRIER_TIMEOUT_SECONDS)
        cpu_start = time.process_time_ns()
        own_start = read_schedstat(os.getpid())
        released: list = [0] * worker_count
        records: dict = {}

        async def race():
            await asyncio.gather(*(_task(i, c.pgconn, claim, released, records) for i, c in enumerate(connections)))

        asyncio.run(race())
        own = schedstat_delta(own_start, read_schedstat(os.getpid()))
        cpu = time.process_time_ns() - cpu_start
        workers = []
        for i in range(worker_count):
            attempts, backend_pid, schedstat_start, schedstat_end, ended = records[i]
            workers.append(WorkerRecord(
                worker_index=i, released_ns=released[i], **attempts.arrays(), backend_pid=backend_pid,
                # every task shares the one process: its CPU and its wait for a CPU are each task's too
                cpu_ns=cpu, backend_schedstat_start=schedstat_start, backend_schedstat_end=schedstat_end,
                ended_ns=ended, client_run_delay_ns=own[1] if own else None))
        results.put(("ok", workers))
        for conn in connections:
            conn.close()
    except BaseException as exc:  # report everything, then exit non-zero
        results.put(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        raise SystemExit(1)


def run_race_asyncio(url: str, strategy_name: str, worker_count: int, on_release=None,
                     timeout_seconds: float | None = None) -> RaceResult:
    """Race worker_count connections, all driven by one asyncio process, until the queue is drained."""
    check_strategy(strategy_name)
    if worker_count < 1:
        raise ValueError("worker_count must be at least 1")
    barrier = _CONTEXT.Barrier(2)
    results = _CONTEXT.Queue()
    process = _CONTEXT.Process(target=_client_main, name="claimrace-asyncio-client", daemon=True,
                               args=(os.getpid(), url, strategy_name, worker_count, barrier, results))
    deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
    process.start()
    try:
        message = None
        while barrier.n_waiting < 1:
            if process.exitcode is not None:
                try:
                    message = results.get(timeout=1)
                except queue.Empty:
                    pass
                raise RaceError(f"the asyncio client exited before the start: "
                                f"{message[1].splitlines()[0] if message else process.exitcode}")
            time.sleep(0.01)
        if on_release is not None:
            on_release()
        barrier.wait(config.BARRIER_TIMEOUT_SECONDS)
        while message is None:
            try:
                message = results.get(timeout=0.2)
            except queue.Empty:
                if process.exitcode not in (None, 0):
                    raise RaceError(f"the asyncio client died with exit code {process.exitcode}") from None
                if deadline is not None and time.monotonic() > deadline:
                    raise RaceError(f"the race did not finish within {timeout_seconds:.0f} s") from None
        if message[0] != "ok":
            raise RaceError(f"the asyncio client failed: {message[1].strip().splitlines()[0]}\n{message[1]}")
        workers = message[1]
    finally:
        barrier.abort()
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join(1)
        results.close()
    t0 = min(w.released_ns for w in workers)
    end = max(int((w.start_ns + w.latency_ns).max()) if len(w.start_ns) else w.released_ns for w in workers)
    return RaceResult(strategy_name, worker_count, 0.0, 0.0, t0, end, workers, client_processes=1)
