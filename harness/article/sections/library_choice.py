"""The table a reader picks a job library from: one row per library, real and modelled marked apart, at its
defaults and at the setting its own docs give for production. Not a section: a part of "When a worker dies"
(harness.article.sections.library_faults), which loads its runs and calls it; the longer table of what to set and
what the runs saw stays there.

A dead worker's job runs again, per library:
    as it comes     never where the fault runs left it stuck or failed for good, or where the recovery is off until
                    set; else its default setting, read in its source, plus what the raced runs took beyond their
                    shorter setting (the median of the kill runs that landed): a setting of 30 s raced at 2 s and
                    seen at 2.8 s reads "about 31 s"; where nothing is set (a lock that drops with its connection),
                    what the runs took;
    in production   the same from the fault runs under its production setting, where they ran; else its production
                    setting's default as declared (read in source, not raced here); where a user sets it as low as
                    the library accepts (River), the wait at that least, seen or read; a dash where its docs give
                    none.
"""

from __future__ import annotations

import html

import pandas as pd

from harness import libraries
from harness.article.findings import CONFIRMED, CORRECTED, NOT_MEASURED
from harness.article.formats import DASH, missing, wait as about
from harness.article.labels import library_label
from harness.article.prose import table
from harness.article.sections import library_poolers, stale_completions
from harness.article.wording import Sentences

SENTENCES = "library_choice"
say = Sentences(SENTENCES)

COLUMNS = ("library", "dead worker: its job runs again after", "dead worker, in production",
           "hung worker: its completion", "hung worker, in production", "behind PgBouncer")


def _kills(runs: pd.DataFrame | None) -> pd.DataFrame:
    """The kill runs whose fault landed (the dead worker's)."""
    if runs is None or not len(runs):
        return pd.DataFrame()
    return runs[(runs["fault"] == "kill") & runs["fault_landed"].astype(bool)]


def dead_worker_wait(runs: pd.DataFrame | None, recovery: dict) -> str:
    """How long a dead worker's job waits before it runs again (the module's docstring), from the kill runs that
    landed and the recovery its library declares (default_s and raced_s: as it comes, or its production's; with
    after_declared_dead_s, a recovery that starts once the user declares the worker dead)."""
    kills = _kills(runs)
    if not len(kills):
        return DASH
    if int(kills["failed"].sum()):
        return say("never.failed")
    if recovery.get("off_by_default"):
        return say("never.off", setting=recovery.get("setting") or DASH)
    stuck = int((kills["stuck"] + kills["lost"]).sum()) > 0
    seen = kills["recovery_s"].dropna()
    seen = float(seen.median()) if len(seen) else None
    declared = recovery.get("after_declared_dead_s")
    default = declared if declared is not None else recovery.get("default_s")
    raced = recovery.get("raced_s")
    if missing(default):  # nothing built in, or nothing to set
        return say("never.stuck") if stuck else say("seen", seen=about(seen)) if seen is not None else DASH
    if stuck or seen is None or missing(raced):  # longer than a run here: read in its source only
        return say("read", wait=about(float(default)))
    wait = about(float(default) + max(seen - float(raced), 0.0))
    return say("scaled.declared", wait=wait) if declared is not None else say("scaled", wait=wait)


def production_wait(library: str, production: pd.DataFrame | None) -> str:
    """dead_worker_wait under the library's production setting where its fault runs ran so; else its declared
    production default (read in source); a dash where it declares none."""
    declared = libraries.get(library).PRODUCTION
    if not declared:
        return DASH
    runs = production[production["library"] == library] if production is not None else None
    recovery = declared["recovery"]
    if recovery.get("least_s") is not None:  # raced at the least pair it accepts: what was seen, or that bound
        seen = _kills(runs)["recovery_s"].dropna() if runs is not None and len(_kills(runs)) else ()
        return say("least.seen", wait=about(float(seen.median()))) if len(seen) else \
            say("least", wait=about(float(recovery["least_s"])))
    if runs is not None and len(_kills(runs)):
        return dead_worker_wait(runs, recovery)
    if recovery.get("after_declared_dead_s") is not None:
        return say("declared.on_call", wait=about(float(recovery["after_declared_dead_s"])))
    default = recovery.get("default_s")
    return DASH if missing(default) else say("declared", wait=about(float(default)))


def _completion(row: dict | None, hung: dict | None = None) -> str:
    """A probe row's outcome in a word or two; a dash where the library was not probed so. Where its hold is its
    session (Que, good_job), the row lost its job by its sessions cut, and `hung` (the worker hung and still
    connected) is said beside it."""
    if row is None:
        return DASH
    said = stale_completions.outcome_said(row)
    return said if hung is None else say("completion.both", cut=said, hung=stale_completions.outcome_said(hung))


def _pooler(library: str, verdicts: dict, fixed: set, pooled) -> str:
    """Which PgBouncer mode ran every job once, with the drain rates beside it; a model's is its claim's."""
    claim = f"{libraries.get(library).CLAIM} (claim)" if libraries.is_model(library) else None
    verdict = verdicts.get(claim or library)
    if library in fixed:
        said = say("pooler.with_setting", setting=libraries.documented_setting(library)["setting"])
    else:
        said = {CONFIRMED: say("pooler.either"), CORRECTED: say("pooler.session"),
                NOT_MEASURED: say("pooler.undecided")}.get(verdict, DASH)
    if claim and verdict is not None:
        said = say("pooler.by_claim", said=said)
    rates = library_poolers.rates_said(pooled, library)
    return say("pooler.rates", said=said, rates=rates) if rates and said != DASH else said


def choice_table(mine) -> str:
    """One row per library raced under a fault, probed or drained through the pooler (the module's docstring)."""
    if mine is None:
        return ""
    faults = mine.faults if len(mine.faults) else pd.DataFrame(columns=["library"])
    probed = {row["library"]: row for row in stale_completions.installed(mine.probes)}
    verdicts = library_poolers.library_pooler_verdicts(mine.pooled, mine.claims)
    fixed = library_poolers.libraries_fixed_by_their_setting(mine.pooled)
    names = list(dict.fromkeys([*faults["library"], *probed,
                                *(mine.pooled["library"] if mine.pooled is not None else [])]))
    # real libraries first, then the models, each group as the runs first came
    names = [n for n in names if not libraries.is_model(n)] + [n for n in names if libraries.is_model(n)]
    rows = []
    for library in names:
        runs = faults[faults["library"] == library]
        recovery = runs["recovery"].iloc[0] if len(runs) else {}
        rows.append(dict(zip(COLUMNS, (
            html.escape(library_label(library)), html.escape(dead_worker_wait(runs, recovery)),
            html.escape(production_wait(library, mine.production)),
            html.escape(_completion(probed.get(library), stale_completions.hung(mine.probes, library))),
            html.escape(_completion(stale_completions.in_production(mine.probes, library))),
            html.escape(_pooler(library, verdicts, fixed, mine.pooled))))))
    if not rows:
        return ""
    return table(pd.DataFrame(rows, columns=list(COLUMNS)), caption=say("caption"), css_class="wide", escape=False)
