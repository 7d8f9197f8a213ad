"""The article's names and colours, each written once: strategies, measures, wait classes, table states.

Tables, charts and prose read them from here, so a label on a chart's legend is
the same string as in the table beside it. Plain Python only: no chart library,
so findings and prose can import it too.

Colours: a hue means a strategy, on every chart. Every other category (results,
wait classes, processes, index arms, runner counts) is drawn from the earth and
grey tones of NEUTRAL, which no strategy uses, so a blue mark is always guarded.
"""

from __future__ import annotations

from collections.abc import Iterable

from harness import libraries
from harness.claims.protocols import LIBRARY_PROTOCOL_ORDER, LIBRARY_VARIANTS
from harness.libraries.catalogue import MODELLED_LIBRARY_STRATEGIES, RACED_LIBRARY_STRATEGIES, SOURCES
from harness.experiments.plans.outcomes import TABLE_STATES
from harness.service.queries import PENDING_LIMIT


def by_position(names: tuple[str, ...], palette: tuple, what: str) -> dict:
    """Each name (a library or a variant of its protocol, in their declaration's order: harness.libraries.catalogue) with
    the palette's value at its position. More names than values fails at import, in one line saying what to add:
    a value drawn twice would make two libraries one on a chart."""
    if len(names) > len(palette):
        raise ValueError(f"{', '.join(names[len(palette):])}: no value left in {what} (harness/article/labels.py "
                         f"has {len(palette)} for {len(names)} names); add one there")
    return dict(zip(names, palette))


# --------------------------------------------------------------------------- strategies

# The study's claims: the original three first, then the other claims, each family beside its relative.
STUDY_ORDER = ("naive", "guarded", "skip_locked", "naive_transaction", "naive_serializable", "for_update",
               "skip_locked_batch", "skip_locked_batch_in", "advisory_lock")
# Then the job libraries' protocols, each followed by its variants, in their declaration's order.
STRATEGY_ORDER = STUDY_ORDER + LIBRARY_PROTOCOL_ORDER
STUDY_COLOURS = {"naive": "#c0392b", "guarded": "#2a6fb0", "skip_locked": "#2e8b57",
                 "naive_transaction": "#e67e22", "naive_serializable": "#8e44ad", "for_update": "#7f8c8d",
                 "skip_locked_batch": "#16a085", "skip_locked_batch_in": "#b7950b", "advisory_lock": "#d35493"}
# The job libraries' protocols, by position in their declaration's order (a new library takes the next unused
# value, after the last of its kind; one declared between two others would move every later one's colour).
# Those modelled from their sources: the SKIP LOCKED ones in cool and yellow hues, the advisory-lock ones (que,
# good_job) beside advisory_lock's pink; the last two are not drawn yet.
MODELLED_HUES = ("#17becf", "#5e35b1", "#f48fb1", "#ad1457", "#f1c40f", "#304ffe", "#cddc39")
# The libraries also raced with their own workers: every one SKIP LOCKED, in hues of their own; the last two are
# not drawn yet.
RACED_HUES = ("#8d6e63", "#00897b", "#9ccc65", "#3949ab", "#ff7043", "#546e7a", "#aa00ff", "#004d40")
# A protocol with a safeguard taken out (LIBRARY_VARIANTS): naive's red family.
VARIANT_HUES = ("#e57373",)
STRATEGY_COLOURS = {**STUDY_COLOURS,
                    **by_position(MODELLED_LIBRARY_STRATEGIES, MODELLED_HUES, "MODELLED_HUES"),
                    **by_position(tuple(LIBRARY_VARIANTS), VARIANT_HUES, "VARIANT_HUES"),
                    **by_position(RACED_LIBRARY_STRATEGIES, RACED_HUES, "RACED_HUES")}
# Why a strategy has no lost races to count, from its SQL (harness.claims.strategies).
CANNOT_LOSE = {
    "naive": "its UPDATE does not check the status, so it never sees a loss",
    "skip_locked": "it skips rows other workers hold, so it never loses one",
    "naive_transaction": "its UPDATE does not check the status, so it never sees a loss",
    "naive_serializable": "a conflict aborts its transaction instead (counted as aborted attempts)",
    "for_update": "it waits for the row lock and re-checks the row, so it never loses one",
    "skip_locked_batch": "it skips rows other workers hold, so it never loses one",
    "skip_locked_batch_in": "it skips rows other workers hold, so it never loses one",
}

# Tones for every category that is not a strategy, dark to light; none is a strategy's hue.
NEUTRAL = {"charcoal": "#3b3b3b", "brown": "#6b4226", "olive": "#7d7a3c", "ochre": "#b8862b", "sand": "#e3c98f", "grey": "#a6a6a6",
           "light grey": "#d4d4d4", "pale": "#ececec"}

# --------------------------------------------------------------------------- races

CLAIMS_PER_SECOND = "claims per second (as the workers count them)"
DISTINCT_JOBS_PER_SECOND = "naive: distinct jobs per second"

# C4: the winning statement alone, and a worker's whole wait for a job, lost races included.
WINNING_CLAIM_LATENCY = "winning claim latency"
TIME_TO_GET_A_JOB = "time to get a job"
WAIT_MEASURE_ORDER = (WINNING_CLAIM_LATENCY, TIME_TO_GET_A_JOB)

# The slowed-down race: what became of each attempt.
# The latency section's three panels, in order: what naive over-claims, what guarded wastes, what each gets done.
ROUND_TRIP_MEASURES = ("naive: extra claims per job", "guarded: lost races per win",
                       "claims per second")

# The side-by-side races (with and without the partial index, one server against another), one panel each.
SIDE_BY_SIDE_MEASURES = ("claims per second", "winning claim p99 (ms)")

WON = "won"
WON_SHARED = "won a job another worker also won"
LOST = "lost"
RESULT_COLOURS = {WON: NEUTRAL["charcoal"], WON_SHARED: NEUTRAL["ochre"], LOST: NEUTRAL["grey"]}

LOCK_WAIT = "row or transaction lock"  # the wait group of backends blocked on a row or a transaction

# The sampler's classes (harness.server.activity.WAIT_CLASSES), grouped for the article, in stacking order.
WAIT_GROUPS = {
    LOCK_WAIT: ("Lock:tuple", "Lock:transactionid"),
    "other lock": ("Lock:other", "LWLock"),
    "waiting for the client": ("Client",),
    "on a CPU or waiting for one": ("CPU",),
    "other (I/O, IPC, ...)": ("IO", "IPC", "Other"),
}
WAIT_GROUP_COLOURS = {
    LOCK_WAIT: NEUTRAL["brown"],
    "other lock": NEUTRAL["ochre"],
    "waiting for the client": NEUTRAL["light grey"],
    "on a CPU or waiting for one": NEUTRAL["charcoal"],
    "other (I/O, IPC, ...)": NEUTRAL["sand"],
}

# From /proc/<pid>/schedstat over each worker's window: its backend's and its own process's time on a CPU
# and runnable (in the run queue, waiting for one).
SCHEDSTAT_PARTS = {
    "running_share": ("backend", "on a CPU"),
    "runnable_share": ("backend", "waiting for a CPU"),
    "client_running_share": ("worker process", "on a CPU"),
    "client_runnable_share": ("worker process", "waiting for a CPU"),
}
SCHEDSTAT_LABELS = {column: f"{process} {state}" for column, (process, state) in SCHEDSTAT_PARTS.items()}
CPU_STATE_ORDER = ("on a CPU", "waiting for a CPU")
PROCESS_COLOURS = {"backend": NEUTRAL["charcoal"], "worker process": NEUTRAL["ochre"]}

# --------------------------------------------------------------------------- plans and churn

INDEX_LABELS = {False: "without partial index", True: "with partial index"}
INDEX_COLOURS = {"without partial index": NEUTRAL["ochre"], "with partial index": NEUTRAL["charcoal"]}

# The table states the plans are measured in; harness.experiments.plans.outcomes defines them.
TABLE_STATE_LABELS = {state.name: state.label for state in TABLE_STATES}
# How each state is drawn against fill level: states measured at every fill are lines, each with its own dash;
# the drains by claims and by a race are measured at one fill, so they are points with a shape of their own.
TABLE_STATE_DASHES = {"first_scan": [1, 0], "steady": [8, 4], "held_snapshot": [2, 3], "vacuumed": [12, 3, 2, 3],
                      "after_claims": [1, 0], "after_race": [1, 0]}
TABLE_STATE_SHAPES = {"first_scan": "circle", "steady": "circle", "held_snapshot": "circle", "vacuumed": "circle",
                      "after_claims": "triangle-up", "after_race": "diamond"}

ONE_CONNECTION = "one connection"
ONE_BULK_UPDATE = "one bulk UPDATE"


def drained_by(mode: str, worker_count) -> str:
    """How a churn table's queue was drained: one connection, a race of N workers, or one bulk UPDATE."""
    if mode == "sequential":
        return ONE_CONNECTION
    if mode == "bulk":
        return ONE_BULK_UPDATE
    return f"race, {int(worker_count)} workers"


PHASE_LABELS = {"immediate": "right after the claims", "settled": "once the statistics settled",
                "after_read": "after one full read"}
AUTOVACUUM_LABELS = {True: "autovacuum on (default)", False: "autovacuum off for the table"}
AUTOVACUUM_COLOURS = {"autovacuum on (default)": NEUTRAL["charcoal"], "autovacuum off for the table": NEUTRAL["grey"]}

# --------------------------------------------------------------------------- marks that are not a category

REFERENCE_COLOUR = "#555555"  # reference lines (parity, N - 1 rivals) and subtitles
TARGET_BAND_COLOUR = NEUTRAL["sand"]
READ_COLOUR = NEUTRAL["grey"]  # the slowed-down race's reads, behind the coloured writes
WINDOW_COLOUR = NEUTRAL["pale"]  # the slowed-down race's pause between a read and its write
CPU_BOUND_COLOUR = "#d9d9d9"  # the band over CPU-bound worker counts
NOTE_COLOUR = "#444444"  # small text on a chart, legend symbols that show only a dash pattern
OTHER_COLOUR = "#666666"  # a value this module has no colour for

# --------------------------------------------------------------------------- helpers


def in_order(present: Iterable, order: Iterable) -> list:
    """The values present, in the given order; values the order does not know come last, sorted."""
    present = {value for value in present if value == value}  # NaN is not a value to draw
    known = [value for value in order if value in present]
    return known + sorted(present - set(known), key=str)


def strategies_in(values: Iterable) -> list[str]:
    """The strategies among `values`, in the article's order."""
    return in_order((str(v) for v in values), STRATEGY_ORDER)



# --------------------------------------------------------------------------- a claim is not a completion

# One run's events in the fault timeline: a runner's claim, job, heartbeats and finish, the reaper, the fault.
FAULT_EVENT_COLOURS = {"claimed": "#4c78a8", "started": "#9ecae9", "heartbeat": "#bab0ac", "finished": "#54a24b",
                       "finish_rejected": "#e45756", "reaped": "#f58518", "pause": "#b279a2", "kill": "#b279a2",
                       "stopped": "#bab0ac"}
FAULT_EVENT_ORDER = tuple(FAULT_EVENT_COLOURS)


# --------------------------------------------------------------------------- at production polling rates

# The two claim endpoints, in the colour of the strategy each runs.
PRODUCTION_ENDPOINT_LABELS = {"pending": "GET /pending + claim by id", "claim": "POST /claim (SKIP LOCKED)",
                              "claim_batch": f"POST /claim, up to {PENDING_LIMIT} (SKIP LOCKED)"}
ENDPOINT_COLOURS = {PRODUCTION_ENDPOINT_LABELS["pending"]: STRATEGY_COLOURS["guarded"],
                    PRODUCTION_ENDPOINT_LABELS["claim"]: STRATEGY_COLOURS["skip_locked"],
                    PRODUCTION_ENDPOINT_LABELS["claim_batch"]: STRATEGY_COLOURS["skip_locked_batch"]}
# Runner counts are ordered: light to dark as they grow.
RUNNER_COUNT_TONES = (NEUTRAL["sand"], NEUTRAL["ochre"], NEUTRAL["brown"], NEUTRAL["charcoal"])

# The job libraries raced with their own workers: not strategies, so neutral tones of their own, by position in their
# declaration's order (as their hues above); the last one is not drawn yet.
LIBRARY_TONES = (NEUTRAL["charcoal"], NEUTRAL["ochre"], NEUTRAL["olive"], NEUTRAL["brown"], NEUTRAL["sand"],
                 NEUTRAL["grey"], NEUTRAL["light grey"])
# neutral tones alone are hard to tell apart: each library also has its own point shape and line dash (the last two
# of each not drawn yet)
LIBRARY_SHAPE_CYCLE = ("circle", "square", "triangle-up", "diamond", "cross", "triangle-down", "triangle-left",
                       "triangle-right")
LIBRARY_DASH_CYCLE = ([1, 0], [6, 3], [2, 2], [8, 3, 2, 3], [4, 4], [1, 3], [12, 4], [6, 2, 1, 2])
LIBRARY_COLOURS = by_position(RACED_LIBRARY_STRATEGIES, LIBRARY_TONES, "LIBRARY_TONES")
LIBRARY_SHAPES = by_position(RACED_LIBRARY_STRATEGIES, LIBRARY_SHAPE_CYCLE, "LIBRARY_SHAPE_CYCLE")
LIBRARY_DASHES = by_position(RACED_LIBRARY_STRATEGIES, LIBRARY_DASH_CYCLE, "LIBRARY_DASH_CYCLE")


def library_label(library: str) -> str:
    """A library as the article names it: a model (harness.libraries.models) says so."""
    return f"{library} (model)" if libraries.is_model(library) else library


def release_said(library: str) -> dict[str, str]:
    """A library's release as its sentences cite it, from its declaration alone (each template takes what it needs):
    release ("1.2.3"), tag ("v1.2.3"), commit (its first 7 digits, a model's) and at ("v1.2.3 (abcdef0)")."""
    source = SOURCES[library]
    return {"release": source.release, "tag": source.tag, "commit": source.commit[:7],
            "at": source.at if source.commit else source.tag}
