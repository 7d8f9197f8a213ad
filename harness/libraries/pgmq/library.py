"""pgmq, raced with its own client (adapter.py): its declaration and its claim protocol
(harness.libraries.declaration)."""

from __future__ import annotations

from harness.libraries.declaration import (CLAIM_AND_COMPLETION, COMPLETE, Credited, Library, Source,
                                           skip_locked_protocol)

# pgmq-extension/sql/pgmq.sql: pgmq.read (the SKIP LOCKED CTE; the UPDATE moves vt and counts the read) and
# pgmq.archive (the row moves to the archive table); its client sends each call in a transaction of its own.
# Credited as procrastinate's are, in the copy of the SQL its Python client ships, which is what runs here.
LIBRARY = Library(
    "pgmq", "pgmq",
    Source("pgmq/pgmq", ("pgmq-extension/sql/pgmq.sql",), "", "SQL 1.13.0", "site-packages", (
        Credited("claim", "pgmq/sql/pgmq.sql", "CREATE FUNCTION pgmq.read(",
                 "LIMIT $1 FOR UPDATE SKIP LOCKED ) UPDATE pgmq.%I m", "$$ LANGUAGE plpgsql;"),
        Credited("completion", "pgmq/sql/pgmq.sql", "CREATE FUNCTION pgmq.archive( queue_name TEXT, msg_id BIGINT )",
                 "DELETE FROM pgmq.%I WHERE msg_id = $1 RETURNING", "$$ LANGUAGE plpgsql;"))),
    "the visibility timeout and read count; the archive table (the archive is one UPDATE here)", True,
    skip_locked_protocol(
        "pgmq's read and archive",
        "BEGIN, the SKIP LOCKED CTE UPDATE (its read function's body), COMMIT; then BEGIN, the archive, COMMIT.",
        COMPLETE, CLAIM_AND_COMPLETION, "the read and the archive each one READ COMMITTED transaction"))
