"""Every job library, in one order: each declared once in its folder's library.py (harness.libraries.declaration),
and every list of libraries in the project read off LIBRARIES.

The order is the article's (colours, shapes and dashes go by position): the libraries this project does not run
first (read from their sources at a commit), then those raced with their own code too (read from the release
installed here). A new one goes after the last of its kind.
"""

from __future__ import annotations

from harness.libraries.chancy import library as chancy
from harness.libraries.good_job import library as good_job
from harness.libraries.graphile_worker import library as graphile_worker
from harness.libraries.oban import library as oban
from harness.libraries.pgboss import library as pgboss
from harness.libraries.pgmq import library as pgmq
from harness.libraries.pgqueuer import library as pgqueuer
from harness.libraries.procrastinate import library as procrastinate
from harness.libraries.que import library as que
from harness.libraries.river import library as river
from harness.libraries.solid_queue import library as solid_queue

LIBRARIES = tuple(module.LIBRARY for module in (
    river, oban, que, good_job, solid_queue,  # not run here (Go, Elixir, Ruby)
    procrastinate, pgqueuer, chancy, pgmq, pgboss, graphile_worker))  # raced with their own code too

SOURCES = {library.name: library.source for library in LIBRARIES}
DROPPED = {library.name: library.dropped for library in LIBRARIES}
LIBRARY_STATEMENTS = {library.name: library.statements for library in LIBRARIES if library.statements is not None}
LIBRARY_NAMES = {library.name: library.title for library in LIBRARIES}
# the libraries this project does not run (a model each, harness.libraries.models), and those also raced with their
# own workers (an adapter each); their protocols are raced beside the study's strategies on the same table
MODELLED_LIBRARY_STRATEGIES = tuple(library.name for library in LIBRARIES if not library.runs_here)
RACED_LIBRARY_STRATEGIES = tuple(library.name for library in LIBRARIES if library.runs_here)
LIBRARY_STRATEGIES = MODELLED_LIBRARY_STRATEGIES + RACED_LIBRARY_STRATEGIES
