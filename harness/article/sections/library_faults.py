"""The section "When a worker dies": the job libraries' own workers under an injected fault (A9), and the libraries and
the advisory-lock claims behind PgBouncer in transaction mode against session mode (A10); per library, what to
configure."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.article.analysis import race_summary
from harness.article.findings import (CONFIRMED, CORRECTED, NOT_MEASURED, VERDICT_LABELS, Finding, make_finding,
                                      not_measured)
from harness.article.formats import DASH, count, missing, number, span
from harness.article.prose import join, numbered, table
from harness.article.sections.libraries import jobs_per_run
from harness.article.wording import Sentences
from harness.experiments import registry
from harness.experiments.libraries import load_summary
from harness.storage import read_manifest

NAME = "library_faults"
say = Sentences(NAME)

# What a fault can do wrong to a job, as the ledger marks it (harness.experiments.library_faults); running a job
# twice is not among them: it is what at-least-once execution costs, and is counted apart.
WRONG = ("stuck", "lost", "completed_twice", "completed_by_stale_holder")
MODES = ("session", "transaction")  # the control, then the mode under test


@dataclass(frozen=True)
class Loaded:
    fault_runs: tuple  # the libraries' fault runs (report section library_faults)
    faults: pd.DataFrame  # one row per fault run: its summary, with its recovery settings
    pooled_runs: tuple = ()  # the libraries' drains through PgBouncer (report section library_poolers)
    pooled: pd.DataFrame | None = None  # one row per drain: its summary
    claim_runs: tuple = ()  # races of the advisory-lock claims through PgBouncer (report section pooler_claims)
    claims: pd.DataFrame | None = None  # analysis.race_summary of those races


def _summaries(paths) -> pd.DataFrame:
    rows = []
    for path in paths:
        manifest = read_manifest(path)
        rows.append({**load_summary(path), "run_id": manifest["run_id"],
                     "recovery": manifest["procedure"].get("recovery") or {}})
    return pd.DataFrame(rows)


def load(runs: dict[str, list[Path]], loaded: dict) -> Loaded | None:
    fault_paths = tuple(Path(p) for p in runs.get("library_faults", []))
    pooled_paths = tuple(Path(p) for p in runs.get("library_poolers", []))
    claim_paths = tuple(Path(p) for p in runs.get("pooler_claims", []))
    if not (fault_paths or pooled_paths or claim_paths):
        return None
    return Loaded(fault_paths, _summaries(fault_paths), pooled_paths,
                  _summaries(pooled_paths) if pooled_paths else None, claim_paths,
                  race_summary(list(claim_paths)) if claim_paths else None)


# --------------------------------------------------------------------------- A9


def _landed(faults: pd.DataFrame | None) -> pd.DataFrame | None:
    """The fault runs whose fault was seen to land: the only ones that count."""
    if faults is None or not len(faults):
        return None
    return faults[faults["fault_landed"].fillna(False).astype(bool)]


def _wrong(runs: pd.DataFrame) -> dict[str, int]:
    return {name: int(runs[name].sum()) for name in WRONG}


def a9_a_dead_workers_job_completes_once(faults: pd.DataFrame | None) -> Finding:
    """Per library, a part: corrected where a fault that landed left a job stuck or lost, or completed it twice or by
    a stale holder; not measured where no fault landed, none hit a job, or a job was still running at the bound
    (it might yet have gone either way); confirmed otherwise. A job run twice is the price of at-least-once
    execution, counted in the figures, not a failure."""
    if faults is None or not len(faults):
        return not_measured("A9", say("A9.no_runs"))
    parts, notes = [], []
    for library, runs in faults.groupby("library", sort=False):
        mine = _landed(runs)
        if not len(mine):
            parts.append((library, NOT_MEASURED))
            notes.append(say("A9.not_landed", library=library, faults=join(dict.fromkeys(runs["fault"]))))
            continue
        wrong = _wrong(mine)
        hit, running = int(mine["jobs_hit"].sum()), int(mine["in_progress_at_timeout"].sum())
        if any(wrong.values()):
            parts.append((library, CORRECTED))
            notes.append(_what_went_wrong(library, mine))
        elif running or not hit:
            parts.append((library, NOT_MEASURED))
            notes.append(say("A9.still_running", library=library, jobs=count(running)) if running
                         else say("A9.none_hit", library=library))
        else:
            parts.append((library, CONFIRMED))
    verdicts = {v for _, v in parts}
    verdict = CORRECTED if CORRECTED in verdicts else CONFIRMED if verdicts == {CONFIRMED} else NOT_MEASURED
    landed = _landed(faults)
    hit = landed[landed["jobs_hit_recovered"] > 0] if len(landed) else landed
    if len(hit):
        notes.append(say("A9.at_least_once", twice=count(int(hit["executed_twice"].sum())),
                         recovered=numbered(int(hit["jobs_hit_recovered"].sum()), "job")))
    decided = [name for name, v in parts if v != NOT_MEASURED]
    wrong_names = [name for name, v in parts if v == CORRECTED]
    ours = say("A9.ours", wrong=join(wrong_names) or say("A9.no_library"), libraries=count(len(decided)),
               jobs=count(int(landed["jobs"].sum())), faults=join(dict.fromkeys(landed["fault"]))) if decided else ""
    return make_finding("A9", verdict, ours, notes, {"libraries": count(len(parts))}, parts=tuple(parts))


def _what_went_wrong(library: str, runs: pd.DataFrame) -> str:
    """'procrastinate: after kill, 1 stuck; ...': each fault that did harm, and what."""
    said = []
    for fault, mine in runs.groupby("fault", sort=False):
        harm = [f"{count(n)} {name.replace('_', ' ')}" for name, n in _wrong(mine).items() if n]
        if harm:
            said.append(say("A9.harm", fault=fault, harm=join(harm)))
    return say("A9.wrong", library=library, harm="; ".join(said))


# --------------------------------------------------------------------------- A10


@dataclass(frozen=True)
class PooledPoint:
    """One library's drain, or one claim's race, through the pooler in one mode: what went wrong, and its rate."""

    kind: str  # "library" or "claim"
    name: str
    mode: str
    jobs: int
    ran: int  # jobs run (a drain) or claimed (a race)
    twice: int  # run or claimed twice
    locks_left: int | None  # advisory locks still held on the server at the end
    failed_workers: int | None  # workers that wrote an error (a drain); None where not recorded
    jobs_per_s: float

    @property
    def problems(self) -> list[str]:
        out = []
        if self.twice:
            out.append(say("problem.twice", jobs=count(self.twice)))
        if self.ran < self.jobs:
            out.append(say("problem.not_run", jobs=count(self.jobs - self.ran), of=count(self.jobs)))
        if self.locks_left:
            out.append(say("problem.locks", locks=count(self.locks_left)))
        if self.failed_workers:
            out.append(say("problem.errors", workers=count(self.failed_workers)))
        return out


def _number(value, default=0):
    return default if missing(value) else int(value)


def pooled_points(pooled: pd.DataFrame | None, claims: pd.DataFrame | None) -> list[PooledPoint]:
    """Every library drain and claim race through the pooler, summed over its runs per name and mode."""
    points = []
    if pooled is not None and len(pooled):
        for (name, mode), runs in pooled.groupby(["library", "pooler"], sort=False):
            errors = runs["workers_with_errors"] if "workers_with_errors" in runs else pd.Series(dtype=float)
            points.append(PooledPoint(
                "library", name, mode, int(runs["jobs"].sum()), int(runs["executed"].sum()),
                int(runs["executed_twice"].sum() + runs["duplicate_claims"].sum()),
                int(runs["advisory_locks_left"].fillna(0).sum()),
                None if errors.isna().all() else int(errors.fillna(0).sum()),
                float(runs["jobs_per_s"].median())))
    if claims is not None and len(claims):
        claims = claims.assign(strategy=claims["strategy"].astype(str))
        for (name, mode), runs in claims.groupby(["strategy", "pooler"], sort=False):
            points.append(PooledPoint(
                "claim", name, mode, int(runs["job_count"].sum()),
                int(runs["job_count"].sum() - runs["unclaimed_jobs"].sum()), int(runs["duplicate_jobs"].sum()),
                sum(_number(v) for v in runs["advisory_locks_at_end"]), None,
                float(runs["claims_per_second"].median())))
    return points


def _by_name(points: list[PooledPoint]) -> dict[tuple[str, str], dict[str, PooledPoint]]:
    out: dict = {}
    for point in points:
        out.setdefault((point.kind, point.name), {})[point.mode] = point
    return out


def pooler_verdict(modes: dict[str, PooledPoint]) -> str:
    """Transaction mode against session mode for one library or claim: not measured without both, or where the
    control itself went wrong; corrected where transaction mode went wrong; confirmed where it did not."""
    if not all(mode in modes for mode in MODES) or modes["session"].problems:
        return NOT_MEASURED
    return CORRECTED if modes["transaction"].problems else CONFIRMED


def a10_through_a_transaction_pooler(pooled: pd.DataFrame | None, claims: pd.DataFrame | None) -> Finding:
    """Per library and per claim, a part (pooler_verdict)."""
    grouped = _by_name(pooled_points(pooled, claims))
    if not grouped:
        return not_measured("A10", say("A10.no_runs"))
    parts, notes = [], []
    for (kind, name), modes in grouped.items():
        verdict = pooler_verdict(modes)
        parts.append((name, verdict))
        if verdict == NOT_MEASURED:
            notes.append(say("A10.control_failed", name=name, problems=join(modes["session"].problems))
                         if "session" in modes and modes["session"].problems
                         else say("A10.one_mode", name=name, modes=join(modes)))
    broke = [name for name, verdict in parts if verdict == CORRECTED]
    held = [name for name, verdict in parts if verdict == CONFIRMED]
    verdicts = {v for _, v in parts}
    verdict = CORRECTED if CORRECTED in verdicts else CONFIRMED if verdicts == {CONFIRMED} else NOT_MEASURED
    ours = " ".join(
        ([say("A10.ours_broke", broke=join(broke))] if broke else [])
        + ([say("A10.ours_held", names=join(held))] if held else []))
    return make_finding("A10", verdict, ours, notes, {"names": count(len(parts))}, parts=tuple(parts))


def findings(loaded: dict) -> list[Finding]:
    mine = loaded.get(NAME)
    return [a9_a_dead_workers_job_completes_once(mine.faults if mine is not None else None),
            a10_through_a_transaction_pooler(mine.pooled if mine is not None else None,
                                             mine.claims if mine is not None else None)]


# --------------------------------------------------------------------------- the prose's figures


def duration(seconds) -> str:
    """A setting as a reader sets it: '3 s', '17 min', '4 h'; a dash for none."""
    if missing(seconds):
        return DASH
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:g} s"
    if seconds < 7200:
        return f"{seconds / 60:g} min"
    return f"{seconds / 3600:g} h"


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    mine = loaded.get(NAME)
    out = {}  # the findings' own figures come from the summary section
    faults = mine.faults if mine is not None else pd.DataFrame()
    if len(faults):
        request = registry.request_of("libraries", list(mine.fault_runs))
        described = _fault_text()
        out |= {"lf_faults": "; ".join(described[name] for name in request.faults),
                "lf_workers": count(int(faults["worker_count"].max())), "lf_jobs": count(int(faults["jobs"].max()))}
    else:
        out |= {"lf_faults": DASH, "lf_workers": DASH, "lf_jobs": DASH}
    out["lp_setup"] = _pooler_setup(mine)
    out["lp_pgbouncer"] = _pgbouncer_version(mine)
    return out


def _pgbouncer_version(mine: Loaded | None) -> str:
    """PgBouncer's version as the runs recorded it (a drain's procedure, a race's results)."""
    for path in (*mine.pooled_runs, *mine.claim_runs) if mine is not None else ():
        manifest = read_manifest(path)
        described = manifest["procedure"].get("pooler") or manifest["results"].get("pooler") or {}
        if described.get("pgbouncer"):
            return described["pgbouncer"]
    return DASH


def _pooler_setup(mine: Loaded | None) -> str:
    said = []
    if mine is not None and mine.pooled is not None and len(mine.pooled):
        request = registry.request_of("libraries", list(mine.pooled_runs))
        jobs, fewer = jobs_per_run(mine.pooled)
        said.append(say("setup.libraries", jobs=jobs, fewer=fewer,
                        workers=join([str(w) for w in request.worker_counts])))
    if mine is not None and mine.claims is not None and len(mine.claims):
        request = registry.request_of("race", list(mine.claim_runs))
        said.append(say("setup.claims", claims=join([f"`{s}`" for s in request.strategies]),
                        jobs=count(request.job_count), workers=join([str(w) for w in request.worker_counts])))
    return join(said) if said else say("setup.none")


ADVICE_COLUMNS = ("library", "to run a dead worker's job again", "seen here", "behind PgBouncer")


def advice_table(loaded: dict) -> str:
    """Per library raced under a fault or through the pooler, one row: what to set, what these runs saw, and what
    the pooler verdict says."""
    mine = loaded.get(NAME)
    if mine is None:
        return ""
    faults = mine.faults if len(mine.faults) else pd.DataFrame(columns=["library"])
    pooled = dict(a10_through_a_transaction_pooler(mine.pooled, mine.claims).parts)
    names = list(dict.fromkeys([*faults["library"], *(mine.pooled["library"] if mine.pooled is not None else [])]))
    rows = []
    for library in names:
        runs = faults[faults["library"] == library]
        recovery = runs["recovery"].iloc[0] if len(runs) else {}
        through = {CONFIRMED: say("advice.either_mode"), CORRECTED: say("advice.session_mode"),
                   NOT_MEASURED: say("advice.pooler_not_decided")}.get(pooled.get(library), DASH)
        rows.append(dict(zip(ADVICE_COLUMNS, (
            html.escape(library), _code(_configure_text(duration(recovery.get("default_s"))).get(library, DASH)),
            html.escape(_seen(_landed(runs)) if len(runs) else DASH), html.escape(through)))))
    return table(pd.DataFrame(rows, columns=list(ADVICE_COLUMNS)), caption=say("advice_caption"), escape=False)


def _code(text: str) -> str:
    """A sentence's `names` as code, the rest escaped: for a table cell."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _fault_text() -> dict[str, str]:
    return {"kill": say("fault.kill"), "pause": say("fault.pause"), "terminate": say("fault.terminate"),
            "restart": say("fault.restart")}


def _configure_text(default: str) -> dict[str, str]:
    """What a user of each library sets so a dead worker's job runs again, as its source shows (RECOVERY in
    harness/libraries/<name>.py); `default`: the library's own recovery time."""
    return {"procrastinate": say("configure.procrastinate"), "pgqueuer": say("configure.pgqueuer", default=default),
            "chancy": say("configure.chancy", default=default), "pgmq": say("configure.pgmq", default=default),
            "pgboss": say("configure.pgboss", default=default),
            "graphile_worker": say("configure.graphile_worker", default=default)}


def _seen(runs: pd.DataFrame) -> str:
    """What the fault runs of one library saw: stuck jobs, the recovery time against its setting, stale holders."""
    if runs is None or not len(runs):
        return say("seen.nothing_landed")
    said = []
    wrong = _wrong(runs)
    if wrong["stuck"] + wrong["lost"]:
        said.append(say("seen.stuck", jobs=numbered(wrong["stuck"] + wrong["lost"], "job"),
                        faults=join(runs.loc[runs["stuck"] + runs["lost"] > 0, "fault"].unique())))
    recovered = runs["recovery_s"].dropna()
    if len(recovered):
        said.append(say("seen.recovered", recovery=span(recovered.min(), recovered.max(), lambda v: number(v, 1)),
                        setting=duration(runs["recovery_setting_s"].iloc[0]),
                        twice=numbered(int(runs["executed_twice"].sum()), "job")))
    if wrong["completed_by_stale_holder"] + wrong["completed_twice"]:
        said.append(say("seen.stale", jobs=numbered(wrong["completed_by_stale_holder"] + wrong["completed_twice"], "job")))
    return " ".join(said) if said else say("seen.clean")


# --------------------------------------------------------------------------- the tables


LEDGER_COLUMNS = ("library", "fault", "landed", "completed once", "stuck or lost", "completed twice",
                  "by a stale holder", "ran twice", "worker exits", "recovery s: seen / setting (default)")


def ledger_table(loaded: dict) -> str:
    """One row per library and fault: the ledger of its jobs, summed over its runs."""
    faults = loaded[NAME].faults
    rows = []
    for (library, fault), runs in faults.groupby(["library", "fault"], sort=False):
        landed = runs["fault_landed"].fillna(False).astype(bool)
        recovered = runs["recovery_s"].dropna()
        seen = span(recovered.min(), recovered.max(), lambda v: number(v, 1)) if len(recovered) else DASH
        setting = f"{duration(runs['recovery_setting_s'].iloc[0])} ({duration(runs['recovery_default_s'].iloc[0])})"
        rows.append(dict(zip(LEDGER_COLUMNS, (
            library, fault, f"{int(landed.sum())}/{len(runs)}", int(runs["completed_once"].sum()),
            int((runs["stuck"] + runs["lost"]).sum()), int(runs["completed_twice"].sum()),
            int(runs["completed_by_stale_holder"].sum()), int(runs["executed_twice"].sum()),
            int(runs["worker_exits"].sum()), f"{seen} / {setting}"))))
    return table(pd.DataFrame(rows), caption=say("ledger_caption", jobs=count(int(faults["jobs"].max())),
                                                 workers=count(int(faults["worker_count"].max()))), css_class="wide")


POOLER_COLUMNS = ("library or claim", "jobs/s: session / transaction", "went wrong in session mode",
                  "went wrong in transaction mode", "verdict")


def pooler_table(loaded: dict) -> str:
    """One row per library and claim: each mode's rate and what went wrong, and the part's verdict."""
    mine = loaded[NAME]
    rows = []
    for (kind, name), modes in _by_name(pooled_points(mine.pooled, mine.claims)).items():
        rate = " / ".join(number(modes[m].jobs_per_s, 0) if m in modes else DASH for m in MODES)
        wrong = [join(modes[m].problems) or say("problem.none") if m in modes else DASH for m in MODES]
        rows.append(dict(zip(POOLER_COLUMNS, (name if kind == "library" else f"{name} (claim)", rate, *wrong,
                                              VERDICT_LABELS[pooler_verdict(modes)]))))
    return table(pd.DataFrame(rows, columns=list(POOLER_COLUMNS)), caption=say("pooler_caption"))
