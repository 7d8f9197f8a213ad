"""River (Go), modelled from its source: its declaration and its claim protocol (harness.libraries.declaration)."""

from __future__ import annotations

from harness.libraries.declaration import CLAIM, SKIP_LOCKED_CLAIM, Library, Protocol, Source

# riverqueue/river, riverdriver/riverpgxv5/internal/dbsqlc/river_job.sql (JobGetAvailable, lines 200-216 at its latest
# release; the unreleased main read before, fdf6cdf, does not change the file): one statement per fetch, no explicit
# transaction; a CTE locks up to "free slots" available jobs FOR UPDATE SKIP LOCKED, in (priority, scheduled_at, id)
# order, and the UPDATE sets them running (attempt + 1, attempted_at, attempted_by). Completions are held by the
# client and written in batches (every 250 ms, or at 100 waiting), so they add a small fraction of a statement per
# job: the model leaves them out. Its fault model's completion (GUARDED_COMPLETE) stands for JobSetStateIfRunningMany,
# which checks `state = 'running'` alone (river_job.sql:620-660).
RIVER_CLAIM = SKIP_LOCKED_CLAIM

LIBRARY = Library(
    "river", "River (Go)",
    Source("riverqueue/river", ("riverdriver/riverpgxv5/internal/dbsqlc/river_job.sql",),
           "60435dc2c58e3d3dfbde6a00f08bc98a3f13c37e", "v0.43.0"),  # its JobGetAvailable query
    "the batched completions; attempt, attempted_by and the wide row it returns", False,
    Protocol("River's fetch",
             "One statement: a CTE locks the next available job FOR UPDATE SKIP LOCKED, the UPDATE sets it running.",
             (("claim", CLAIM),), {"claim": RIVER_CLAIM}),
    statements=1)
