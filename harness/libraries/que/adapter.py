"""Que (que-rb/que, Ruby), modelled for a fault run (harness.libraries.models), read at the commit
its library.py names.

Worker loop: the locker (lib/que/locker.rb), on a connection of its own outside the pool, polls
(lib/que/poller.rb) and takes a session advisory lock on the job, re-reads it, and hands it to a worker
(lib/que/worker.rb), which checks that it still exists, runs it and resolves it: destroys it by default, a DELETE
by id (lib/que/job_methods.rb) on a pooled connection, guarded by nothing; the locker then unlocks it. Nothing but
the lock marks a job as taken.

Recovery: the session's end. A job whose locker's session ends (the process killed, its backend terminated) is
free at once, its row unchanged, for any locker's next poll; one whose process is paused stays locked. The locker
does not reconnect: it waits on its connection every 50 ms, and an error there ends the process
(Thread.abort_on_exception), its running job with it, as the model's LockerWatch does.
"""

from __future__ import annotations

from harness.libraries import models
from harness.libraries.declaration import JOBS
from harness.libraries.que.library import LIBRARY, QUE_EXISTS, QUE_POLL, QUE_UNLOCK_ALONE, QUE_VERIFY

NAME = "que"
CLAIM = "que"
AT, TAG = LIBRARY.source.at, LIBRARY.source.tag  # the release read, as the citations say it
SOURCE = str(LIBRARY.source) + "; lib/que/job_methods.rb (the resolve)"
JOBS_SCHEMA, JOBS_TABLE, ID_COLUMN, CLAIMED = models.JOBS_SCHEMA, models.JOBS_TABLE, models.ID_COLUMN, models.CLAIMED
COMPLETED = "DELETE"  # the default resolve destroys the job
# the stale-completion probe (harness.experiments.libraries.probe): its completion as the server logs it, and what
# its source says the probe should find
COMPLETION_LOGGED = "DELETE FROM claimrace.jobs WHERE id"
# the parameter of that statement naming the job it completes: its job id
COMPLETION_JOB = "$1"
HOLDS_BY_SESSION = True  # a frozen worker keeps its session and so its lock: the probe cuts the session instead
STALE_COMPLETION = {"expected": "not_sent",
                    "checks": "the job's id only (a DELETE by id, on a pooled connection, not the lock's), but a "
                              "lost locker connection ends the process first, so the stale completion is never sent",
                    "why": "the lock drops with the session and the job runs again; the old worker's process exits",
                    "source": "lib/que/job_methods.rb:19-23 and 166-174 (destroy); lib/que/locker.rb:183 "
                              f"(abort_on_exception), {AT}"}
# a hung worker still connected (the probe's --lost-by frozen): its lock lives in its locker's session, which it keeps
HUNG = {"expected": "not_handed_on",
        "checks": "the job's id only (a DELETE by id); what keeps the job from other workers is its lock, in its "
                  "locker's session, which a hung worker keeps",
        "why": "its session advisory lock holds the job for as long as its locker's session lives, hung or not",
        "source": f"lib/que/locker.rb:428 (pg_try_advisory_lock, a session lock), {AT}"}
# Behind a transaction pooler, read in its source and not run (the model's pooler row is its rewritten claim's):
# what the library does with its defaults, and what its source documents instead
POOLER_READ = {
    "defaults": "its locker holds session advisory locks (`lib/que/locker.rb:428`), `LISTEN`s, creates `pg_temp` "
                "functions (`lib/que/poller.rb:197-202`) and prepares its poll (`lib/que/connection.rb:84-92`): none of "
                "them lasts past a transaction under transaction pooling",
    "setting": "a direct connection for the locker (`--connection-url`, `docs/README.md:101`; `CHANGELOG.md:322` at "
               f"{TAG}); the workers' connections may go through PgBouncer"}
CONNECTIONS = models.CONNECTIONS  # the locker's, and the pool's
SETTINGS = {"concurrency": 1, "resolve": "destroy (the default)"}
RECOVERY = {"mechanism": "the job's session advisory lock drops when its locker's connection closes; the job runs "
                         "again at a locker's next poll",
            "setting": None, "default_s": None, "raced_s": None}
RESOLVE = f"DELETE FROM {JOBS} WHERE id = $1"
LOCKER_WAIT_S = 0.05  # the locker waits on its connection this long at a time (DEFAULT_WAIT_PERIOD, locker.rb)


def _claim(conn, me):
    job = models.one(conn, QUE_POLL)
    if job is not None and models.one(conn, QUE_VERIFY, job) is None:  # finished since the poll's snapshot
        conn.execute(QUE_UNLOCK_ALONE, (job,))
        return None
    return job


PROTOCOL = models.Protocol(
    claim=_claim, start=lambda conn, job, me: models.one(conn, QUE_EXISTS, job) is not None,
    complete=lambda conn, job, me: conn.execute(RESOLVE, (job,)),
    release=lambda conn, job, me: conn.execute(QUE_UNLOCK_ALONE, (job,)), complete_apart=True,
    watch_s=LOCKER_WAIT_S)

install, enqueue, work = models.install, models.enqueue, models.worker(PROTOCOL)
