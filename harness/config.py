"""Every path and default in one place."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("CLAIMRACE_DATA_DIR", PROJECT_ROOT / "data"))
REPORT_DIR = PROJECT_ROOT / "report"
NOTEBOOK_DIR = PROJECT_ROOT / "notebooks"
PARAMS_FILE = NOTEBOOK_DIR / "params" / "report.yml"  # the sweeps `make report` runs, declared as data

# The harness owns this schema and nothing else in the database it is pointed at.
SCHEMA = "claimrace"
SCHEMA_MARKER = "owned by the claimrace harness; it drops and recreates the objects it created here"

DEFAULT_JOB_COUNT = 10_000
DEFAULT_WORKER_COUNTS = (1, 2, 4, 8, 16, 32, 64, 100)
DEFAULT_PG_VERSION = 16
SUPPORTED_PG_VERSIONS = (16, 18)

# Connections the harness itself holds besides the workers (control + a spare).
HARNESS_CONNECTIONS = 2
# The embedded server gets at least this many connection slots.
EMBEDDED_MIN_MAX_CONNECTIONS = 200

# Bounded waits, so a broken run fails instead of hanging.
BARRIER_TIMEOUT_SECONDS = 60.0
WORKER_EXIT_GRACE_SECONDS = 5.0
