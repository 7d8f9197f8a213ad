"""The study's claim strategies: each one's SQL, written once, and the loop step that runs it; and STRATEGIES, every
strategy a race can run by name: these, and the job libraries' protocols (harness.claims.protocols).

The report shows these SQL strings verbatim, the pgbench scripts are made from
them, and the race workers prepare exactly them. The study's three strategies
(ORIGINAL_STRATEGIES) run every statement in autocommit at READ COMMITTED, one
statement per round trip; the others say how they differ in `isolation`.
What every claim shares (outcome codes, Strategy, the libpq steps) is in
harness.claims.steps.
"""

from __future__ import annotations

import time

from harness.claims.steps import (BATCH, COMMAND_OK, EMPTY, ERROR, LOST, OK, TUPLES_OK, WON, AttemptNotes, Strategy,
                                 abandon_transaction, failed_statement, one_statement_stepwise)
from harness.claims.protocols import LIBRARY_PROTOCOL_ORDER, LIBRARY_VARIANTS, PROTOCOLS, library_strategy
from harness.config import SCHEMA
from harness.libraries.que.library import QUE_UNLOCK_ALONE
from harness.errors import UserError

# What `--strategy all` means: the study's three, the sweep the report races.
ORIGINAL_STRATEGIES = ("naive", "guarded", "skip_locked")
# A word that stands for several strategies in a list of them (`--strategy skip_locked,libraries`, a params section's
# `strategies: [skip_locked, libraries]`): every job library's protocol, each followed by its variants, in the
# libraries' declaration's order (harness.libraries.catalogue.LIBRARIES), so a library declared there is raced too.
STRATEGY_GROUPS = {"libraries": LIBRARY_PROTOCOL_ORDER}
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
def skip_locked_pick(table: str, limit: str = BATCH) -> str:
    """The batch claim's pick: up to `limit` of the oldest pending rows of `table` nobody else holds, locked. The
    claim service's POST /claim runs it on its runs table (harness.service.queries), in the CTE form below."""
    return (f"SELECT id FROM {SCHEMA}.{table} WHERE status = 'pending' "
            f"ORDER BY id LIMIT {limit} FOR UPDATE SKIP LOCKED")


BATCH_CLAIM_CTE = (
    f"WITH picked AS ({skip_locked_pick('jobs')}) "
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
        if picked.status != TUPLES_OK:
            return failed_statement(pgconn, 0)
        if picked.ntuples == 0:
            return EMPTY, 0
        job_id = picked.get_value(0, 0)
        claimed = pgconn.exec_prepared(b"claim", (job_id,))
        if claimed.status not in OK:
            return failed_statement(pgconn, job_id)
        return settle(claimed, job_id)

    return claim


def _read_pause_write(settle):
    """A slowed-down attempt: pick, pause where the race window is, then claim; each statement's times."""

    def claim(pgconn, pause_seconds: float, clock) -> tuple[int, int, int, int]:
        picked = pgconn.exec_prepared(b"pick", None)
        read_end = clock()
        if picked.status != TUPLES_OK:
            return (*failed_statement(pgconn, 0), read_end, 0)
        if picked.ntuples == 0:
            return EMPTY, 0, read_end, 0
        job_id = picked.get_value(0, 0)
        time.sleep(pause_seconds)
        write_start = clock()
        claimed = pgconn.exec_prepared(b"claim", (job_id,))
        if claimed.status not in OK:
            return (*failed_statement(pgconn, job_id), read_end, write_start)
        return (*settle(claimed, job_id), read_end, write_start)

    return claim


_claim_naive = _read_then_write(_settle_naive)
_claim_guarded = _read_then_write(_settle_guarded)


def _claim_skip_locked(pgconn) -> tuple[int, int]:
    claimed = pgconn.exec_prepared(b"claim", None)
    if claimed.status != TUPLES_OK:
        return failed_statement(pgconn, 0)
    return _settle_skip_locked(claimed, None)


def _claim_skip_locked_stepwise(pgconn, pause_seconds: float, clock) -> tuple[int, int, int, int]:
    # one statement reads and writes: there is no gap to pause in (read_end = 0: no separate read)
    write_start = clock()
    return (*_claim_skip_locked(pgconn), 0, write_start)


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
    if claimed.status != TUPLES_OK:
        return failed_statement(pgconn, 0)
    return _settle_for_update(claimed, None)


# --------------------------------------------------------------------------- claims inside one transaction

def _transaction_attempt(pgconn, settle, pause_seconds: float = 0.0, clock=None) -> tuple[int, int, int, int]:
    """BEGIN, pick, claim what was picked, COMMIT: (outcome, job id, read end, write start).

    With a clock (a slowed-down race), pauses between the pick and the claim, inside the transaction, and
    stamps both; without one, the stamps are 0.
    """
    began = pgconn.exec_prepared(b"begin", None)
    if began.status != COMMAND_OK:
        return (*abandon_transaction(pgconn, began, 0), 0, 0)
    picked = pgconn.exec_prepared(b"pick", None)
    read_end = clock() if clock is not None else 0
    if picked.status != TUPLES_OK:
        return (*abandon_transaction(pgconn, picked, 0), read_end, 0)
    job_id = picked.get_value(0, 0) if picked.ntuples else None
    write_start = 0
    if job_id is not None:
        if clock is not None:
            time.sleep(pause_seconds)
            write_start = clock()
        claimed = pgconn.exec_prepared(b"claim", (job_id,))
        if claimed.status not in OK:
            return (*abandon_transaction(pgconn, claimed, job_id), read_end, write_start)
    # an empty pick commits too: even a read-only SERIALIZABLE transaction may fail here, and then it is retried
    committed = pgconn.exec_prepared(b"commit", None)
    if committed.status != COMMAND_OK:
        return (*abandon_transaction(pgconn, committed, job_id), read_end, write_start)
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


def _batch_steps(notes: AttemptNotes, batch: int):
    """One statement claims up to `batch` jobs: the attempt's job id is the lowest, every id is noted."""
    add_rows, add_ids = notes.rows.append, notes.job_ids.extend

    def claim(pgconn) -> tuple[int, int]:
        claimed = pgconn.exec_prepared(b"claim", None)
        if claimed.status != TUPLES_OK:
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

    return claim, one_statement_stepwise(claim)


def _advisory_attempt(pgconn, add_stray, pause_seconds: float = 0.0, clock=None) -> tuple[int, int, int, int]:
    """Pick under an advisory lock, claim with the guard, release every advisory lock and note the strays."""
    picked = pgconn.exec_prepared(b"pick", None)
    read_end = clock() if clock is not None else 0
    job_id = picked.get_value(0, 0) if picked.status == TUPLES_OK and picked.ntuples else None
    write_start = 0
    if picked.status != TUPLES_OK:
        # session advisory locks outlive the failed statement (they ignore transactions): release them below
        outcome = ERROR
    elif job_id is None:
        outcome = EMPTY
    else:
        if clock is not None:
            time.sleep(pause_seconds)
            write_start = clock()
        claimed = pgconn.exec_prepared(b"claim", (job_id,))
        if claimed.status not in OK:
            outcome = ERROR
        else:
            outcome = _settle_guarded(claimed, job_id)[0]  # zero rows: the pick's snapshot was older than a claim
    # released whatever happened above: a lock kept would block its job for every other worker
    released = pgconn.exec_prepared(b"release", (job_id or b"0",))
    if released.status != TUPLES_OK:
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
            claim_stepwise=one_statement_stepwise(_claim_for_update),
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

# Every strategy a race runs by name: the study's, then the libraries' protocols.
STRATEGIES.update(PROTOCOLS)


# The harness's clean-up of advisory locks after each job, taken out of a protocol for a race through a transaction
# pooler: there a session's statements come from any client, and releasing every lock the session holds would
# release other clients'. Per protocol, a statement replaced by the library's own (or None: dropped).
WITHOUT_CLEANUP = {"que": {"unlock": QUE_UNLOCK_ALONE}, "good_job": {"held_after": None}}


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
    return library_strategy(name, strategy.title, strategy.summary, protocol, sql, strategy.isolation,
                             counts_stray_locks=False, library_name=library_name)


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise UserError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)} or all "
                        f"(the original three: {', '.join(ORIGINAL_STRATEGIES)}); libraries stands for every job "
                        "library's protocol") from None


def expand_strategies(names) -> list[str]:
    """The names in order, a word of STRATEGY_GROUPS (`libraries`) replaced by the strategies it stands for."""
    return [one for name in names for one in STRATEGY_GROUPS.get(name, (name,))]


def parse_strategies(text: str) -> list[str]:
    """'all' (the original three), one name, or a comma-separated list, where `libraries` stands for every job
    library's protocol (STRATEGY_GROUPS)."""
    names = list(ORIGINAL_STRATEGIES) if text.strip() == "all" else \
        expand_strategies(t.strip() for t in text.split(",") if t.strip())
    if not names:
        raise UserError("no strategy given")
    for name in names:
        get_strategy(name)
    return names
