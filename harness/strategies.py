"""The claim strategies: each one's SQL, written once, and the loop step that runs it.

The report shows these SQL strings verbatim, the pgbench scripts are made from
them, and the race workers prepare exactly them. Every statement runs in
autocommit at READ COMMITTED, one statement per round trip, as in the study.

A claim step talks to libpq directly (psycopg's pq layer, prepared statements,
text parameters) so the client's own work between two round trips stays small.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from psycopg import pq

from harness.config import SCHEMA

# Outcome codes stored per attempt; names are what the Parquet files hold.
WON, LOST, EMPTY, ERROR = 0, 1, 2, 3
OUTCOME_NAMES = ("won", "lost", "empty", "error")

PICK_OLDEST_PENDING = f"SELECT id FROM {SCHEMA}.jobs WHERE status = 'pending' ORDER BY id LIMIT 1"

NAIVE_CLAIM = f"UPDATE {SCHEMA}.jobs SET status = 'running', started_at = now() WHERE id = $1"

GUARDED_CLAIM = (
    f"UPDATE {SCHEMA}.jobs SET status = 'running', started_at = now() "
    "WHERE id = $1 AND status = 'pending' RETURNING id"
)

SKIP_LOCKED_CLAIM = (
    f"UPDATE {SCHEMA}.jobs SET status = 'running', started_at = now() "
    f"WHERE id = (SELECT id FROM {SCHEMA}.jobs WHERE status = 'pending' "
    "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id"
)


class ClaimConnectionError(Exception):
    """The connection broke mid-race: the worker cannot go on."""


# Plain ints: PGresult.status is an int, and an int compare is the cheapest test in the loop.
_TUPLES_OK = int(pq.ExecStatus.TUPLES_OK)
OK_STATUSES = _OK = (int(pq.ExecStatus.TUPLES_OK), int(pq.ExecStatus.COMMAND_OK))
_CONNECTION_OK = int(pq.ConnStatus.OK)


def failed_statement(pgconn, job_id) -> tuple[int, int]:
    """A statement came back with an error: an ERROR attempt, or the end if the connection broke."""
    if pgconn.status != _CONNECTION_OK:
        raise ClaimConnectionError(pgconn.get_error_message().decode(errors="replace").strip())
    return ERROR, int(job_id or 0)


# What the last statement's result means: (outcome, job id). The same rules serve the one-connection
# loop below and the slowed-down loop, so an outcome is decided in one place.


def _settle_naive(result, job_id) -> tuple[int, int]:
    # no status check: the UPDATE always finds the row, so the worker always "wins"
    return (WON if result.command_tuples == 1 else LOST), int(job_id)


def _settle_guarded(result, job_id) -> tuple[int, int]:
    # zero rows: another worker flipped it first (the API's 409)
    return (WON if result.ntuples == 1 else LOST), int(job_id)


def _settle_skip_locked(result, job_id) -> tuple[int, int]:
    if result.ntuples == 0:
        # nothing pending that is not locked by someone else: the queue is drained for us
        return EMPTY, 0
    return WON, int(result.get_value(0, 0))


def _read_then_write(settle):
    """One attempt of a two-statement strategy on a blocking connection: pick, then claim what was picked."""

    def claim(pgconn) -> tuple[int, int]:
        picked = pgconn.exec_prepared(b"pick", None)
        if picked.status != _TUPLES_OK:
            return failed_statement(pgconn, 0)
        if picked.ntuples == 0:
            return EMPTY, 0
        job_id = picked.get_value(0, 0)
        claimed = pgconn.exec_prepared(b"claim", (job_id,))
        if claimed.status not in _OK:
            return failed_statement(pgconn, job_id)
        return settle(claimed, job_id)

    return claim


def _read_pause_write(settle):
    """A slowed-down attempt: pick, pause where the race window is, then claim; each statement's times."""

    def claim(pgconn, pause_seconds: float, clock) -> tuple[int, int, int, int]:
        picked = pgconn.exec_prepared(b"pick", None)
        read_end = clock()
        if picked.status != _TUPLES_OK:
            return (*failed_statement(pgconn, 0), read_end, 0)
        if picked.ntuples == 0:
            return EMPTY, 0, read_end, 0
        job_id = picked.get_value(0, 0)
        time.sleep(pause_seconds)
        write_start = clock()
        claimed = pgconn.exec_prepared(b"claim", (job_id,))
        if claimed.status not in _OK:
            return (*failed_statement(pgconn, job_id), read_end, write_start)
        return (*settle(claimed, job_id), read_end, write_start)

    return claim


_claim_naive = _read_then_write(_settle_naive)
_claim_guarded = _read_then_write(_settle_guarded)


def _claim_skip_locked(pgconn) -> tuple[int, int]:
    claimed = pgconn.exec_prepared(b"claim", None)
    if claimed.status != _TUPLES_OK:
        return failed_statement(pgconn, 0)
    return _settle_skip_locked(claimed, None)


def _claim_skip_locked_stepwise(pgconn, pause_seconds: float, clock) -> tuple[int, int, int, int]:
    # one statement reads and writes: there is no gap to pause in (read_end = 0: no separate read)
    write_start = clock()
    return (*_claim_skip_locked(pgconn), 0, write_start)


@dataclass(frozen=True)
class Strategy:
    name: str
    title: str
    summary: str
    statements: tuple[tuple[str, str], ...]  # (prepared name, SQL) in the order one attempt runs them
    claim: Callable[[object], tuple[int, int]]  # one whole attempt on a blocking connection
    # the outcome of an attempt from its last statement's result (and the picked id, if any);
    # every earlier statement returns one row whose first value is the next statement's $1, or none (EMPTY)
    settle: Callable[[object, object], tuple[int, int]] | None = None
    # a slowed-down attempt: (pgconn, pause between read and write, clock) -> (outcome, job id, read end, write start)
    claim_stepwise: Callable[[object, float, Callable[[], int]], tuple[int, int, int, int]] | None = None

    def prepare(self, pgconn) -> None:
        """Prepare this strategy's statements on a raw libpq connection."""
        for name, text in self.statements:
            result = pgconn.prepare(name.encode(), text.encode())
            if result.status != pq.ExecStatus.COMMAND_OK:
                raise RuntimeError(f"cannot prepare {self.name}.{name}: "
                                   f"{result.error_message.decode(errors='replace').strip()}")

    @property
    def sql(self) -> str:
        """The statements as a reader sees them, one per line, ; terminated."""
        return "\n".join(f"{text};" for _, text in self.statements)


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy(
            name="naive",
            title="Read, then write",
            summary="SELECT the oldest pending job, then UPDATE it with no status check.",
            statements=(("pick", PICK_OLDEST_PENDING), ("claim", NAIVE_CLAIM)),
            claim=_claim_naive,
            settle=_settle_naive,
            claim_stepwise=_read_pause_write(_settle_naive),
        ),
        Strategy(
            name="guarded",
            title="Read, then a guarded write",
            summary="SELECT the oldest pending job, then UPDATE it only if it is still pending; "
                    "zero rows means another worker won.",
            statements=(("pick", PICK_OLDEST_PENDING), ("claim", GUARDED_CLAIM)),
            claim=_claim_guarded,
            settle=_settle_guarded,
            claim_stepwise=_read_pause_write(_settle_guarded),
        ),
        Strategy(
            name="skip_locked",
            title="One statement, SKIP LOCKED",
            summary="One UPDATE whose subquery locks the oldest pending row nobody else holds.",
            statements=(("claim", SKIP_LOCKED_CLAIM),),
            claim=_claim_skip_locked,
            settle=_settle_skip_locked,
            claim_stepwise=_claim_skip_locked_stepwise,
        ),
    )
}


def get_strategy(name: str) -> Strategy:
    from harness.errors import UserError

    try:
        return STRATEGIES[name]
    except KeyError:
        raise UserError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)} or all") from None


def parse_strategies(text: str) -> list[str]:
    """'all', one name, or a comma-separated list."""
    names = list(STRATEGIES) if text.strip() == "all" else [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        from harness.errors import UserError

        raise UserError("no strategy given")
    for name in names:
        get_strategy(name)
    return names
