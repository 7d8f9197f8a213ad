"""Oban (Elixir), modelled from its source: its declaration and its claim protocol (harness.libraries.declaration)."""

from __future__ import annotations

from harness.libraries.declaration import (BEGIN, CLAIM, COMMIT, COMPLETE, PLAIN, SKIP_LOCKED_CLAIM, Library, Protocol,
                                           Source)

# oban-bg/oban, lib/oban/engines/basic.ex (fetch_jobs): a transaction around one UPDATE that takes its rows from a
# CTE "subset" (LIMIT demand, FOR UPDATE SKIP LOCKED; the CTE fences the LIMIT from the planner), setting state
# 'executing'; BEGIN and COMMIT are round trips of their own. Completion (complete_job) is one autocommit UPDATE by
# id per job, with no check of the job's state (lines 94-130 and 216-224 at the latest release).
OBAN_CLAIM = SKIP_LOCKED_CLAIM

LIBRARY = Library(
    "oban", "Oban (Elixir)",
    Source("oban-bg/oban", ("lib/oban/engines/basic.ex",), "f86cc924cb8f1b60c8ed499a9135f715fc921ef7",
           "v2.23.1"),  # the Basic engine's fetch_jobs and complete_job
    "attempt, attempted_by and the wide row it returns; Oban retries a failed transaction itself", False,
    Protocol("Oban's fetch and completion",
             "BEGIN, the SKIP LOCKED CTE UPDATE, COMMIT; then the job's completion, an UPDATE by id.",
             (("begin", PLAIN), ("claim", CLAIM), ("commit", PLAIN), ("complete", PLAIN)),
             {"begin": BEGIN, "claim": OBAN_CLAIM, "commit": COMMIT, "complete": COMPLETE},
             "the claim in one READ COMMITTED transaction (BEGIN, UPDATE, COMMIT), the completion in autocommit"),
    statements=4)
