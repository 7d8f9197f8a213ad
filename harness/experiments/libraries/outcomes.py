"""The stale-completion probe's outcomes (harness.experiments.libraries.probe), per run and per library over its
repeats: what the probe stores, what `--probe --json` prints and what the article reads.

A run's outcome: accepted (the stale holder's completion changed the row the live holder was running), refused (it
sent its completion and nothing changed), not_sent (it sent none: its worker ended first), not_applied (nothing
changed, and the sending cannot be seen: no server log), not_handed_on (no second holder within the bound), or None
where the first holder never lost the job. A library's: the outcome every landed repeat agrees on, else varies.
"""

from __future__ import annotations

from harness import libraries

OUTCOMES = ("accepted", "refused", "not_sent", "not_applied", "not_handed_on")
VARIES = "varies"


def run_outcome(lost: bool, handed_on: bool, stale: dict | None) -> str | None:
    """One run's outcome: None where A did not lose J (no fault seen); not_handed_on; accepted (A's completion
    changed the row B was running); refused (A sent it, nothing changed); not_sent (A sent none: its worker ended
    first); not_applied (nothing changed, and whether A sent one cannot be seen: no server log here)."""
    if not lost:
        return None
    if not handed_on:
        return "not_handed_on"
    if stale is not None and stale["completions_applied"]:
        return "accepted"
    sent = None if stale is None else stale["completions_sent"]
    return "not_applied" if sent is None else "refused" if sent else "not_sent"


def library_outcome(outcomes: list[str | None]) -> str | None:
    """Over a library's repeats: the outcome every repeat where the fault landed agrees on, else varies; None
    where none landed."""
    seen = {outcome for outcome in outcomes if outcome is not None}
    if not seen:
        return None
    return seen.pop() if len(seen) == 1 else VARIES


def _total(values) -> int | None:
    values = list(values)
    return None if not values or any(v is None for v in values) else int(sum(values))


def _sent_by_both(summary: dict, what: str) -> int | None:
    """A run's completions sent (or applied) by both holders; None where the run could not see them."""
    stale, live = summary[f"stale_completions_{what}"], summary[f"live_completions_{what}"]
    if stale is None or (summary["handed_on"] and live is None):
        return None
    return stale + (live or 0)


def per_library(summaries: list[dict]) -> list[dict]:
    """One row per library, version, setting and way of losing the job over its probe runs (an earlier release
    beside the installed one, its production setting beside its defaults, a hung worker beside its cut sessions:
    each a row of its own): what `--probe --json` prints."""
    rows = []
    def key(s: dict) -> tuple:
        return s["library"], s["version"], s.get("configuration", "default"), s.get("hung", False)

    for name, version, setting, hung in dict.fromkeys(key(s) for s in summaries):
        mine = [s for s in summaries if key(s) == (name, version, setting, hung)]
        landed = [s for s in mine if s["fault_landed"]]
        outcome = library_outcome([s["stale_completion"] for s in mine])
        first = mine[0]
        rows.append({
            "library": name, "version": version, "release": first.get("release", "installed"), "setting": setting,
            "hung": hung, "production_setting": first.get("production_setting"),
            "repeats": len(mine), "landed": len(landed),
            "lost_by": first["lost_by"], "handed_on": sum(bool(s["handed_on"]) for s in landed),
            "stale_completion": outcome,
            "outcomes": [s["stale_completion"] for s in mine],
            "completions_sent": _total(_sent_by_both(s, "sent") for s in landed),
            "completions_applied": _total(_sent_by_both(s, "applied") for s in landed),
            "stale_completions_sent": _total(s["stale_completions_sent"] for s in landed if s["handed_on"]),
            "stale_completions_applied": _total(s["stale_completions_applied"] for s in landed if s["handed_on"]),
            "live_completions_sent": _total(s["live_completions_sent"] for s in landed if s["handed_on"]),
            "live_completions_applied": _total(s["live_completions_applied"] for s in landed if s["handed_on"]),
            # every run that handed the job on ended with it completed: by the stale holder or the live one
            "completed_every_time": all((s["stale_completions_applied"] or 0) + (s["live_completions_applied"] or 0)
                                        for s in landed if s["handed_on"]),
            "model": libraries.is_model(name),
            "expected_from_source": first["expected_from_source"], "source_checks": first["source_checks"],
            "source_ref": first["source_ref"],
            "agrees_with_source": None if outcome is None else outcome == first["expected_from_source"],
            "hand_on_bound_s": first["hand_on_bound_s"], "recovery_setting_s": first["recovery_setting_s"],
            "recovery_default_s": first["recovery_default_s"]})
    return rows
