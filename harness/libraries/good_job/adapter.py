"""good_job (bensheldon/good_job, Ruby), modelled for a fault run (harness.libraries.models), read at the commit
its library.py names.

Worker loop, with its default lock strategy, advisory (lib/good_job/configuration.rb): the candidates are every
unfinished job (finished_at IS NULL, app/models/good_job/job.rb), started or not, and a worker keeps the first
whose session advisory lock it gets (app/models/concerns/good_job/advisory_lockable.rb), on the connection its job's
statements use; it re-reads the job, records its start (performed_at), runs it, records its finish (finished_at,
an UPDATE by id guarded by nothing) and unlocks it.

Recovery: the session's end. A started job whose worker's session ends is a candidate again at once, as it never
left (good_job records an InterruptedError on the earlier execution and runs it again); one whose process is paused
stays locked. Its process records and their cleanup only inform the other lock strategies.

A worker whose session was lost mid-job: the model sends its finish again on a new connection (as every model's
statements are, harness.libraries.models), so the job another worker runs since is completed twice. good_job does
so only where ActiveRecord reconnects inside the finish, as Rails 7.1 and later do (rails/rails#44591, read from
its notes, not its source); on an earlier Rails the finish fails and only the new holder completes the job.
"""

from __future__ import annotations

from harness.libraries import models
from harness.libraries.declaration import BEGIN, COMMIT, COMPLETE
from harness.libraries.good_job.library import LIBRARY, GOOD_JOB_PICK, GOOD_JOB_RELOAD, GOOD_JOB_START, GOOD_JOB_UNLOCK

NAME = "good_job"
CLAIM = "good_job"
AT, TAG = LIBRARY.source.at, LIBRARY.source.tag  # the release read, as the citations say it
SOURCE = str(LIBRARY.source) + "; lib/good_job/configuration.rb (the lock strategy)"
JOBS_SCHEMA, JOBS_TABLE, ID_COLUMN, CLAIMED = models.JOBS_SCHEMA, models.JOBS_TABLE, models.ID_COLUMN, models.CLAIMED
COMPLETED = "NEW.status = 'done'"  # every finish: good_job's is unguarded
# the stale-completion probe (harness.experiments.libraries.probe): its completion as the server logs it, and what
# its source says the probe should find
COMPLETION_LOGGED = "SET status = 'done'"
# the parameter of that statement naming the job it completes: its job id
COMPLETION_JOB = "$1"
HOLDS_BY_SESSION = True  # a frozen worker keeps its session and so its lock: the probe cuts the session instead
STALE_COMPLETION = {"expected": "accepted",
                    "checks": "the job's id only (save! of finished_at; neither locked_by_id nor the advisory lock "
                              "is checked); sent on a new connection where ActiveRecord reconnects inside it (Rails "
                              "7.1 and later, read in Rails' notes, not its source)",
                    "why": "the lock drops with the session and the job runs again; the old worker finishes it too",
                    "source": f"app/models/good_job/job.rb:861-901 (perform), {AT}"}
# a hung worker still connected (the probe's --lost-by frozen): with its default lock strategy, advisory, its lock
# lives in its session, which it keeps
HUNG = {"expected": "not_handed_on",
        "checks": "the job's id only; what keeps the job from other workers is its advisory lock, in its session, "
                  "which a hung worker keeps",
        "why": "its session advisory lock holds the job for as long as its session lives, hung or not",
        "source": "app/models/concerns/good_job/advisory_lockable.rb:217 (pg_try_advisory_lock, a session lock); "
                  "app/models/good_job/job.rb:385-399 (perform_with_advisory_lock); lib/good_job/configuration.rb:"
                  f"397-403 (lock_strategy, advisory by default), {AT}"}
# Behind a transaction pooler, read in its source and not run (the model's pooler row is its rewritten claim's):
# what the library does with its defaults, and what its source documents instead
POOLER_READ = {
    "defaults": "it claims with session advisory locks (`lock_strategy` `:advisory`, "
                "`lib/good_job/configuration.rb:401-402`) and `LISTEN`s; its README says it is not compatible with "
                f"transaction mode (`README.md:1570` at {TAG})",
    "setting": "`lock_strategy = :skiplocked` with `LISTEN`/`NOTIFY` and the lock heartbeat off (`README.md:1527-1566` "
               f"at {TAG}), and on PgBouncer before 1.21 ActiveRecord's `prepared_statements: false` (true by "
               "default: rails/rails `activerecord/lib/active_record/connection_adapters/abstract_adapter.rb:"
               "1230-1231` at v8.0.5), which that README does not "
               "name"}
CONNECTIONS = models.CONNECTIONS
SETTINGS = {"concurrency": 1, "lock_strategy": "advisory (the default)"}
RECOVERY = {"mechanism": "the job's session advisory lock drops when its worker's connection closes; the job runs "
                         "again at a worker's next poll",
            "setting": None, "default_s": None, "raced_s": None}
# good_job's candidates are every unfinished job; the race's pick narrows them to the pending ones
PICK = GOOD_JOB_PICK.replace("status = 'pending'", "status <> 'done'")
assert "status <> 'done'" in PICK, "the race's good_job pick no longer names its pending jobs as written here"


def _start(conn, job, me) -> bool:
    if models.one(conn, GOOD_JOB_RELOAD, job) is None:  # finished since the candidates' snapshot
        return False
    conn.execute(BEGIN)
    conn.execute(GOOD_JOB_START, (job,))
    conn.execute(COMMIT)
    return True


def _finish(conn, job, me) -> None:
    conn.execute(BEGIN)
    conn.execute(COMPLETE, (job,))
    conn.execute(COMMIT)


PROTOCOL = models.Protocol(
    claim=lambda conn, me: models.one(conn, PICK), start=_start, complete=_finish,
    release=lambda conn, job, me: conn.execute(GOOD_JOB_UNLOCK, (job,)))

install, enqueue, work = models.install, models.enqueue, models.worker(PROTOCOL)
