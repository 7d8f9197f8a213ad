"""pg-boss, raced with its own worker (adapter.py): its declaration and its claim protocol
(harness.libraries.declaration)."""

from __future__ import annotations

from harness.libraries.declaration import GUARDED_COMPLETE, NEITHER, Credited, Library, Source, skip_locked_protocol

# src/plans.js: fetchNextJob (the SKIP LOCKED CTE, to 'active') and completeJobs (an UPDATE of the jobs still
# 'active', src/plans.js:552, whichever worker now holds them: not that the job is still this worker's, so a stale
# holder's completion lands on a job another worker now runs). Credited as procrastinate's are.
LIBRARY = Library(
    "pgboss", "pg-boss",
    Source("timgit/pg-boss", ("src/plans.js",), "", "10.4.2", "node_modules", (
        Credited("claim", "pg-boss/src/plans.js", "function fetchNextJob (schema)", "FOR UPDATE SKIP LOCKED",
                 "} function "),
        Credited("claim", "pg-boss/src/plans.js", "function fetchNextJob (schema)",
                 "UPDATE ${schema}.job j SET state = '${JOB_STATES.active}',", "} function "),
        Credited("completion", "pg-boss/src/plans.js", "function completeJobs (schema)",
                 "WHERE name = $1 AND id IN (SELECT UNNEST($2::uuid[])) AND state = '${JOB_STATES.active}' "
                 "RETURNING *", "} function "))),
    "its singleton and group policies in the claim; the completion's output column", True,
    skip_locked_protocol(
        "pg-boss's fetch and completion",
        "The SKIP LOCKED CTE UPDATE, then the completion of the job if it is still active, each in autocommit.",
        GUARDED_COMPLETE, NEITHER))
