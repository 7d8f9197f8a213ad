"""The job libraries raced with their own code: one module per library, each declaring the same few things.

A library module declares:

    NAME, PACKAGE          its name here and the distribution its version is read from
    SOURCE                 where its claim lives: repository, file and the release raced
    JOBS_TABLE, ID_COLUMN  the table the library claims from, and its job id column
    JOBS_SCHEMA            (optional) the schema that table is in, where the library has its own
    CLAIMED                the claim's transition, a condition on OLD and NEW for the audit trigger
    SETTINGS               the worker's settings as raced (poll interval, concurrency, batch), each stated
    install(url)           the library's own schema, from its own migrations
    enqueue(url, n)        n no-op jobs, through the library's API
    work(url, log, ready, start)
                           one worker process: the library's own fetch-and-complete loop at concurrency 1 until
                           the queue is empty, its no-op job appending the job id it was handed and the time (ns) to `log`

harness.experiments.libraries races them; `available()` says which ones installed here.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from types import ModuleType

from harness.errors import UserError

NAMES = ("procrastinate", "pgqueuer", "pgmq")


def get(name: str) -> ModuleType:
    """The module of a library raced here; one line naming the known ones otherwise."""
    if name not in NAMES:
        raise UserError(f"no job library named {name!r} (known: {', '.join(NAMES)}, or all)")
    return importlib.import_module(f"harness.libraries.{name}")


def version(name: str) -> str | None:
    """The installed version of a library's distribution; None where it is not installed."""
    try:
        return importlib.metadata.version(get(name).PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


def available() -> list[str]:
    return [name for name in NAMES if version(name) is not None]
