"""The claim strategies: each one's SQL, written once, and the loop step that runs it.

The report shows these SQL strings verbatim, the pgbench scripts are made from
them, and the race workers prepare exactly them. Every statement runs in
autocommit at READ COMMITTED, one statement per round trip, as in the study.

A claim step talks to libpq directly (psycopg's pq layer, prepared statements,
text parameters) so the client's own work between two round trips stays small.
"""

from __future__ import annotations

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


_OK = (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK)


def _failed(pgconn: pq.abc.PGconn, result) -> bool:
    if result.status in _OK:
        return False
    if pgconn.status != pq.ConnStatus.OK:
        raise ClaimConnectionError(pgconn.get_error_message().decode(errors="replace").strip())
    return True


def _claim_naive(pgconn) -> tuple[int, int]:
    picked = pgconn.exec_prepared(b"pick", None)
    if _failed(pgconn, picked):
        return ERROR, 0
    if picked.ntuples == 0:
        return EMPTY, 0
    job_id = picked.get_value(0, 0)
    claimed = pgconn.exec_prepared(b"claim", [job_id])
    if _failed(pgconn, claimed):
        return ERROR, int(job_id)
    # no status check: the UPDATE always finds the row, so the worker always "wins"
    return (WON if claimed.command_tuples == 1 else LOST), int(job_id)


def _claim_guarded(pgconn) -> tuple[int, int]:
    picked = pgconn.exec_prepared(b"pick", None)
    if _failed(pgconn, picked):
        return ERROR, 0
    if picked.ntuples == 0:
        return EMPTY, 0
    job_id = picked.get_value(0, 0)
    claimed = pgconn.exec_prepared(b"claim", [job_id])
    if _failed(pgconn, claimed):
        return ERROR, int(job_id)
    # zero rows: another worker flipped it first (the API's 409)
    return (WON if claimed.ntuples == 1 else LOST), int(job_id)


def _claim_skip_locked(pgconn) -> tuple[int, int]:
    claimed = pgconn.exec_prepared(b"claim", None)
    if _failed(pgconn, claimed):
        return ERROR, 0
    if claimed.ntuples == 0:
        # nothing pending that is not locked by someone else: the queue is drained for us
        return EMPTY, 0
    return WON, int(claimed.get_value(0, 0))


@dataclass(frozen=True)
class Strategy:
    name: str
    title: str
    summary: str
    statements: tuple[tuple[str, str], ...]  # (prepared name, SQL) in the order one attempt runs them
    claim: Callable[[object], tuple[int, int]]

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
        ),
        Strategy(
            name="guarded",
            title="Read, then a guarded write",
            summary="SELECT the oldest pending job, then UPDATE it only if it is still pending; "
                    "zero rows means another worker won.",
            statements=(("pick", PICK_OLDEST_PENDING), ("claim", GUARDED_CLAIM)),
            claim=_claim_guarded,
        ),
        Strategy(
            name="skip_locked",
            title="One statement, SKIP LOCKED",
            summary="One UPDATE whose subquery locks the oldest pending row nobody else holds.",
            statements=(("claim", SKIP_LOCKED_CLAIM),),
            claim=_claim_skip_locked,
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
