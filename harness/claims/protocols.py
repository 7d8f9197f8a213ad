"""Job libraries' claim protocols, rewritten on this study's jobs table so the race loop can run them.

Two kinds: the libraries this project does not run (Go, Elixir, Ruby), read from their sources at a commit; and
the libraries raced with their own workers (harness.libraries), read from the release installed here, whose
claim a test finds among the statements the server logged while the library itself ran.

Each protocol is the sequence of statements one of the library's workers sends for one job at concurrency 1:
its claim, and, where the library sends them one job at a time, its job's start and completion, with a no-op job
between. The statements are written here, from reading each library's source at the commit its declaration
(LIBRARIES) names; none is copied. What a model keeps: the order of the statements, the transaction boundaries, the
locks and where they are held, the re-checks. What it drops, for every library: its queue, priority and schedule
columns and their indexes, the extra columns and tables it writes (so a model may send fewer statements than its
library: its declaration's `statements`), its wake-ups. Each declaration's `dropped` says the rest.

LIBRARIES declares every library once (name, title, source, what it drops, whether it also runs here); every list
of libraries in the project is read off it.

The table (harness.server.schema) has id, status and started_at. A job is 'pending', then 'running' once a worker
has it (the write the audit records), then 'done' where the library writes a completion. A model's write that
stands for the library's start of the job is unguarded where the library's is, so a protocol that lets two workers
past its checks shows as a job run twice in the audit.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.claims.steps import (AUTOCOMMIT, EMPTY, IDLE, LOST, OK, TUPLES_OK, WON, AttemptNotes, Strategy,
                                 abandon_transaction, failed_statement, one_statement_stepwise)
from harness.config import SCHEMA

JOBS = f"{SCHEMA}.jobs"

BEGIN = "BEGIN ISOLATION LEVEL READ COMMITTED"
COMMIT = "COMMIT"
COMPLETE = f"UPDATE {JOBS} SET status = 'done' WHERE id = $1"

# The advisory locks this session still holds once it has released its job's (none, where the protocol is
# sound), then released: a measurement and a clean-up added here, not the library's (a lock left behind would keep
# its job from every worker). The count refers to the unlock's CTE, so it runs after it.
HELD_AFTER = ("held AS MATERIALIZED (SELECT count(*) AS stray FROM pg_locks WHERE locktype = 'advisory' "
              "AND pid = pg_backend_pid() AND (SELECT done FROM released) IS NOT NULL) "
              "SELECT stray, pg_advisory_unlock_all() FROM held")


# The claim most libraries send, in one statement: a CTE locks the next pending job FOR UPDATE SKIP LOCKED (the CTE
# fences the LIMIT from the planner), and the UPDATE sets it running. What sets them apart is around it: the
# transactions, the re-checks, the completion.
SKIP_LOCKED_CLAIM = (
    f"WITH next AS (SELECT id FROM {JOBS} WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) "
    f"UPDATE {JOBS} AS j SET status = 'running', started_at = now() FROM next WHERE j.id = next.id RETURNING j.id"
)
# a completion that checks the job's status before it writes. pg-boss's completeJobs checks `state = 'active'` and
# nothing more (src/plans.js:552 in 10.4.2): not that the job is still this worker's, so a stale holder's
# completion lands on a job another worker now runs. chancy's checks the claim_id its fetch set (chancy/worker.py:697
# in 0.26.0), which is the worker's own claim; the model stands for it with the status. River's model sends it too:
# River's JobSetStateIfRunningMany checks `state = 'running'` alone (river_job.sql:620-660 in v0.43.0).
GUARDED_COMPLETE = f"UPDATE {JOBS} SET status = 'done' WHERE id = $1 AND status = 'running'"

# --------------------------------------------------------------------------- River

# riverqueue/river, riverdriver/riverpgxv5/internal/dbsqlc/river_job.sql (JobGetAvailable, lines 200-216 at its latest
# release, v0.43.0; the unreleased main read before, fdf6cdf, does not change the file): one statement per
# fetch, no explicit transaction; a CTE locks up to "free slots" available jobs FOR UPDATE SKIP LOCKED, in
# (priority, scheduled_at, id) order, and the UPDATE sets them running (attempt + 1, attempted_at, attempted_by).
# Completions are held by the client and written in batches (every 250 ms, or at 100 waiting), so they add a small
# fraction of a statement per job: the model leaves them out.
RIVER_CLAIM = SKIP_LOCKED_CLAIM

# --------------------------------------------------------------------------- Oban

# oban-bg/oban, lib/oban/engines/basic.ex (fetch_jobs): a transaction around one UPDATE that takes its rows from a
# CTE "subset" (LIMIT demand, FOR UPDATE SKIP LOCKED; the CTE fences the LIMIT from the planner), setting state
# 'executing'; BEGIN and COMMIT are round trips of their own. Completion (complete_job) is one autocommit UPDATE by
# id per job, with no check of the job's state (lines 94-130 and 216-224 at the latest release, v2.23.1).
OBAN_CLAIM = SKIP_LOCKED_CLAIM

# --------------------------------------------------------------------------- Que

# que-rb/que, lib/que/poller.rb (poll_jobs): a recursive CTE walks the queue in key order, one row per step, and
# takes a session advisory lock on each (inside a function, so the lock is tried exactly once per row) until it
# holds as many jobs as it has free slots; nothing is written to the job. lib/que/locker.rb then re-reads the
# locked ids in a new statement (a new snapshot, taken after the lock), since the poll's snapshot may predate
# another worker's finish; lib/que/worker.rb checks that the job still exists, runs it, and resolves it (deletes
# it by default); the locker unlocks it after that has committed. Here the LATERAL subquery with OFFSET 0 keeps
# the lock call from being flattened into the scan, so it is tried once per row, as Que's function is.
QUE_POLL = (
    "WITH RECURSIVE walk (id, locked) AS ("
    f"SELECT first.id, lock.locked FROM (SELECT id FROM {JOBS} WHERE status = 'pending' ORDER BY id LIMIT 1) first "
    "CROSS JOIN LATERAL (SELECT pg_try_advisory_lock(first.id) AS locked OFFSET 0) lock "
    "UNION ALL "
    "SELECT next.id, lock.locked FROM walk "
    f"CROSS JOIN LATERAL (SELECT id FROM {JOBS} WHERE status = 'pending' AND id > walk.id ORDER BY id LIMIT 1) next "
    "CROSS JOIN LATERAL (SELECT pg_try_advisory_lock(next.id) AS locked OFFSET 0) lock "
    "WHERE NOT walk.locked) "
    "SELECT id FROM walk WHERE locked"
)
QUE_VERIFY = f"SELECT id FROM {JOBS} WHERE id = $1 AND status = 'pending'"
QUE_EXISTS = f"SELECT 1 FROM {JOBS} WHERE id = $1"
# the job's resolve: Que deletes the row; here the row stays and takes the status the audit records
QUE_RESOLVE = f"UPDATE {JOBS} SET status = 'running', started_at = now() WHERE id = $1"
QUE_UNLOCK = f"WITH released AS MATERIALIZED (SELECT pg_advisory_unlock($1) AS done), {HELD_AFTER}"
# Que's unlock as Que sends it, without the count and the clean-up: what races through a transaction pooler, where
# the clean-up would release locks other clients' statements took on the same server session
QUE_UNLOCK_ALONE = "SELECT pg_advisory_unlock($1)"

# --------------------------------------------------------------------------- good_job

# bensheldon/good_job, app/models/concerns/good_job/advisory_lockable.rb (the advisory_lock scope, its default
# lock strategy): one autocommit SELECT takes up to 1,000 unfinished candidates in a MATERIALIZED CTE and keeps the
# first whose session advisory lock it gets; the key is the first 64 bits of md5('<table>-<id>'). Then
# app/models/good_job/job.rb re-reads the job (it must not be finished: the candidates' snapshot may be stale),
# records its start in a transaction, runs it, records its finish in a transaction, and unlocks, checking
# pg_locks before and after (a lock may have been taken twice). good_job also writes an executions row at start and
# at finish; the model does not.
GOOD_JOB_KEY = "('x' || substr(md5('jobs-' || {id}::text), 1, 16))::bit(64)::bigint"
GOOD_JOB_PICK = (
    f"SELECT id FROM {JOBS} WHERE id IN ("
    f"WITH candidates AS MATERIALIZED (SELECT id FROM {JOBS} WHERE status = 'pending' ORDER BY id LIMIT 1000) "
    f"SELECT id FROM candidates WHERE pg_try_advisory_lock({GOOD_JOB_KEY.format(id='id')}) LIMIT 1)"
)
GOOD_JOB_RELOAD = f"SELECT id FROM {JOBS} WHERE id = $1 AND status <> 'done'"
GOOD_JOB_START = f"UPDATE {JOBS} SET status = 'running', started_at = now() WHERE id = $1"
GOOD_JOB_LOCK_HELD = (
    "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND objsubid = 1 "
    f"AND ((classid::bigint << 32) | objid::bigint) = {GOOD_JOB_KEY.format(id='$1::bigint')}"
)
GOOD_JOB_UNLOCK = f"SELECT pg_advisory_unlock({GOOD_JOB_KEY.format(id='$1::bigint')})"
# good_job's check after the unlock looks for its key; this one counts every advisory lock the session still
# holds, then releases them (as HELD_AFTER)
GOOD_JOB_HELD_AFTER = ("WITH held AS MATERIALIZED (SELECT count(*) AS stray FROM pg_locks WHERE locktype = 'advisory' "
                       "AND pid = pg_backend_pid()) SELECT stray, pg_advisory_unlock_all() FROM held")

# --------------------------------------------------------------------------- Solid Queue

# rails/solid_queue, app/models/solid_queue/ready_execution.rb (claim) and claimed_execution.rb: in one
# transaction, SELECT the next ready execution FOR UPDATE SKIP LOCKED, insert its claimed execution, re-select the
# claimed rows, delete the ready one; the row lock is held across those statements. The job's row is then loaded
# and the job run; its completion is a second transaction that locks the claimed row (plain FOR UPDATE), marks the
# job finished and deletes the claimed row. Solid Queue moves a job between tables where the model writes its
# status: the model's claim is one UPDATE where Solid Queue sends an INSERT and a DELETE, and its completion one
# UPDATE where it sends an UPDATE and a DELETE; its pause check before each claim is left out.
SOLID_QUEUE_PICK = f"SELECT id FROM {JOBS} WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
SOLID_QUEUE_CLAIM = f"UPDATE {JOBS} SET status = 'running', started_at = now() WHERE id = $1"
SOLID_QUEUE_RESELECT = f"SELECT id FROM {JOBS} WHERE id = $1 AND status = 'running'"
SOLID_QUEUE_LOAD = f"SELECT id, status, started_at FROM {JOBS} WHERE id = $1"
SOLID_QUEUE_LOCK = f"SELECT id FROM {JOBS} WHERE id = $1 FOR UPDATE"

# --------------------------------------------------------------------------- the libraries raced here too

# procrastinate, procrastinate/sql/schema.sql: procrastinate_fetch_job_v2 (the SKIP LOCKED CTE, 'todo' to 'doing',
# passing over a job whose lock has an earlier or running job) and procrastinate_finish_job_v1 (an UPDATE of a job
# still 'todo' or 'doing', or it raises; nothing names the worker); its psycopg
# connector sends each in a transaction of its own, after an empty query that checks the pooled connection.
# pgmq, pgmq/sql/pgmq.sql: pgmq.read (the SKIP LOCKED CTE; the UPDATE moves vt and counts the read) and
# pgmq.archive (the row moves to the archive table); its client sends each call in a transaction of its own.
# chancy, chancy/worker.py: fetch_jobs (the SKIP LOCKED CTE in a transaction, 'pending' to 'running' with a fresh
# claim_id); each completion is an UPDATE by id and claim_id, the worker's completions sent together in one
# transaction once a second.
# PgQueuer, pgqueuer/adapters/persistence/qb.py: the dequeue statement (the SKIP LOCKED CTE, 'queued' to
# 'picked') and the log statement (deletes the job, inserts its log row), each in autocommit.
# pg-boss, src/plans.js: fetchNextJob (the SKIP LOCKED CTE, to 'active') and completeJobs (an UPDATE of the jobs
# still 'active', whichever worker now holds them).
# graphile-worker, src/sql/getJobs.ts and src/sql/completeJobs.ts (as built into its npm package, dist/sql/*.js):
# get_job (the SKIP LOCKED CTE, setting locked_at and locked_by, also locking the job's named queue if it has one)
# and the completion, a DELETE by id.
#
# Each of the six names, in its declaration (Source.credited), the statements credited to it here as fragments of
# its installed package's own files; tests/test_library_sources.py finds every one, so an upgrade that changes one
# fails loudly.

@dataclass(frozen=True)
class Credited:
    """A statement credited to a library installed here, as its installed package's file holds it: `fragment` lies
    between the first `anchor` (the function or statement it belongs to) and the next `end` after it, whitespace
    runs read as one space in all three. `file` is the path under site-packages or node_modules (Source.installed)."""

    role: str  # "claim" or "completion"; a completion's fragment runs to the end of its WHERE clause, so a check
    # added to it fails the test too
    file: str
    anchor: str
    fragment: str
    end: str


@dataclass(frozen=True)
class Source:
    """Where a model was read: the repository, the files, the commit (and the release it carries)."""

    repository: str
    files: tuple[str, ...]
    commit: str  # empty for a library read from the release installed here
    release: str  # the release that commit carries, where the notes name one
    installed: str = ""  # for a library installed here: "site-packages" or "node_modules"
    credited: tuple[Credited, ...] = ()  # its claim and completion, found in the installed files by a test

    def __str__(self) -> str:
        if not self.commit:
            return f"{self.repository}, {', '.join(self.files)}, release {self.release} as installed here"
        release = f" ({self.release})" if self.release else ""
        return f"{self.repository}, {', '.join(self.files)}{release}, commit {self.commit}"

    @property
    def short(self) -> str:
        """For a table: the repository at the commit's first 7 digits (or the release), and the files' names."""
        at = self.commit[:7] if self.commit else self.release
        return f"{self.repository} @ {at}: {', '.join(f.rsplit('/', 1)[-1] for f in self.files)}"


@dataclass(frozen=True)
class Library:
    """One job library, declared once: every list of libraries here is read off LIBRARIES."""

    name: str  # its name everywhere here: its module, its protocol's strategy, its runs
    title: str  # as the article names it (a model with the language it is written in)
    source: Source  # where its claim was read
    dropped: str  # what its protocol here leaves out beyond what every protocol drops
    runs_here: bool  # True: raced with its own code too (harness.libraries); False: a model (harness.libraries.models)
    # the statements the library itself sends per job at concurrency 1, read from its source, for a model; a library
    # raced here has none typed: the article takes the statements the server logged per job while it ran
    statements: int | None = None


# Every model leaves out queues, priorities, schedules, their indexes and wake-ups; `dropped` says the rest.
# River's completions are batched apart; Solid Queue adds a pause check, a DELETE at claim and one at completion;
# good_job, its executions rows at start and finish.
LIBRARIES = (
    # not run here (Go, Elixir, Ruby): read from their sources at a commit
    Library("river", "River (Go)",
            Source("riverqueue/river", ("riverdriver/riverpgxv5/internal/dbsqlc/river_job.sql",),
                   "60435dc2c58e3d3dfbde6a00f08bc98a3f13c37e", "v0.43.0"),  # its JobGetAvailable query
            "the batched completions; attempt, attempted_by and the wide row it returns", False, 1),
    Library("oban", "Oban (Elixir)",
            Source("oban-bg/oban", ("lib/oban/engines/basic.ex",), "f86cc924cb8f1b60c8ed499a9135f715fc921ef7",
                   "v2.23.1"),  # the Basic engine's fetch_jobs and complete_job
            "attempt, attempted_by and the wide row it returns; Oban retries a failed transaction itself", False, 4),
    Library("que", "Que (Ruby)",
            Source("que-rb/que", ("lib/que/poller.rb", "lib/que/locker.rb", "lib/que/worker.rb"),
                   "17fb2c3b75b37599bf17043dbb692555f582f249", "2.4.1"),
            "its buffer of locked jobs and the separate connection that holds the locks; the resolve deletes the "
            "row in Que", False, 5),
    Library("good_job", "good_job (Ruby)",
            Source("bensheldon/good_job", ("app/models/concerns/good_job/advisory_lockable.rb",
                                           "app/models/good_job/job.rb"),
                   "81db22b7cfde2579b2d735e076fa6eaacc65affa", "4.19.2"),
            "the executions rows written at start and finish; running jobs stay candidates in good_job, skipped by "
            "their locks", False, 13),
    Library("solid_queue", "Solid Queue (Ruby)",
            Source("rails/solid_queue", ("app/models/solid_queue/ready_execution.rb",
                                         "app/models/solid_queue/claimed_execution.rb"),
                   "61a9f08a2bbdf02e60fac2371fbca0553f628dac", "1.5.0"),
            "the ready and claimed tables (an INSERT and a DELETE at claim and at completion), the pause check",
            False, 13),
    # raced with their own code too: read from the release installed here (requirements.lock, package-lock.json)
    Library("procrastinate", "procrastinate",
            Source("procrastinate-org/procrastinate", ("procrastinate/sql/schema.sql",), "", "3.10.0", "site-packages", (
                Credited("claim", "procrastinate/sql/schema.sql", "CREATE FUNCTION procrastinate_fetch_job_v2(",
                         "FOR UPDATE OF jobs SKIP LOCKED", "$$;"),
                Credited("completion", "procrastinate/sql/schema.sql", "CREATE FUNCTION procrastinate_finish_job_v1(",
                         "WHERE id = job_id AND status IN ('todo', 'doing') RETURNING id INTO _job_id", "$$;"))),
            "its job locks (a job waits while another with its lock runs); the pool's empty query before each "
            "transaction", True),
    Library("pgqueuer", "PgQueuer", Source(
        "janbjorge/pgqueuer", ("pgqueuer/adapters/persistence/qb.py",), "", "1.6.0", "site-packages", (
            Credited("claim", "pgqueuer/adapters/persistence/qb.py", "def build_dequeue_query(",
                     "FOR UPDATE SKIP LOCKED", "def build_has_queued_work("),
            Credited("claim", "pgqueuer/adapters/persistence/qb.py", "def build_dequeue_query(",
                     "SET status = 'picked',", "def build_has_queued_work("),
            Credited("completion", "pgqueuer/adapters/persistence/qb.py", "def build_log_job_query(",
                     "DELETE FROM {self.qualified.queue_table} WHERE id = ANY(SELECT js.id FROM job_status js "
                     "WHERE js.status != 'failed') RETURNING", "def "))),
            "the completion's DELETE and log row (one UPDATE here); its re-pick of jobs whose heartbeat is stale",
            True),
    Library("chancy", "chancy", Source(
        "TkTech/chancy", ("chancy/worker.py",), "", "0.26.0", "site-packages", (
            Credited("claim", "chancy/worker.py", "async def fetch_jobs(", "FOR UPDATE OF {jobs} SKIP LOCKED", "def "),
            Credited("claim", "chancy/worker.py", "async def fetch_jobs(", "claim_id = gen_random_uuid(),", "def "),
            Credited("completion", "chancy/worker.py", "async def flush(",
                     "WHERE id = %(id)s AND claim_id IS NOT DISTINCT FROM %(claim_id)s RETURNING id", "def "))),
            "the claim_id (its completion checks the status here); the transaction around each second's "
            "completions", True),
    Library("pgmq", "pgmq", Source(
        "pgmq/pgmq", ("pgmq-extension/sql/pgmq.sql",), "", "SQL 1.13.0", "site-packages", (
            # the copy of the SQL its Python client ships, which is what runs here
            Credited("claim", "pgmq/sql/pgmq.sql", "CREATE FUNCTION pgmq.read(",
                     "LIMIT $1 FOR UPDATE SKIP LOCKED ) UPDATE pgmq.%I m", "$$ LANGUAGE plpgsql;"),
            Credited("completion", "pgmq/sql/pgmq.sql", "CREATE FUNCTION pgmq.archive( queue_name TEXT, msg_id BIGINT )",
                     "DELETE FROM pgmq.%I WHERE msg_id = $1 RETURNING", "$$ LANGUAGE plpgsql;"))),
            "the visibility timeout and read count; the archive table (the archive is one UPDATE here)", True),
    Library("pgboss", "pg-boss", Source(
        "timgit/pg-boss", ("src/plans.js",), "", "10.4.2", "node_modules", (
            Credited("claim", "pg-boss/src/plans.js", "function fetchNextJob (schema)", "FOR UPDATE SKIP LOCKED",
                     "} function "),
            Credited("claim", "pg-boss/src/plans.js", "function fetchNextJob (schema)",
                     "UPDATE ${schema}.job j SET state = '${JOB_STATES.active}',", "} function "),
            Credited("completion", "pg-boss/src/plans.js", "function completeJobs (schema)",
                     "WHERE name = $1 AND id IN (SELECT UNNEST($2::uuid[])) AND state = '${JOB_STATES.active}' "
                     "RETURNING *", "} function "))),
            "its singleton and group policies in the claim; the completion's output column", True),
    Library("graphile_worker", "graphile-worker",
            Source("graphile/worker", ("src/sql/getJobs.ts", "src/sql/completeJobs.ts"), "", "0.17.3", "node_modules", (
                Credited("claim", "graphile-worker/dist/sql/getJobs.js", "async function batchGetJobs(",
                         "limit ${batchSize} for update skip locked )", "exports."),
                Credited("claim", "graphile-worker/dist/sql/getJobs.js", "async function batchGetJobs(",
                         "locked_by = $1::text,", "exports."),
                Credited("completion", "graphile-worker/dist/sql/completeJobs.js", "async function batchCompleteJobs(",
                         "delete from ${escapedWorkerSchema}._private_jobs as jobs where id = $1::bigint`",
                         "exports."))),
            "its named queues and their locks; the completion deletes the row in graphile-worker", True),
)

# The lists read off LIBRARIES, in its order.
SOURCES = {library.name: library.source for library in LIBRARIES}
DROPPED = {library.name: library.dropped for library in LIBRARIES}
LIBRARY_STATEMENTS = {library.name: library.statements for library in LIBRARIES if library.statements is not None}
LIBRARY_NAMES = {library.name: library.title for library in LIBRARIES}
# Their protocols, raced beside the study's strategies on the same table: those of the libraries this project does
# not run, read from their sources at a commit, and those also raced with their own workers, read from their releases.
MODELLED_LIBRARY_STRATEGIES = tuple(library.name for library in LIBRARIES if not library.runs_here)
RACED_LIBRARY_STRATEGIES = tuple(library.name for library in LIBRARIES if library.runs_here)
LIBRARY_STRATEGIES = MODELLED_LIBRARY_STRATEGIES + RACED_LIBRARY_STRATEGIES


# --------------------------------------------------------------------------- job libraries' protocols

# What a statement of a library's protocol (harness.claims.protocols) does with its answer:
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
                if result.status not in OK:
                    if pgconn.transaction_status == IDLE:
                        failed = failed_statement(pgconn, job_id)[0]
                    else:
                        failed = abandon_transaction(pgconn, result, job_id)[0]
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
            if outcome in (EMPTY, LOST) and pgconn.transaction_status != IDLE:
                pgconn.exec_(_COMMIT)
            if job_id is None or not releases:
                if counts_stray_locks:  # one note per attempt
                    if outcome != EMPTY:
                        pgconn.exec_(_UNLOCK_ALL)
                    add_stray(0)
                return outcome, int(job_id or 0)
            for name, with_job in releases:
                released = pgconn.exec_prepared(name, (job_id,) if with_job else None)
                if released.status != TUPLES_OK:
                    if counts_stray_locks:
                        pgconn.exec_(_UNLOCK_ALL)
                        add_stray(0)
                    return (WON if outcome == WON else failed_statement(pgconn, job_id)[0]), int(job_id)
            if counts_stray_locks:
                add_stray(int(released.get_value(0, 0)))
            return outcome, int(job_id)

        return claim, one_statement_stepwise(claim)

    return noted_steps


def library_strategy(name: str, title: str, summary: str, protocol: tuple[tuple[str, str], ...],
                      sql: dict[str, str], isolation: str, counts_stray_locks: bool = False,
                      library_name: str | None = None) -> "Strategy":
    """A job library's protocol as a strategy the race runs: its statements prepared once each, its sequence kept.
    library_name: the library a variant of its protocol comes from (its name otherwise)."""
    source = SOURCES[library_name or name]
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
    sql = {step: text for step, text in (("begin", BEGIN), ("claim", SKIP_LOCKED_CLAIM),
                                         ("commit", COMMIT), ("complete", complete)) if step in used}
    return library_strategy(name, title, summary, protocol, sql, isolation)


# A library's protocol with one of its safeguards taken out, to show what the safeguard prevents: variant -> the
# library whose protocol it changes
LIBRARY_VARIANTS = {"que_without_recheck": "que"}
# Every library's protocol in LIBRARIES' order, each followed by its variants: the order the article shows them in
# (harness.article.labels), and what `libraries` stands for among a race's strategies (harness.claims.strategies)
LIBRARY_PROTOCOL_ORDER = tuple(name for library in LIBRARY_STRATEGIES for name in (
    library, *(variant for variant, of in LIBRARY_VARIANTS.items() if of == library)))
PROTOCOLS: dict[str, Strategy] = {s.name: s for s in (
    library_strategy(
        "river", "River's fetch",
        "One statement: a CTE locks the next available job FOR UPDATE SKIP LOCKED, the UPDATE sets it running.",
        (("claim", CLAIM),), {"claim": RIVER_CLAIM}, AUTOCOMMIT),
    library_strategy(
        "oban", "Oban's fetch and completion",
        "BEGIN, the SKIP LOCKED CTE UPDATE, COMMIT; then the job's completion, an UPDATE by id.",
        (("begin", PLAIN), ("claim", CLAIM), ("commit", PLAIN), ("complete", PLAIN)),
        {"begin": BEGIN, "claim": OBAN_CLAIM, "commit": COMMIT,
         "complete": COMPLETE},
        "the claim in one READ COMMITTED transaction (BEGIN, UPDATE, COMMIT), the completion in autocommit"),
    library_strategy(
        "que", "Que's advisory-lock poll",
        "A recursive CTE tries a session advisory lock on one pending job after another until it holds one; "
        "a new statement re-checks it, another checks it exists, the job runs and is resolved, then it is "
        "unlocked. Nothing is written at claim.",
        (("poll", PICK), ("verify", CHECK), ("exists", CHECK), ("resolve", WRITE), ("unlock", RELEASE)),
        {"poll": QUE_POLL, "verify": QUE_VERIFY, "exists": QUE_EXISTS,
         "resolve": QUE_RESOLVE, "unlock": QUE_UNLOCK},
        "read committed, autocommit, one statement per round trip; session advisory locks",
        counts_stray_locks=True),
    library_strategy(
        "good_job", "good_job's advisory lock over candidates",
        "A SELECT materialises up to 1,000 candidates and keeps the first whose advisory lock (an md5 key) it "
        "gets; a reload re-checks it; the start and the finish are transactions of their own; the lock is "
        "released with a pg_locks check before and after.",
        (("pick", PICK), ("reload", CHECK), ("begin", PLAIN), ("start", WRITE), ("commit", PLAIN),
         ("begin", PLAIN), ("finish", PLAIN), ("commit", PLAIN), ("held", RELEASE), ("unlock", RELEASE),
         ("held_after", RELEASE)),
        {"pick": GOOD_JOB_PICK, "reload": GOOD_JOB_RELOAD, "begin": BEGIN,
         "start": GOOD_JOB_START, "commit": COMMIT, "finish": COMPLETE,
         "held": GOOD_JOB_LOCK_HELD, "unlock": GOOD_JOB_UNLOCK,
         "held_after": GOOD_JOB_HELD_AFTER},
        "the pick, the reload and the unlock in autocommit, the start and the finish each in a READ COMMITTED "
        "transaction; a session advisory lock from the pick to the unlock",
        counts_stray_locks=True),
    library_strategy(
        "solid_queue", "Solid Queue's claim and completion",
        "BEGIN, SELECT the next job FOR UPDATE SKIP LOCKED, claim it, re-select it, COMMIT; load the job; then "
        "BEGIN, lock it FOR UPDATE, finish it, COMMIT.",
        (("begin", PLAIN), ("pick", PICK), ("claim", WRITE), ("reselect", PLAIN), ("commit", PLAIN),
         ("load", PLAIN), ("begin", PLAIN), ("lock", PLAIN), ("finish", PLAIN), ("commit", PLAIN)),
        {"begin": BEGIN, "pick": SOLID_QUEUE_PICK, "claim": SOLID_QUEUE_CLAIM,
         "reselect": SOLID_QUEUE_RESELECT, "commit": COMMIT, "load": SOLID_QUEUE_LOAD,
         "lock": SOLID_QUEUE_LOCK, "finish": COMPLETE},
        "the claim and the completion each one READ COMMITTED transaction; the SKIP LOCKED row lock held across "
        "the claim's statements"),
    _skip_locked_library(
        "procrastinate", "procrastinate's fetch and finish",
        "BEGIN, the SKIP LOCKED CTE UPDATE (its fetch function's body), COMMIT; then BEGIN, the finish, COMMIT.",
        COMPLETE, CLAIM_AND_COMPLETION, "the fetch and the finish each one READ COMMITTED transaction"),
    _skip_locked_library(
        "pgqueuer", "PgQueuer's dequeue and log",
        "The SKIP LOCKED CTE UPDATE, then the completion, each one statement in autocommit.",
        COMPLETE, NEITHER, AUTOCOMMIT),
    _skip_locked_library(
        "chancy", "chancy's fetch and completion",
        "BEGIN, the SKIP LOCKED CTE UPDATE, COMMIT; then the completion, an UPDATE that checks the job is "
        "still the worker's (chancy sends a second's completions in one transaction).",
        GUARDED_COMPLETE, CLAIM_ONLY,
        "the fetch in one READ COMMITTED transaction, the completion in autocommit"),
    _skip_locked_library(
        "pgmq", "pgmq's read and archive",
        "BEGIN, the SKIP LOCKED CTE UPDATE (its read function's body), COMMIT; then BEGIN, the archive, COMMIT.",
        COMPLETE, CLAIM_AND_COMPLETION, "the read and the archive each one READ COMMITTED transaction"),
    _skip_locked_library(
        "pgboss", "pg-boss's fetch and completion",
        "The SKIP LOCKED CTE UPDATE, then the completion of the job if it is still active, each in autocommit.",
        GUARDED_COMPLETE, NEITHER, AUTOCOMMIT),
    _skip_locked_library(
        "graphile_worker", "graphile-worker's get_job and completion",
        "The SKIP LOCKED CTE UPDATE, then the completion, each one statement in autocommit.",
        COMPLETE, NEITHER, AUTOCOMMIT),
)}



def _without_step(name: str, of: str, step: str, title: str, summary: str) -> Strategy:
    """A library's protocol with one step taken out (a safeguard), to show what that step prevents."""
    strategy = PROTOCOLS[of]
    protocol = tuple(s for s in strategy.protocol if s[0] != step)
    sql = {n: text for n, text in strategy.statements if n != step}
    return library_strategy(name, title, summary, protocol, sql, strategy.isolation,
                             strategy.counts_stray_locks, library_name=of)


PROTOCOLS["que_without_recheck"] = _without_step(
    "que_without_recheck", "que", "verify", "Que's poll without its re-check",
    "Que's protocol with the re-check under the lock taken out: the job runs once the poll holds its lock.")
