"""chancy, raced with its own worker (adapter.py): its declaration and its claim protocol
(harness.libraries.declaration)."""

from __future__ import annotations

from harness.libraries.declaration import (CLAIM_ONLY, GUARDED_COMPLETE, Credited, Library, Source,
                                           skip_locked_protocol)

# chancy/worker.py: fetch_jobs (the SKIP LOCKED CTE in a transaction, 'pending' to 'running' with a fresh claim_id);
# each completion is an UPDATE by id and claim_id (chancy/worker.py:697), the worker's completions sent together in
# one transaction once a second. The model stands for the claim_id with the status (GUARDED_COMPLETE). Credited as
# procrastinate's are.
LIBRARY = Library(
    "chancy", "chancy",
    Source("TkTech/chancy", ("chancy/worker.py",), "", "0.26.0", "site-packages", (
        Credited("claim", "chancy/worker.py", "async def fetch_jobs(", "FOR UPDATE OF {jobs} SKIP LOCKED", "def "),
        Credited("claim", "chancy/worker.py", "async def fetch_jobs(", "claim_id = gen_random_uuid(),", "def "),
        Credited("completion", "chancy/worker.py", "async def flush(",
                 "WHERE id = %(id)s AND claim_id IS NOT DISTINCT FROM %(claim_id)s RETURNING id", "def "))),
    "the claim_id (its completion checks the status here); the transaction around each second's "
    "completions", True,
    skip_locked_protocol(
        "chancy's fetch and completion",
        "BEGIN, the SKIP LOCKED CTE UPDATE, COMMIT; then the completion, an UPDATE that checks the job is "
        "still the worker's (chancy sends a second's completions in one transaction).",
        GUARDED_COMPLETE, CLAIM_ONLY, "the fetch in one READ COMMITTED transaction, the completion in autocommit"))
