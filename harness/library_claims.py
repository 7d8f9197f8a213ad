"""Job libraries' claim protocols, rewritten on this study's jobs table so the race loop can run them.

Two kinds: the libraries this project does not run (Go, Elixir, Ruby), read from their sources at a commit; and
the libraries raced with their own workers (harness.libraries), read from the release installed here, whose
claim a test finds among the statements the server logged while the library itself ran.

Each protocol is the sequence of statements one of the library's workers sends for one job at concurrency 1:
its claim, and, where the library sends them one job at a time, its job's start and completion, with a no-op job
between. The statements are written here, from reading each library's source at the commit named in SOURCES; none
is copied. What a model keeps: the order of the statements, the transaction boundaries, the locks and where they
are held, the re-checks. What it drops, for every library: its queue, priority and schedule columns and their
indexes, the extra columns and tables it writes (so a model may send fewer statements than its library:
LIBRARY_STATEMENTS), its wake-ups. Each library's own lines in DROPPED say the rest.

The table (harness.server.schema) has id, status and started_at. A job is 'pending', then 'running' once a worker
has it (the write the audit records), then 'done' where the library writes a completion. A model's write that
stands for the library's start of the job is unguarded where the library's is, so a protocol that lets two workers
past its checks shows as a job run twice in the audit.
"""

from __future__ import annotations

from dataclasses import dataclass

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
# a completion that checks the job is still the worker's (pg-boss, chancy)
GUARDED_COMPLETE = f"UPDATE {JOBS} SET status = 'done' WHERE id = $1 AND status = 'running'"

# --------------------------------------------------------------------------- River

# riverqueue/river, riverdriver/riverpgxv5/internal/dbsqlc/river_job.sql (JobGetAvailable): one statement per
# fetch, no explicit transaction; a CTE locks up to "free slots" available jobs FOR UPDATE SKIP LOCKED, in
# (priority, scheduled_at, id) order, and the UPDATE sets them running (attempt + 1, attempted_at, attempted_by).
# Completions are held by the client and written in batches (every 250 ms, or at 100 waiting), so they add a small
# fraction of a statement per job: the model leaves them out.
RIVER_CLAIM = SKIP_LOCKED_CLAIM

# --------------------------------------------------------------------------- Oban

# oban-bg/oban, lib/oban/engines/basic.ex (fetch_jobs): a transaction around one UPDATE that takes its rows from a
# CTE "subset" (LIMIT demand, FOR UPDATE SKIP LOCKED; the CTE fences the LIMIT from the planner), setting state
# 'executing'; BEGIN and COMMIT are round trips of their own. Completion (complete_job) is one autocommit UPDATE by
# id per job, with no check of the job's state.
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
# passing over a job whose lock has an earlier or running job) and procrastinate_finish_job_v1; its psycopg
# connector sends each in a transaction of its own, after an empty query that checks the pooled connection.
# pgmq, pgmq/sql/pgmq.sql: pgmq.read (the SKIP LOCKED CTE; the UPDATE moves vt and counts the read) and
# pgmq.archive (the row moves to the archive table); its client sends each call in a transaction of its own.
# chancy, chancy/worker.py: fetch_jobs (the SKIP LOCKED CTE in a transaction, 'pending' to 'running' with a fresh
# claim_id); each completion is an UPDATE by id and claim_id, the worker's completions sent together in one
# transaction once a second.
# PgQueuer, pgqueuer/adapters/persistence/qb.py: the dequeue statement (the SKIP LOCKED CTE, 'queued' to
# 'picked') and the log statement (deletes the job, inserts its log row), each in autocommit.
# pg-boss, src/plans.js: fetchNextJob (the SKIP LOCKED CTE, to 'active') and completeJobs (an UPDATE of the jobs
# still 'active').
# graphile-worker, src/sql/getJobs.ts and src/sql/completeJobs.ts (as built into its npm package): get_job (the SKIP LOCKED CTE, setting locked_at and
# locked_by, also locking the job's named queue if it has one) and the completion, a DELETE by id.

@dataclass(frozen=True)
class Source:
    """Where a model was read: the repository, the files, the commit (and the release it carries)."""

    repository: str
    files: tuple[str, ...]
    commit: str  # empty for a library read from the release installed here
    release: str  # the release that commit carries, where the notes name one

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


SOURCES = {
    "river": Source("riverqueue/river", ("riverdriver/riverpgxv5/internal/dbsqlc/river_job.sql",),
                    "fdf6cdf12567a5b70c003f5ff850273f09e7efcf", ""),  # its JobGetAvailable query
    "oban": Source("oban-bg/oban", ("lib/oban/engines/basic.ex",), "2939e3134d0812195fbfcfe9a8e8d4bbd30bb23b",
                   ""),  # the Basic engine's fetch_jobs and complete_job
    "que": Source("que-rb/que", ("lib/que/poller.rb", "lib/que/locker.rb", "lib/que/worker.rb"),
                  "17fb2c3b75b37599bf17043dbb692555f582f249", "2.4.1"),
    "good_job": Source("bensheldon/good_job", ("app/models/concerns/good_job/advisory_lockable.rb",
                                               "app/models/good_job/job.rb"),
                       "81db22b7cfde2579b2d735e076fa6eaacc65affa", "4.19.2"),
    "solid_queue": Source("rails/solid_queue", ("app/models/solid_queue/ready_execution.rb",
                                                "app/models/solid_queue/claimed_execution.rb"),
                          "29e818d9c1181195736ffc5d7c1d1c03757b7752", "1.5.0"),
    # read from the release installed here (requirements.lock, package-lock.json)
    "procrastinate": Source("procrastinate-org/procrastinate", ("procrastinate/sql/schema.sql",), "", "3.10.0"),
    "pgqueuer": Source("janbjorge/pgqueuer", ("pgqueuer/adapters/persistence/qb.py",), "", "1.6.0"),
    "chancy": Source("TkTech/chancy", ("chancy/worker.py",), "", "0.26.0"),
    "pgmq": Source("pgmq/pgmq", ("pgmq-extension/sql/pgmq.sql",), "", "SQL 1.13.0"),
    "pgboss": Source("timgit/pg-boss", ("src/plans.js",), "", "10.4.2"),
    "graphile_worker": Source("graphile/worker", ("src/sql/getJobs.ts", "src/sql/completeJobs.ts"), "", "0.17.3"),
}

# What each model leaves out beyond what every model drops (queues, priorities, schedules, their indexes, wake-ups).
DROPPED = {
    "river": "the batched completions; attempt, attempted_by and the wide row it returns",
    "oban": "attempt, attempted_by and the wide row it returns; Oban retries a failed transaction itself",
    "que": "its buffer of locked jobs and the separate connection that holds the locks; the resolve deletes the "
           "row in Que",
    "good_job": "the executions rows written at start and finish; running jobs stay candidates in good_job, "
                "skipped by their locks",
    "solid_queue": "the ready and claimed tables (an INSERT and a DELETE at claim and at completion), the pause "
                   "check",
    "procrastinate": "its job locks (a job waits while another with its lock runs); the pool's empty query before "
                     "each transaction",
    "pgqueuer": "the completion's DELETE and log row (one UPDATE here); its re-pick of jobs whose heartbeat is stale",
    "chancy": "the claim_id (its completion checks the status here); the transaction around each second's "
              "completions",
    "pgmq": "the visibility timeout and read count; the archive table (the archive is one UPDATE here)",
    "pgboss": "its singleton and group policies in the claim; the completion's output column",
    "graphile_worker": "its named queues and their locks; the completion deletes the row in graphile-worker",
}

# The statements the library itself sends per job at concurrency 1, from its source (the model's count is the
# length of its protocol): River's completions are batched apart; Solid Queue adds a pause check, a DELETE at
# claim and one at completion; good_job, its executions rows at start and finish.
# A library raced here with its own worker has no count typed here: the article takes the statements the server
# logged per job while it ran.
LIBRARY_STATEMENTS = {"river": 1, "oban": 4, "que": 5, "good_job": 13, "solid_queue": 13}

# Each library's name and the language it is written in, for the article's list of the libraries modelled here.
LIBRARY_NAMES = {"procrastinate": "procrastinate", "pgqueuer": "PgQueuer", "chancy": "chancy", "pgmq": "pgmq",
                 "pgboss": "pg-boss", "graphile_worker": "graphile-worker",
                 "river": "River (Go)", "oban": "Oban (Elixir)", "que": "Que (Ruby)", "good_job": "good_job (Ruby)",
                 "solid_queue": "Solid Queue (Ruby)"}
