"""procrastinate, raced with its own worker (adapter.py): its declaration and its claim protocol
(harness.libraries.declaration)."""

from __future__ import annotations

from harness.libraries.declaration import (CLAIM_AND_COMPLETION, COMPLETE, Credited, Library, Source,
                                           skip_locked_protocol)

# procrastinate/sql/schema.sql: procrastinate_fetch_job_v2 (the SKIP LOCKED CTE, 'todo' to 'doing', passing over a
# job whose lock has an earlier or running job) and procrastinate_finish_job_v1 (an UPDATE of a job still 'todo' or
# 'doing', or it raises; nothing names the worker); its psycopg connector sends each in a transaction of its own,
# after an empty query that checks the pooled connection. Source.credited names the two as fragments of the
# installed package's own file; tests/test_library_sources.py finds them, so an upgrade that changes one fails loudly.
LIBRARY = Library(
    "procrastinate", "procrastinate",
    Source("procrastinate-org/procrastinate", ("procrastinate/sql/schema.sql",), "", "3.10.0", "site-packages", (
        Credited("claim", "procrastinate/sql/schema.sql", "CREATE FUNCTION procrastinate_fetch_job_v2(",
                 "FOR UPDATE OF jobs SKIP LOCKED", "$$;"),
        Credited("completion", "procrastinate/sql/schema.sql", "CREATE FUNCTION procrastinate_finish_job_v1(",
                 "WHERE id = job_id AND status IN ('todo', 'doing') RETURNING id INTO _job_id", "$$;"))),
    "its job locks (a job waits while another with its lock runs); the pool's empty query before each "
    "transaction", True,
    skip_locked_protocol(
        "procrastinate's fetch and finish",
        "BEGIN, the SKIP LOCKED CTE UPDATE (its fetch function's body), COMMIT; then BEGIN, the finish, COMMIT.",
        COMPLETE, CLAIM_AND_COMPLETION, "the fetch and the finish each one READ COMMITTED transaction"))
