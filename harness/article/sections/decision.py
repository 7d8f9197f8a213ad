"""The decision the page opens with: if you ..., use ..., because ..., each row read off the verdicts and figures
of the findings it rests on, and the point they were measured at. A row whose findings do not bear the advice out
says so instead of giving it."""

from __future__ import annotations

import pandas as pd

from harness.article.findings import (CONFIRMED, CORRECTED, HOLDS, NOT_DISTINGUISHABLE, NOT_MEASURED, VERDICT_LABELS,
                                      Finding)
from harness.article.formats import count
from harness.article.labels import library_label
from harness.article.prose import counted, join, table
from harness.article.sections.library_poolers import documented_costs, pgbouncer_version, point_rate
from harness.article.wording import Sentences

NAME = "decision"
READS = ()  # it reads the findings
UPSTREAM = ("races", "library_faults")
say = Sentences(NAME)

COLUMNS = ("If you", "use", "because", "measured at")


def load(reads: dict, loaded: dict):
    return None


def findings(loaded: dict) -> list[Finding]:
    return []


def _int(text: str) -> int:
    """A count as the findings format it ('1,234')."""
    return int(str(text).replace(",", ""))


def _parts(finding: Finding) -> dict[str, str]:
    return dict(finding.parts)


def _undecided(if_you: str, *rested_on: Finding) -> dict:
    """A row whose findings do not bear its advice out: it names them and their verdicts."""
    verdicts = join([f"{f.id} {VERDICT_LABELS[f.verdict]}" for f in rested_on]) or say("undecided.none")
    return {"If you": if_you, "use": say("undecided.use"), "because": say("undecided.because", verdicts=verdicts),
            "measured at": ""}


def claim_row(found: dict[str, Finding], sweep: dict, repeats: int = 2) -> dict:
    """SKIP LOCKED in the pick: where F7's safety parts hold (no duplicates, no wasted attempts over the whole sweep)
    and its speed part did not find it slower. Its speed against a guarded UPDATE is given where it was told apart,
    and said in plain words where it was not (not distinguishable) or could not be (every point with contention
    CPU-bound, or none raced); F8's wait for a job is added where it was lower in every repeat. With one race a
    side (repeats) a speed and a wait have no spread to judge by: they are printed as one race's."""
    f7 = found.get("F7")
    parts = _parts(f7) if f7 else {}
    safe = ("no duplicates", "no wasted attempts")
    faster = parts.get("faster under contention", NOT_MEASURED)
    if f7 is None or any(parts.get(part) != CONFIRMED for part in safe) or faster not in SPEEDS:
        return _undecided(say("claim.if"), *([f7] if f7 else []))
    v = f7.values
    if faster == CONFIRMED and repeats < 2:
        speed = say("claim.one_race", speedup=v["speedup"])
        at = say("claim.at", workers=v["workers"], **sweep)
    elif faster == CONFIRMED:
        speed = say("claim.faster", speedup=v["speedup"])
        at = say("claim.at", workers=v["workers"], **sweep)
    elif faster == NOT_DISTINGUISHABLE:
        speed = say("claim.not_told_apart", workers=v["workers"])
        at = say("claim.at", workers=v["workers"], **sweep)
    else:
        speed = (say("claim.untested_bound", bound=v["bound_workers"]) if v.get("bound_workers")
                 else say("claim.untested"))
        at = say("claim.at_sweep", **sweep)
    f8 = found.get("F8")
    wait = (say("claim.wait")
            if f8 is not None and f8.values.get("job_order") == "lower" and repeats >= 2 else "")
    return {"If you": say("claim.if"), "use": say("claim.use"),
            "because": say("claim.because", duplicates=v["duplicate_jobs"], wasted=v["wasted"],
                           attempts=v["attempts"], speed=speed, wait=wait),
            "measured at": at}


# the speed part's verdicts under which the row still advises SKIP LOCKED: faster, or not told apart or not tested
# (said so in the row); slower in every repeat leaves the row undecided
SPEEDS = (CONFIRMED, NOT_DISTINGUISHABLE, NOT_MEASURED)


def guard_row(found: dict[str, Finding], sweep: dict) -> dict:
    """The status re-check in the UPDATE: where naive shared jobs (F1) and guarded never did (F4)."""
    f1, f4 = found.get("F1"), found.get("F4")
    if f1 is None or f4 is None or f1.verdict not in HOLDS or f4.verdict != CONFIRMED:
        return _undecided(say("guard.if"), *[f for f in (f1, f4) if f])
    return {"If you": say("guard.if"), "use": say("guard.use"),
            "because": say("guard.because", share=f1.values["share"],
                           duplicates=f4.values["duplicate_jobs"], attempts=f4.values["attempts"]),
            "measured at": say("guard.at", workers=f1.values["workers"], job_count=f1.values["job_count"],
                               runs=f4.values["runs"])}


def index_row(found: dict[str, Finding]) -> dict:
    """The partial index on pending rows: where F9 holds (a half-drained claim walks the taken rows without it)."""
    f9 = found.get("F9")
    if f9 is None or f9.verdict not in HOLDS:
        return _undecided(say("index.if"), *([f9] if f9 else []))
    v = f9.values
    return {"If you": say("index.if"), "use": say("index.use"),
            "because": say("index.because", without=v["without_first_scan_buffers"],
                           with_index=v["with_first_scan_buffers"], cut=v["first_scan_cut"]),
            "measured at": say("index.at", job_count=v["job_count"], consumed=v["consumed"])}


def lease_row(found: dict[str, Finding]) -> dict:
    """A lease, and a finish that checks the holder or a fencing token: where C7's parts hold (a dead runner's run
    stays running; a lease hands it on) and the checked finishes let no stale holder through. A check that did let
    one through is left out of the advice; with neither clean, the row is undecided."""
    c7 = found.get("C7")
    if c7 is None or c7.verdict != CONFIRMED:
        return _undecided(say("lease.if"), *([c7] if c7 else []))
    v = c7.values
    checks = say.each("lease", ("holder", "fenced"))
    clean = [checks[check] for check in checks if _int(v[f"{check}_runs"]) > 0 and _int(v[f"{check}_bad"]) == 0]
    if not clean:
        return _undecided(say("lease.if"), c7)
    # a run handed on from a holder that had started it is done twice: the reader's jobs must be safe to repeat
    twice = ("" if "ran_twice" not in v else
             say("lease.ran_twice", twice=v["ran_twice"], runs=v["checked_runs"]) if _int(v["ran_twice"]) else
             say("lease.none_twice", runs=v["checked_runs"]))
    return {"If you": say("lease.if"), "use": say("lease.use", checks=" or ".join(clean)),
            "because": say("lease.because", stuck=v["stuck"], stale=v["stale"], holder_bad=v["holder_bad"],
                           holder_runs=v["holder_runs"], fenced_bad=v["fenced_bad"], fenced_runs=v["fenced_runs"],
                           twice=twice),
            "measured at": say("lease.at")}


def pooler_row(found: dict[str, Finding], version: str, costs: list | None = None) -> dict:
    """Session mode (or no pooler) for a job library: where some library or claim went wrong through the
    transaction pooler (A10's parts) and the control ran clean. Where none went wrong, the row says transaction
    mode ran clean here. costs (library_poolers.documented_costs): each library's drain rate through the
    transaction pooler with its documented setting beside session mode's, the dearest first, of which the row gives
    the dearest. Before PgBouncer 1.21 the
    row says that later releases can keep prepared statements, which these runs do not test."""
    a10 = found.get("A10")
    if a10 is None or a10.verdict == NOT_MEASURED or not a10.parts:
        return _undecided(say("pooler.if"), *([a10] if a10 else []))
    wrong = [part for part, verdict in a10.parts if verdict == CORRECTED]
    decided = [part for part, verdict in a10.parts if verdict in (CONFIRMED, CORRECTED)]
    at = say("pooler.at", version=version) + (say("pooler.later_releases") if _before_1_21(version) else "")
    if not wrong:
        return {"If you": say("pooler.if"), "use": say("pooler.use_either"),
                "because": say("pooler.because_clean", names=count(len(decided))),
                "measured at": at}
    # the dearest documented setting's rate beside session mode's (the per-library table gives every library's):
    # one run each, so printed, not judged
    cost = ""
    if costs:
        name, session, documented = costs[0]
        cost = say("pooler.cost", library=library_label(name), session=point_rate(session),
                   documented=point_rate(documented))
    return {"If you": say("pooler.if"), "use": say("pooler.use_session"),
            "because": say("pooler.because", wrong=count(len(wrong)), names=count(len(decided)),
                           which=_which(wrong), cost=cost),
            "measured at": at}


def _which(parts: list[str]) -> str:
    """A10's parts that went wrong, libraries first, then the claims together: "chancy and the que, oban claims"."""
    claims = [part.removesuffix(" (claim)") for part in parts if part.endswith(" (claim)")]
    libraries_wrong = [part for part in parts if not part.endswith(" (claim)")]
    named = [say("pooler.claims", names=join(claims))] if len(claims) > 1 else \
        [say("pooler.claim", name=claims[0])] if claims else []
    return join(libraries_wrong + named)


def _before_1_21(version: str) -> bool:
    """Whether a PgBouncer version ("1.18.0") predates 1.21, the first to keep prepared statements in transaction
    mode (its changelog); an unknown version is not said to."""
    try:
        return tuple(int(part) for part in version.split(".")[:2]) < (1, 21)
    except ValueError:
        return False


def horizon_row(found: dict[str, Finding]) -> dict:
    """A timeout on long transactions: where a held horizon slowed some table whose control did not (a confirmed
    part of A11) and the timeout kept that arm from falling behind, with the hold it took and the model's hold at
    a lower rate where a fit exists. Where the timeout did not save it, the row says so instead of advising it."""
    a11 = found.get("A11")
    parts = a11.parts if a11 is not None and a11.parts else ((a11.id, a11.verdict),) if a11 is not None else ()
    if a11 is None or not any(v == CONFIRMED for _, v in parts) or "mitigation_helped" not in a11.values:
        return _undecided(say("horizon.if"), *([a11] if a11 else []))
    v = a11.values
    if v["mitigation_helped"] != "True":
        return {"If you": say("horizon.if"), "use": say("undecided.use"), "because": say("horizon.not_saved", **v),
                "measured at": say("horizon.at", **v)}
    because = say("horizon.because", **v) if "model_hold" in v else say("horizon.because_model_off", **v) \
        if "model_off" in v else say("horizon.because_no_model", **v)
    return {"If you": say("horizon.if"), "use": say("horizon.use", setting=v["mitigation"]),
            "because": because, "measured at": say("horizon.at", **v)}


def rows(found: dict[str, Finding], sweep: dict, version: str, costs: list | None = None,
         repeats: int = 2) -> pd.DataFrame:
    return pd.DataFrame([claim_row(found, sweep, repeats), guard_row(found, sweep), index_row(found), lease_row(found),
                         pooler_row(found, version, costs), horizon_row(found)], columns=list(COLUMNS))


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    races = loaded.get("races")
    facts = races.facts if races is not None else {"job_count": 0, "repeats": 0}
    sweep = {"job_count": count(facts["job_count"]), "races": counted(facts["repeats"], "race")}
    faults = loaded.get("library_faults")
    version = pgbouncer_version(faults) if faults is not None else ""
    costs = documented_costs(faults.pooled) if faults is not None else []
    return {"decision_table": table(rows(found, sweep, version, costs, int(facts["repeats"])), css_class="decision",
                                    escape=False)}
