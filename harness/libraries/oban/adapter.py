"""Oban (oban-bg/oban, Elixir), modelled for a fault run (harness.libraries.models), read at the commit
its library.py names.

Worker loop: the Basic engine's fetch_jobs (lib/oban/engines/basic.ex) sets the next available job 'executing'
with attempted_at (here started_at) now, in a transaction; its complete_job is an UPDATE by id alone, with no
check of the job's state or holder, retried without end on a database error (lib/oban/queue/executor.ex:89): a
worker that lost its job completes it whatever has become of it.

Recovery: Lifeline (lib/oban/plugins/lifeline.ex), once a minute on the leader: Basic.rescue_jobs makes jobs
'executing' with attempted_at older than rescue_after (60 minutes by default, lifeline.ex:70) available again, at
once (lib/oban/engines/basic.ex:181-201); an idle queue hears of them at the stager's next pass, which notifies the
queues that have available jobs (lib/oban/stager.ex:84-125; stage_interval 1 s by default, lib/oban/config.ex:46).
In the release read (its library.py's, the latest), Lifeline is off unless configured: Oban.Config's plugins
default to none (lib/oban/config.ex:41). On main, not yet released, `mix oban.install` (lib/mix/tasks/oban.install.ex:83) and the
installation guide (guides/introduction/installation.md:106) set `lifeline: [rescue_after: {2, :hours}]`.
"""

from __future__ import annotations

from harness.libraries import models
from harness.libraries.declaration import BEGIN, COMMIT, COMPLETE
from harness.libraries.oban.library import LIBRARY, OBAN_CLAIM

NAME = "oban"
CLAIM = "oban"
AT, TAG = LIBRARY.source.at, LIBRARY.source.tag  # the release read, as the citations say it
SOURCE = str(LIBRARY.source) + "; lib/oban/plugins/lifeline.ex (Lifeline)"
JOBS_SCHEMA, JOBS_TABLE, ID_COLUMN, CLAIMED = models.JOBS_SCHEMA, models.JOBS_TABLE, models.ID_COLUMN, models.CLAIMED
COMPLETED = "NEW.status = 'done'"  # every completion: Oban's is unguarded
# the stale-completion probe (harness.experiments.libraries.probe): its completion as the server logs it, and what
# its source says the probe should find
COMPLETION_LOGGED = "SET status = 'done'"
# the parameter of that statement naming the job it completes: its job id
COMPLETION_JOB = "$1"
STALE_COMPLETION = {"expected": "accepted",
                    "checks": "the job's id only; attempted_by, written at fetch, is not checked",
                    "why": "Lifeline (once configured) hands the job on; the completion checks nothing",
                    "source": f"lib/oban/engines/basic.ex:216-224 (complete_job), {AT}"}
# Behind a transaction pooler, read in its source and not run (the model's pooler row is its rewritten claim's):
# what the library's driver does with its defaults, and what its source documents instead
POOLER_READ = {
    "defaults": "Postgrex prepares named statements (`prepare: :named`, elixir-ecto/postgrex `lib/postgrex.ex:147-148` "
                "at v0.22.2), which PgBouncer before 1.21 in transaction mode breaks, and its Postgres notifier "
                f"`LISTEN`s (`lib/oban/notifiers/postgres.ex:8-9` at {TAG})",
    "setting": "`prepare: :unnamed` on the Repo (postgrex `lib/postgrex.ex:203-207`) and `Oban.Notifiers.PG` "
               f"(`guides/advanced/troubleshooting.md:65-79` at {TAG})"}
CONNECTIONS = models.CONNECTIONS
SETTINGS = {"concurrency": 1, "lifeline_interval_s": 1.0, "lifeline_interval_default_s": 60.0,
            "stage_interval_s": 1.0, "stage_interval_default_s": 1.0}
# Lifeline is off by default: no default recovery; its rescue_after once turned on is enabled_default_s
RECOVERY = {"mechanism": "Lifeline (off unless configured), on the leader, makes a job executing longer than "
                         "rescue_after available",
            "setting": "rescue_after", "default_s": None, "raced_s": 3.0, "off_by_default": True,
            "enabled_default_s": 3600.0,
            "then": "the stager's next pass (every second), which tells an idle queue of it",
            "then_s": SETTINGS["stage_interval_s"]}
RESCUE = models.rescue(RECOVERY["raced_s"])
stager = models.Ticks(SETTINGS["stage_interval_s"])


def _claim(conn, me):
    conn.execute(BEGIN)
    try:
        return models.one(conn, OBAN_CLAIM)
    finally:
        conn.execute(COMMIT)


def _maintain(conn, me):
    conn.execute(RESCUE)
    if stager.due():
        conn.execute(models.SCHEDULE)


PROTOCOL = models.Protocol(
    claim=_claim, complete=lambda conn, job, me: conn.execute(COMPLETE, (job,)),
    maintain=_maintain, maintain_s=SETTINGS["lifeline_interval_s"])

install, enqueue, work = models.install, models.enqueue, models.worker(PROTOCOL)
