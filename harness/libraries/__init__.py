"""The job libraries: a folder each (harness/libraries/<name>/), holding its declaration and claim protocol
(library.py: harness.libraries.declaration, listed in harness.libraries.catalogue), its adapter (adapter.py) and,
for a Node library, its script (worker.cjs).

A library raced with its own code has an adapter that declares:

    NAME, PACKAGE          its name here and the distribution its version is read from
    SOURCE                 where its claim lives: repository, file and the release raced
    JOBS_TABLE, ID_COLUMN  the table the library claims from, and its job id column
    JOBS_SCHEMA            (optional) the schema that table is in, where the library has its own
    STATS_TABLE            (optional) the table whose statistics count its claims' writes (a partition)
    AUDIT_ID_SQL           (optional) the job id the workers log, as an expression on NEW, where the id column is
                           not a number
    JOB_CAP                (optional) the most jobs a sweep queues for it, for a worker that paces itself
    NOTIFIES_ON_CHANGE     (optional, False) True: its table sends a NOTIFY on every change; a run also measures
                           what a notification costs the idle listening sessions
    CONNECTIONS            (optional, 2) the server connections one worker may hold (the pooler keeps as many)
    STOPS_ON_ITS_OWN       (optional, True) False: its worker never stops on an empty queue; the harness sends
                           SIGTERM once every job has run
    installed_version(), INSTALL_HINT
                           (optional) for a library that is not a Python distribution (npm)
    CLAIM_LOGGED           what marks its claim among the statements the server logged (case aside)
    CLAIM_FUNCTION         (optional) the function whose body is its claim, where the claim calls one
    CLAIMED                the claim's transition, a condition on OLD and NEW for the audit trigger
    COMPLETED              a finished job's transition, a condition on OLD and NEW, or "DELETE" where finishing a
                           job deletes its row (the audit of a fault run)
    FAILED                 (optional) a job failed for good, as a condition on its row t (the ledger's `failed`)
    SETTINGS               the worker's settings as raced (poll interval, concurrency, batch), each stated
    POOLER_SETTING         what the library documents for a transaction pooler (prepared statements off), as
                           {"setting": ..., "source": ...}, applied by its worker where pooler_setting() is
                           "documented"; None where it documents none (the run is not made)
    RECOVERY               what brings back the job of a worker that died: its mechanism, the setting, its default
                           and the value a fault run races (seconds; None where the library has none); and, where
                           a recovered job waits longer before a worker may claim it (a retry's backoff, a
                           scheduler's pass), the most it waits (then_s) and why (then)
    COMPLETION_LOGGED      what marks its completion among the statements the server logged (case aside), and
    COMPLETION_JOB         that statement's parameter naming the job or jobs it completes ($1; an id, or an array)
    STALE_COMPLETION       what its released source says its completion checks, and so what the stale-completion
                           probe should find: {"expected", "checks", "source"}
    HOLDS_BY_SESSION       (optional, False) True: its hold on a job is its session's advisory lock
    PRODUCTION             (optional) what its own docs set for production beyond its defaults, as the probe races it
                           (--setting production; its worker reads configuration())
    EARLIER_RELEASES       (optional) releases before the one installed that the probe may race, each with what
                           its source at that tag says, as STALE_COMPLETION (harness.libraries.releases)
    STALL                  (optional) where its hold on a running job is a heartbeat renewed every beat_share of
                           its recovery setting, {"beat_share", "write_wait_s", "raced_s", "why", "source"}: a
                           stall fault run (--fault stall) races raced_s and predicts from it whether the stalled
                           job is handed on
    install(url)           the library's own schema, from its own migrations
    enqueue(url, n, job_s=None[, first])
                           n no-op jobs, through the library's API (job_s: a fault run's, where the job carries it);
                           a library with AUDIT_ID_SQL numbers its jobs, from `first` where it is given (a soak's
                           arrivals enqueue again and again: harness.experiments.soak.library)
    enqueuer(url, job_s=None)
                           enqueue's client opened once, as a context manager yielding send(n, first): a soak's
                           arrivals send each job through it as the job falls due (harness.libraries.enqueuers)
    work(url, log, ready, start, job_s=None)
                           one worker process: the library's own fetch-and-complete loop at concurrency 1 until
                           the queue is empty, its no-op job appending the job id it was handed, the time (ns) and
                           its pid to `log`; with job_s (a fault run), each job lasts job_s and appends its end
                           ("... end"), the worker polls on an empty queue until it is stopped, and the library's
                           recovery settings are RECOVERY's raced values

A library that can both listen and poll (harness.experiments.libraries.wakeups) also declares:

    WAKEUP                 the setting that turns LISTEN/NOTIFY on or off, and the default poll interval (poll_s)
    wake_install(url)      its schema, with its queue's default poll interval
    wake_work(url, log, ready, start, listen)
                           one worker idle on the empty queue until stopped, woken by LISTEN/NOTIFY where `listen`
    enqueue_paced(url, n, interval_s, listen)
                           n no-op jobs, one at a time, interval_s apart, through one open app

harness.experiments.libraries.drain races them, harness.experiments.libraries.faults injects faults into their
workers; `available()` says which ones installed here. `get(name)` hands a library's module out as an Adapter: the
optional parts above with their defaults written once (OptionalParts), the rest read from its module. (Its claim
protocol and where it was read are its library.py's.) The libraries this project does not run are modelled for a
fault run only (harness.libraries.models, MODELS): their adapter is a model, `get` finds them too, `available`
does not list them.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

from harness.errors import UserError
from harness.libraries.catalogue import MODELLED_LIBRARY_STRATEGIES, RACED_LIBRARY_STRATEGIES, SOURCES

# Read off the one declaration per library (harness.libraries.catalogue.LIBRARIES); each has its folder here.
NAMES = RACED_LIBRARY_STRATEGIES  # raced with their own code: its adapter.py runs it
MODELS = MODELLED_LIBRARY_STRATEGIES  # modelled: its adapter.py is a model (harness.libraries.models)


def documented_setting(name: str) -> dict | None:
    """A library's POOLER_SETTING: what it documents for a transaction pooler; None where it documents none."""
    return get(name).POOLER_SETTING


@dataclass(frozen=True)
class OptionalParts:
    """The parts of a library's module it may leave out, each with its default, written here once."""

    JOBS_SCHEMA: str | None = None  # the schema its jobs table is in, where it has its own
    STATS_TABLE: str | None = None  # the table whose statistics count its claims' writes; None: its JOBS_TABLE
    AUDIT_ID_SQL: str | None = None  # the job id as an expression on NEW, where its id column is not a number
    JOB_CAP: int | None = None  # the most jobs a sweep queues for it; None: as many as asked
    NOTIFIES_ON_CHANGE: bool = False  # its table sends a NOTIFY on every change
    CONNECTIONS: int = 2  # the server connections one worker may hold
    STOPS_ON_ITS_OWN: bool = True  # its worker stops on an empty queue (else the harness sends SIGTERM)
    INSTALL_HINT: str = "run make install"  # how to install it here, in one line
    CLAIM_FUNCTION: str | None = None  # the function whose body is its claim, where the claim calls one
    FAILED: str | None = None  # a job failed for good, as a condition on its row t
    HOLDS_BY_SESSION: bool = False  # its hold on a job is its session's advisory lock
    WAKEUP: dict | None = None  # the setting that turns LISTEN/NOTIFY on or off, where it can do both
    POOLER_SETTING: dict | None = None  # what it documents for a transaction pooler; None: nothing
    POOLER_READ: dict | None = None  # a model's: what its source says a transaction pooler breaks in it
    installed_version: Callable[[], str | None] | None = None  # its version, where it is not a Python distribution
    # earlier releases the stale-completion probe may race (harness.libraries.releases): release -> what its
    # source at that tag says, as STALE_COMPLETION
    EARLIER_RELEASES: dict | None = None
    # what its own docs set for production beyond its defaults, where they do: the setting, its source, the values
    # raced and their defaults, its recovery (raced_s, default_s, as RECOVERY's) and what the probe should find under
    # it (stale_completion, as STALE_COMPLETION)
    PRODUCTION: dict | None = None
    # under PRODUCTION, what a user does once a worker is declared dead, called by the probe once its first holder
    # is frozen: declare_dead(url, job)
    declare_dead: Callable[[str, int], None] | None = None
    # for a library whose hold is its session: what its source says of a hung worker still connected (the probe's
    # --lost-by frozen), as STALE_COMPLETION
    HUNG: dict | None = None
    # for a library whose hold on a running job is a heartbeat renewed every beat_share of its recovery setting:
    # {"beat_share", "write_wait_s", "raced_s", "why", "source"}, from which a stall's fault run predicts whether
    # the job is handed on
    STALL: dict | None = None


OPTIONAL_DEFAULTS = {field.name: field.default for field in dataclasses.fields(OptionalParts)}


class Adapter:
    """A library's module (its adapter) read through one interface: what the module declares, as declared (what
    every library declares: NAME, SOURCE, JOBS_TABLE, install(), work() and the rest in this module's docstring),
    and an optional part it leaves out as OptionalParts' default. It reads the module at each use and writes to
    it, so a module changed in place (a test's monkeypatch) reads the same through either."""

    # no instance __dict__: every attribute but the module is the module's (pytest's monkeypatch then records and
    # restores the module's own value)
    __slots__ = ("module",)

    def __init__(self, module: ModuleType):
        object.__setattr__(self, "module", module)

    def __repr__(self) -> str:
        return f"Adapter({self.module.__name__})"

    def __getattr__(self, name: str):
        try:
            return getattr(self.module, name)
        except AttributeError:
            if name in OPTIONAL_DEFAULTS:
                return OPTIONAL_DEFAULTS[name]
            raise

    def __setattr__(self, name: str, value) -> None:
        setattr(self.module, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self.module, name)

    @property
    def stats_table(self) -> str:
        return self.STATS_TABLE or self.JOBS_TABLE


@functools.cache
def _declared(module_name: str) -> Adapter:
    return Adapter(importlib.import_module(module_name))


def get(name: str) -> Adapter:
    """A library raced here, or a model, as its Adapter; one line naming the known ones otherwise."""
    if name not in NAMES and name not in MODELS:
        raise UserError(f"no job library named {name!r} (known: {', '.join(NAMES)}, or all; modelled for a fault "
                        f"run: {', '.join(MODELS)}, or models)")
    return _declared(f"harness.libraries.{name}.adapter")


RECOVERS_IN_A_RUN_S = 120.0  # a recovery set longer than this (graphile-worker's 4 h) is not waited for in a run


def recovers_within_s(name: str, configuration: str = "default") -> float | None:
    """The most a dead worker's job waits, as raced, before another worker may claim it: the recovery setting and
    whatever the library adds after it (RECOVERY's then_s), or, in production, PRODUCTION's raced recovery; None
    where nothing is set to recover it within a run (RECOVERS_IN_A_RUN_S)."""
    library = get(name)
    if configuration == "production" and library.PRODUCTION is not None:
        return library.PRODUCTION["recovery"]["raced_s"]
    recovery = library.RECOVERY
    if recovery["raced_s"] is None:
        return None
    within = recovery["raced_s"] + recovery.get("then_s", 0.0)
    return within if within <= RECOVERS_IN_A_RUN_S else None


def is_model(name: str) -> bool:
    return name in MODELS


def version(name: str) -> str | None:
    """The installed version of a library's distribution (or npm package); None where it is not installed."""
    if name in MODELS:  # what a model stands for: its library's release (or its commit) as read
        source = SOURCES[name]
        return f"model of {source.release or source.commit[:7]}"
    try:
        library = get(name)
        if library.installed_version is not None:
            return library.installed_version()
        return importlib.metadata.version(library.PACKAGE)
    except (ImportError, importlib.metadata.PackageNotFoundError):  # its module imports a package not installed
        return None


def install_hint(name: str) -> str:
    """What to do so a library is installed here, in one line."""
    try:
        return get(name).INSTALL_HINT
    except ImportError:
        return "run make install"


def available() -> list[str]:
    return [name for name in NAMES if version(name) is not None]
