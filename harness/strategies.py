"""The claim strategies: each one's SQL, written once, and the loop step that runs it.

The report shows these SQL strings verbatim, the pgbench scripts are made from
them, and the race workers prepare exactly them. The study's three strategies
(ORIGINAL_STRATEGIES) run every statement in autocommit at READ COMMITTED, one
statement per round trip; the others say how they differ in `isolation`.

A claim step talks to libpq directly (psycopg's pq layer, prepared statements,
text parameters) so the client's own work between two round trips stays small.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from psycopg import pq

from harness import library_claims as library
from harness.config import SCHEMA
from harness.errors import UserError

# Outcome codes stored per attempt; names are what the Parquet files hold.
# aborted: the server ended the attempt's transaction with a serialization failure or a deadlock (retried).
WON, LOST, EMPTY, ERROR, ABORTED = 0, 1, 2, 3, 4
OUTCOME_NAMES = ("won", "lost", "empty", "error", "aborted")

# What `--strategy all` means: the study's three, the sweep the report races.
ORIGINAL_STRATEGIES = ("naive", "guarded", "skip_locked")
DEFAULT_BATCH = 5  # the size of the original's GET /pending
MAX_BATCH = 1000
# A batch strategy's SQL holds this where its LIMIT goes; the race fills in its batch size before preparing.
BATCH = "{batch}"
AUTOCOMMIT = "read committed, autocommit, one statement per round trip"

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

BEGIN_READ_COMMITTED = "BEGIN ISOLATION LEVEL READ COMMITTED"
BEGIN_SERIALIZABLE = "BEGIN ISOLATION LEVEL SERIALIZABLE"
COMMIT = "COMMIT"
ROLLBACK = b"ROLLBACK"  # only after a failed statement inside a transaction, so never prepared

# Workers queue behind the row lock of the oldest pending job. At READ COMMITTED a waiter re-checks the row
# once the holder commits (EvalPlanQual in the subquery's LockRows step): a row that is no longer pending is
# skipped and the scan goes on to the next one, so the subquery hands back only a row it holds and saw pending.
FOR_UPDATE_CLAIM = (
    f"UPDATE {SCHEMA}.jobs SET status = 'running', started_at = now() "
    f"WHERE id = (SELECT id FROM {SCHEMA}.jobs WHERE status = 'pending' "
    "ORDER BY id LIMIT 1 FOR UPDATE) RETURNING id"
)

# Up to {batch} jobs per statement. The server does not inline a CTE that locks rows into the UPDATE: the plan
# keeps it as "CTE picked", run once per statement whatever the join above it does (the race stores the plan).
BATCH_CLAIM_CTE = (
    f"WITH picked AS (SELECT id FROM {SCHEMA}.jobs WHERE status = 'pending' "
    f"ORDER BY id LIMIT {BATCH} FOR UPDATE SKIP LOCKED) "
    f"UPDATE {SCHEMA}.jobs AS j SET status = 'running', started_at = now() "
    "FROM picked WHERE j.id = picked.id RETURNING j.id"
)

# The form reported to claim more than {batch} rows. The IN subquery becomes one side of a semi-join. If the
# plan re-runs it once per outer row (Nested Loop Semi Join over a seq scan of jobs, the subquery inside with
# no Materialize or Hash above it), each run skips the rows this statement has already updated (LockRows
# treats them as updated by itself and moves on) and returns up to {batch} new ones: on PostgreSQL 16, with
# hash, merge, materialize, hash-aggregate and sort plans turned off, one statement with LIMIT 2 claimed all
# 200 rows of its table (tests/test_strategies.py). The plans the planner picks on its own here run the
# subquery once: a Hash Semi Join on small tables, and from about a thousand rows a Nested Loop driven by
# Unique over the sorted subquery, probing the primary key. Each attempt's row count is stored and checked.
BATCH_CLAIM_IN = (
    f"UPDATE {SCHEMA}.jobs SET status = 'running', started_at = now() "
    f"WHERE id IN (SELECT id FROM {SCHEMA}.jobs WHERE status = 'pending' "
    f"ORDER BY id LIMIT {BATCH} FOR UPDATE SKIP LOCKED) RETURNING id"
)

# The advisory-lock claim of job libraries such as Que (que-rb/que, lib/que/sql.rb): the pick takes a
# session advisory lock on the job id, the claim updates the job, then the lock is released. Que walks the
# queue with a recursive CTE, one pg_try_advisory_lock at a time, because a plain WHERE clause (this pick)
# may lock more rows than the LIMIT returns: the planner decides on which rows, and in which order, the
# filter runs. A seq scan feeding a sort runs it on every row before LIMIT 1 picks one. The index scan in id
# order that PostgreSQL 16 picks here stops at the first row that passes, but evaluates the lock before the
# status test (its Filter reads "pg_try_advisory_lock(id) AND status = 'pending'"), so it locks every taken
# job it walks past on the way: Que deletes finished jobs, this table keeps them. With the partial index the
# scan reads pending rows only.
ADVISORY_PICK = (
    f"SELECT id FROM {SCHEMA}.jobs WHERE status = 'pending' AND pg_try_advisory_lock(id) ORDER BY id LIMIT 1"
)
# Que re-reads the job once it holds the lock ("this query took its MVCC snapshot while a job was being
# processed by another worker, but didn't attempt the advisory lock until it was finished"): a worker whose
# pick's snapshot predates another's claim can lock a job that is already taken, after that worker unlocked
# it. The guarded UPDATE is that re-check here: zero rows is a lost race, not a second claim.
ADVISORY_CLAIM = GUARDED_CLAIM
# Counts the advisory locks this backend holds on jobs other than the one it picked ($1, 0 for none:
# the stray locks the pick took and did not return), then releases them all, so every attempt starts clean.
# A bigint key is stored in pg_locks as classid (high 32 bits) and objid (low 32 bits).
ADVISORY_RELEASE = (
    "WITH held AS MATERIALIZED (SELECT count(*) FILTER (WHERE ((classid::bigint << 32) | objid::bigint) <> $1) "
    "AS stray FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()) "
    "SELECT stray, pg_advisory_unlock_all() FROM held"
)


class ClaimConnectionError(Exception):
    """The connection broke mid-race: the worker cannot go on."""


# Plain ints: PGresult.status is an int, and an int compare is the cheapest test in the loop.
_TUPLES_OK = int(pq.ExecStatus.TUPLES_OK)
_OK = (int(pq.ExecStatus.TUPLES_OK), int(pq.ExecStatus.COMMAND_OK))
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


def settle_for(strategy_name: str):
    """The rule that turns the last statement's result into (outcome, job id), for the original three."""
    return {"naive": _settle_naive, "guarded": _settle_guarded, "skip_locked": _settle_skip_locked}[strategy_name]


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


def _one_statement_stepwise(claim):
    """A slowed-down attempt of a one-statement claim: it reads and writes at once, so there is no gap to pause
    in (read_end = 0: no separate read)."""

    def claim_stepwise(pgconn, pause_seconds: float, clock) -> tuple[int, int, int, int]:
        write_start = clock()
        return (*claim(pgconn), 0, write_start)

    return claim_stepwise


def _settle_for_update(result, job_id) -> tuple[int, int]:
    # Zero rows means the queue was empty, never a lost race: the subquery returns only a row it has locked
    # and re-checked as pending after any wait (see FOR_UPDATE_CLAIM), and the UPDATE then finds that row
    # held by its own transaction. It returns none only when every row its scan reached was taken, and a
    # taken job never becomes pending again.
    if result.ntuples == 0:
        return EMPTY, 0
    return WON, int(result.get_value(0, 0))


def _claim_for_update(pgconn) -> tuple[int, int]:
    claimed = pgconn.exec_prepared(b"claim", None)
    if claimed.status != _TUPLES_OK:
        return failed_statement(pgconn, 0)
    return _settle_for_update(claimed, None)


# --------------------------------------------------------------------------- claims inside one transaction

# A serialization failure, or a deadlock: the server rolled the attempt back, and the worker simply tries again.
RETRIED_SQLSTATES = (b"40001", b"40P01")
_IDLE = int(pq.TransactionStatus.IDLE)
_COMMAND_OK = int(pq.ExecStatus.COMMAND_OK)


def _abandon_transaction(pgconn, failed, job_id) -> tuple[int, int]:
    """A statement inside the attempt's transaction failed: roll back what is left; a serialization failure
    or a deadlock is ABORTED (the next attempt is the retry), anything else an ERROR."""
    if pgconn.status != _CONNECTION_OK:
        raise ClaimConnectionError(pgconn.get_error_message().decode(errors="replace").strip())
    if pgconn.transaction_status != _IDLE:  # a failed COMMIT has already ended the transaction
        pgconn.exec_(ROLLBACK)
    retried = failed.error_field(pq.DiagnosticField.SQLSTATE) in RETRIED_SQLSTATES
    return (ABORTED if retried else ERROR), int(job_id or 0)


def _transaction_attempt(pgconn, settle, pause_seconds: float = 0.0, clock=None) -> tuple[int, int, int, int]:
    """BEGIN, pick, claim what was picked, COMMIT: (outcome, job id, read end, write start).

    With a clock (a slowed-down race), pauses between the pick and the claim, inside the transaction, and
    stamps both; without one, the stamps are 0.
    """
    began = pgconn.exec_prepared(b"begin", None)
    if began.status != _COMMAND_OK:
        return (*_abandon_transaction(pgconn, began, 0), 0, 0)
    picked = pgconn.exec_prepared(b"pick", None)
    read_end = clock() if clock is not None else 0
    if picked.status != _TUPLES_OK:
        return (*_abandon_transaction(pgconn, picked, 0), read_end, 0)
    job_id = picked.get_value(0, 0) if picked.ntuples else None
    write_start = 0
    if job_id is not None:
        if clock is not None:
            time.sleep(pause_seconds)
            write_start = clock()
        claimed = pgconn.exec_prepared(b"claim", (job_id,))
        if claimed.status not in _OK:
            return (*_abandon_transaction(pgconn, claimed, job_id), read_end, write_start)
    # an empty pick commits too: even a read-only SERIALIZABLE transaction may fail here, and then it is retried
    committed = pgconn.exec_prepared(b"commit", None)
    if committed.status != _COMMAND_OK:
        return (*_abandon_transaction(pgconn, committed, job_id), read_end, write_start)
    if job_id is None:
        return EMPTY, 0, read_end, write_start
    return (*settle(claimed, job_id), read_end, write_start)


def _in_transaction(settle):
    def claim(pgconn) -> tuple[int, int]:
        outcome, job_id, _, _ = _transaction_attempt(pgconn, settle)
        return outcome, job_id

    def claim_stepwise(pgconn, pause_seconds: float, clock) -> tuple[int, int, int, int]:
        return _transaction_attempt(pgconn, settle, pause_seconds, clock)

    return claim, claim_stepwise


# the same steps serve both isolation levels: the BEGIN each strategy prepares sets it
_claim_naive_in_transaction, _naive_in_transaction_stepwise = _in_transaction(_settle_naive)


# --------------------------------------------------------------------------- claims that note more per attempt


@dataclass
class AttemptNotes:
    """A worker's per-attempt facts beyond the outcome and the job id, for the strategies that have them.

    Kept in plain lists, one entry per attempt (job_ids: one per claimed job, attempt after attempt),
    and turned into arrays after the race, like the outcomes.
    """

    rows: list = field(default_factory=list)  # batch strategies: jobs the attempt claimed
    job_ids: list = field(default_factory=list)  # batch strategies: every job claimed, lowest first per attempt
    stray_locks: list = field(default_factory=list)  # advisory_lock: locks held after the attempt on other jobs


def _batch_steps(notes: AttemptNotes, batch: int):
    """One statement claims up to `batch` jobs: the attempt's job id is the lowest, every id is noted."""
    add_rows, add_ids = notes.rows.append, notes.job_ids.extend

    def claim(pgconn) -> tuple[int, int]:
        claimed = pgconn.exec_prepared(b"claim", None)
        if claimed.status != _TUPLES_OK:
            add_rows(0)
            return failed_statement(pgconn, 0)
        count = claimed.ntuples
        add_rows(count)
        if count == 0:
            # nothing pending that is not locked by someone else: the queue is drained for us
            return EMPTY, 0
        ids = sorted(int(claimed.get_value(i, 0)) for i in range(count))
        add_ids(ids)
        return WON, ids[0]

    return claim, _one_statement_stepwise(claim)


def _advisory_attempt(pgconn, add_stray, pause_seconds: float = 0.0, clock=None) -> tuple[int, int, int, int]:
    """Pick under an advisory lock, claim with the guard, release every advisory lock and note the strays."""
    picked = pgconn.exec_prepared(b"pick", None)
    read_end = clock() if clock is not None else 0
    job_id = picked.get_value(0, 0) if picked.status == _TUPLES_OK and picked.ntuples else None
    write_start = 0
    if picked.status != _TUPLES_OK:
        # session advisory locks outlive the failed statement (they ignore transactions): release them below
        outcome = ERROR
    elif job_id is None:
        outcome = EMPTY
    else:
        if clock is not None:
            time.sleep(pause_seconds)
            write_start = clock()
        claimed = pgconn.exec_prepared(b"claim", (job_id,))
        if claimed.status not in _OK:
            outcome = ERROR
        else:
            outcome = _settle_guarded(claimed, job_id)[0]  # zero rows: the pick's snapshot was older than a claim
    # released whatever happened above: a lock kept would block its job for every other worker
    released = pgconn.exec_prepared(b"release", (job_id or b"0",))
    if released.status != _TUPLES_OK:
        add_stray(0)
        return (*failed_statement(pgconn, job_id), read_end, write_start)
    add_stray(int(released.get_value(0, 0)))
    return outcome, int(job_id or 0), read_end, write_start


def _advisory_steps(notes: AttemptNotes, batch: int):
    add_stray = notes.stray_locks.append

    def claim(pgconn) -> tuple[int, int]:
        outcome, job_id, _, _ = _advisory_attempt(pgconn, add_stray)
        return outcome, job_id

    def claim_stepwise(pgconn, pause_seconds: float, clock) -> tuple[int, int, int, int]:
        return _advisory_attempt(pgconn, add_stray, pause_seconds, clock)

    return claim, claim_stepwise


# --------------------------------------------------------------------------- job libraries' protocols

# What a statement of a library's protocol (harness.library_claims) does with its answer:
PLAIN = "plain"  # nothing to read (BEGIN, COMMIT, a completion, a read the library makes and ignores)
PICK = "pick"  # the job's id, or no row: nothing left for this worker (EMPTY)
CLAIM = "claim"  # a pick that also writes the claim: a row is a won job
CHECK = "check"  # a re-check of the picked job: no row means another worker has it (LOST)
WRITE = "write"  # the job's start, the write the audit records: a row written is a won job
RELEASE = "release"  # runs once a job was picked, whatever came after; the last one counts the locks still held
_COMMIT = b"COMMIT"


_UNLOCK_ALL = b"SELECT pg_advisory_unlock_all()"


def _protocol_steps(protocol: tuple[tuple[str, str], ...], sql: dict[str, str], counts_stray_locks: bool):
    """One attempt of a library's protocol: its statements in order, each given the picked job's id where its SQL
    takes one ($1), ended early by an empty pick or a failed check (an open transaction is committed, as the
    library's would be), its release statements run once a job was picked.

    A claim once written stays won: a statement that fails after it (a completion, an unlock) ends the attempt but
    does not undo what the audit recorded. Where the protocol takes advisory locks, its last release counts the
    locks the session still holds and releases them (a measurement and a clean-up of this harness, not the
    library's), so each attempt's note is its own; an attempt that failed before it picked a job releases them
    too, and notes none (its pick's locks are not known)."""
    steps = tuple((name.encode(), role, "$1" in sql[name]) for name, role in protocol if role != RELEASE)
    releases = tuple((name.encode(), "$1" in sql[name]) for name, role in protocol if role == RELEASE)

    def noted_steps(notes: AttemptNotes, batch: int):
        add_stray = notes.stray_locks.append

        def claim(pgconn) -> tuple[int, int]:
            job_id, outcome = None, None
            for name, role, with_job in steps:
                result = pgconn.exec_prepared(name, (job_id,) if with_job else None)
                if result.status not in _OK:
                    if pgconn.transaction_status == _IDLE:
                        failed = failed_statement(pgconn, job_id)[0]
                    else:
                        failed = _abandon_transaction(pgconn, result, job_id)[0]
                    outcome = WON if outcome == WON else failed
                    break
                if role in (PICK, CLAIM):
                    if result.ntuples == 0:
                        outcome = EMPTY
                        break
                    job_id = result.get_value(0, 0)
                    outcome = WON if role == CLAIM else outcome
                elif role == CHECK and result.ntuples == 0:
                    outcome = LOST
                    break
                elif role == WRITE:
                    outcome = WON if (result.command_tuples or 0) >= 1 else LOST
                    if outcome == LOST:
                        break
            if outcome in (EMPTY, LOST) and pgconn.transaction_status != _IDLE:
                pgconn.exec_(_COMMIT)
            if job_id is None or not releases:
                if counts_stray_locks:  # one note per attempt
                    if outcome != EMPTY:
                        pgconn.exec_(_UNLOCK_ALL)
                    add_stray(0)
                return outcome, int(job_id or 0)
            for name, with_job in releases:
                released = pgconn.exec_prepared(name, (job_id,) if with_job else None)
                if released.status != _TUPLES_OK:
                    if counts_stray_locks:
                        pgconn.exec_(_UNLOCK_ALL)
                        add_stray(0)
                    return (WON if outcome == WON else failed_statement(pgconn, job_id)[0]), int(job_id)
            if counts_stray_locks:
                add_stray(int(released.get_value(0, 0)))
            return outcome, int(job_id)

        return claim, _one_statement_stepwise(claim)

    return noted_steps


def _library_strategy(name: str, title: str, summary: str, protocol: tuple[tuple[str, str], ...],
                      sql: dict[str, str], isolation: str, counts_stray_locks: bool = False,
                      library_name: str | None = None) -> "Strategy":
    """A job library's protocol as a strategy the race runs: its statements prepared once each, its sequence kept.
    library_name: the library a variant of its protocol comes from (its name otherwise)."""
    source = library.SOURCES[library_name or name]
    roles = [role for _, role in protocol]
    # one step wins the job; the releases come last
    assert sum(role in (CLAIM, WRITE) for role in roles) == 1, name
    assert RELEASE not in roles or roles[roles.index(RELEASE):] == [RELEASE] * roles.count(RELEASE), name
    return Strategy(
        name=name, title=title, summary=summary,
        statements=tuple(sql.items()), protocol=protocol,
        noted_steps=_protocol_steps(protocol, sql, counts_stray_locks),
        counts_stray_locks=counts_stray_locks, isolation=isolation, library_source=str(source),
        not_benched="a library's protocol hands the picked id from statement to statement and may end early; "
                    "the bench's scripts run a fixed list",
    )


# Which of a SKIP LOCKED library's two statements it wraps in a BEGIN and COMMIT of its own.
NEITHER, CLAIM_ONLY, CLAIM_AND_COMPLETION = "neither", "claim only", "claim and completion"


def _skip_locked_library(name: str, title: str, summary: str, complete: str, in_transactions: str,
                         isolation: str) -> "Strategy":
    """A library whose claim is the shared SKIP LOCKED CTE (library_claims.SKIP_LOCKED_CLAIM) followed by its
    completion: what sets one apart is which of the two it sends inside a transaction of its own."""
    claim = (("begin", PLAIN), ("claim", CLAIM), ("commit", PLAIN)) if in_transactions != NEITHER else \
        (("claim", CLAIM),)
    completion = (("begin", PLAIN), ("complete", PLAIN), ("commit", PLAIN)) \
        if in_transactions == CLAIM_AND_COMPLETION else (("complete", PLAIN),)
    protocol = claim + completion
    used = {step for step, _ in protocol}
    sql = {step: text for step, text in (("begin", library.BEGIN), ("claim", library.SKIP_LOCKED_CLAIM),
                                         ("commit", library.COMMIT), ("complete", complete)) if step in used}
    return _library_strategy(name, title, summary, protocol, sql, isolation)


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
    # the library repeats a statement (BEGIN, COMMIT); and where the protocol was read (harness.library_claims)
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
        Strategy(
            name="naive_transaction",
            title="Read, then write, in one transaction",
            summary="The naive pair inside one READ COMMITTED transaction: each statement still takes its "
                    "own snapshot, so two workers can pick the same job.",
            statements=(("begin", BEGIN_READ_COMMITTED), ("pick", PICK_OLDEST_PENDING), ("claim", NAIVE_CLAIM),
                        ("commit", COMMIT)),
            claim=_claim_naive_in_transaction,
            claim_stepwise=_naive_in_transaction_stepwise,
            isolation="one READ COMMITTED transaction per attempt: BEGIN, pick, claim, COMMIT",
            not_benched="the bench's scripts hand each statement's row to the next (\\gset), and BEGIN and "
                        "COMMIT return none",
        ),
        Strategy(
            name="naive_serializable",
            title="Read, then write, SERIALIZABLE",
            summary="The naive pair inside one SERIALIZABLE transaction; a serialization failure aborts the "
                    "attempt and the worker tries again.",
            statements=(("begin", BEGIN_SERIALIZABLE), ("pick", PICK_OLDEST_PENDING), ("claim", NAIVE_CLAIM),
                        ("commit", COMMIT)),
            claim=_claim_naive_in_transaction,
            claim_stepwise=_naive_in_transaction_stepwise,
            isolation="one SERIALIZABLE transaction per attempt: BEGIN, pick, claim, COMMIT; a serialization "
                      "failure (40001) or deadlock (40P01) is rolled back and counted as an aborted attempt",
            not_benched="a serialization failure is rolled back and retried by the client; pgbench "
                        "reports it as a failed transaction, which the bench takes for a broken run",
        ),
        Strategy(
            name="for_update",
            title="One statement, FOR UPDATE",
            summary="One UPDATE whose subquery locks the oldest pending row and waits while another worker "
                    "holds it.",
            statements=(("claim", FOR_UPDATE_CLAIM),),
            claim=_claim_for_update,
            settle=_settle_for_update,
            claim_stepwise=_one_statement_stepwise(_claim_for_update),
        ),
        Strategy(
            name="skip_locked_batch",
            title="A batch, SKIP LOCKED, as a CTE",
            summary="One statement claims up to k pending rows nobody else holds: a CTE picks them "
                    "once, the UPDATE flips them.",
            statements=(("claim", BATCH_CLAIM_CTE),),
            noted_steps=_batch_steps,
            batch=True,
            not_benched="one attempt claims several jobs; the bench counts a pgbench transaction as one claim",
        ),
        Strategy(
            name="skip_locked_batch_in",
            title="A batch, SKIP LOCKED, WHERE id IN",
            summary="One UPDATE ... WHERE id IN (a subquery that locks up to k pending rows nobody else holds).",
            statements=(("claim", BATCH_CLAIM_IN),),
            noted_steps=_batch_steps,
            batch=True,
            not_benched="one attempt claims several jobs; the bench counts a pgbench transaction as one claim",
        ),
        Strategy(
            name="advisory_lock",
            title="Advisory lock, then a guarded write",
            summary="SELECT the oldest pending job whose advisory lock this worker can take, UPDATE it if it "
                    "is still pending, then release the advisory locks.",
            statements=(("pick", ADVISORY_PICK), ("claim", ADVISORY_CLAIM), ("release", ADVISORY_RELEASE)),
            noted_steps=_advisory_steps,
            counts_stray_locks=True,
            isolation="read committed, autocommit, one statement per round trip; session advisory locks",
            not_benched="its release step counts the advisory locks each attempt leaves, which a pgbench "
                        "script cannot report",
        ),
    )
}

# The job libraries' protocols (harness.library_claims), raced beside the strategies above on the same table.
# Those of libraries this project does not run (Go, Elixir, Ruby), read from their sources at a commit ...
MODELLED_LIBRARY_STRATEGIES = ("river", "oban", "que", "good_job", "solid_queue")
# ... and those of the libraries also raced with their own workers (harness.libraries), read from their releases.
RACED_LIBRARY_STRATEGIES = ("procrastinate", "pgqueuer", "chancy", "pgmq", "pgboss", "graphile_worker")
LIBRARY_STRATEGIES = MODELLED_LIBRARY_STRATEGIES + RACED_LIBRARY_STRATEGIES
# A library's protocol with one of its safeguards taken out, to show what the safeguard prevents: protocol -> library.
LIBRARY_VARIANTS = {"que_without_recheck": "que"}
STRATEGIES.update({s.name: s for s in (
    _library_strategy(
        "river", "River's fetch",
        "One statement: a CTE locks the next available job FOR UPDATE SKIP LOCKED, the UPDATE sets it running.",
        (("claim", CLAIM),), {"claim": library.RIVER_CLAIM}, AUTOCOMMIT),
    _library_strategy(
        "oban", "Oban's fetch and completion",
        "BEGIN, the SKIP LOCKED CTE UPDATE, COMMIT; then the job's completion, an UPDATE by id.",
        (("begin", PLAIN), ("claim", CLAIM), ("commit", PLAIN), ("complete", PLAIN)),
        {"begin": library.BEGIN, "claim": library.OBAN_CLAIM, "commit": library.COMMIT,
         "complete": library.COMPLETE},
        "the claim in one READ COMMITTED transaction (BEGIN, UPDATE, COMMIT), the completion in autocommit"),
    _library_strategy(
        "que", "Que's advisory-lock poll",
        "A recursive CTE tries a session advisory lock on one pending job after another until it holds one; "
        "a new statement re-checks it, another checks it exists, the job runs and is resolved, then it is "
        "unlocked. Nothing is written at claim.",
        (("poll", PICK), ("verify", CHECK), ("exists", CHECK), ("resolve", WRITE), ("unlock", RELEASE)),
        {"poll": library.QUE_POLL, "verify": library.QUE_VERIFY, "exists": library.QUE_EXISTS,
         "resolve": library.QUE_RESOLVE, "unlock": library.QUE_UNLOCK},
        "read committed, autocommit, one statement per round trip; session advisory locks",
        counts_stray_locks=True),
    _library_strategy(
        "good_job", "good_job's advisory lock over candidates",
        "A SELECT materialises up to 1,000 candidates and keeps the first whose advisory lock (an md5 key) it "
        "gets; a reload re-checks it; the start and the finish are transactions of their own; the lock is "
        "released with a pg_locks check before and after.",
        (("pick", PICK), ("reload", CHECK), ("begin", PLAIN), ("start", WRITE), ("commit", PLAIN),
         ("begin", PLAIN), ("finish", PLAIN), ("commit", PLAIN), ("held", RELEASE), ("unlock", RELEASE),
         ("held_after", RELEASE)),
        {"pick": library.GOOD_JOB_PICK, "reload": library.GOOD_JOB_RELOAD, "begin": library.BEGIN,
         "start": library.GOOD_JOB_START, "commit": library.COMMIT, "finish": library.COMPLETE,
         "held": library.GOOD_JOB_LOCK_HELD, "unlock": library.GOOD_JOB_UNLOCK,
         "held_after": library.GOOD_JOB_HELD_AFTER},
        "the pick, the reload and the unlock in autocommit, the start and the finish each in a READ COMMITTED "
        "transaction; a session advisory lock from the pick to the unlock",
        counts_stray_locks=True),
    _library_strategy(
        "solid_queue", "Solid Queue's claim and completion",
        "BEGIN, SELECT the next job FOR UPDATE SKIP LOCKED, claim it, re-select it, COMMIT; load the job; then "
        "BEGIN, lock it FOR UPDATE, finish it, COMMIT.",
        (("begin", PLAIN), ("pick", PICK), ("claim", WRITE), ("reselect", PLAIN), ("commit", PLAIN),
         ("load", PLAIN), ("begin", PLAIN), ("lock", PLAIN), ("finish", PLAIN), ("commit", PLAIN)),
        {"begin": library.BEGIN, "pick": library.SOLID_QUEUE_PICK, "claim": library.SOLID_QUEUE_CLAIM,
         "reselect": library.SOLID_QUEUE_RESELECT, "commit": library.COMMIT, "load": library.SOLID_QUEUE_LOAD,
         "lock": library.SOLID_QUEUE_LOCK, "finish": library.COMPLETE},
        "the claim and the completion each one READ COMMITTED transaction; the SKIP LOCKED row lock held across "
        "the claim's statements"),
    _skip_locked_library(
        "procrastinate", "procrastinate's fetch and finish",
        "BEGIN, the SKIP LOCKED CTE UPDATE (its fetch function's body), COMMIT; then BEGIN, the finish, COMMIT.",
        library.COMPLETE, CLAIM_AND_COMPLETION, "the fetch and the finish each one READ COMMITTED transaction"),
    _skip_locked_library(
        "pgqueuer", "PgQueuer's dequeue and log",
        "The SKIP LOCKED CTE UPDATE, then the completion, each one statement in autocommit.",
        library.COMPLETE, NEITHER, AUTOCOMMIT),
    _skip_locked_library(
        "chancy", "chancy's fetch and completion",
        "BEGIN, the SKIP LOCKED CTE UPDATE, COMMIT; then the completion, an UPDATE that checks the job is "
        "still the worker's (chancy sends a second's completions in one transaction).",
        library.GUARDED_COMPLETE, CLAIM_ONLY,
        "the fetch in one READ COMMITTED transaction, the completion in autocommit"),
    _skip_locked_library(
        "pgmq", "pgmq's read and archive",
        "BEGIN, the SKIP LOCKED CTE UPDATE (its read function's body), COMMIT; then BEGIN, the archive, COMMIT.",
        library.COMPLETE, CLAIM_AND_COMPLETION, "the read and the archive each one READ COMMITTED transaction"),
    _skip_locked_library(
        "pgboss", "pg-boss's fetch and completion",
        "The SKIP LOCKED CTE UPDATE, then the completion of the job if it is still active, each in autocommit.",
        library.GUARDED_COMPLETE, NEITHER, AUTOCOMMIT),
    _skip_locked_library(
        "graphile_worker", "graphile-worker's get_job and completion",
        "The SKIP LOCKED CTE UPDATE, then the completion, each one statement in autocommit.",
        library.COMPLETE, NEITHER, AUTOCOMMIT),
)})



def _without_step(name: str, of: str, step: str, title: str, summary: str) -> Strategy:
    """A library's protocol with one step taken out (a safeguard), to show what that step prevents."""
    strategy = STRATEGIES[of]
    protocol = tuple(s for s in strategy.protocol if s[0] != step)
    sql = {n: text for n, text in strategy.statements if n != step}
    return _library_strategy(name, title, summary, protocol, sql, strategy.isolation,
                             strategy.counts_stray_locks, library_name=of)


STRATEGIES["que_without_recheck"] = _without_step(
    "que_without_recheck", "que", "verify", "Que's poll without its re-check",
    "Que's protocol with the re-check under the lock taken out: the job runs once the poll holds its lock.")


# The harness's clean-up of advisory locks after each job, taken out of a protocol for a race through a transaction
# pooler: there a session's statements come from any client, and releasing every lock the session holds would
# release other clients'. Per protocol, a statement replaced by the library's own (or None: dropped).
WITHOUT_CLEANUP = {"que": {"unlock": library.QUE_UNLOCK_ALONE}, "good_job": {"held_after": None}}


def without_cleanup(name: str) -> Strategy:
    """The strategy as its library sends it, without the harness's counting and clean-up of advisory locks (its
    stray locks are not noted); any other strategy unchanged (advisory_lock's release of every lock is its own)."""
    strategy = STRATEGIES[name]
    library_name = LIBRARY_VARIANTS.get(name, name)
    changes = WITHOUT_CLEANUP.get(library_name)
    if changes is None:
        return strategy
    dropped = {step for step, text in changes.items() if text is None}
    protocol = tuple(step for step in strategy.protocol if step[0] not in dropped)
    sql = {n: changes.get(n, text) for n, text in strategy.statements if n not in dropped}
    return _library_strategy(name, strategy.title, strategy.summary, protocol, sql, strategy.isolation,
                             counts_stray_locks=False, library_name=library_name)


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise UserError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)} or all "
                        f"(the original three: {', '.join(ORIGINAL_STRATEGIES)})") from None


def parse_strategies(text: str) -> list[str]:
    """'all' (the original three), one name, or a comma-separated list."""
    names = list(ORIGINAL_STRATEGIES) if text.strip() == "all" else [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise UserError("no strategy given")
    for name in names:
        get_strategy(name)
    return names
