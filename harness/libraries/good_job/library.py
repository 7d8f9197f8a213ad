"""good_job (Ruby), modelled from its source: its declaration and its claim protocol
(harness.libraries.declaration)."""

from __future__ import annotations

from harness.libraries.declaration import (BEGIN, CHECK, COMMIT, COMPLETE, JOBS, PICK, PLAIN, RELEASE, WRITE, Library,
                                           Protocol, Source)

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
# holds, then releases them (as declaration.HELD_AFTER)
GOOD_JOB_HELD_AFTER = ("WITH held AS MATERIALIZED (SELECT count(*) AS stray FROM pg_locks WHERE locktype = 'advisory' "
                       "AND pid = pg_backend_pid()) SELECT stray, pg_advisory_unlock_all() FROM held")

LIBRARY = Library(
    "good_job", "good_job (Ruby)",
    Source("bensheldon/good_job", ("app/models/concerns/good_job/advisory_lockable.rb",
                                   "app/models/good_job/job.rb"),
           "81db22b7cfde2579b2d735e076fa6eaacc65affa", "4.19.2"),
    "the executions rows written at start and finish; running jobs stay candidates in good_job, skipped by "
    "their locks", False,
    Protocol("good_job's advisory lock over candidates",
             "A SELECT materialises up to 1,000 candidates and keeps the first whose advisory lock (an md5 key) it "
             "gets; a reload re-checks it; the start and the finish are transactions of their own; the lock is "
             "released with a pg_locks check before and after.",
             (("pick", PICK), ("reload", CHECK), ("begin", PLAIN), ("start", WRITE), ("commit", PLAIN),
              ("begin", PLAIN), ("finish", PLAIN), ("commit", PLAIN), ("held", RELEASE), ("unlock", RELEASE),
              ("held_after", RELEASE)),
             {"pick": GOOD_JOB_PICK, "reload": GOOD_JOB_RELOAD, "begin": BEGIN, "start": GOOD_JOB_START,
              "commit": COMMIT, "finish": COMPLETE, "held": GOOD_JOB_LOCK_HELD, "unlock": GOOD_JOB_UNLOCK,
              "held_after": GOOD_JOB_HELD_AFTER},
             "the pick, the reload and the unlock in autocommit, the start and the finish each in a READ COMMITTED "
             "transaction; a session advisory lock from the pick to the unlock",
             counts_stray_locks=True),
    statements=13)
