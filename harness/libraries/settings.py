"""How a library's worker process is told how to run its library: as it comes, or as its own docs set it for
production; with its defaults behind a pooler, or with what it documents for one. The harness sets each in the
worker's environment (harness.experiments.library_runtime.worker_process); the adapter reads it."""

from __future__ import annotations

import os

# a drain through PgBouncer with each library's defaults, or with what it documents for a transaction pooler
POOLER_SETTINGS = ("default", "documented")
POOLER_SETTING_ENV = "CLAIMRACE_POOLER_SETTING"  # and the Node process the worker starts reads it too

# a library as it comes, or as its own docs set it for production (PRODUCTION), where they set more than its defaults
CONFIGURATIONS = ("default", "production")
CONFIGURATION_ENV = "CLAIMRACE_CONFIGURATION"


# the recovery setting a run races where it is not the library's RECOVERY raced_s (a stall run's: its STALL's)
RECOVERY_ENV = "CLAIMRACE_RECOVERY_S"


def recovery_s(raced: float) -> float:
    """The recovery setting this worker is to run with, in seconds: the run's, else the library's raced one."""
    return float(os.environ.get(RECOVERY_ENV) or raced)


def configuration() -> str:
    """"production" where this worker is to run as its library's PRODUCTION says, else "default"."""
    return os.environ.get(CONFIGURATION_ENV, "default")


def pooler_setting() -> str:
    """"documented" where this worker is to apply its library's POOLER_SETTING, else "default"."""
    return os.environ.get(POOLER_SETTING_ENV, "default")
