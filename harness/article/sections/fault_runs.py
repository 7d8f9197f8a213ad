"""The fault runs as the faults section reads them: the ledger table, one fault's timeline, the cost of leases,
and the figures its prose names. A part of that section, beside it; it imports no section.

    fault_summary(paths) -> DataFrame      one row per stored faults run: its protocol, fault, ledger counts, cost
    ledger_frame(summary) -> DataFrame     the ledger table, one row per protocol and fault
    cost_frame(summary) -> DataFrame       per protocol, from its run without a fault: heartbeats and churn
    timeline(paths, protocol, fault) -> DataFrame   the events around the run the fault hit
    fault_facts(paths) -> {placeholder: text}       every figure the section's prose names
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from harness.article.formats import DASH, count, number, percent, span
from harness.article.prose import counted, join, table
from harness.storage import open_runs

LEDGER_COLUMNS = {"completed_once": "completed once", "completed_twice": "completed twice",
                  "executed_twice": "ran twice", "stale_completion": "completed by a stale holder",
                  "stuck": "stuck", "lost": "lost", "in_progress_at_timeout": "in progress at the bound"}
PROTOCOL_ORDER = ("none", "lease", "lease_holder", "lease_fenced")
PROTOCOL_KEYS = {"none": "none", "lease": "lease", "lease_holder": "holder", "lease_fenced": "fenced"}
FAULT_ORDER = ("kill", "pause", "terminate", "restart", "service", "service_mid_claim", "restart_mid_finish", "none")
# the service or its database goes away for a while
CUTTING_FAULTS = ("terminate", "restart", "service", "service_mid_claim", "restart_mid_finish")
FAULT_WORDS = {"kill": "runner killed after its claim", "pause": "runner paused past its lease",
               "terminate": "service's connections terminated", "restart": "PostgreSQL restarted",
               "service": "service killed and restarted",
               "service_mid_claim": "service killed between a claim's commit and its answer",
               "restart_mid_finish": "PostgreSQL restarted inside a finish", "none": "no fault"}


def fault_summary(paths) -> pd.DataFrame:
    """One row per faults run: parameters, ledger counts, reaps, heartbeats, counters, whether each rule held."""
    rows = []
    for run in open_runs(paths):
        results, parameters = run.results, run.parameters
        row = {**dataclasses.asdict(parameters), **{k: v for k, v in results.items() if not isinstance(v, dict)},
               "run_dir": str(run.path), "pause_s": (run.procedure.get("fault") or {}).get("pause_s")}
        # runs stored before the ledger had the class counted a run still worked on at the bound as lost
        row.setdefault("in_progress_at_timeout", 0)
        effects = results.get("fault_effects")
        row["fault_effects"] = ", ".join(f"{name.replace('_', ' ')} {value}" for name, value in effects.items()) \
            if effects else ("none observed" if parameters.fault != "none" and effects is not None else "")
        row.update({f"rule_{name}": held for name, held in results.get("expectations", {}).items()})
        rows.append(row)
    frame = pd.DataFrame(rows)
    if not len(frame):
        return frame
    frame["protocol"] = pd.Categorical(frame["protocol"], PROTOCOL_ORDER, ordered=True)
    frame["fault"] = pd.Categorical(frame["fault"], FAULT_ORDER, ordered=True)
    return frame.sort_values(["fault", "protocol"]).reset_index(drop=True)


def ledger_frame(summary: pd.DataFrame) -> pd.DataFrame:
    """The ledger: per fault and protocol, how many runs ended in each class, and the runs done twice."""
    frame = summary[["fault", "protocol", "runs", *LEDGER_COLUMNS]].copy()
    frame["fault"] = [FAULT_WORDS[str(f)] + ("" if landed is not False else " (no effect observed)")
                      for f, landed in zip(frame["fault"], summary.get("fault_landed", [True] * len(frame)))]
    frame["protocol"] = frame["protocol"].astype(str)
    return frame.rename(columns={"runs": "runs queued", **LEDGER_COLUMNS})


def ledger_html(paths) -> str:
    summary = fault_summary(paths)
    frame = ledger_frame(summary)
    first = summary.iloc[0]
    caption = (f"{count(first['job_count'])} runs queued, {count(first['runner_count'])} runners, a lease of "
               f"{number(first['lease_s'], 1)} s, jobs of {number(first['job_s'], 1)} s; one run per row")
    return table(frame, caption=caption, formats={c: count for c in ("runs queued", *LEDGER_COLUMNS.values())},
                 css_class="wide")


def cost_frame(summary: pd.DataFrame) -> pd.DataFrame:
    """Per protocol, its run without a fault: heartbeats, what the server counted on claimrace.runs, claims/s."""
    calm = summary[summary["fault"].astype(str) == "none"].copy()
    calm["hot_share"] = calm["hot_updates"] / calm["updates"]
    frame = calm[["protocol", "heartbeats_per_run", "updates_per_run", "hot_share", "dead_tuples",
                  "claims_per_second"]].copy()
    frame["protocol"] = frame["protocol"].astype(str)
    return frame.rename(columns={"heartbeats_per_run": "heartbeats per run", "updates_per_run": "row updates per run",
                                 "hot_share": "HOT share", "dead_tuples": "dead tuples at the end",
                                 "claims_per_second": "claims/s"})


def cost_html(paths) -> str:
    frame = cost_frame(fault_summary(paths))
    return table(frame, caption="the runs without a fault; counters of claimrace.runs from pg_stat_user_tables",
                 formats={"heartbeats per run": lambda v: number(v, 1), "row updates per run": lambda v: number(v, 1),
                          "HOT share": percent, "dead tuples at the end": count,
                          "claims/s": lambda v: number(v, 2)})


def timeline(paths, protocol: str = "lease", fault: str = "pause") -> pd.DataFrame:
    """The events of the run the fault hit (every runner's and the reaper's), and the fault itself."""
    for stored in open_runs(paths):
        asked = stored.parameters
        if asked.protocol == protocol and asked.fault == fault:
            events = stored.table("timeline")
            run = stored.results["hit"].get("run")
            hit = events[(events["run"] == run) | (events["source"] == "fault")].copy()
            hit = hit[hit["event"] != "poll"]
            hit["protocol"], hit["fault"], hit["hit_run"] = protocol, fault, run
            return hit.reset_index(drop=True)
    return pd.DataFrame(columns=["t", "source", "event", "runner", "run", "token", "status", "protocol", "fault"])


def _cell(summary: pd.DataFrame, protocol: str, fault: str, column: str):
    rows = summary[(summary["protocol"].astype(str) == protocol) & (summary["fault"].astype(str) == fault)]
    return rows.iloc[0][column] if len(rows) else None


def _total(summary: pd.DataFrame, protocol: str, column: str) -> int:
    return int(summary.loc[summary["protocol"].astype(str) == protocol, column].sum())


def fault_facts(paths) -> dict:
    """Every figure the section's prose names, formatted."""
    summary = fault_summary(paths)
    if not len(summary):
        return {"faults_list": "no fault", "faults_runs": count(0)}
    first = summary.iloc[0]
    faults = [str(f) for f in summary["fault"].unique() if str(f) != "none"]

    def cell(protocol, fault, column, fmt=count):
        value = _cell(summary, protocol, fault, column)
        return "n/a" if value is None or pd.isna(value) else fmt(value)

    facts = {
        "faults_runs": count(len(summary)), "faults_jobs": count(first["job_count"]),
        "faults_runners": count(first["runner_count"]), "faults_lease": number(first["lease_s"], 1),
        "faults_heartbeat_every": number(first["lease_s"] / 3, 2), "faults_job_s": number(first["job_s"], 1),
        "faults_pause": span(summary["pause_s"].min(), summary["pause_s"].max(), lambda v: number(v, 1))
        if summary["pause_s"].notna().any() else DASH,
        "faults_list": join([FAULT_WORDS[f] for f in faults]),
        "faults_count": counted(len(faults), "fault"),
        "none_kill_stuck": cell("none", "kill", "stuck"),
        "lease_kill_stuck": cell("lease", "kill", "stuck"),
        "lease_kill_ran_twice": cell("lease", "kill", "executed_twice"),
        "lease_kill_reaps": cell("lease", "kill", "reaps"),
        "lease_pause_stale": cell("lease", "pause", "stale_completion"),
        "lease_pause_twice": cell("lease", "pause", "completed_twice"),
        "fenced_pause_stale": cell("lease_fenced", "pause", "stale_completion"),
        "fenced_pause_ran_twice": cell("lease_fenced", "pause", "executed_twice"),
        "none_mid_claim_stuck": cell("none", "service_mid_claim", "stuck"),
        "lease_mid_claim_reaps": cell("lease", "service_mid_claim", "reaps"),
        "lease_mid_claim_stuck": cell("lease", "service_mid_claim", "stuck"),
        "none_mid_finish_stuck": cell("none", "restart_mid_finish", "stuck"),
        "fenced_mid_finish_ran_twice": cell("lease_fenced", "restart_mid_finish", "executed_twice"),
    }
    for protocol in PROTOCOL_ORDER:
        key = PROTOCOL_KEYS[protocol]
        for column in ("lost", "stuck", "completed_twice", "stale_completion", "executed_twice",
                       "in_progress_at_timeout"):
            facts[f"{key}_total_{column}"] = count(_total(summary, protocol, column)) \
                if protocol in set(summary["protocol"].astype(str)) else "n/a"
        facts[f"{key}_heartbeats_per_run"] = cell(protocol, "none", "heartbeats_per_run", lambda v: number(v, 1))
        facts[f"{key}_updates_per_run"] = cell(protocol, "none", "updates_per_run", lambda v: number(v, 1))
        facts[f"{key}_claims_per_second"] = cell(protocol, "none", "claims_per_second", lambda v: number(v, 2))
        facts[f"{key}_dead_tuples"] = cell(protocol, "none", "dead_tuples")
        facts[f"{key}_updates"] = cell(protocol, "none", "updates")
        facts[f"{key}_hot_updates"] = cell(protocol, "none", "hot_updates")
        facts[f"{key}_heartbeats_accepted"] = cell(protocol, "none", "heartbeats_accepted")
    leased = summary[summary["protocol"].astype(str) != "none"]
    cut_off = leased["fault"].astype(str).isin(CUTTING_FAULTS)
    calm_reaps = int(leased.loc[~cut_off, "reaps_of_healthy_holders"].sum()) if len(leased) else 0
    cut_reaps = int(leased.loc[cut_off, "reaps_of_healthy_holders"].sum()) if len(leased) else 0
    fenced = summary[summary["protocol"].astype(str) == "lease_fenced"]
    fenced_clean = bool(len(fenced)) and int((fenced["lost"] + fenced["stuck"] + fenced["stale_completion"]).sum()) == 0
    sentences = []
    if cut_off.any():
        sentences.append(
            f"When the service or its database was cut off, leases of runners that were neither killed nor paused ran "
            f"out too: {counted(cut_reaps, 'reap')} of such runs over {counted(int(cut_off.sum()), 'run')} with a "
            f"lease (one reading: their heartbeats could not get through in time).")
    if calm_reaps:
        sentences.append(
            f"With the service up, {counted(calm_reaps, 'lease')} of a runner that was neither killed nor paused "
            f"ran out as well, over {counted(int((~cut_off).sum()), 'run')} with a lease; one reading is that, on this "
            f"shared machine, a heartbeat every {number(first['lease_s'] / 3, 2)} s sometimes came later than the "
            f"lease allows.")
    else:
        sentences.append("With the service up, no lease of a runner that was neither killed nor paused ran out.")
    if cut_reaps + calm_reaps and fenced_clean:
        sentences.append("Under the fence, none of them was completed by the wrong runner.")
    facts["healthy_reaps_phrase"] = " ".join(sentences)
    facts["acknowledged_lost_total"] = count(int(summary["acknowledged_lost"].sum()))
    return facts
