"""What every job library declares once, in its folder's library.py: its name and title, where its claim was read
(Source, at a release), what its protocol leaves out, and the protocol itself: the statements one of its workers
sends for one job at concurrency 1, rewritten on this study's jobs table so the race loop can run them
(harness.claims.protocols builds the strategy).

Two kinds: the libraries this project does not run (Go, Elixir, Ruby), read from their sources at a commit; and
the libraries raced with their own workers (their adapter.py), read from the release installed here, whose claim a
test finds among the statements the server logged while the library itself ran. A library raced here names its
release once, in its Source: the same release as its pin and its lock (a test checks them against each other).

Each protocol is written here, from reading the library's source at that release; none is copied. What a model
keeps: the order of the statements, the transaction boundaries, the locks and where they are held, the re-checks.
What it drops, for every library: its queue, priority and schedule columns and their indexes, the extra columns and
tables it writes (so a model may send fewer statements than its library: `statements`), its wake-ups. Each
declaration's `dropped` says the rest.

The table (harness.server.schema) has id, status and started_at. A job is 'pending', then 'running' once a worker
has it (the write the audit records), then 'done' where the library writes a completion. A model's write that
stands for the library's start of the job is unguarded where the library's is, so a protocol that lets two workers
past its checks shows as a job run twice in the audit.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.config import SCHEMA

JOBS = f"{SCHEMA}.jobs"

BEGIN = "BEGIN ISOLATION LEVEL READ COMMITTED"
COMMIT = "COMMIT"
COMPLETE = f"UPDATE {JOBS} SET status = 'done' WHERE id = $1"

# The advisory locks this session still holds once it has released its job's (none, where the protocol is
# sound), then released: a measurement and a clean-up added here, not the library's (a lock left behind would keep
# its job from every worker). The count refers to the unlock's CTE, so it runs after it.
HELD_AFTER = ("held AS MATERIALIZED (SELECT count(*) AS stray FROM pg_locks WHERE locktype = 'advisory' "
              "AND pid = pg_backend_pid() AND (SELECT done FROM released) IS NOT NULL) "
              "SELECT stray, pg_advisory_unlock_all() FROM held")

# The claim most libraries send, in one statement: a CTE locks the next pending job FOR UPDATE SKIP LOCKED (the CTE
# fences the LIMIT from the planner), and the UPDATE sets it running. What sets them apart is around it: the
# transactions, the re-checks, the completion.
SKIP_LOCKED_CLAIM = (
    f"WITH next AS (SELECT id FROM {JOBS} WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) "
    f"UPDATE {JOBS} AS j SET status = 'running', started_at = now() FROM next WHERE j.id = next.id RETURNING j.id"
)
# A completion that checks the job's status before it writes (pg-boss's, chancy's and River's models: each one's
# library.py says what its own checks).
GUARDED_COMPLETE = f"UPDATE {JOBS} SET status = 'done' WHERE id = $1 AND status = 'running'"

# What a statement of a protocol does with its answer:
PLAIN = "plain"  # nothing to read (BEGIN, COMMIT, a completion, a read the library makes and ignores)
PICK = "pick"  # the job's id, or no row: nothing left for this worker
CLAIM = "claim"  # a pick that also writes the claim: a row is a won job
CHECK = "check"  # a re-check of the picked job: no row means another worker has it
WRITE = "write"  # the job's start, the write the audit records: a row written is a won job
RELEASE = "release"  # runs once a job was picked, whatever came after; the last one counts the locks still held


@dataclass(frozen=True)
class Credited:
    """A statement credited to a library installed here, as its installed package's file holds it: `fragment` lies
    between the first `anchor` (the function or statement it belongs to) and the next `end` after it, whitespace
    runs read as one space in all three. `file` is the path under site-packages or node_modules (Source.installed)."""

    role: str  # "claim" or "completion"; a completion's fragment runs to the end of its WHERE clause, so a check
    # added to it fails the test too
    file: str
    anchor: str
    fragment: str
    end: str


@dataclass(frozen=True)
class Source:
    """Where a model was read: the repository, the files, the commit (and the release it carries)."""

    repository: str
    files: tuple[str, ...]
    commit: str  # empty for a library read from the release installed here
    release: str  # the release that commit carries, or the one installed here: the one place this names it
    installed: str = ""  # for a library installed here: "site-packages" or "node_modules"
    credited: tuple[Credited, ...] = ()  # its claim and completion, found in the installed files by a test

    def __str__(self) -> str:
        if not self.commit:
            return f"{self.repository}, {', '.join(self.files)}, release {self.release} as installed here"
        release = f" ({self.release})" if self.release else ""
        return f"{self.repository}, {', '.join(self.files)}{release}, commit {self.commit}"

    @property
    def short(self) -> str:
        """For a table: the repository at the commit's first 7 digits (or the release), and the files' names."""
        at = self.commit[:7] if self.commit else self.release
        return f"{self.repository} @ {at}: {', '.join(f.rsplit('/', 1)[-1] for f in self.files)}"

    @property
    def tag(self) -> str:
        """The release as its repository tags it ("v1.2.3")."""
        return self.release if self.release.startswith("v") else f"v{self.release}"

    @property
    def at(self) -> str:
        """For a citation of a model's source: its tag and the commit's first 7 digits ("v1.2.3 (abcdef0)")."""
        return f"{self.tag} ({self.commit[:7]})"


@dataclass(frozen=True)
class Protocol:
    """A library's statements for one job, in order, each with its role, and their SQL by step name."""

    title: str  # as the article names the protocol
    summary: str
    steps: tuple[tuple[str, str], ...]  # (step, role), in the order the worker sends them
    sql: dict[str, str]  # step -> its statement
    isolation: str | None = None  # its transactions, as the article says them; None: autocommit, one per round trip
    counts_stray_locks: bool = False  # it takes advisory locks: its last release counts those left


@dataclass(frozen=True)
class Library:
    """One job library, declared once: every list of libraries here is read off harness.libraries.catalogue."""

    name: str  # its name everywhere here: its folder, its protocol's strategy, its runs
    title: str  # as the article names it (a model with the language it is written in)
    source: Source  # where its claim was read
    dropped: str  # what its protocol here leaves out beyond what every protocol drops
    runs_here: bool  # True: raced with its own code too (its adapter.py); False: a model (harness.libraries.models)
    protocol: Protocol
    # the statements the library itself sends per job at concurrency 1, read from its source, for a model; a library
    # raced here has none typed: the article takes the statements the server logged per job while it ran
    statements: int | None = None


# Which of a SKIP LOCKED library's two statements it wraps in a BEGIN and COMMIT of its own.
NEITHER, CLAIM_ONLY, CLAIM_AND_COMPLETION = "neither", "claim only", "claim and completion"


def skip_locked_protocol(title: str, summary: str, complete: str, in_transactions: str,
                         isolation: str | None = None) -> Protocol:
    """A library whose claim is the shared SKIP LOCKED CTE (SKIP_LOCKED_CLAIM) followed by its completion: what sets
    one apart is which of the two it sends inside a transaction of its own."""
    claim = (("begin", PLAIN), ("claim", CLAIM), ("commit", PLAIN)) if in_transactions != NEITHER else \
        (("claim", CLAIM),)
    completion = (("begin", PLAIN), ("complete", PLAIN), ("commit", PLAIN)) \
        if in_transactions == CLAIM_AND_COMPLETION else (("complete", PLAIN),)
    steps = claim + completion
    used = {step for step, _ in steps}
    sql = {step: text for step, text in (("begin", BEGIN), ("claim", SKIP_LOCKED_CLAIM),
                                         ("commit", COMMIT), ("complete", complete)) if step in used}
    return Protocol(title, summary, steps, sql, isolation)
