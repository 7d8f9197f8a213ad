"""Solid Queue (rails/solid_queue, Ruby), modelled for a fault run (harness.libraries.models), read at the commit
its library.py names.

Worker loop: each worker registers a process row and touches its heartbeat every process_heartbeat_interval (60 s
by default, lib/solid_queue.rb; lib/solid_queue/processes/registrable.rb). Its claim (app/models/solid_queue/
ready_execution.rb) takes the next ready job FOR UPDATE SKIP LOCKED and records it claimed by its process, in one
transaction; here the claimed execution is the job's held_by. Its completion (app/models/solid_queue/
claimed_execution.rb, finalize) re-reads and locks its claimed execution in a transaction and does nothing where
it is gone: a worker that lost its job cannot complete it.

Recovery: the supervisor's maintenance (lib/solid_queue/supervisor/maintenance.rb), every
process_alive_threshold (5 minutes by default; here in every worker, as every model's recovery loop), prunes each
process silent for that long (app/models/solid_queue/
process/prunable.rb) and fails its claimed jobs with ProcessPrunedError: they wait in the failed jobs for someone
to retry them; nothing runs them again. (A forked worker that exits is noticed sooner, within a second, by the
supervisor's waitpid, and its claimed jobs failed the same way, with ProcessExitError; the model's pruning stands
for both.) A worker whose heartbeat finds its process row gone shuts down (registrable.rb, runnable.rb).
"""

from __future__ import annotations

import time

from harness.libraries import models
from harness.libraries.declaration import BEGIN, COMMIT, JOBS
from harness.libraries.solid_queue.library import LIBRARY, SOLID_QUEUE_PICK, SOLID_QUEUE_RESELECT

NAME = "solid_queue"
CLAIM = "solid_queue"
AT, TAG = LIBRARY.source.at, LIBRARY.source.tag  # the release read, as the citations say it
SOURCE = (str(LIBRARY.source) + "; lib/solid_queue/supervisor/maintenance.rb and "
          "app/models/solid_queue/process/prunable.rb (pruning)")
JOBS_SCHEMA, JOBS_TABLE, ID_COLUMN, CLAIMED = models.JOBS_SCHEMA, models.JOBS_TABLE, models.ID_COLUMN, models.CLAIMED
COMPLETED = "NEW.status = 'done'"  # every completion the claimed execution's guard let through
FAILED = "t.status = 'failed'"  # its failed executions: a pruned worker's claimed jobs, waiting for someone to retry them
# the stale-completion probe (harness.experiments.libraries.probe): its completion as the server logs it, and what
# its source says the probe should find
COMPLETION_LOGGED = "held_by = $2 AND status = 'running' FOR UPDATE"
# the parameter of that statement naming the job it completes: its job id
COMPLETION_JOB = "$1"
STALE_COMPLETION = {"expected": "not_handed_on",
                    "checks": "its claimed execution, locked by id; gone, the job is not finished",
                    "why": "a dead worker's claimed jobs are failed, not run again",
                    "source": "app/models/solid_queue/claimed_execution.rb:104-124 (finalize, "
                              "unless_already_finalized) and 39-53 (fail_all_with); "
                              f"app/models/solid_queue/process/prunable.rb:24-29, {AT}"}
# the release before the guard, read in its source and not modelled (harness.libraries.releases: a model is written
# from one release): 1.4.0's completion (finished) finishes the job and destroys its claimed execution in a plain
# transaction, without looking for it first; the guard (finalize, unless_already_finalized) is first tagged in the release read
EARLIER_RELEASES = {"1.4.0": {"expected": None, "read_only": True,
                              "checks": "nothing: it finishes the job and destroys its claimed execution without "
                                        "looking for it",
                              "why": "a job a user retries after its worker was pruned could be finished by the "
                                     "pruned worker",
                              "source": "app/models/solid_queue/claimed_execution.rb:110-115 (finished), v1.4.0 "
                                        "(176721e)"}}
# Behind a transaction pooler, read in its source and not run (the model's pooler row is its rewritten claim's):
# what the library's driver does with its defaults, and what would avoid it
POOLER_READ = {
    "defaults": "it keeps no session state (no advisory locks, no `LISTEN`: it polls), and its claim is one "
                f"transaction (`app/models/solid_queue/ready_execution.rb:26-34` at {TAG}), but ActiveRecord prepares "
                "its statements by default (rails/rails `activerecord/lib/active_record/connection_adapters/"
                "abstract_adapter.rb:1230-1231` at v8.0.5), which "
                "PgBouncer before 1.21 in transaction mode breaks",
    "setting": "ActiveRecord's `prepared_statements: false` for the queue's database; its README says nothing of "
               "poolers"}
CONNECTIONS = models.CONNECTIONS
# shortened in the library's own ratio or wider: a heartbeat every tenth of the threshold (a fifth by default), so a
# server restart's few seconds do not make healthy workers look silent
SETTINGS = {"concurrency": 1, "process_heartbeat_interval_s": 0.5, "process_heartbeat_interval_default_s": 60.0,
            "prune_every": "process_alive_threshold, as the supervisor's maintenance"}
RECOVERY = {"mechanism": "pruning fails the claimed jobs of a process silent for process_alive_threshold; "
                         "nothing runs them again",
            "setting": "process_alive_threshold", "default_s": 300.0, "raced_s": 5.0}
REGISTER = f"INSERT INTO {models.JOBS_SCHEMA}.processes (pid) VALUES (pg_backend_pid()) RETURNING id"
CLAIM_BY = f"UPDATE {JOBS} SET status = 'running', started_at = now(), held_by = $2 WHERE id = $1"
FINALIZE_LOCK = f"SELECT id FROM {JOBS} WHERE id = $1 AND held_by = $2 AND status = 'running' FOR UPDATE"
FINISHED = f"UPDATE {JOBS} SET status = 'done', held_by = NULL WHERE id = $1"
HEARTBEAT = f"UPDATE {models.JOBS_SCHEMA}.processes SET last_heartbeat_at = now() WHERE id = $1 RETURNING id"
PRUNE = (f"WITH silent AS (SELECT id FROM {models.JOBS_SCHEMA}.processes WHERE last_heartbeat_at <= now() - "
         f"make_interval(secs => {RECOVERY['raced_s']}) AND id <> $1 FOR UPDATE SKIP LOCKED), "
         f"pruned AS (DELETE FROM {models.JOBS_SCHEMA}.processes p USING silent WHERE p.id = silent.id RETURNING p.id) "
         f"UPDATE {JOBS} SET status = 'failed', held_by = NULL WHERE status = 'running' "
         "AND held_by IN (SELECT id FROM pruned)")


def _claim(conn, me):
    conn.execute(BEGIN)
    try:
        job = models.one(conn, SOLID_QUEUE_PICK)
        if job is not None:
            conn.execute(CLAIM_BY, (job, me))
            models.one(conn, SOLID_QUEUE_RESELECT, job)
        return job
    finally:
        conn.execute(COMMIT)


def _complete(conn, job, me) -> None:
    conn.execute(BEGIN)
    try:
        if models.one(conn, FINALIZE_LOCK, job, me) is not None:  # its claimed execution is still there
            conn.execute(FINISHED, (job,))
    finally:
        conn.execute(COMMIT)


_pruned_at = [0.0]  # when this worker's maintenance last pruned (monotonic), once per threshold


def _maintain(conn, me) -> bool:
    if models.one(conn, HEARTBEAT, me) is None:  # pruned: shut down
        return False
    if time.monotonic() - _pruned_at[0] >= RECOVERY["raced_s"]:
        conn.execute(PRUNE, (me,))
        _pruned_at[0] = time.monotonic()
    return True


PROTOCOL = models.Protocol(
    register=lambda conn: models.one(conn, REGISTER), claim=_claim, complete=_complete, maintain=_maintain,
    maintain_s=SETTINGS["process_heartbeat_interval_s"])

install, enqueue, work = models.install, models.enqueue, models.worker(PROTOCOL)
