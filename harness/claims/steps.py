"""What every claim the race runs shares: the outcome codes, the Strategy a worker runs, and the few libpq steps
both the study's strategies (harness.claims.strategies) and the job libraries' protocols (harness.claims.protocols) are
built from.

A claim step talks to libpq directly (psycopg's pq layer, prepared statements,
text parameters) so the client's own work between two round trips stays small.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from psycopg import pq

# Outcome codes stored per attempt; names are what the Parquet files hold.
# aborted: the server ended the attempt's transaction with a serialization failure or a deadlock (retried).
WON, LOST, EMPTY, ERROR, ABORTED = 0, 1, 2, 3, 4
OUTCOME_NAMES = ("won", "lost", "empty", "error", "aborted")

DEFAULT_BATCH = 5  # the size of the original's GET /pending
MAX_BATCH = 1000
# A batch strategy's SQL holds this where its LIMIT goes; the race fills in its batch size before preparing.
BATCH = "{batch}"
AUTOCOMMIT = "read committed, autocommit, one statement per round trip"
ROLLBACK = b"ROLLBACK"  # only after a failed statement inside a transaction, so never prepared


class ClaimConnectionError(Exception):
    """The connection broke mid-race: the worker cannot go on."""


# Plain ints: PGresult.status is an int, and an int compare is the cheapest test in the loop.
TUPLES_OK = int(pq.ExecStatus.TUPLES_OK)
OK = (int(pq.ExecStatus.TUPLES_OK), int(pq.ExecStatus.COMMAND_OK))
CONNECTION_OK = int(pq.ConnStatus.OK)


def failed_statement(pgconn, job_id) -> tuple[int, int]:
    """A statement came back with an error: an ERROR attempt, or the end if the connection broke."""
    if pgconn.status != CONNECTION_OK:
        raise ClaimConnectionError(pgconn.get_error_message().decode(errors="replace").strip())
    return ERROR, int(job_id or 0)


def one_statement_stepwise(claim):
    """A slowed-down attempt of a one-statement claim: it reads and writes at once, so there is no gap to pause
    in (read_end = 0: no separate read)."""

    def claim_stepwise(pgconn, pause_seconds: float, clock) -> tuple[int, int, int, int]:
        write_start = clock()
        return (*claim(pgconn), 0, write_start)

    return claim_stepwise


# A serialization failure, or a deadlock: the server rolled the attempt back, and the worker simply tries again.
RETRIED_SQLSTATES = (b"40001", b"40P01")
IDLE = int(pq.TransactionStatus.IDLE)
COMMAND_OK = int(pq.ExecStatus.COMMAND_OK)


def abandon_transaction(pgconn, failed, job_id) -> tuple[int, int]:
    """A statement inside the attempt's transaction failed: roll back what is left; a serialization failure
    or a deadlock is ABORTED (the next attempt is the retry), anything else an ERROR."""
    if pgconn.status != CONNECTION_OK:
        raise ClaimConnectionError(pgconn.get_error_message().decode(errors="replace").strip())
    if pgconn.transaction_status != IDLE:  # a failed COMMIT has already ended the transaction
        pgconn.exec_(ROLLBACK)
    retried = failed.error_field(pq.DiagnosticField.SQLSTATE) in RETRIED_SQLSTATES
    return (ABORTED if retried else ERROR), int(job_id or 0)


@dataclass
class AttemptNotes:
    """A worker's per-attempt facts beyond the outcome and the job id, for the strategies that have them.

    Kept in plain lists, one entry per attempt (job_ids: one per claimed job, attempt after attempt),
    and turned into arrays after the race, like the outcomes.
    """

    rows: list = field(default_factory=list)  # batch strategies: jobs the attempt claimed
    job_ids: list = field(default_factory=list)  # batch strategies: every job claimed, lowest first per attempt
    stray_locks: list = field(default_factory=list)  # advisory_lock: locks held after the attempt on other jobs


# --------------------------------------------------------------------------- the strategies

ClaimStep = Callable[[object], tuple[int, int]]
# a slowed-down attempt: (pgconn, pause between read and write, clock) -> (outcome, job id, read end, write start)
StepwiseClaim = Callable[[object, float, Callable[[], int]], tuple[int, int, int, int]]


@dataclass(frozen=True)
class Strategy:
    name: str
    title: str
    summary: str
    statements: tuple[tuple[str, str], ...]  # (prepared name, SQL) in the order one attempt runs them
    claim: ClaimStep | None = None  # one whole attempt on a blocking connection (strategies without notes)
    # the outcome of an attempt from its last statement's result (and the picked id, if any);
    # every earlier statement returns one row whose first value is the next statement's $1, or none (EMPTY)
    settle: Callable[[object, object], tuple[int, int]] | None = None
    claim_stepwise: StepwiseClaim | None = None
    # strategies that note more per attempt (AttemptNotes): (notes, batch) -> (claim, claim_stepwise)
    noted_steps: Callable[[AttemptNotes, int], tuple[ClaimStep, StepwiseClaim]] | None = None
    isolation: str = AUTOCOMMIT
    batch: bool = False  # one attempt claims up to `batch` jobs (its SQL holds BATCH)
    counts_stray_locks: bool = False  # notes the advisory locks each attempt left on jobs it did not return
    # None: the bench (harness against pgbench) takes it; else why it cannot, in one line
    not_benched: str | None = None
    # a job library's protocol: (prepared name, role) in the order one attempt sends them, names repeated where
    # the library repeats a statement (BEGIN, COMMIT); and where the protocol was read (harness.claims.protocols)
    protocol: tuple[tuple[str, str], ...] = ()
    library_source: str | None = None

    @property
    def statements_per_attempt(self) -> int:
        """The statements (round trips) one attempt that gets a job sends."""
        return len(self.protocol) if self.protocol else len(self.statements)

    def steps(self, notes: AttemptNotes, batch: int = 1) -> tuple[ClaimStep, StepwiseClaim]:
        """This worker's claim and slowed-down claim; strategies with notes write them into `notes`."""
        if self.noted_steps is not None:
            return self.noted_steps(notes, batch)
        return self.claim, self.claim_stepwise

    def statements_for(self, batch: int = DEFAULT_BATCH) -> tuple[tuple[str, str], ...]:
        """The statements as prepared, a batch strategy's LIMIT filled in."""
        return tuple((name, text.replace(BATCH, str(int(batch)))) for name, text in self.statements)

    def prepare(self, pgconn, batch: int = DEFAULT_BATCH) -> None:
        """Prepare this strategy's statements on a raw libpq connection."""
        for name, text in self.statements_for(batch):
            result = pgconn.prepare(name.encode(), text.encode())
            if result.status != pq.ExecStatus.COMMAND_OK:
                raise RuntimeError(f"cannot prepare {self.name}.{name}: "
                                   f"{result.error_message.decode(errors='replace').strip()}")

    def sql_for(self, batch: int = DEFAULT_BATCH) -> str:
        """The statements as a reader sees them, one per line, ; terminated, in the order an attempt sends them."""
        texts = dict(self.statements_for(batch))
        order = [name for name, _ in self.protocol] if self.protocol else list(texts)
        return "\n".join(f"{texts[name]};" for name in order)

    @property
    def sql(self) -> str:
        return self.sql_for()
