"""What the job libraries' sections share of their runs: the jobs each run queued. Not a section: sections
import it, and it imports no section."""

from __future__ import annotations

import pandas as pd

from harness import libraries
from harness.article.formats import count
from harness.article.prose import join
from harness.article.wording import Sentences

SENTENCES = "library_runs"  # its sentences' file
say = Sentences(SENTENCES)


def jobs_per_run(summary: pd.DataFrame) -> tuple[str, str]:
    """The jobs queued per run: the sweep's count, and ' (a library: its own)' where one raced fewer (JOB_CAP)."""
    per_library = summary.groupby("library", sort=False)["jobs"].max()
    most = int(per_library.max())
    fewer = [say("fewer_jobs", library=name, jobs=count(int(jobs))) if libraries.get(name).JOB_CAP is not None
             else say("fewer_jobs.asked", library=name, jobs=count(int(jobs)))
             for name, jobs in per_library.items() if jobs < most]
    return count(most), (f" ({join(fewer)})" if fewer else "")
