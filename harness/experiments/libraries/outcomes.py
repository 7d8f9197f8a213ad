"""The stale-completion probe's outcomes (harness.experiments.libraries.probe), per run and per library over its
repeats: what the probe stores, what `--probe --json` prints and what the article reads.

A run's outcome: accepted (the stale holder's completion changed the row the live holder was running), refused (it
sent its completion and nothing changed), not_sent (it sent none: its worker ended first), not_applied (nothing
changed, and the sending cannot be seen: no server log), not_handed_on (no second holder within the bound), or None
where the first holder never lost the job. A library's: the outcome every landed repeat agrees on, else varies.
"""

from __future__ import annotations

from harness import libraries
from harness.stats import wilson_interval

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


# --------------------------------------------------------------------------- a stall shorter than the recovery
#
# A stall fault run (harness.experiments.libraries.faults, --fault stall) freezes the worker running a job, with its
# connections kept, `stall_at_s` into the job for `stall_s`, within the job's first beat, so the job's hold was last
# written when it was picked. Where a library renews its hold on a running job on a schedule (its STALL: a beat
# queued every beat_share of its recovery setting, written within write_wait_s), the beat that falls due during the
# stall is queued once the worker resumes, and written up to write_wait_s later. The job is stale from the setting
# on until then; another worker looks for stale jobs at least every write_wait_s (its own connection is held the
# same way). So:
#
#   kept         where even the latest write comes before the setting: max(beat, at + stall) + wait < setting;
#   handed on    where the job stays stale a whole wait before the earliest write: max(beat, at + stall) - setting
#                >= wait;
#   in between   either can happen: not predicted.
#
# Each side with STALL_MARGIN_S more. So the setting must exceed twice the longest stall plus twice the wait (a stall
# begun just before a beat), not merely the stall.

BORNE_OUT, TOO_FEW, CONTRADICTED, ONE_SIDE, NOT_MEASURED = ("borne_out", "too_few", "contradicted", "one_side",
                                                            "not_measured")
STALL_OUTCOMES = (BORNE_OUT, TOO_FEW, CONTRADICTED, ONE_SIDE, NOT_MEASURED)
# how far inside each side a run must end to be predicted: the hold's age is read from the job's logged start, not
# from the pick that wrote it (tens of milliseconds before), and a resumed process waits for a CPU. Chosen before the
# runs.
STALL_MARGIN_S = 0.2


def beat_queued_s(age_s: float, stall_s: float, beat_s: float) -> float:
    """When, counted from the hold's last write, the next beat is queued: when it falls due, or once the worker
    resumes where the stall covers that moment."""
    return max(beat_s, age_s + stall_s)


def predicted_handed_on(age_s: float, stall_s: float, setting_s: float, beat_s: float,
                        wait_s: float) -> bool | None:
    """A stall of stall_s begun with the hold age_s old (within its first beat): False where the hold is written
    again before it reaches the setting however late the write comes, True where the job stays stale a whole wait
    before the earliest write, None between (either can happen), each side with STALL_MARGIN_S."""
    queued = beat_queued_s(age_s, stall_s, beat_s)
    if queued + wait_s < setting_s - STALL_MARGIN_S:
        return False
    if queued - setting_s >= wait_s + STALL_MARGIN_S:
        return True
    return None


def longest_safe_stall_s(setting_s: float, beat_share: float, wait_s: float) -> float:
    """The longest stall kept wherever it begins in a beat: one begun as a beat falls due, the hold a beat old."""
    return setting_s - beat_share * setting_s - wait_s


def stall_outcome(runs: list[tuple[bool | None, bool]]) -> str:
    """Over stall runs whose stall landed, each (predicted handed on, handed on), those not predicted (None) left
    out: contradicted where a run's hand-on differs from the prediction; one side where every run agrees and only
    one side was raced; borne out where every run agrees, both sides were raced (a run predicted to hand its job on,
    and one predicted not to) and the 95 % Wilson intervals of the two sides' shares handed on are apart; too few
    where they agree but those intervals overlap (one run a side cannot tell a rate of none from one of all); not
    measured without a run."""
    runs = [(predicted, seen) for predicted, seen in runs if predicted is not None]
    if not runs:
        return NOT_MEASURED
    if any(predicted != seen for predicted, seen in runs):
        return CONTRADICTED
    kept = sum(not predicted for predicted, _ in runs)
    handed = len(runs) - kept
    if not kept or not handed:
        return ONE_SIDE
    return BORNE_OUT if wilson_interval(0, kept)[1] < wilson_interval(handed, handed)[0] else TOO_FEW
