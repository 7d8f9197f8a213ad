"""The section "When a worker dies": the job libraries' own workers under an injected fault (A9), and the libraries and
the advisory-lock claims behind PgBouncer in transaction mode against session mode (A10, read by
harness.article.sections.library_poolers from this section's runs); per library, what to configure."""

from __future__ import annotations

import html
from dataclasses import dataclass

import pandas as pd

from harness import libraries
from harness.article.analysis import race_summary
from harness.article.findings import CONFIRMED, CORRECTED, NOT_MEASURED, Finding, make_finding, not_measured
from harness.article.formats import DASH, count, missing, number, span
from harness.article.labels import library_label, release_said
from harness.article.prose import join, numbered, table
from harness.article.sections import library_choice, library_poolers, stale_completions
from harness.article.sections.library_poolers import code_cell
from harness.article.wording import Sentences
from harness.libraries.catalogue import LIBRARY_STRATEGIES
from harness.storage import open_runs

NAME = "library_faults"
READS = ("library_faults", "library_poolers", "pooler_claims", "library_probe")
UPSTREAM = ()
say = Sentences(NAME)

# What a fault can do wrong to a job, as the ledger marks it (harness.experiments.libraries.faults); running a job
# twice is not among them: it is what at-least-once execution costs, and is counted apart.
WRONG = ("stuck", "failed", "lost", "completed_twice", "completed_by_stale_holder")


def _column(runs: pd.DataFrame, name: str) -> pd.Series:
    """A ledger count per run; 0 for a run stored before the ledger had it (failed: those runs called it stuck)."""
    return runs[name].fillna(0) if name in runs else pd.Series(0, index=runs.index)


@dataclass(frozen=True)
class Loaded:
    fault_runs: tuple  # the libraries' fault runs (report section library_faults)
    faults: pd.DataFrame  # one row per fault run: its summary, with its recovery settings
    pooled_runs: tuple = ()  # the libraries' drains through PgBouncer (report section library_poolers)
    pooled: pd.DataFrame | None = None  # one row per drain: its summary
    claim_runs: tuple = ()  # races of the advisory-lock claims through PgBouncer (report section pooler_claims)
    claims: pd.DataFrame | None = None  # analysis.race_summary of those races
    requests: dict | None = None  # what each of those params-file sections asked: {section: its dataclass}
    # one row per library over the stale-completion probe's runs (stale_completions.probes)
    probes: tuple = ()
    # the fault runs under a library's production setting (its PRODUCTION), kept out of faults: A9 and the ledger
    # read each library as it comes, the advice reads these beside them
    production: pd.DataFrame | None = None


def _summaries(paths) -> pd.DataFrame:
    """One row per run: its summary, its recovery settings and, for a fault run, the pause, the job's length, the
    supervisor's restart delay and its stuck jobs that never started (from its ledger)."""
    rows = []
    for run in open_runs(paths):
        procedure = run.procedure
        row = {**run.summary, "run_id": run.run_id, "recovery": procedure.get("recovery") or {}}
        if run.has_table("ledger"):
            jobs = run.table("ledger")
            row |= {"stuck_unstarted": int(((jobs["state"] == "stuck") & (jobs["starts"] == 0)).sum()),
                    "pause_s": (procedure.get("fault") or {}).get("pause_s"), "job_s": procedure.get("job_s"),
                    "restart_delay_s": (procedure.get("supervisor") or {}).get("restart_delay_s")}
        rows.append(row)
    return pd.DataFrame(rows)


def load(reads: dict, loaded: dict) -> Loaded | None:
    fault_paths, pooled_paths, claim_paths = (reads[name].runs if name in reads else () for name in READS[:3])
    probes = stale_completions.probes(reads)
    if not (fault_paths or pooled_paths or claim_paths or probes):
        return None
    faults = _summaries(fault_paths)
    # a run stored before runs recorded their setting ran the library as it comes
    production = faults["setting"].fillna("default") == "production" if "setting" in faults else \
        pd.Series(False, index=faults.index)
    return Loaded(fault_paths, faults[~production], pooled_paths,
                  _summaries(pooled_paths) if pooled_paths else None, claim_paths,
                  race_summary(list(claim_paths)) if claim_paths else None,
                  {name: asked.request for name, asked in reads.items()}, probes,
                  faults[production] if production.any() else None)


# --------------------------------------------------------------------------- A9


def _landed(faults: pd.DataFrame | None) -> pd.DataFrame | None:
    """The fault runs whose fault was seen to land: the only ones that count."""
    if faults is None or not len(faults):
        return None
    return faults[faults["fault_landed"].fillna(False).astype(bool)]


def _judged(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs with each stuck job split three ways: never started by the bound (the fault did not hold it up),
    censored (the library's recovery is set past the time the run waited: it may yet come), and stuck for good
    (nothing recovers it, or its recovery had the time and did not)."""
    unstarted = runs["stuck_unstarted"].fillna(0) if "stuck_unstarted" in runs else pd.Series(0, index=runs.index)
    started = runs["stuck"] - unstarted
    waited = runs["waited_s"] if "waited_s" in runs else pd.Series(float("nan"), index=runs.index)
    then = runs["recovery_then_s"].fillna(0.0) if "recovery_then_s" in runs else 0.0  # a retry's backoff, a pass
    past = runs["recovery_setting_s"].notna() & waited.notna() & (runs["recovery_setting_s"] + then > waited)
    return runs.assign(stuck_unstarted=unstarted, stuck_censored=started.where(past, 0),
                       stuck_for_good=started.where(~past, 0))


def _tally(runs: pd.DataFrame) -> tuple[dict[str, int], dict[str, int]]:
    """(what went wrong: WRONG, stuck counting only jobs stuck for good; what is undecided at the end)."""
    judged = _judged(runs)
    wrong = {"stuck": int(judged["stuck_for_good"].sum()),
             **{name: int(_column(runs, name).sum()) for name in WRONG if name != "stuck"}}
    undecided = {"running": int(runs["in_progress_at_timeout"].sum()),
                 "censored": int(judged["stuck_censored"].sum()), "unstarted": int(judged["stuck_unstarted"].sum())}
    return wrong, undecided


def _libraries(n: int) -> str:
    return f"{count(n)} {'library' if n == 1 else 'libraries'}"


def a9_a_dead_workers_job_completes_once(faults: pd.DataFrame | None, probes=()) -> Finding:
    """Per library, a part: corrected where a fault that landed left a job stuck for good (nothing recovers it, or
    its recovery had the time) or lost, or completed it twice or by a stale holder, or where the stale-completion
    probe saw a worker that had lost its job complete it while another ran it (probe_verdict); not measured where no
    fault landed, none hit a job, or a job was undecided at the bound (still running, never started, or waiting for
    a recovery set past the time the run waited); confirmed otherwise. A job run twice is the price of
    at-least-once execution, counted, not held against the library. probes: probe_outcomes.per_library's rows."""
    by_probe = {row["library"]: row for row in stale_completions.installed(probes)}
    if (faults is None or not len(faults)) and not by_probe:
        return not_measured("A9", say("A9.no_runs"))
    faults = faults if faults is not None and len(faults) else pd.DataFrame(columns=["library", "fault"])
    parts, notes = [], []
    for library in dict.fromkeys([*faults["library"], *by_probe]):
        runs, probed = faults[faults["library"] == library], by_probe.get(library)
        mine, name = _landed(runs) if len(runs) else runs, library_label(library)
        verdicts = [stale_completions.probe_verdict(probed)] if stale_completions.probe_verdict(probed) else []
        if not len(runs):
            pass
        elif not len(mine):
            verdicts.append(NOT_MEASURED)
            notes.append(say("A9.not_landed", library=name,
                             faults=join(dict.fromkeys(map(fault_said, runs["fault"])))))
        else:
            wrong, undecided = _tally(mine)
            if any(wrong.values()):
                verdicts.append(CORRECTED)
                notes.append(_what_went_wrong(name, mine))
            elif any(undecided.values()) or not int(mine["jobs_hit"].sum()):
                verdicts.append(NOT_MEASURED)
                notes.append(_why_undecided(name, mine, undecided))
            else:
                verdicts.append(CONFIRMED)
        parts.append((name, library_poolers.worst_verdict(verdicts) if verdicts else NOT_MEASURED))
    notes = stale_completions.a9_notes(stale_completions.installed(probes)) + notes
    decided = [name for name, v in parts if v != NOT_MEASURED]
    counted_runs = _landed(faults) if len(faults) else faults.assign(executed_twice=[], jobs_hit=[])
    counted_runs = counted_runs[counted_runs["library"].map(library_label).isin(decided)]
    twice = int(counted_runs["executed_twice"].sum())
    if twice:
        notes.append(say("A9.at_least_once", twice=numbered(twice, "job")))
    # what decided: the jobs the faults hit, in how many runs, and the probes that handed the job on
    evidence = [say("A9.ours.faults", hit=numbered(int(counted_runs["jobs_hit"].sum()), "job"),
                    faults=join(dict.fromkeys(map(fault_said, counted_runs["fault"]))),
                    runs=numbered(len(counted_runs), "run"))] \
        if len(counted_runs) else []
    probed = sum(row["handed_on"] for row in stale_completions.installed(probes)
                 if library_label(row["library"]) in decided)
    evidence += [say("A9.ours.probes", probes=count(probed))] if probed else []
    ours = say("A9.ours", wrong=count(sum(1 for _, v in parts if v == CORRECTED)), libraries=_libraries(len(decided)),
               evidence="; ".join(evidence)) if decided else ""
    return make_finding("A9", library_poolers.worst_verdict(v for _, v in parts), ours, notes, {"libraries": count(len(parts))},
                        parts=tuple(parts))


def _why_undecided(library: str, runs: pd.DataFrame, undecided: dict[str, int]) -> str:
    if undecided["censored"]:
        return say("A9.censored", library=library, jobs=numbered(undecided["censored"], "job"),
                   waited=number(runs["waited_s"].max(), 0), setting=duration(runs["recovery_setting_s"].max()))
    if undecided["running"]:
        return say("A9.still_running", library=library, jobs=numbered(undecided["running"], "job"))
    if undecided["unstarted"]:
        return say("A9.never_started", library=library, jobs=numbered(undecided["unstarted"], "job"))
    return say("A9.none_hit", library=library)


def _what_went_wrong(library: str, runs: pd.DataFrame) -> str:
    """'procrastinate: after kill, 1 stuck; ...': each fault that did harm, and what."""
    said = []
    for fault, mine in runs.groupby("fault", sort=False):
        harm = [f"{count(n)} {name.replace('_', ' ')}" for name, n in _tally(mine)[0].items() if n]  # stuck: for good
        if harm:
            said.append(say("A9.harm", fault=fault_said(fault), harm=join(harm)))
    return say("A9.wrong", library=library, harm="; ".join(said))


def findings(loaded: dict) -> list[Finding]:
    mine = loaded.get(NAME)
    return [a9_a_dead_workers_job_completes_once(mine.faults if mine is not None else None,
                                                 mine.probes if mine is not None else ()),
            library_poolers.a10_through_a_transaction_pooler(
                mine.pooled if mine is not None else None, mine.claims if mine is not None else None,
                library_poolers.pgbouncer_version(mine) if mine is not None else DASH)]


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
    faults = mine.faults if mine is not None else pd.DataFrame()
    if not len(faults):
        return {"lf_setup": say("setup.no_faults"), "lp_setup": library_poolers.pooler_setup(mine),
                "lf_models_caveat": _models_caveat(faults)}
    request = mine.requests["library_faults"]
    def paused(fault: str) -> str:
        lengths = faults.loc[faults["fault"] == fault, "pause_s"].dropna() if "pause_s" in faults else ()
        return span(min(lengths), max(lengths), lambda v: number(v, 1)) if len(lengths) else DASH

    described = {"kill": say("fault.kill"), "terminate": say("fault.terminate"), "restart": say("fault.restart"),
                 "pause": say("fault.pause", pause=paused("pause")),
                 "short_pause": say("fault.short_pause", pause=paused("short_pause"))}
    setup = say("setup.faults", workers=count(int(faults["worker_count"].max())),
                jobs=count(int(faults["jobs"].max())), job_s=duration(faults["job_s"].max()),
                faults="; ".join(described[name] for name in request.faults),
                restart=duration(faults["restart_delay_s"].max()))
    return {"lf_setup": setup, "lp_setup": library_poolers.pooler_setup(mine), "lf_models_caveat": _models_caveat(faults)}


def fault_said(fault: str) -> str:
    """A fault's name in a sentence: short_pause as "short pause"."""
    return fault.replace("_", " ")


def _models_caveat(faults: pd.DataFrame) -> str:
    """For "What doesn't this prove?": which libraries ran as models, not as their own code."""
    models = [name for name in dict.fromkeys(faults.get("library", [])) if libraries.is_model(name)]
    return say("models_caveat", models=join(models)) if models else say("no_models_caveat")


def choice_table(loaded: dict) -> str:
    """The table a reader picks a library from (library_choice)."""
    return library_choice.choice_table(loaded.get(NAME))


ADVICE_COLUMNS = ("library", "to run a dead worker's job again", "seen here", "a stale holder's completion",
                  "behind PgBouncer")


def advice_table(loaded: dict) -> str:
    """Per library raced under a fault or through the pooler, one row: what to set, what these runs saw, and what
    its pooler verdict says."""
    mine = loaded.get(NAME)
    if mine is None:
        return ""
    faults = mine.faults if len(mine.faults) else pd.DataFrame(columns=["library"])
    pooled = library_poolers.library_pooler_verdicts(mine.pooled, mine.claims)
    fixed = library_poolers.libraries_fixed_by_their_setting(mine.pooled)
    probed = {row["library"]: row for row in stale_completions.installed(mine.probes)}
    names = list(dict.fromkeys([*faults["library"], *probed,
                                *(mine.pooled["library"] if mine.pooled is not None else [])]))
    rows = []
    for library in names:
        runs = faults[faults["library"] == library]
        recovery = runs["recovery"].iloc[0] if len(runs) else {}
        # a model did not run through the pooler: its claim's races did (harness.libraries.models: CLAIM)
        claim = f"{libraries.get(library).CLAIM} (claim)" if libraries.is_model(library) else None
        through = {CONFIRMED: say("advice.either_mode"), CORRECTED: say("advice.session_mode"),
                   NOT_MEASURED: say("advice.pooler_not_decided")}.get(pooled.get(claim or library), DASH)
        if claim and claim in pooled:
            through = say("advice.by_its_claim", verdict=through)
        elif library in fixed:
            through = say("advice.with_its_setting", setting=libraries.documented_setting(library)["setting"])
        rates = library_poolers.rates_said(mine.pooled, library)
        if rates:
            through = say("advice.with_rates", through=through, rates=rates)
        read = libraries.get(library).POOLER_READ if claim else None
        if read:  # what the model's claim cannot show: the library's driver and session state, read in its source
            through = say("advice.model_read_only", **read) if through == DASH else \
                say("advice.model_read", measured=through, **read)
        rows.append(dict(zip(ADVICE_COLUMNS, (
            html.escape(library_label(library)),
            code_cell(_configure_text(recovery).get(library, DASH)),
            html.escape(_seen_both(runs, _production_runs(mine, library))),
            html.escape(stale_completions.advice(probed.get(library), mine.probes)),
            code_cell(through)))))
    return table(pd.DataFrame(rows, columns=list(ADVICE_COLUMNS)), caption=say("advice_caption"), escape=False)


def _configure_text(recovery: dict) -> dict[str, str]:
    """What a user of each library sets so a dead worker's job runs again, as its source shows (RECOVERY in
    harness/libraries/<name>/adapter.py); `recovery`: the library's, whose default (or,
    for a recovery off by default, its setting's default once turned on) the sentence names."""
    default = duration(recovery.get("enabled_default_s") if recovery.get("off_by_default")
                       else recovery.get("default_s"))
    return say.each("configure", LIBRARY_STRATEGIES, own=release_said, default=default)


def _default(runs: pd.DataFrame) -> str:
    """A library's recovery default as the ledger gives it: its duration, or off where nothing recovers until the
    user turns it on (Oban's Lifeline)."""
    recovery = runs["recovery"].iloc[0] if "recovery" in runs else {}
    return say("default_off") if recovery.get("off_by_default") else duration(runs["recovery_default_s"].iloc[0])


def _production_runs(mine: Loaded, library: str) -> pd.DataFrame | None:
    if mine.production is None:
        return None
    runs = mine.production[mine.production["library"] == library]
    return runs if len(runs) else None


def _seen_both(runs: pd.DataFrame, production: pd.DataFrame | None) -> str:
    """What the fault runs saw of a library as it comes, and under its production setting where it ran so."""
    said = _seen(_landed(runs)) if len(runs) else DASH
    if production is None:
        return said
    return " ".join(part for part in (said if said != DASH else "",
                                       say("seen.production", seen=_seen(_landed(production)))) if part)


def _seen(runs: pd.DataFrame | None) -> str:
    """What the fault runs of one library that landed saw: jobs stuck for good, undecided at the end, the recovery
    time against its setting, completions by a worker that had lost the job."""
    if runs is None or not len(runs):
        return say("seen.nothing_landed")
    said = [say("seen.hit", hit=numbered(int(runs["jobs_hit"].sum()), "job"), runs=numbered(len(runs), "run"))]
    wrong, undecided = _tally(runs)
    if wrong["stuck"] + wrong["lost"]:
        bad = _judged(runs)
        said.append(say("seen.stuck", jobs=numbered(wrong["stuck"] + wrong["lost"], "job"),
                        faults=join(map(fault_said,
                                        bad.loc[bad["stuck_for_good"] + bad["lost"] > 0, "fault"].unique()))))
    if wrong["failed"]:
        said.append(say("seen.failed", jobs=numbered(wrong["failed"], "job"),
                        faults=join(map(fault_said, runs.loc[_column(runs, "failed") > 0, "fault"].unique()))))
    if any(undecided.values()):
        said.append(say("seen.undecided", jobs=numbered(sum(undecided.values()), "job")))
    recovered = runs["recovery_s"].dropna()
    if len(recovered):
        setting = runs["recovery_setting_s"].iloc[0]
        then = (runs["recovery"].iloc[0] if "recovery" in runs else {}).get("then")
        seen = dict(recovery=span(recovered.min(), recovered.max(), lambda v: number(v, 1)), setting=duration(setting),
                    twice=numbered(int(runs["executed_twice"].sum()), "job"))
        said.append((say("seen.recovered_then", then=then, **seen) if then else say("seen.recovered", **seen))
                    if not missing(setting) else
                    say("seen.recovered_unset", recovery=span(recovered.min(), recovered.max(),
                                                              lambda v: number(v, 1)),
                        twice=numbered(int(runs["executed_twice"].sum()), "job")))
    if wrong["completed_by_stale_holder"] + wrong["completed_twice"]:
        said.append(say("seen.stale", jobs=numbered(wrong["completed_by_stale_holder"] + wrong["completed_twice"],
                                                    "job")))
    if len(said) == 1:
        said.append(say("seen.clean"))
    sent = _sent(runs)
    if sent is not None and "completions_not_applied" in runs and runs["completions_not_applied"].sum():
        said.append(say("seen.not_applied", sent=numbered(sent, "completion"),
                        unapplied=count(int(runs["completions_not_applied"].sum()))))
    return " ".join(said)


# --------------------------------------------------------------------------- the tables


LEDGER_COLUMNS = ("library", "fault", "landed", "done once", "stuck or lost", "failed for good", "done twice",
                  "by a stale holder", "sent / applied", "ran twice", "worker exits",
                  "recovery s: seen / setting (default)")


def ledger_table(loaded: dict) -> str:
    """One row per library and fault: the ledger of its jobs over the runs whose fault landed (dashes where none
    did)."""
    mine = loaded.get(NAME)
    if mine is None or not len(mine.faults):
        return ""
    faults = mine.faults
    rows = []
    for (library, fault), runs in faults.groupby(["library", "fault"], sort=False):
        counted = _landed(runs)

        def total(column):
            return int(counted[column].sum()) if len(counted) else DASH

        recovered = counted["recovery_s"].dropna()
        seen = span(recovered.min(), recovered.max(), lambda v: number(v, 1)) if len(recovered) else DASH
        setting = f"{duration(runs['recovery_setting_s'].iloc[0])} ({_default(runs)})"
        rows.append(dict(zip(LEDGER_COLUMNS, (
            library_label(library), fault, f"{len(counted)}/{len(runs)}", total("completed_once"),
            int((counted["stuck"] + counted["lost"]).sum()) if len(counted) else DASH,
            int(_column(counted, "failed").sum()) if len(counted) else DASH, total("completed_twice"),
            total("completed_by_stale_holder"), sent_and_applied(counted), total("executed_twice"),
            total("worker_exits"),
            f"{seen} / {setting}"))))
    job_s = duration(faults["job_s"].max()) if "job_s" in faults else DASH
    models = say("ledger_models") + " " if any(map(libraries.is_model, faults["library"])) else ""
    return table(pd.DataFrame(rows), caption=say("ledger_caption", jobs=count(int(faults["jobs"].max())), job_s=job_s,
                                                 workers=count(int(faults["worker_count"].max())), models=models),
                 css_class="wide")


def _sent(runs: pd.DataFrame) -> int | None:
    """The completion statements the runs' workers sent, None where a run could not see them (no server log here,
    or a run stored before they were counted)."""
    sent = runs["completions_sent"] if "completions_sent" in runs else pd.Series(None, index=runs.index, dtype=float)
    return None if sent.isna().any() else int(sent.sum())


def sent_and_applied(runs: pd.DataFrame) -> str:
    """Completions sent / applied over the runs; what could not be seen is said so, not counted 0."""
    if not len(runs):
        return DASH
    sent = _sent(runs)
    applied = int(runs["completions_applied"].sum()) if "completions_applied" in runs \
        and runs["completions_applied"].notna().all() else None
    return f"{say('cannot_be_seen') if sent is None else sent} / {DASH if applied is None else applied}"


def probe_table(loaded: dict) -> str:
    """The stale-completion probe's table (harness.article.sections.stale_completions), from this section's runs."""
    mine = loaded.get(NAME)
    return stale_completions.probe_table(mine.probes) if mine is not None else ""
