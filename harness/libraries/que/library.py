"""Que (Ruby), modelled from its source: its declaration and its claim protocol (harness.libraries.declaration)."""

from __future__ import annotations

from harness.libraries.declaration import (CHECK, HELD_AFTER, JOBS, PICK, RELEASE, WRITE, Library, Protocol,
                                           Source)

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

LIBRARY = Library(
    "que", "Que (Ruby)",
    Source("que-rb/que", ("lib/que/poller.rb", "lib/que/locker.rb", "lib/que/worker.rb"),
           "17fb2c3b75b37599bf17043dbb692555f582f249", "2.4.1"),
    "its buffer of locked jobs and the separate connection that holds the locks; the resolve deletes the "
    "row in Que", False,
    Protocol("Que's advisory-lock poll",
             "A recursive CTE tries a session advisory lock on one pending job after another until it holds one; "
             "a new statement re-checks it, another checks it exists, the job runs and is resolved, then it is "
             "unlocked. Nothing is written at claim.",
             (("poll", PICK), ("verify", CHECK), ("exists", CHECK), ("resolve", WRITE), ("unlock", RELEASE)),
             {"poll": QUE_POLL, "verify": QUE_VERIFY, "exists": QUE_EXISTS, "resolve": QUE_RESOLVE,
              "unlock": QUE_UNLOCK},
             "read committed, autocommit, one statement per round trip; session advisory locks",
             counts_stray_locks=True),
    statements=5)
