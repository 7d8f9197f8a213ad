"""graphile-worker, raced with its own worker (adapter.py): its declaration and its claim protocol
(harness.libraries.declaration)."""

from __future__ import annotations

from harness.libraries.declaration import COMPLETE, NEITHER, Credited, Library, Source, skip_locked_protocol

# src/sql/getJobs.ts and src/sql/completeJobs.ts (as built into its npm package, dist/sql/*.js): get_job (the SKIP
# LOCKED CTE, setting locked_at and locked_by, also locking the job's named queue if it has one) and the completion,
# a DELETE by id. Credited as procrastinate's are.
LIBRARY = Library(
    "graphile_worker", "graphile-worker",
    Source("graphile/worker", ("src/sql/getJobs.ts", "src/sql/completeJobs.ts"), "", "0.17.3", "node_modules", (
        Credited("claim", "graphile-worker/dist/sql/getJobs.js", "async function batchGetJobs(",
                 "limit ${batchSize} for update skip locked )", "exports."),
        Credited("claim", "graphile-worker/dist/sql/getJobs.js", "async function batchGetJobs(",
                 "locked_by = $1::text,", "exports."),
        Credited("completion", "graphile-worker/dist/sql/completeJobs.js", "async function batchCompleteJobs(",
                 "delete from ${escapedWorkerSchema}._private_jobs as jobs where id = $1::bigint`",
                 "exports."))),
    "its named queues and their locks; the completion deletes the row in graphile-worker", True,
    skip_locked_protocol(
        "graphile-worker's get_job and completion",
        "The SKIP LOCKED CTE UPDATE, then the completion, each one statement in autocommit.",
        COMPLETE, NEITHER))
