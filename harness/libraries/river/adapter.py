"""River (riverqueue/river, Go), modelled for a fault run (harness.libraries.models), read at the commit
its library.py names.

Worker loop: the claim is JobGetAvailable (riverdriver/riverpgxv5/internal/dbsqlc/river_job.sql): one statement
sets the next available job running with attempted_at (here started_at) now; the completion is
JobSetStateIfRunningMany (the same file), which changes a job only while it is 'running', with no check of the
attempt or of the client that holds it: a worker that lost its job completes it if another worker now runs it.

Recovery: the job rescuer (internal/maintenance/job_rescuer.go), every 30 s (JobRescuerIntervalDefault, line 31,
not a setting), on the elected leader: JobGetStuck finds jobs 'running' with attempted_at older than
RescueStuckJobsAfter (1 hour by default; at least JobTimeout, 1 minute by default), and JobRescueMany makes them
'retryable', scheduled at the retry policy's next time (job_rescuer.go:275-277): attempt^4 s with +/- 10 % jitter,
1 s for a first failure (internal/retrypolicy/default.go:31-40, 49-76). The scheduler (JobSchedule, every 5 s:
JobSchedulerIntervalDefault, internal/maintenance/job_scheduler.go:26) then makes them available. All at
the release its library.py names.

Left out here: the leader (every worker runs the rescuer, each second as raced; the scheduler's pass is one per 5 s
of the clock, on whichever worker comes first, as one leader's would be), the fetch poll (a worker polls every
IDLE_POLL_S rather than River's FetchPollInterval of 1 s or a notification), and attempts' counts and errors.
"""

from __future__ import annotations

from harness.libraries import models, settings
from harness.libraries.declaration import GUARDED_COMPLETE
from harness.libraries.river.library import LIBRARY, RIVER_CLAIM

NAME = "river"
CLAIM = "river"
AT, TAG = LIBRARY.source.at, LIBRARY.source.tag  # the release read, as the citations say it
SOURCE = str(LIBRARY.source) + " (the claim); internal/maintenance/job_rescuer.go (the rescuer)"
JOBS_SCHEMA, JOBS_TABLE, ID_COLUMN, CLAIMED = models.JOBS_SCHEMA, models.JOBS_TABLE, models.ID_COLUMN, models.CLAIMED
COMPLETED = "NEW.status = 'done'"  # every completion the guard let through
# the stale-completion probe (harness.experiments.libraries.probe): its completion as the server logs it, and what
# its source says the probe should find
COMPLETION_LOGGED = "SET status = 'done'"
# the parameter of that statement naming the job it completes: its job id
COMPLETION_JOB = "$1"
STALE_COMPLETION = {"expected": "accepted",
                    "checks": "the job's id and state = 'running'; not attempt, not attempted_by",
                    "why": "the rescuer hands the job on; the completion does not check who holds it",
                    "source": "riverdriver/riverpgxv5/internal/dbsqlc/river_job.sql:620-699 "
                              f"(JobSetStateIfRunningMany; its guard at 684-685), {AT}"}
# Behind a transaction pooler, read in its source and not run (the model's pooler row is its rewritten claim's):
# what the library's driver does with its defaults, and what its source documents instead
POOLER_READ = {
    "defaults": "pgx prepares and caches named statements (`QueryExecModeCacheStatement`, jackc/pgx `conn.go:191` at "
                f"v5.10.0, the version {TAG} requires), which PgBouncer before 1.21 in transaction mode breaks, and "
                "its work coordinator keeps a connection to `LISTEN` on "
                "(`riverdriver/riverpgxv5/river_pgx_v5_driver.go:1120-1129`)",
    "setting": "`default_query_exec_mode=simple_protocol` (the mode its driver tests run for PgBouncer, "
               f"`riverdriver/riverdrivertest/driver_test.go:104-108`) with `PollOnly` (`client.go:320-321`), at {TAG}"}
CONNECTIONS = models.CONNECTIONS
SETTINGS = {"concurrency": 1, "completions": "at once (River batches them)", "rescuer_interval_s": 1.0,
            "rescuer_interval_default_s": 30.0, "first_retry_s": 1.0, "scheduler_interval_s": 5.0,
            "scheduler_interval_default_s": 5.0}
RETRY_JITTER = 0.1  # the retry policy's +/- 10 %
RECOVERY = {"mechanism": "the rescuer, on the leader, makes a job running longer than RescueStuckJobsAfter retryable",
            "setting": "RescueStuckJobsAfter", "default_s": 3600.0, "raced_s": 3.0,
            "then": "its first retry's backoff (1 s, +/- 10 %), then the scheduler's next pass (every 5 s)",
            "then_s": SETTINGS["first_retry_s"] * (1 + RETRY_JITTER) + SETTINGS["scheduler_interval_s"]}
# As River's client accepts it. The default row's 3 s RescueStuckJobsAfter, checked every second, cannot be set in
# River: NewClient applies the defaults (JobTimeout 1 minute) before it validates, and RescueStuckJobsAfter may not
# be less than JobTimeout (client.go:524, 590-592, 816-820), and the rescuer's interval is a constant, not a setting
# (internal/maintenance/job_rescuer.go:31, 128). A job is rescued only once its JobTimeout has passed too (:357-358;
# JobTimeout -1 never). So production races JobTimeout 2 s (above the probe's and a fault run's 1 s jobs) and
# RescueStuckJobsAfter 3 s, the least pair it accepts, with the rescuer's pass every 30 s. All at the release read.
_RACED = {"JobTimeout_s": 2.0, "RescueStuckJobsAfter_s": 3.0, "rescuer_interval_s": 30.0}
_DEFAULTS = {"JobTimeout_s": 60.0, "RescueStuckJobsAfter_s": 3600.0, "rescuer_interval_s": 30.0}
_THEN_S = RECOVERY["then_s"]  # the first retry's backoff and the scheduler's pass, as in the default row


def _within_s(values: dict) -> float:
    """The most a dead worker's job waits: rescuable after the later of its two settings, found at the rescuer's
    next pass, then its backoff and the scheduler's pass."""
    return max(values["JobTimeout_s"], values["RescueStuckJobsAfter_s"]) + values["rescuer_interval_s"] + _THEN_S


PRODUCTION = {"setting": "JobTimeout 2 s and RescueStuckJobsAfter 3 s, the least pair its client accepts above a "
                         "1 s job; the rescuer's pass every 30 s, which is not a setting",
              "source": "client.go:524, 590-592, 816-820 and internal/maintenance/job_rescuer.go:31, 128, 357-358 "
                        f"at {AT}",
              "raced": _RACED, "defaults": _DEFAULTS,
              # at its defaults the same hour as it comes; a user sets the pair, no lower than the least it accepts
              "recovery": {"raced_s": _within_s(_RACED), "default_s": _within_s(_DEFAULTS), "least_s": _within_s(_RACED)},
              "stale_completion": STALE_COMPLETION}
RESCUE = models.rescue(RECOVERY["raced_s"], SETTINGS["first_retry_s"])
PRODUCTION_RESCUE = models.rescue(max(_RACED["JobTimeout_s"], _RACED["RescueStuckJobsAfter_s"]),
                                  SETTINGS["first_retry_s"])
scheduler = models.Ticks(SETTINGS["scheduler_interval_s"])
rescuer = models.Ticks(_RACED["rescuer_interval_s"])  # production's: one pass per 30 s of the clock


def _maintain(conn, me):
    if settings.configuration() == "production":
        if rescuer.due():
            conn.execute(PRODUCTION_RESCUE)
    else:
        conn.execute(RESCUE)
    if scheduler.due():
        conn.execute(models.SCHEDULE)


PROTOCOL = models.Protocol(
    claim=lambda conn, me: models.one(conn, RIVER_CLAIM),
    complete=lambda conn, job, me: conn.execute(GUARDED_COMPLETE, (job,)),
    maintain=_maintain, maintain_s=SETTINGS["rescuer_interval_s"])

install, enqueue, work = models.install, models.enqueue, models.worker(PROTOCOL)
