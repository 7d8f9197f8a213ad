"""The libraries and the advisory-lock claims behind PgBouncer, transaction mode against session mode (A10), in the
section "When a worker dies" (harness.article.sections.library_faults, whose Loaded holds the runs: pooled, claims,
and the fault runs' libraries): the verdict per library and claim, PgBouncer's version as the runs recorded it,
the pooler's table and what each library's documentation says about poolers."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

import pandas as pd

from harness import libraries
from harness.article.findings import (CONFIRMED, CORRECTED, NOT_MEASURED, VERDICT_LABELS, Finding, make_finding,
                                      not_measured)
from harness.article.formats import DASH, count, missing, number
from harness.article.labels import library_label, release_said
from harness.article.prose import join, numbered, table
from harness.article.sections.library_runs import jobs_per_run
from harness.article.wording import Sentences
from harness.libraries.catalogue import LIBRARY_STRATEGIES

# not a section of its own (no NAME): library_faults is, and its Loaded holds the runs read here
FAULTS = "library_faults"
SENTENCES = "library_poolers"  # its sentences' file
say = Sentences(SENTENCES)

MODES = ("session", "transaction")  # the control, then the mode under test
# a library's drains in transaction mode with what it documents for a transaction pooler (its POOLER_SETTING), kept
# apart from its defaults' as a mode of its own
DOCUMENTED = "transaction, documented setting"


def code_cell(text: str) -> str:
    """A sentence's `names` as code, the rest escaped: for a table cell."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


@dataclass(frozen=True)
class PooledPoint:
    """One library's drains, or one claim's races, at one worker count through the pooler in one mode: what went
    wrong, summed over its runs, and its median rate."""

    kind: str  # "library" or "claim"
    name: str
    workers: int
    mode: str
    jobs: int
    ran: int  # jobs run (a drain) or claimed (a race)
    run_twice: int | None  # jobs a drain's workers ran twice; None for a race
    claimed_twice: int  # jobs the audit saw claimed twice
    locks_left: int | None  # advisory locks still held on the server at the end (a race; a drain reads them only
    #                         after the pooler and its sessions are gone, so it cannot see one)
    failed_workers: int | None  # drain workers whose error output holds an error; None for a race
    jobs_per_s: float  # over the jobs run, where some were not
    cpu_bound: bool  # any of its runs was (harness.server.activity.cpu_bound)

    @property
    def problems(self) -> list[str]:
        out = []
        if self.run_twice:
            out.append(say("problem.run_twice", jobs=count(self.run_twice)))
        if self.claimed_twice:
            out.append(say("problem.claimed_twice", jobs=count(self.claimed_twice)))
        if self.ran < self.jobs:
            out.append(say("problem.not_run", jobs=count(self.jobs - self.ran), of=count(self.jobs)))
        if self.locks_left:
            out.append(say("problem.locks", locks=numbered(self.locks_left, "advisory lock")))
        if self.failed_workers:
            out.append(say("problem.errors", workers=numbered(self.failed_workers, "worker")))
        return out


def pooled_points(pooled: pd.DataFrame | None, claims: pd.DataFrame | None) -> list[PooledPoint]:
    """Every library's drains and every claim's races through the pooler, per name, worker count and mode."""
    points = []
    if pooled is not None and len(pooled):
        # a drain stored before the setting was one ran with the library's defaults
        chosen = pooled["pooler_setting"].fillna("default") if "pooler_setting" in pooled else "default"
        pooled = pooled.assign(pooler=pooled["pooler"].where(pd.Series(chosen, index=pooled.index) != "documented",
                                                             DOCUMENTED))
        for (name, workers, mode), runs in pooled.groupby(["library", "worker_count", "pooler"], sort=False):
            errors = runs["workers_with_errors"] if "workers_with_errors" in runs else pd.Series(dtype=float)
            points.append(PooledPoint(
                "library", name, int(workers), mode, int(runs["jobs"].sum()), int(runs["executed"].sum()),
                int(runs["executed_twice"].sum()), int(runs["duplicate_claims"].sum()), None,
                None if errors.isna().all() else int(errors.fillna(0).sum()), float(runs["jobs_per_s"].median()),
                _any_bound(runs)))
    if claims is not None and len(claims):
        claims = claims.assign(strategy=claims["strategy"].astype(str))
        for (name, workers, mode), runs in claims.groupby(["strategy", "worker_count", "pooler"], sort=False):
            points.append(PooledPoint(
                "claim", name, int(workers), mode, int(runs["job_count"].sum()),
                int(runs["job_count"].sum() - runs["unclaimed_jobs"].sum()), None, int(runs["duplicate_jobs"].sum()),
                int(sum(0 if missing(v) else v for v in runs["advisory_locks_at_end"])), None,
                float(runs["claims_per_second"].median()), _any_bound(runs)))
    return points


def _any_bound(runs: pd.DataFrame) -> bool:
    return bool(runs["cpu_bound"].map(lambda v: v is True or v == 1).any()) if "cpu_bound" in runs else False


def _grouped(points: list[PooledPoint]) -> dict[tuple[str, str, int], dict[str, PooledPoint]]:
    """{(kind, name, workers): {mode: point}}"""
    out: dict = {}
    for point in points:
        out.setdefault((point.kind, point.name, point.workers), {})[point.mode] = point
    return out


def _part_names(grouped: dict) -> dict[tuple[str, str, int], str]:
    """A part's name: the library's, or the claim's with '(claim)', and its worker count where it has several."""
    several = {(kind, name) for kind, name, _ in grouped
               if sum(1 for k, n, _ in grouped if (k, n) == (kind, name)) > 1}
    return {(kind, name, workers): (name if kind == "library" else f"{name} (claim)")
            + (f" at {workers} workers" if (kind, name) in several else "") for kind, name, workers in grouped}


def _against_session(modes: dict[str, PooledPoint], mode: str) -> str:
    """One transaction-mode arm against session mode: not measured without both, or where the control itself went
    wrong; corrected where the arm went wrong; confirmed where it did not."""
    if mode not in modes or "session" not in modes or modes["session"].problems:
        return NOT_MEASURED
    return CORRECTED if modes[mode].problems else CONFIRMED


def pooler_verdict(modes: dict[str, PooledPoint]) -> str:
    """Transaction mode against session mode for one library or claim, decided on the library's documented setting
    for a transaction pooler where that was raced (a library that works as its documentation says to set it is not
    corrected), else on its defaults."""
    return _against_session(modes, DOCUMENTED if DOCUMENTED in modes else "transaction")


def _outcome(modes: dict[str, PooledPoint], mode: str) -> str:
    """What one transaction-mode arm did, in a few words: ran clean, went wrong (how), or not raced."""
    if mode not in modes:
        return say("A10.outcome.not_raced")
    problems = modes[mode].problems
    return say("A10.outcome.wrong", problems=join(problems)) if problems else say("A10.outcome.clean")


def _both_settings(name: str, library: str, modes: dict[str, PooledPoint]) -> str:
    """A library's part, read both ways: 'defaults: ...; with the documented setting (...): ...', and which decided."""
    setting = libraries.documented_setting(library) if library in libraries.NAMES else None
    if setting is None:
        documented = say("A10.outcome.none_documented")
    else:
        documented = say("A10.outcome.documented", setting=setting["setting"], outcome=_outcome(modes, DOCUMENTED))
    decided = say("A10.decided.documented") if DOCUMENTED in modes else say("A10.decided.defaults")
    return say("A10.both", name=name, defaults=_outcome(modes, "transaction"), documented=documented, decided=decided)


def worst_verdict(verdicts) -> str:
    """CORRECTED where any part is, CONFIRMED where every part is, else NOT_MEASURED (A9 and A10 alike)."""
    verdicts = set(verdicts)
    return CORRECTED if CORRECTED in verdicts else CONFIRMED if verdicts == {CONFIRMED} else NOT_MEASURED


def a10_through_a_transaction_pooler(pooled: pd.DataFrame | None, claims: pd.DataFrame | None,
                                     version: str = DASH) -> Finding:
    """Per library and per claim (and worker count, where several were run), a part (pooler_verdict); each
    library's part read with its defaults and with its documented setting, in the note. version: PgBouncer's, as
    the runs recorded it (pgbouncer_version)."""
    grouped = _grouped(pooled_points(pooled, claims))
    if not grouped:
        return not_measured("A10", say("A10.no_runs"))
    names = _part_names(grouped)
    parts, notes, defaults_broke = [], [], set()  # libraries, not their parts: one may be raced at several counts
    for key, modes in grouped.items():
        verdict = pooler_verdict(modes)
        parts.append((names[key], verdict))
        kind, name, _ = key
        if kind == "library":
            if _against_session(modes, "transaction") == CORRECTED:
                defaults_broke.add(name)
        if verdict == NOT_MEASURED:
            notes.append(say("A10.control_failed", name=names[key], problems=join(modes["session"].problems))
                         if "session" in modes and modes["session"].problems
                         else say("A10.one_mode", name=names[key], modes=join(modes)))
        elif kind == "library":
            notes.append(_both_settings(names[key], name, modes))
    if any(kind == "library" for kind, _, _ in grouped):
        notes.append(say("A10.pgbouncer", version=version))
    # which parts went wrong is in the verdict's label, and how in the pooler table
    ours = say("A10.ours_broke", broke=count(sum(1 for _, v in parts if v == CORRECTED)), parts=count(len(parts)))
    if any(DOCUMENTED in modes for modes in grouped.values()):
        ours += " " + say("A10.ours_defaults", broke=count(len(defaults_broke)))
    return make_finding("A10", worst_verdict(v for _, v in parts), ours, notes, {"names": count(len(parts))},
                        parts=tuple(parts))


def libraries_fixed_by_their_setting(pooled: pd.DataFrame | None) -> set[str]:
    """The libraries that went wrong in transaction mode with their defaults and ran clean, at every worker count,
    with their documented setting."""
    by_name: dict = {}
    for (kind, name, _), modes in _grouped(pooled_points(pooled, None)).items():
        by_name.setdefault(name, []).append(_against_session(modes, "transaction") == CORRECTED
                                            and _against_session(modes, DOCUMENTED) == CONFIRMED)
    return {name for name, fixed in by_name.items() if all(fixed)}


def documented_costs(pooled: pd.DataFrame | None) -> list[tuple[str, PooledPoint, PooledPoint]]:
    """(library, its session-mode drain, its drain in transaction mode with its documented setting) for every
    library raced both ways at one worker count, the dearest setting first (session rate over documented rate)."""
    pairs = [(name, modes["session"], modes[DOCUMENTED])
             for (kind, name, _), modes in _grouped(pooled_points(pooled, None)).items()
             if "session" in modes and DOCUMENTED in modes]
    return sorted(pairs, key=lambda pair: -pair[1].jobs_per_s / max(pair[2].jobs_per_s, 1e-9))


def point_rate(point: PooledPoint) -> str:
    """A drain's rate, marked where it was CPU-bound; where some of its jobs did not run, how many did instead (a
    rate over the jobs a failing drain ran misleads)."""
    if point.ran < point.jobs:
        return say("rates.partial", ran=count(point.ran), jobs=count(point.jobs))
    rate = say("rates.rate", rate=number(point.jobs_per_s, 0))
    return rate + (" " + say("rates.cpu_bound") if point.cpu_bound else "")


def rates_said(pooled: pd.DataFrame | None, library: str) -> str:
    """A library's drain rate in each mode it ran through the pooler (one worker count: its first), one run each:
    printed beside its advice, not judged; where a drain left jobs unrun, how many it ran instead; '' where it did
    not run through it."""
    by_workers = {workers: modes for (kind, name, workers), modes in _grouped(pooled_points(pooled, None)).items()
                  if kind == "library" and name == library}
    if not by_workers:
        return ""
    modes = by_workers[min(by_workers)]
    words = {"session": say("rates.session"), "transaction": say("rates.transaction"),
             DOCUMENTED: say("rates.documented")}
    rates = [say("rates.mode", rate=point_rate(modes[mode]), mode=words[mode])
             for mode in (*MODES, DOCUMENTED) if mode in modes]
    first = next(iter(modes.values()))
    return say("rates.said", rates=join(rates), jobs=count(first.jobs), workers=count(min(by_workers)))


def library_pooler_verdicts(pooled: pd.DataFrame | None, claims: pd.DataFrame | None = None) -> dict[str, str]:
    """Per library drained through the pooler, its worst part over its worker counts; per claim raced through it,
    keyed "<claim> (claim)", the same."""
    by_name: dict = {}
    for (kind, name, _), modes in _grouped(pooled_points(pooled, claims)).items():
        by_name.setdefault(name if kind == "library" else f"{name} (claim)", []).append(pooler_verdict(modes))
    return {name: worst_verdict(verdicts) for name, verdicts in by_name.items()}


def pgbouncer_version(mine) -> str:
    """PgBouncer's version as the runs recorded it (a drain's procedure, a race's results)."""
    for run in (*mine.pooled_runs, *mine.claim_runs):
        described = run.procedure.get("pooler") or run.results.get("pooler") or {}
        if described.get("pgbouncer"):
            return described["pgbouncer"]
    return DASH


def pooler_setup(mine) -> str:
    """Which PgBouncer, and what went through it; or that nothing did."""
    said = []
    if mine is not None and mine.pooled is not None and len(mine.pooled):
        request = mine.requests["library_poolers"]
        jobs, fewer = jobs_per_run(mine.pooled)
        said.append(say("setup.libraries", jobs=jobs, fewer=fewer,
                        workers=join([str(w) for w in request.worker_counts])))
        documented = sorted(set(mine.pooled["library"][mine.pooled["pooler_setting"] == "documented"])
                            if "pooler_setting" in mine.pooled else ())
        if documented:
            said.append(say("setup.documented", settings=join(
                [f"{name}: `{libraries.documented_setting(name)['setting']}`" for name in documented])))
    if mine is not None and mine.claims is not None and len(mine.claims):
        request = mine.requests["pooler_claims"]
        said.append(say("setup.claims", claims=join([f"`{s}`" for s in request.strategies]),
                        jobs=count(request.job_count), workers=join([str(w) for w in request.worker_counts]),
                        repeats=count(request.repeats)))
    if not said:
        return say("setup.no_pooler")
    return say("setup.pooler", version=pgbouncer_version(mine), what=join(said))



POOLER_COLUMNS = ("library or claim", "jobs/s: session / transaction", "went wrong in session mode",
                  "went wrong in transaction mode", "verdict")
# where a library ran in transaction mode with its documented setting too (DOCUMENTED): the rate's third figure and
# that arm's column
RATE_DOCUMENTED = "jobs/s: session / transaction / documented setting"
WRONG_DOCUMENTED = "went wrong with its documented setting"


def pooler_table(loaded: dict) -> str:
    """One row per library and claim (and worker count): each mode's rate and what went wrong, and the verdict."""
    mine = loaded.get(FAULTS)
    if mine is None:
        return ""
    grouped = _grouped(pooled_points(mine.pooled, mine.claims))
    if not grouped:
        return ""
    names = _part_names(grouped)
    # the documented setting's arm, where any library ran it: its own rate and what went wrong, beside the defaults'
    shown = (*MODES, DOCUMENTED) if any(DOCUMENTED in modes for modes in grouped.values()) else MODES
    columns = ((POOLER_COLUMNS[0], RATE_DOCUMENTED, *POOLER_COLUMNS[2:4], WRONG_DOCUMENTED, POOLER_COLUMNS[-1])
               if DOCUMENTED in shown else POOLER_COLUMNS)
    rows = []
    for key, modes in grouped.items():
        rate = " / ".join(number(modes[m].jobs_per_s, 0) + (" (CPU-bound)" if modes[m].cpu_bound else "")
                          if m in modes else DASH for m in shown)
        wrong = [join(modes[m].problems) or say("problem.none") if m in modes else DASH for m in shown]
        rows.append(dict(zip(columns, (names[key], rate, *wrong, VERDICT_LABELS[pooler_verdict(modes)]))))
    caption = say("pooler_caption") + (" " + say("pooler_caption_documented") if DOCUMENTED in shown else "")
    return table(pd.DataFrame(rows, columns=list(columns)), caption=caption)


DOCS_COLUMNS = ("library", "what its documentation says about poolers", "read at")


def _docs() -> dict[str, tuple[str, str]]:
    """Per library, what its own documentation says about PgBouncer and poolers, and where that was read."""
    docs, where = (say.each("docs", LIBRARY_STRATEGIES, own=release_said),
                   say.each("docs_where", LIBRARY_STRATEGIES, own=release_said))
    return {name: (docs[name], where[name]) for name in LIBRARY_STRATEGIES}


def pooler_docs_table(loaded: dict) -> str:
    """Per library raced under a fault or through the pooler (a model's claim through it), what its documentation
    says about poolers."""
    mine = loaded.get(FAULTS)
    if mine is None:
        return ""
    names = [*mine.faults.get("library", []), *(mine.pooled["library"] if mine.pooled is not None else [])]
    docs = _docs()
    rows = [dict(zip(DOCS_COLUMNS, (html.escape(library_label(name)), code_cell(docs[name][0]), code_cell(docs[name][1]))))
            for name in dict.fromkeys(names) if name in docs]
    if not rows:
        return ""
    return table(pd.DataFrame(rows, columns=list(DOCS_COLUMNS)), caption=say("docs_caption"), escape=False)

