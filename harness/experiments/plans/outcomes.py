"""The states of a drained table in which the plans experiment explains the claims: the values of its
`table_state` column, as the experiment (harness.experiments.plans.measure) writes them and the article reads them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TableState:
    """One state of the drained table in which the claims are explained."""

    name: str  # the table_state column's value
    label: str  # a few words for legends and tables
    description: str


RACE_DRAIN_WORKERS = 4  # the connections that drain after_race's prefix

# The table states in the order they are shown; notebooks and charts read them from here.
TABLE_STATES = (
    TableState("first_scan", "first scan after the drain",
               "the first EXPLAIN ANALYZE after the prefix flip, no other session holding a snapshot; "
               "a fresh table for every repetition"),
    TableState("steady", "later scans after the drain",
               "the scans after the first one on the same table, no other session holding a snapshot, "
               "before any VACUUM"),
    TableState("held_snapshot", "while a transaction older than the drain is open",
               "a second session holds a REPEATABLE READ snapshot taken before the prefix flip, so no scan "
               "may mark the consumed rows' index entries dead or prune their old versions"),
    TableState("vacuumed", "after VACUUM",
               "the held_snapshot table after the snapshot was released and VACUUM (ANALYZE) ran"),
    TableState("after_claims", "after a drain by claims",
               "a fresh table whose prefix was claimed one job at a time by the skip_locked claim on one "
               "connection, each claim committed, then ANALYZE (the reference point only)"),
    TableState("after_race", "after a drain by a race",
               f"a fresh table whose prefix was claimed by {RACE_DRAIN_WORKERS} connections racing with the skip_locked claim, "
               "each claim committed, then ANALYZE (the reference point only)"),
)
TABLE_STATE_NAMES = tuple(state.name for state in TABLE_STATES)
FIRST_SCAN, STEADY, HELD_SNAPSHOT, VACUUMED, AFTER_CLAIMS, AFTER_RACE = TABLE_STATE_NAMES
# The states measured at every point; the drains by claims only at the reference point (they are slow).
EVERY_POINT_STATES = (FIRST_SCAN, STEADY, HELD_SNAPSHOT, VACUUMED)
REFERENCE_ONLY_STATES = (AFTER_CLAIMS, AFTER_RACE)
# The states measured right after a real drain, with no other session holding a snapshot.
UNHELD_STATES = (FIRST_SCAN, STEADY)
