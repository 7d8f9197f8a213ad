"""The original's findings and claims beside ours: one value per finding, each verdict decided once, from stored runs.

A Finding holds the original's claim and figure (typed in below, in ORIGINAL,
and shown as the original's wherever it appears), our figure computed from the
runs, a verdict from a fixed vocabulary, a note computed from the same data, the
article section it belongs to, and the formatted numbers the prose needs.

The verdicts:

confirmed
    the claim holds in our runs, at about the original's size where it gives one;
confirmed_different_size
    the claim holds in direction, at a materially different size;
confirmed_in_part
    every part of the claim that was measured holds, and a part (the original's size, say) was not measured here;
corrected
    our runs show the claim as stated is wrong in a way they pin down (a different
    scaling, another mechanism, the opposite per job);
not_reproduced
    what the original reports does not appear in our runs;
added
    not in the original: measured here;
not_measured
    this build has no run that measures it.

A note states a cause only where a measurement in this build shows it; anything
else is worded as a reading ("one reading is", "may").

The rules that decide each verdict live with their section of the article
(harness/article/sections/); harness/article/contents.py runs them in page order.

    make_finding(id, verdict, ours, notes, values)   # a rule's result
    table(findings) -> DataFrame                     # the comparison table (HTML cells)
"""

from __future__ import annotations

import html as html_text
from dataclasses import dataclass, field
from urllib.parse import quote

import pandas as pd

from harness.article.formats import DASH, number
from harness.article.labels import CANNOT_LOSE
from harness.article.prose import worker_list

# --------------------------------------------------------------------------- verdicts

CONFIRMED = "confirmed"
CONFIRMED_DIFFERENT_SIZE = "confirmed_different_size"
CORRECTED = "corrected"
NOT_REPRODUCED = "not_reproduced"
ADDED = "added"
NOT_MEASURED = "not_measured"
NOT_DISTINGUISHABLE = "not_distinguishable"  # the ranges over repeats overlap: more repeats could tell
CONFIRMED_IN_PART = "confirmed_in_part"  # a finding whose measured parts are confirmed, and a part was not measured
VERDICTS = (CONFIRMED, CONFIRMED_DIFFERENT_SIZE, CONFIRMED_IN_PART, CORRECTED, NOT_REPRODUCED, NOT_DISTINGUISHABLE,
            ADDED, NOT_MEASURED)
HOLDS = (CONFIRMED, CONFIRMED_DIFFERENT_SIZE, CONFIRMED_IN_PART)  # the verdicts under which a claim holds
# a part of a finding may also say this: what it adds was looked for, in a run that could show it, and not seen
ADDED_NONE_SEEN = "added_none_seen"
PART_VERDICTS = (*VERDICTS, ADDED_NONE_SEEN)
VERDICT_LABELS = {CONFIRMED: "confirmed", CONFIRMED_DIFFERENT_SIZE: "confirmed, different size",
                  CORRECTED: "corrected", NOT_REPRODUCED: "not reproduced",
                  NOT_DISTINGUISHABLE: "not distinguishable at this spread", ADDED: "added",
                  NOT_MEASURED: "not measured", ADDED_NONE_SEEN: "added: none seen",
                  CONFIRMED_IN_PART: "confirmed where measured, a part not measured"}

# --------------------------------------------------------------------------- the article's sections


def anchor(heading: str) -> str:
    """The id nbconvert gives a Markdown heading (spaces become hyphens), so a finding can link to its section."""
    return quote(heading.replace(" ", "-"), safe="?/:@!$&'()*+,;=")


WITHOUT_GUARD = anchor("What happens without the guard?")
MECHANISM = anchor("Why does one UPDATE work, mechanically?")
GUARD_COST = anchor("What does the guard cost?")
TIME_SPENT = anchor("Where the backends' time goes")
WAIT_FOR_A_JOB = anchor("The wait for a job")
SKIP_LOCKED = anchor("So should we switch to SKIP LOCKED?")
HALF_DRAINED = anchor("The half-drained queue")
PRODUCTION = anchor("Production context")
PRODUCTION_POLLING = anchor("At production polling rates")
TABLE_CHURN = anchor("What do all these status flips do to the table?")
HARNESS_CHECK = anchor("Is the harness measuring PostgreSQL, or itself?")
LIMITS = anchor("What doesn't this prove?")
CLAIM_NOT_COMPLETION = anchor("A claim is not a completion")
FAQ = anchor("FAQ")
OTHER_CLAIMS = anchor("Other ways to claim")
LATENCY = anchor("What does a network round trip change?")
LIBRARIES = anchor("What the job libraries do")
WORKER_DIES = anchor("When a worker dies")
LONG_RUNNING = anchor("When a transaction holds the horizon")

# --------------------------------------------------------------------------- the original's figures


@dataclass(frozen=True)
class Claim:
    """What the original write-up claims, its figure as it gives it, and where our article discusses it."""

    claim: str
    figure: str
    section: str


NOT_IN_THE_ORIGINAL = "not measured in the original"

# The original write-up's claims and figures (not ours), from the study brief.
ORIGINAL = {
    "F1": Claim("naive hands out duplicates already at 2 workers",
                "9,763 of 10,000 jobs claimed more than once", WITHOUT_GUARD),
    "F2": Claim("naive's duplicates compound with concurrency", "rising with workers (a chart)", WITHOUT_GUARD),
    "F3": Claim("naive's \"throughput\" looks best because duplicate work counts as work",
                "about 6,000 claims/s, the highest of the three", GUARD_COST),
    "F4": Claim("guarded: zero duplicates at every concurrency", "0 in about 700,000 tight-loop attempts",
                WITHOUT_GUARD),
    "F5": Claim("guarded: lost races grow much faster than workers", "about 22 lost races per win at 100 workers",
                GUARD_COST),
    "F6": Claim("guarded slows down as workers are added (head-of-queue contention)",
                "falling with workers; 1,100+ claims/s and p99 under 2 ms at low concurrency", GUARD_COST),
    "F7": Claim("skip_locked: no duplicates, no wasted attempts, far higher throughput under contention",
                "about 20x guarded at high concurrency", SKIP_LOCKED),
    "F8": Claim("skip_locked pays in tail latency (rows stay locked until commit)", "a higher p99", SKIP_LOCKED),
    "F9": Claim("half drained, skip_locked's inner SELECT walks the consumed rows; a partial index fixes it",
                "without the index: 5,001 rows removed by filter, 10,057 shared buffers hit, 2.277 ms; "
                "with it: 14 buffers, 0.207 ms", HALF_DRAINED),
    "F10": Claim("the guarded plan shows the status re-check as a Filter on the locked row",
                 "Filter: (status = 'pending'::text) under the primary-key Index Scan, 0.027 ms", MECHANISM),
    "F11": Claim("page pruning reclaims dead versions without autovacuum",
                 "5,002 status updates on a 10k-row table left n_dead_tup = 0 once stats settled", TABLE_CHURN),
    "F12": Claim("HOT updates need free space on the page",
                 "default fillfactor: 0 of 1,000 updates HOT; fillfactor 70: 448 of 1,000", TABLE_CHURN),
    "F13": Claim("the partial index blocks HOT, because status is in its predicate",
                 "fillfactor 70 with the partial index: 0 of 1,000 HOT", TABLE_CHURN),
    "C1": Claim("at SERIALIZABLE the naive pair aborts (serialization failures) instead of producing duplicates",
                NOT_IN_THE_ORIGINAL, OTHER_CLAIMS),
    "C2": Claim("a SELECT then UPDATE in one transaction at READ COMMITTED is still racy",
                NOT_IN_THE_ORIGINAL, OTHER_CLAIMS),
    "C3": Claim("plain FOR UPDATE without SKIP LOCKED is correct but serialises claiming", NOT_IN_THE_ORIGINAL,
                OTHER_CLAIMS),
    "C4": Claim("guarded's p99 counts only wins; the time to get a job is fatter", NOT_IN_THE_ORIGINAL,
                WAIT_FOR_A_JOB),
    "C5": Claim("at production polling (a handful of runners, every 5 s, 5 jobs per poll) conflicts are rare",
                NOT_IN_THE_ORIGINAL, PRODUCTION_POLLING),
    "C6": Claim("real network latency widens naive's window and makes each lost guarded race dearer",
                NOT_IN_THE_ORIGINAL, LATENCY),
    "C7": Claim("a claim is not a completion: a runner that dies leaves its job running; a lease is missing",
                NOT_IN_THE_ORIGINAL, CLAIM_NOT_COMPLETION),
    "C8": Claim("picking the row with SKIP LOCKED inside the claim endpoint is a one-statement server change",
                NOT_IN_THE_ORIGINAL, PRODUCTION_POLLING),
    "C9": Claim("partial index, fillfactor and HOT rate form a trade-off; small volumes take no index and the "
                "default fillfactor, six-figure daily volumes the opposite corner", NOT_IN_THE_ORIGINAL,
                LONG_RUNNING),
}
# What we measure beyond the original.
ADDED_CLAIMS = {
    "A1": Claim("time to get a job, lost races included, per strategy", NOT_IN_THE_ORIGINAL, WAIT_FOR_A_JOB),
    "A2": Claim("where guarded's backends spend their time under contention: lock waits or waiting for a CPU",
                NOT_IN_THE_ORIGINAL, TIME_SPENT),
    "A3": Claim("the Python harness gets as many claims per second out of the server as pgbench",
                NOT_IN_THE_ORIGINAL, HARNESS_CHECK),
    "A4": Claim("claimed one at a time, updates are HOT even at the default fillfactor", NOT_IN_THE_ORIGINAL,
                TABLE_CHURN),
    "A5": Claim("a batch claimed with WHERE id IN (... LIMIT k FOR UPDATE SKIP LOCKED) can take more than k rows",
                "reported by users of job libraries, not by the original", OTHER_CLAIMS),
    "A6": Claim("an advisory-lock pick takes locks on jobs it does not return",
                "reported by users of job libraries, not by the original", OTHER_CLAIMS),
    "A7": Claim("a job library's own workers run each job once when several of them drain one queue",
                NOT_IN_THE_ORIGINAL, LIBRARIES),
    "A8": Claim("the job libraries' claim protocols, rewritten on this table, hand each job to one worker",
                NOT_IN_THE_ORIGINAL, LIBRARIES),
    "A9": Claim("a job library completes the job of a worker that dies, stops or loses its connection, once, and only "
                "by a worker that holds it", NOT_IN_THE_ORIGINAL, WORKER_DIES),
    "A10": Claim("a job library's workers, and the advisory-lock claims, work through PgBouncer in transaction mode "
                 "as in session mode", NOT_IN_THE_ORIGINAL, WORKER_DIES),
    "A11": Claim("a transaction that holds the MVCC horizon slows a queue's claims, whatever the table's shape",
                 "reported by Brandur Leach (2015) and PlanetScale (2026), not by the original", LONG_RUNNING),
    "A12": Claim("a transaction that holds the MVCC horizon slows a job library's pickup",
                 "reported by Brandur Leach (2015) of Que, not by the original", LONG_RUNNING),
}
ORIGINAL_JOB_COUNT = 10_000
ORIGINAL_F1_DUPLICATE_JOBS = 9_763
ORIGINAL_F3_PEAK = 6_000
ORIGINAL_F4_ATTEMPTS = 700_000
ORIGINAL_F5_LOSSES_PER_WIN = 22
ORIGINAL_HIGH_WORKERS = 100
ORIGINAL_F6_MIN_RATE = 1_100  # "1,100+": a lower bound
ORIGINAL_F6_MAX_P99_MS = 2.0  # "sub-2 ms"
ORIGINAL_F7_RATIO = 20
ORIGINAL_F9_WITHOUT_BUFFERS = 10_057
ORIGINAL_F9_WITH_BUFFERS = 14
ORIGINAL_F9_TIME_RATIO = 2.277 / 0.207
ORIGINAL_F11_CLAIMS = 5_002
ORIGINAL_F12_LOW_FILLFACTOR = 70
ORIGINAL_F12_LOW_HOT_SHARE = 448 / 1_000
ORIGINAL_F12_UPDATES = 1_000

# Lost races per win exist only for guarded: naive's UPDATE always finds its row and skip_locked's picks a row
# no one else holds; neither has a lost outcome in a drain.


def lost_per_win(strategy: str, value, digits: int = 2) -> str:
    """Lost races per win as the tables show it: a dash for a strategy that cannot lose."""
    return DASH if strategy in CANNOT_LOSE else number(value, digits)


# --------------------------------------------------------------------------- a finding


@dataclass(frozen=True)
class Finding:
    """One of the original's findings or claims, or one we add, beside our figure and a verdict."""

    id: str  # F1..F13 (the original's findings), C1..C9 (its unmeasured claims), A1.. (ours)
    claim: str  # the original's claim, or what we add
    original: str  # the original's figure, as it gives it
    ours: str  # our figure, median [min-max] over repeats where the runs have repeats
    verdict: str  # one of VERDICTS
    note: str  # computed from the same data: what differs, and why where a measurement shows it
    section: str  # the anchor of the article section that discusses it
    values: dict = field(default_factory=dict)  # named, formatted figures for the prose's placeholders
    # the race sweep's worker counts the verdict was decided on (rules that read the sweep; CPU-bound points left out)
    worker_counts_used: tuple = ()
    # a finding with several parts: (part, verdict) each; `verdict` is then its first part's
    parts: tuple = ()
    # the verdict it reads decided again with the race points near the CPU-bound line left out too, where that
    # differs (contents.evaluate): it then rests on those points
    near_line: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"{self.id}: unknown verdict {self.verdict!r}")

    @property
    def verdict_label(self) -> str:
        """The verdict, and each part's where there are several: the page says what findings --json says."""
        if len(self.parts) > 1:
            parts = "; ".join(f"{part}: {VERDICT_LABELS[verdict]}" for part, verdict in self.parts)
            return f"{VERDICT_LABELS[self.verdict]} ({parts})"
        return VERDICT_LABELS[self.verdict]

    @property
    def statement(self) -> str:
        """The finding in its general form, for a paragraph that lacks one of its figures: verdict, figure, note."""
        said = ". ".join(part.rstrip(".") for part in (self.ours, self.note) if part)
        return f"**{self.id}, {self.verdict_label}.** {said}." if said else f"**{self.id}, {self.verdict_label}.**"

    def as_dict(self) -> dict:
        return {"id": self.id, "claim": self.claim, "original": self.original, "ours": self.ours,
                "verdict": self.verdict, "note": self.note, "section": self.section, "values": dict(self.values),
                "worker_counts_used": list(self.worker_counts_used),
                "parts": [{"part": part, "verdict": verdict} for part, verdict in self.parts],
                "near_line": self.near_line}


def make_finding(finding_id: str, verdict: str, ours: str = "", notes=(), values: dict | None = None,
             used=(), parts=()) -> Finding:
    claim = ORIGINAL.get(finding_id) or ADDED_CLAIMS[finding_id]
    note = " ".join(n.strip() for n in ([notes] if isinstance(notes, str) else notes) if n and n.strip())
    for _, part_verdict in parts:
        if part_verdict not in PART_VERDICTS:
            raise ValueError(f"{finding_id}: unknown verdict {part_verdict!r}")
    return Finding(finding_id, claim.claim, claim.figure, ours, verdict, note, claim.section, dict(values or {}),
                   tuple(int(w) for w in used), tuple(parts))


def order(finding_id: str) -> tuple:
    return ("FCA".index(finding_id[0]), int(finding_id[1:]))


def by_id(findings: list[Finding]) -> dict[str, Finding]:
    return {f.id: f for f in findings}


TABLE_COLUMNS = ["finding", "the original's claim", "the original's figure", "this reproduction", "verdict"]


def decided_at(finding: Finding) -> str:
    """The verdict's short note: the worker counts a verdict that reads the race sweep was decided at."""
    used = finding.worker_counts_used
    if not used:
        return ""
    return f"decided at {worker_list(used)} worker{'' if list(used) == [1] else 's'}"


NEAR_LINE_LABEL = "without the points near the CPU-bound line: "  # then the verdict it would read


def near_line_said(finding: Finding) -> str:
    """What the verdict reads without the race points near the CPU-bound line, where that differs; else nothing."""
    return NEAR_LINE_LABEL + VERDICT_LABELS[finding.near_line] if finding.near_line else ""


def _verdict_cell(finding: Finding) -> str:
    """The verdict, and under it where it was decided and, where leaving out the points near the CPU-bound line
    changes it, what it would read then (lines of their own, not columns most rows leave empty)."""
    lines = [line for line in (decided_at(finding), near_line_said(finding)) if line]
    return html_text.escape(finding.verdict_label) + "".join(
        f'<br><span class="decided-at">{html_text.escape(line)}</span>' for line in lines)


def table(findings: list[Finding]) -> pd.DataFrame:
    """The comparison table: one row per finding in id order, the original's columns labelled as the original's,
    each finding linked to the section that states it in full with its note (cells are HTML: render with
    escape=False)."""
    rows = [{"finding": f'<a href="#{html_text.escape(f.section)}">{f.id}</a>',
             "the original's claim": html_text.escape(f.claim), "the original's figure": html_text.escape(f.original),
             "this reproduction": html_text.escape(f.ours), "verdict": _verdict_cell(f)}
            for f in sorted(findings, key=lambda f: order(f.id))]
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def verdict_counts(findings: list[Finding]) -> dict:
    """How many findings got each verdict: {verdict: count}."""
    counts = {verdict: 0 for verdict in VERDICTS}
    for f in findings:
        counts[f.verdict] += 1
    return counts


def not_measured(finding_id: str, why: str) -> Finding:
    return make_finding(finding_id, NOT_MEASURED, "", why)
