"""The soak's own processes (harness.experiments.soak.measure): the arrivals, inserting each job as it falls due, and the
workers, each claiming, running and finishing jobs on its own connection; how they are stopped and what they report.
Every process dies with the harness (die_with_parent), SIGKILL included."""

from __future__ import annotations

import os
import time
import traceback

import numpy as np

from harness.children import die_with_parent
from harness.claims.steps import EMPTY, ERROR, LOST, WON, AttemptNotes
from harness.config import SCHEMA
from harness.server import database
from harness.claims.strategies import get_strategy

JOBS = f"{SCHEMA}.jobs"
BATCH = 10  # skip_locked_batch: the jobs one claim takes at most, each run and finished in turn
POLL_S = 0.05  # a worker that found the queue empty waits this long before it asks again
STOP_GRACE_S = 5.0
ARRIVED, CLAIMED = 0, 1  # the places in a run's shared counts
INSERT_MAX = 1000  # jobs in one arrivals statement at most: a late schedule catches up in steps

FINISH_SQL = {"history": f"UPDATE {JOBS} SET status = 'done' WHERE id = $1",
              "history_indexed": f"UPDATE {JOBS} SET status = 'done' WHERE id = $1",
              "partitioned": f"UPDATE {JOBS} SET status = 'done' WHERE id = $1",
              "delete": f"DELETE FROM {JOBS} WHERE id = $1"}
INSERT_SQL = f"INSERT INTO {JOBS} (status) SELECT 'pending' FROM generate_series(1, %s) RETURNING id"


def session(url: str, name: str, synchronous_commit: str):
    conn = database.connect(url, application_name=name)
    conn.execute(f"SET synchronous_commit = {'off' if synchronous_commit == 'off' else 'on'}")
    return conn


def arrivals_main(parent_pid: int, url: str, schedule, synchronous_commit: str, clock, start, stop,
                  results, counts=None) -> None:
    """Insert every job as soon as it is due (open loop), job k at clock + schedule.due_s(k) (the run's start, as
    the harness set it before the start: not this process's waking up; harness.experiments.soak.phases.Schedule);
    put (ids, due ns, committed ns) on results. counts: a shared (arrived, claimed) pair the harness reads live;
    the arrivals add to the first."""
    die_with_parent(parent_pid)
    try:
        conn = session(url, "claimrace-soak-arrivals", synchronous_commit)
        ids, due, committed = [], [], []
        start.wait()
        began = clock.value
        sent = 0
        while not stop.is_set():
            owed = int(schedule.due_by((time.time_ns() - began) / 1e9)) + 1 - sent
            if owed <= 0:
                wait_s = schedule.due_s(sent) - (time.time_ns() - began) / 1e9
                stop.wait(max(0.0, min(wait_s, 0.05)))
                continue
            owed = min(owed, INSERT_MAX)
            rows = conn.execute(INSERT_SQL, [owed]).fetchall()
            now = time.time_ns()
            ids.extend(row[0] for row in rows)
            due.extend(began + int(schedule.due_s(sent + k) * 1e9) for k in range(owed))
            committed.extend([now] * owed)
            sent += owed
            if counts is not None:
                with counts.get_lock():
                    counts[ARRIVED] += owed
        results.put(("arrivals", np.array(ids, dtype=np.int64), np.array(due, dtype=np.int64),
                     np.array(committed, dtype=np.int64)))
        conn.close()
    except BaseException as exc:
        results.put(("error", "arrivals", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        raise SystemExit(1)


def worker_main(index: int, parent_pid: int, url: str, shape: str, strategy_name: str, job_s: float,
                synchronous_commit: str, start, stop, results, counts=None) -> None:
    """Claim, run the job, finish it, until stopped; put (job ids, claim return ns, claim statement ns, lost and
    empty counts) on results. counts: as arrivals_main's; a worker adds the jobs it claimed to the second."""
    die_with_parent(parent_pid)
    try:
        conn = session(url, f"claimrace-soak-worker-{index}", synchronous_commit)
        pgconn = conn.pgconn
        strategy = get_strategy(strategy_name)
        batch = BATCH if strategy.batch else 1
        strategy.prepare(pgconn, batch)
        notes = AttemptNotes()
        claim, _ = strategy.steps(notes, batch)
        finish = FINISH_SQL[shape]
        jobs, returned, took = [], [], []
        lost = empty = errors = 0
        start.wait()
        while not stop.is_set():
            began = time.perf_counter_ns()
            outcome, job_id = claim(pgconn)
            ended = time.perf_counter_ns()
            # a batch claim's jobs, all returned by the one statement, each run and finished in turn; only this
            # attempt's ids are read, so the notes need not grow all run
            taken = list(notes.job_ids) if strategy.batch else [job_id]
            notes.job_ids.clear()
            notes.rows.clear()
            if outcome == WON:
                at = time.time_ns()
                for job in taken:
                    jobs.append(job)
                    returned.append(at)
                    took.append(ended - began)
                if counts is not None:
                    with counts.get_lock():
                        counts[CLAIMED] += len(taken)
                for job in taken:
                    if job_s:
                        time.sleep(job_s)
                    conn.execute(finish.replace("$1", "%s"), [job])
            elif outcome == LOST:
                lost += 1
            elif outcome == EMPTY:
                empty += 1
                stop.wait(POLL_S)
            elif outcome == ERROR:
                errors += 1
                stop.wait(POLL_S)
        results.put(("worker", index, np.array(jobs, dtype=np.int64), np.array(returned, dtype=np.int64),
                     np.array(took, dtype=np.int64), lost, empty, errors, os.getpid(), pgconn.backend_pid))
        conn.close()
    except BaseException as exc:
        results.put(("error", f"worker {index}", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        raise SystemExit(1)


def stop_all(processes, stop) -> None:
    stop.set()
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in processes:
        proc.join(max(0.0, deadline - time.monotonic()))
    for proc in processes:
        if proc.is_alive():
            proc.kill()
            proc.join(1)


def collect(results, expected: int, timeout_s: float) -> dict:
    got: dict = {"workers": [], "errors": []}
    deadline = time.monotonic() + timeout_s
    while len(got["workers"]) + ("arrivals" in got) + len(got["errors"]) < expected:
        try:
            item = results.get(timeout=max(0.1, deadline - time.monotonic()))
        except Exception:
            break
        if item[0] == "arrivals":
            got["arrivals"] = item[1:]
        elif item[0] == "worker":
            got["workers"].append(item[1:])
        else:
            got["errors"].append(f"{item[1]}: {item[2]}")
        if time.monotonic() > deadline:
            break
    return got
