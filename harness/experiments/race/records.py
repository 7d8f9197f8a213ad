"""One connection's raw attempts and when its claim loop stops: the bookkeeping every race loop shares.

The race drives a connection with blocking calls in a process of its own
(harness.experiments.race.workers, drained, timed or slowed down) or as one task of an
asyncio process (harness.experiments.race.asyncio_client). The loops differ only in how
they call a claim (`claim(pgconn)` or `await claim(pgconn)`) and what they do
around it; what an attempt leaves behind is noted here, once:

    began, note = records.start(pgconn, deadline_ns, stop_when_empty)
    while began:
        outcome, job_id = claim(pgconn)
        began = note(began, outcome, job_id)

note reads the clock as the claim returns, keeps the attempt, applies the stop
rule, and reads the clock again as the next attempt begins (0: the loop is
over). The attempt is kept in four plain lists turned into arrays after the race:
list.append costs half a numpy item store and never needs a capacity check.
The end time is stored, not the latency, to keep the subtraction out of the
loop; the appends are bound once, so an attempt costs two clock reads, one call
of note and four appends.

The stop rule: an EMPTY answer ends a drain (a timed race keeps asking until
its deadline, as pgbench does); an ERROR is counted, and MAX_CONSECUTIVE_ERRORS
in a row end the worker with the connection's last error.
"""

from __future__ import annotations

import time

import numpy as np

from harness.claims.steps import EMPTY, ERROR, WON

MAX_CONSECUTIVE_ERRORS = 1000  # a worker that only errors is broken, not racing
NO_DEADLINE = 2**63 - 1  # a drain race: the deadline test never fires


class ClaimRecords:
    """One connection's attempts, one entry per attempt: absolute monotonic start and end (ns), outcome, job."""

    __slots__ = ("starts", "ends", "outcomes", "jobs")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.outcomes: list[int] = []
        self.jobs: list[int] = []

    def start(self, pgconn, deadline_ns: int = NO_DEADLINE, stop_when_empty: bool = True):
        """(when the first attempt begins, note): note(began, outcome, job_id) keeps an attempt and returns when
        the next one begins, or 0 once the loop is over (an empty queue in a drain, the deadline passed); it
        raises RuntimeError, with the connection's last error, at the MAX_CONSECUTIVE_ERRORS-th error in a row."""
        clock = time.monotonic_ns
        add_start, add_end = self.starts.append, self.ends.append
        add_outcome, add_job = self.outcomes.append, self.jobs.append
        consecutive_errors = 0

        def note(began: int, outcome: int, job_id: int) -> int:
            nonlocal consecutive_errors
            ended = clock()
            add_start(began)
            add_end(ended)
            add_outcome(outcome)
            add_job(job_id)
            if outcome > WON:  # rare paths only: lost, empty, error, aborted
                if outcome == EMPTY and stop_when_empty:
                    return 0
                if outcome == ERROR:
                    consecutive_errors += 1
                    if consecutive_errors >= MAX_CONSECUTIVE_ERRORS:
                        raise RuntimeError(f"{consecutive_errors} consecutive failed claims: "
                                           f"{pgconn.get_error_message().decode(errors='replace').strip()}")
                else:
                    consecutive_errors = 0
            else:
                consecutive_errors = 0
            if ended >= deadline_ns:
                return 0
            return clock()

        return clock(), note

    def arrays(self) -> dict:
        """The attempts as WorkerRecord's arrays: start_ns, latency_ns, outcome, job_id."""
        start = np.array(self.starts, dtype=np.int64)
        return {"start_ns": start, "latency_ns": np.array(self.ends, dtype=np.int64) - start,
                "outcome": np.array(self.outcomes, dtype=np.int8), "job_id": np.array(self.jobs, dtype=np.int64)}
