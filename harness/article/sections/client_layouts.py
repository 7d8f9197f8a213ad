"""The client layouts: the races under one process per worker against one asyncio process, a note on F1,
F2, F5 and F7 each, and their table."""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from harness.article.findings import (Finding, ORIGINAL_F1_DUPLICATE_JOBS, ORIGINAL_F5_LOSSES_PER_WIN,
                                      ORIGINAL_F7_RATIO, ORIGINAL_HIGH_WORKERS, ORIGINAL_JOB_COUNT)
from harness.article.formats import DASH, count, missing, number, percent, ratio
from harness.article.prose import join, table, worker_list
from harness.article.sections.race_sweep import RACES, race_data
from harness.article.wording import Sentences

NAME = "client_layouts"
READS = ()
UPSTREAM = ("races",)
say = Sentences(NAME)


PROCESSES, ASYNCIO = "one process per worker", "one asyncio process"
# (finding, figure, workers, the original's figure or None): what the layouts are compared on
LAYOUT_FIGURES = (
    ("F1", "naive's share of the jobs claimed more than once", 2, ORIGINAL_F1_DUPLICATE_JOBS / ORIGINAL_JOB_COUNT),
    ("F2", "naive's claims beyond each job's first, per job", ORIGINAL_HIGH_WORKERS, None),
    ("F5", "guarded's lost races per win", 2, 1.0),
    ("F5", "guarded's lost races per win", 8, None),
    ("F5", "guarded's lost races per win", 32, None),
    ("F5", "guarded's lost races per win", ORIGINAL_HIGH_WORKERS, float(ORIGINAL_F5_LOSSES_PER_WIN)),
    ("F7", "skip_locked's claims/s over guarded's", 8, None),
    ("F7", "skip_locked's claims/s over guarded's", ORIGINAL_HIGH_WORKERS, float(ORIGINAL_F7_RATIO)),
)


def _layout_value(points: pd.DataFrame, figure: str, workers: int) -> float:
    def at(strategy, column):
        rows = points[(points["strategy"].astype(str) == strategy) & (points["worker_count"] == workers)]
        return float(rows[column].median()) if len(rows) else math.nan

    if figure.startswith("naive's share"):
        return at("naive", "duplicate_jobs") / at("naive", "job_count")
    if figure.startswith("naive's claims beyond"):
        return at("naive", "extra_claims") / at("naive", "job_count")
    if figure.startswith("guarded's lost"):
        return at("guarded", "losses_per_win")
    return at("skip_locked", "claims_per_second") / at("guarded", "claims_per_second")


def layout_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The client-layout races: per figure the original's findings rest on, its value under each layout (median
    over repeats), the original's where it gives one, and which layout lies nearer it (on a log scale)."""
    rows = []
    for finding_id, figure, workers, original in LAYOUT_FIGURES:
        values, bound = {}, {}
        for layout, label in (("processes", PROCESSES), ("asyncio", ASYNCIO)):
            picked = summary[summary["client_layout"] == layout] if "client_layout" in summary else summary.iloc[0:0]
            values[label] = _layout_value(picked, figure, workers)
            at_point = picked[picked["worker_count"] == workers]
            # one CPU-bound race marks the point, as everywhere (analysis.over_repeats)
            bound[label] = bool(len(at_point) and "cpu_bound" in at_point
                                and at_point["cpu_bound"].fillna(False).astype(bool).any())
        if all(missing(v) for v in values.values()):
            continue
        nearer = None
        # which layout lies nearer the original is read only where neither was CPU-bound: else it is the scheduler's
        if original and not any(bound.values()) and all(not missing(v) and v > 0 for v in values.values()):
            nearer = min(values, key=lambda label: abs(math.log(values[label] / original)))
        rows.append({"finding": finding_id, "figure": figure, "workers": workers, **values,
                     "the original": original if original is not None else math.nan, "nearer the original": nearer,
                     "asyncio CPU-bound": bound[ASYNCIO], "processes CPU-bound": bound[PROCESSES]})
    return pd.DataFrame(rows, columns=["finding", "figure", "workers", PROCESSES, ASYNCIO, "the original",
                                       "nearer the original", "asyncio CPU-bound", "processes CPU-bound"])


def layout_note(table: pd.DataFrame, finding_id: str) -> str:
    """One sentence per finding: its figures under the original's client layout, and which layout is nearer."""
    rows = table[table["finding"] == finding_id]
    rows = rows[~rows[ASYNCIO].map(missing)]
    if not len(rows):
        return ""
    fmt = percent if finding_id == "F1" else (ratio if finding_id == "F7" else (lambda v: number(v, 2)))
    listed = ", ".join(say("layout.point", asyncio=fmt(row[ASYNCIO]), processes=fmt(row[PROCESSES]),
                           workers=row["workers"]) for _, row in rows.iterrows())
    nearer = [say("layout.nearer", workers=row["workers"], original=fmt(row["the original"]),
                  layout=say("layout.nearer_asyncio") if row["nearer the original"] == ASYNCIO
                  else say("layout.nearer_processes"))
              for _, row in rows.iterrows() if isinstance(row["nearer the original"], str)]
    bound = bool(rows["asyncio CPU-bound"].all())
    # an original figure beside a point where either layout was CPU-bound: said, and not read against it
    unread = [row["workers"] for _, row in rows.iterrows() if not missing(row["the original"])
              and (row["asyncio CPU-bound"] or row["processes CPU-bound"])]
    return (say("layout.note", figure=rows.iloc[0]["figure"], figures=listed,
                nearer="; " + "; ".join(nearer) if nearer else "")
            + (" " + say("layout.cpu_bound") if bound else "")
            + (" " + say("layout.not_read", workers=worker_list(unread)) if unread else ""))


def layouts_html(loaded: dict) -> str:
    """The client-layout races beside the sweep's, per figure the original's findings rest on; '' without them."""
    layouts = loaded[RACES].layouts
    frame = layout_table(layouts) if layouts is not None else pd.DataFrame()
    if not len(frame):
        return ""

    def shown(row, column):
        value = row[column]
        if missing(value):
            return DASH
        return percent(value) if row["finding"] == "F1" else ratio(value) if row["finding"] == "F7" else number(value, 2)

    return table(pd.DataFrame({
        "finding": frame["finding"], "figure": frame["figure"], "workers": frame["workers"],
        PROCESSES: [shown(r, PROCESSES) for _, r in frame.iterrows()],
        ASYNCIO: [shown(r, ASYNCIO) for _, r in frame.iterrows()],
        "the original": [shown(r, "the original") for _, r in frame.iterrows()],
        "CPU-bound": [", ".join(label for label, column in ((PROCESSES, "processes CPU-bound"),
                                                            (ASYNCIO, "asyncio CPU-bound")) if r[column])
                      for _, r in frame.iterrows()]}))


# --------------------------------------------------------------------------- the section


def load(reads: dict, loaded: dict) -> None:
    """Nothing of its own: it reads the sweep the races section loaded."""
    return None


def findings(loaded: dict) -> list[Finding]:
    """None of its own: it adds a note to F1, F2, F5 and F7 (annotate)."""
    return []


def annotate(found: list[Finding], loaded: dict) -> list[Finding]:
    """Each finding the layouts are compared on gets its figures under the original's client layout."""
    layouts = race_data(loaded).layouts
    if layouts is None or not len(layouts):
        return found
    compared = layout_table(layouts)
    return [replace(f, note=" ".join(n for n in (f.note, layout_note(compared, f.id)) if n)) for f in found]


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    """The layout races' size the prose names."""
    layouts = loaded[RACES].layouts
    layouts = layouts if layouts is not None else pd.DataFrame()
    return {"layout_job_count": count(layouts["job_count"].max()) if len(layouts) else "no",
            "layout_worker_list": join([str(w) for w in sorted(layouts["worker_count"].unique())])
            if len(layouts) else "no"}
