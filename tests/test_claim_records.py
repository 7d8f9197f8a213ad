"""The bookkeeping every race loop shares (harness.experiments.race.records): what it keeps and when it stops."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from harness.claims.steps import ABORTED, EMPTY, ERROR, LOST, WON
from harness.experiments.race.records import MAX_CONSECUTIVE_ERRORS, ClaimRecords
from harness.experiments.race.workers import _claim_loop
from harness.experiments.race.asyncio_client import _task


class _Connection:
    backend_pid = 0  # no such process: no schedstat is read
    def get_error_message(self) -> bytes:
        return b"ERROR:  the last error\n"


def scripted(*answers):
    """A claim that answers from the list, then EMPTY."""
    left = iter(answers)

    def claim(pgconn):
        return next(left, (EMPTY, 0))

    return claim


def test_a_drain_keeps_every_attempt_and_stops_at_the_first_empty_answer():
    records = ClaimRecords()
    _claim_loop(_Connection(), scripted((WON, 1), (LOST, 2), (WON, 3), (EMPTY, 0), (WON, 4)), records)
    assert records.outcomes == [WON, LOST, WON, EMPTY] and records.jobs == [1, 2, 3, 0]
    arrays = records.arrays()
    assert arrays["start_ns"].dtype == np.int64 and arrays["outcome"].dtype == np.int8
    assert (arrays["latency_ns"] >= 0).all() and list(arrays["job_id"]) == [1, 2, 3, 0]
    assert all(end <= start for end, start in zip(records.ends, records.starts[1:])), "attempts do not overlap"


def test_a_timed_race_asks_past_an_empty_answer_until_its_deadline():
    records = ClaimRecords()
    _claim_loop(_Connection(), scripted(), records, time.monotonic_ns() + 20_000_000, stop_when_empty=False)
    assert len(records.outcomes) > 1 and set(records.outcomes) == {EMPTY}
    assert records.ends[-1] >= records.ends[0], "the loop ends once an attempt ends past the deadline"


def test_only_errors_in_a_row_end_a_worker_with_the_connections_error():
    records = ClaimRecords()
    almost = [(ERROR, 0)] * (MAX_CONSECUTIVE_ERRORS - 1)
    # any other outcome in between starts the count again: an aborted attempt, a lost one
    _claim_loop(_Connection(), scripted(*almost, (ABORTED, 0), *almost, (LOST, 1), *almost), records)
    assert records.outcomes[-1] == EMPTY
    with pytest.raises(RuntimeError, match=f"^{MAX_CONSECUTIVE_ERRORS} consecutive failed claims: ERROR:  the last "
                                           "error$"):
        _claim_loop(_Connection(), scripted(*almost, (ERROR, 0), (WON, 1)), ClaimRecords())


def test_the_asyncio_task_keeps_the_same_records_and_stops_the_same_way():
    answers = scripted((WON, 1), (ERROR, 0), (LOST, 2), (EMPTY, 0), (WON, 3))

    async def claim(pgconn):
        await asyncio.sleep(0)
        return answers(pgconn)

    released, found = [0], {}
    asyncio.run(_task(0, _Connection(), claim, released, found))
    records, backend_pid, *_ = found[0]
    assert records.outcomes == [WON, ERROR, LOST, EMPTY] and records.jobs == [1, 0, 2, 0] and backend_pid == 0
    assert released[0] <= records.starts[0]
    failing = scripted(*[(ERROR, 0)] * MAX_CONSECUTIVE_ERRORS)

    async def failing_claim(pgconn):
        return failing(pgconn)

    with pytest.raises(RuntimeError, match="^1000 consecutive failed claims: ERROR:  the last error$"):
        asyncio.run(_task(0, _Connection(), failing_claim, [0], {}))
