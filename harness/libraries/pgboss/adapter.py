"""pg-boss, raced with its own worker (https://github.com/timgit/pg-boss, from npm at the release its library.py
names, run by Node; npm resolves 10.x on Node 20).

Its claim is fetchNextJob in src/plans.js: a CTE takes the next jobs of the queue whose state is before 'active'
`FOR UPDATE SKIP LOCKED`, and an UPDATE sets them 'active'; complete() (completeJobs) sets a job 'completed' if
its state is still 'active', and checks nothing more: not which worker holds it, so a worker that lost the job
completes it while another runs it (src/plans.js:543-557 as installed).
Jobs live in a partition of pgboss.job per queue. The worker is boss.work() with batchSize 1
(its worker.cjs, beside this file): its loop fetches, runs the job, completes it, then waits out the rest of
the polling interval before it fetches again, whether or not it found a job. It never stops on an empty queue:
the harness stops it (SIGTERM, and pg-boss's graceful stop) once every job has run.

Recovery: a job active for longer than its expireIn (15 minutes by default) is failed by the maintenance (every
maintenanceIntervalSeconds, 120 s by default, in a process started with supervise), and retried while it has
retries left (retryLimit, 2 by default).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from harness.libraries import node
from harness.libraries.pgboss.library import LIBRARY

NAME = "pgboss"
RELEASE = LIBRARY.source.release  # the release raced and read, named once in its library.py
PACKAGE = "pg-boss"
SOURCE = (f"timgit/pg-boss, src/plans.js (fetchNextJob, completeJobs) and src/worker.js (the loop), release {RELEASE} "
          "from npm")
QUEUE = "claimrace"
JOBS_SCHEMA = "pgboss"
JOBS_TABLE = "job"  # partitioned by queue: the audit trigger on it is cloned to each queue's partition
STATS_TABLE = "j" + hashlib.sha224(QUEUE.encode()).hexdigest()  # the queue's partition (plans.js, create_queue)
ID_COLUMN = "id"  # a uuid: the audit and the workers' logs use the job's data.n instead
AUDIT_ID_SQL = "(NEW.data->>'n')::bigint"
CLAIM_LOGGED = "FOR UPDATE SKIP LOCKED"  # what marks its claim among the statements the server logged
CLAIMED = "NEW.state = 'active' AND OLD.state IS DISTINCT FROM 'active'"
COMPLETED = "NEW.state = 'completed' AND OLD.state IS DISTINCT FROM 'completed'"
# the stale-completion probe (harness.experiments.libraries.probe): its completion as the server logs it, and what
# its source says the probe should find
COMPLETION_LOGGED = "completed_on = now(), state = 'completed'"
# the parameter of that statement naming the job it completes: an array of job uuids (cancelJobs sets completed_on
# too, with state 'cancelled')
COMPLETION_JOB = "$2"
STALE_COMPLETION = {"expected": "accepted",
                    "checks": "the job's id and state = 'active': any worker's active job",
                    "why": "expiry retries the job; the completion does not check who holds it",
                    "source": f"pg-boss/src/plans.js:543-556 (completeJobs), release {RELEASE} as installed"}
STOPS_ON_ITS_OWN = False
# pg-boss documents nothing for poolers (its README says nothing of PgBouncer or prepared statements) and needs
# nothing: its Db.executeSql is node-postgres's pool.query(text, values) without a name (src/db.js), an unnamed
# statement, which a transaction pooler carries
POOLER_SETTING = None
SCRIPT = Path(__file__).with_name("worker.cjs")  # its Node script, beside this file
POLL_S = 0.5  # the least pg-boss allows (attorney.js, MIN_POLLING_INTERVAL_MS)
# its worker runs about two jobs a second at that interval: a sweep queues at most this many jobs for it
JOB_CAP = 40
SETTINGS = {"batch_size": 1, "polling_interval_s": POLL_S, "polling_interval_default_s": 2.0, "supervise": False,
            "schedule": False}
# a fault run: each job expires after expireInSeconds, and every worker supervises, its maintenance every second
RECOVERY = {"mechanism": "expiry: the maintenance fails an active job past its expireIn, and it is retried",
            "setting": "expireInSeconds + maintenanceIntervalSeconds", "default_s": 900.0 + 120.0,
            "raced_s": 3.0 + 1.0, "raced": {"expire_in_s": 3, "maintenance_interval_s": 1, "supervise": True},
            "defaults": {"expire_in_s": 900, "maintenance_interval_s": 120, "supervise": True}}


INSTALL_HINT = node.INSTALL_HINT
installed_version, install, enqueue, enqueuer, work = node.commands(
    PACKAGE, SCRIPT, str(POLL_S),
    fault_work_args=lambda job_s: (str(RECOVERY["raced"]["maintenance_interval_s"]),),
    fault_enqueue_args=lambda job_s: (str(RECOVERY["raced"]["expire_in_s"]),))
