"""The wait for a job: its tail against a winning claim's (C4), guarded's against skip_locked's (A1)."""

from __future__ import annotations

import pandas as pd

from harness.article.compare import scaled, separated
from harness.article.findings import (ADDED, CONFIRMED, Finding, NOT_DISTINGUISHABLE, NOT_REPRODUCED, make_finding,
                                      not_measured)
from harness.article.formats import count, ms, number, ratio
from harness.article.prose import cpu_bound_note
from harness.article.sections.race_sweep import job_wait_figures, race_data, waits_workers
from harness.article.wording import Sentences

NAME = "job_wait"
READS = ()
UPSTREAM = ("races",)
say = Sentences(NAME)


def _waits_cpu_bound(job_waits: pd.DataFrame | None, strategies, least: int = 2) -> list[int]:
    """The worker counts waits_workers leaves out because a race there was CPU-bound."""
    every = set(waits_workers(job_waits, strategies, least, cpu_free=False))
    return sorted(every - set(waits_workers(job_waits, strategies, least)))


C4_FATTER = 2.0


def c4_wait_for_a_job(job_waits: pd.DataFrame | None) -> Finding:
    contended = waits_workers(job_waits, ("guarded",))
    skipped = cpu_bound_note(_waits_cpu_bound(job_waits, ("guarded",)))
    if not contended:
        return not_measured("C4", say("C4.none", skipped=skipped))
    w = contended[-1]
    wait, claim = (job_wait_figures(job_waits, "guarded", w, c) for c in ("wait_p99_ms", "claim_p99_ms"))
    fatter = wait.median / claim.median
    values = {"workers": count(w), "wait_p99": wait.text(ms), "claim_p99": claim.text(ms), "ratio": ratio(fatter),
              "wait_p50": job_wait_figures(job_waits, "guarded", w, "wait_p50_ms").text(ms),
              "claim_p50": job_wait_figures(job_waits, "guarded", w, "claim_p50_ms").text(ms)}
    ours = say("C4.ours", workers=w, wait_p99=wait.text(ms), ratio=ratio(fatter))
    # every repeat's wait against C4_FATTER times every repeat's winning claim
    beyond = separated(wait, scaled(claim, C4_FATTER))
    if beyond > 0:
        return make_finding("C4", CONFIRMED, ours, skipped, values, [w])
    if beyond == 0:
        return make_finding("C4", NOT_DISTINGUISHABLE, ours,
                        [say("C4.spans", fatter=number(C4_FATTER, 0)), skipped], values, [w])
    return make_finding("C4", NOT_REPRODUCED, ours,
                    [say("C4.within", fatter=number(C4_FATTER, 0), workers=w), skipped], values, [w])


def a1_time_to_get_a_job(job_waits: pd.DataFrame | None) -> Finding:
    contended = waits_workers(job_waits, ("guarded", "skip_locked"))
    skipped = cpu_bound_note(_waits_cpu_bound(job_waits, ("guarded", "skip_locked")))
    if not contended:
        return not_measured("A1", say("A1.none", skipped=skipped))
    pairs = [(w, job_wait_figures(job_waits, "guarded", w, "wait_p99_ms"),
              job_wait_figures(job_waits, "skip_locked", w, "wait_p99_ms")) for w in contended]
    ours = say("A1.ours", points=", ".join(
        say("A1.point", guarded_p99=g.text(ms), skip_locked_p99=s.text(ms), workers=w) for w, g, s in pairs))
    w, guarded, skip = pairs[-1]
    values = {"workers": count(w), "guarded_p99": guarded.text(ms), "skip_locked_p99": skip.text(ms),
              "ratio": ratio(guarded.median / skip.median)}
    order = {-1: say("A1.lower"), 1: say("A1.higher"), 0: say("A1.overlap")}[separated(skip, guarded)]
    return make_finding("A1", ADDED, ours,
                    [say("A1.note", workers=w, order=order, ratio=ratio(guarded.median / skip.median)), skipped],
                    values, contended)


# --------------------------------------------------------------------------- the section


def load(reads: dict, loaded: dict) -> None:
    """Nothing of its own: it reads the sweep the races section loaded."""
    return None


def findings(loaded: dict) -> list[Finding]:
    """C4 and A1 from each race's attempts."""
    job_waits = race_data(loaded).job_waits
    return [c4_wait_for_a_job(job_waits), a1_time_to_get_a_job(job_waits)]


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    """None beyond its findings' own: the prose under its heading names the findings' figures."""
    return {}
