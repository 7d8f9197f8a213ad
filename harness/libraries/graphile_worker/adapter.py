"""graphile-worker, raced with its own worker (https://github.com/graphile/worker, from npm at the release
its library.py names, run by Node).

Its claim is the get_job statement of src/sql/getJobs.ts: a CTE takes the next available job of the tasks this
worker knows `FOR UPDATE SKIP LOCKED` (and its named queue, if it has one, `FOR UPDATE SKIP LOCKED` too), and an
UPDATE sets locked_by and locked_at and counts the attempt; a finished job is deleted. The worker is runOnce at
concurrency 1 (its worker.cjs, beside this file): it takes jobs until none is left, then returns.

Recovery: a job locked for more than 4 hours is unlocked (src/sql/resetLockedAt.ts:24, run by a worker every 8 to
10 minutes, at random between minResetLockedInterval and maxResetLockedInterval: src/config.ts:33-34 and
src/main.ts:318-322 at the release's tag); the 4 hours are written into the statement, not a setting.
A worker stopped gracefully unlocks its own.
"""

from __future__ import annotations

from pathlib import Path

import psycopg

from harness.libraries import node
from harness.libraries.graphile_worker.library import LIBRARY

NAME = "graphile_worker"
RELEASE = LIBRARY.source.release  # the release raced and read, named once in its library.py
PACKAGE = "graphile-worker"
SOURCE = f"graphile/worker, src/sql/getJobs.ts (the get_job statement), release {RELEASE} from npm"
JOBS_SCHEMA = "graphile_worker"
JOBS_TABLE = "_private_jobs"
ID_COLUMN = "id"
CLAIM_LOGGED = "skip locked"  # what marks its claim among the statements the server logged
CLAIMED = "NEW.locked_by IS NOT NULL AND OLD.locked_by IS NULL"
COMPLETED = "DELETE"  # a finished job's row is deleted
# the stale-completion probe (harness.experiments.libraries.probe): its completion as the server logs it, and what
# its source says the probe should find
COMPLETION_LOGGED = "_private_jobs as jobs where id = $1::bigint"
# the parameter of that statement naming the job it completes: its job id (the single-job path; a batch completes an
# array in batchCompleteJobs)
COMPLETION_JOB = "$1"
STALE_COMPLETION = {"expected": "not_handed_on",
                    "checks": "the job's id only (a DELETE by id; locked_by is not checked)",
                    "why": "a job's lock lasts 4 hours, written in its statements",
                    "source": "graphile-worker/dist/sql/completeJobs.js:36-42 (batchCompleteJobs), "
                              f"release {RELEASE} as installed"}
SCRIPT = Path(__file__).with_name("worker.cjs")  # its Node script, beside this file
SETTINGS = {"concurrency": 1, "mode": "runOnce", "prepared_statements": True}
# its runner option for PgBouncer's transaction mode (dist/interfaces.d.ts, SharedOptions.noPreparedStatements);
# the worker script sets it where the environment says "documented"
POOLER_SETTING = {"setting": "noPreparedStatements: true", "source": f"graphile-worker {RELEASE}, dist/interfaces.d.ts "
                  "(noPreparedStatements), its docs' PgBouncer note"}
# a fault run keeps polling (run, not runOnce); nothing shortens the 4 hours
RECOVERY = {"mechanism": "stale locks: a job locked for 4 hours is unlocked", "setting": "4 hours, in the statement",
            "default_s": 4 * 3600.0, "raced_s": 4 * 3600.0}


# What its docs give for a worker that will not come back: forceUnlockWorkers with its id, which unlocks its jobs at
# once (dist/interfaces.d.ts:190-195 in the release raced: "Only use this if the workers in question are no longer running").
# The probe's production setting declares the frozen worker dead as soon as it is frozen (declare_dead): a worker
# declared dead in error, or one that hangs and comes back, then meets its job run by another; its completion checks
# the id alone, so its source says accepted.
PRODUCTION = {"setting": "forceUnlockWorkers on a worker declared dead (here: as soon as it is frozen)",
              "source": "graphile-worker/dist/interfaces.d.ts:190-195 (WorkerUtils.forceUnlockWorkers), release "
                        f"{RELEASE} as installed",
              # the fault-run worker's poll (worker.cjs), and its default (dist/config.js:18-19 as installed)
              "raced": {"declared_dead_after_s": 0.0, "poll_interval_s": 0.1},
              "defaults": {"declared_dead_after_s": None, "poll_interval_s": 2.0},
              # the unlock at once, then the other worker's next poll; without the call, its 4 hours. Once the user
              # has declared the worker dead, its default poll (dist/config.js:18-19 as installed)
              "recovery": {"raced_s": 1.0, "default_s": RECOVERY["default_s"], "after_declared_dead_s": 2.0},
              "stale_completion": STALE_COMPLETION | {
                  "expected": "accepted", "why": "its completion deletes the job by id, whoever holds it now"}}


def declare_dead(url: str, job: int) -> None:
    """Unlock the jobs of the worker that holds job, with the library's own forceUnlockWorkers."""
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        holder = conn.execute(f"SELECT locked_by FROM {JOBS_SCHEMA}.{JOBS_TABLE} WHERE id = %s", (job,)).fetchone()
    if holder and holder[0]:
        node.run(SCRIPT, "unlock", url, holder[0])


INSTALL_HINT = node.INSTALL_HINT
installed_version, install, enqueue, enqueuer, work = node.commands(PACKAGE, SCRIPT)
