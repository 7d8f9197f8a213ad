"""PgQueuer, raced with its own worker (adapter.py): its declaration and its claim protocol
(harness.libraries.declaration)."""

from __future__ import annotations

from harness.libraries.declaration import COMPLETE, NEITHER, Credited, Library, Source, skip_locked_protocol

# pgqueuer/adapters/persistence/qb.py: the dequeue statement (the SKIP LOCKED CTE, 'queued' to 'picked') and the log
# statement (deletes the job, inserts its log row), each in autocommit; credited as procrastinate's are.
LIBRARY = Library(
    "pgqueuer", "PgQueuer",
    Source("janbjorge/pgqueuer", ("pgqueuer/adapters/persistence/qb.py",), "", "1.6.0", "site-packages", (
        Credited("claim", "pgqueuer/adapters/persistence/qb.py", "def build_dequeue_query(",
                 "FOR UPDATE SKIP LOCKED", "def build_has_queued_work("),
        Credited("claim", "pgqueuer/adapters/persistence/qb.py", "def build_dequeue_query(",
                 "SET status = 'picked',", "def build_has_queued_work("),
        Credited("completion", "pgqueuer/adapters/persistence/qb.py", "def build_log_job_query(",
                 "DELETE FROM {self.qualified.queue_table} WHERE id = ANY(SELECT js.id FROM job_status js "
                 "WHERE js.status != 'failed') RETURNING", "def "))),
    "the completion's DELETE and log row (one UPDATE here); its re-pick of jobs whose heartbeat is stale", True,
    skip_locked_protocol(
        "PgQueuer's dequeue and log",
        "The SKIP LOCKED CTE UPDATE, then the completion, each one statement in autocommit.",
        COMPLETE, NEITHER))
