"""The soak's model, checked on runs it was not fitted on (harness.experiments.soak.outcomes: claim_slope,
predict_fall_behind, model_check). Not a section: the soak section imports it, and it imports no section.

A table's slope (what a claim gains per row version the hold kept) is fitted on its arm raced most often at one
rate: each of those repeats is predicted from the others' slopes (one left out in turn), and every other held run
of the same table and claim (another rate) from all of theirs."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.article.formats import DASH, count, number, span, wait
from harness.article.prose import join, table
from harness.article.sections.soak_arms import arm_label, base_arm, held_label, onset_text, watched
from harness.article.wording import Sentences
from harness.experiments.soak import outcomes as soak_outcomes

SENTENCES = "soak_model"
say = Sentences(SENTENCES)

COLUMNS = ("table", "held by", "jobs/s", "fitted on", "claim ms per 100,000 versions kept: fitted (range); its own",
           "CPU ms a statement per 100,000: fitted; its own", "fell behind at: predicted", "the limit met first",
           "measured", "measured / predicted", "the model")
SHARES = (0.1, 0.25, 0.5)  # a reader's rates, as shares of what the workers sustain: the model's hold at each


def _fit_rate(runs: pd.DataFrame, positions: list[int]):
    """The rate the fit's arm was raced at: the one with the most runs (the first such, on a tie)."""
    rates = runs.iloc[positions]["rate_asked"].astype(str)
    return rates.value_counts(sort=True).index[0]


def fittable(runs: pd.DataFrame) -> dict[tuple, list[int]]:
    """Held runs with nothing else changed, judged, with a slope, grouped by what a fit's runs share
    (outcomes.fit_key)."""
    groups: dict[tuple, list[int]] = {}
    for position, row in runs.iterrows():
        if not soak_outcomes.fits(row) or not base_arm(row):
            continue
        groups.setdefault(soak_outcomes.fit_key(row), []).append(position)
    return groups


def checked(runs: pd.DataFrame) -> list[dict]:
    """Each run the model predicts from runs other than itself: its fit (median, lowest, highest, runs, rate), the
    prediction, the measured onset (censored: held observed_s) and outcomes.model_check's word."""
    found = []
    for positions in fittable(runs).values():
        rate = _fit_rate(runs, positions)
        fit_runs = [p for p in positions if str(runs.iloc[p]["rate_asked"]) == rate]
        for position in positions:
            others = [runs.iloc[p].to_dict() for p in fit_runs if p != position]
            row = runs.iloc[position].to_dict()
            fit = soak_outcomes.fitted(others, row)
            if fit is None:
                continue
            cpu_fit = soak_outcomes.fitted_cpu(others, row)
            cpu = soak_outcomes.cpu_inputs(cpu_fit, row)
            args = (fit[0], float(row["rate"]), int(row["workers"]), float(row["sustained_rate"]))
            met = soak_outcomes.limit_met(*args, cpu=cpu)
            predicted = None if met is None else met[0]
            measured = row["seconds_to_fall_behind"]
            measured = None if measured is None or pd.isna(measured) else float(measured)
            found.append({"position": position, "fit": fit, "fit_rate": float(runs.iloc[fit_runs[0]]["rate"]),
                          "cpu_fit": cpu_fit, "cpu": cpu,
                          # the limit whose capacity fell below the arrivals first: read only where both were modelled
                          "limit": None if met is None or cpu is None else met[1],
                          "in_fit_arm": position in fit_runs, "predicted": predicted, "measured": measured,
                          "check": soak_outcomes.model_check(predicted, measured, watched(runs.iloc[position]))})
    return found


def _alike(found: list[dict], runs: pd.DataFrame, like) -> list[dict]:
    """The checks of runs of the same table and claim as `like` (a run's row: outcomes.fit_key)."""
    return [f for f in found if soak_outcomes.fit_key(runs.iloc[f["position"]]) == soak_outcomes.fit_key(like)]


def standing(found: list[dict]) -> str:
    """Whether a table's model may be planned by: MODEL_HOLDS where it held on every run it could be tested on,
    a run at another rate than its fit among them; MODEL_OFF where it was off on any; else MODEL_UNTESTED (no run
    at another rate tested it). Written after the first cold build with a second rate (its 70 % run was off: the
    model is not quoted where its check fails; docs/soak.md)."""
    words = [f["check"] for f in found]
    if soak_outcomes.MODEL_OFF in words:
        return soak_outcomes.MODEL_OFF
    outside = [f for f in found if not f["in_fit_arm"] and f["check"] == soak_outcomes.MODEL_HOLDS]
    return soak_outcomes.MODEL_HOLDS if outside else soak_outcomes.MODEL_UNTESTED


def plans_by(mine, position: int) -> bool:
    """Whether the model of the table of the run at `position` may be planned by (standing holds)."""
    runs = mine.summaries
    return standing(_alike(checked(runs), runs, runs.iloc[position])) == soak_outcomes.MODEL_HOLDS


def _off_said(found: list[dict], runs: pd.DataFrame) -> dict[str, str]:
    """Where the model was off: the span of measured over predicted on the runs it could be tested on, and the run
    at another rate (else the first) it was off on."""
    ratios = [max(f["measured"], 1.0) / max(f["predicted"], 1.0) for f in found
              if f["measured"] is not None and f["predicted"] is not None]
    off = [f for f in found if f["check"] == soak_outcomes.MODEL_OFF]
    worst = next((f for f in off if not f["in_fit_arm"]), off[0])
    return {"ratios": span(min(ratios), max(ratios), lambda v: number(v, 2)) if ratios else DASH,
            "off_rate": number(runs.iloc[worst["position"]]["rate"], 0), "off_predicted": _seconds(worst["predicted"]),
            "off_measured": onset_text(runs, [worst["position"]], "seconds_to_fall_behind")}


def predicted_backlog(mine, position: int) -> pd.DataFrame | None:
    """The model's backlog over the hold of the run at `position`, predicted from runs other than itself (checked):
    (second into the run, value); None where the run is not predicted."""
    found = next((f for f in checked(mine.summaries) if f["position"] == position), None)
    row = mine.summaries.iloc[position]
    ends = None if found is None else soak_outcomes.predicted_backlog(
        found["fit"][0], float(row["rate"]), int(row["workers"]), float(row["sustained_rate"]),
        float(row["pin_to"] - row["pin_from"]), cpu=found["cpu"])
    if ends is None:
        return None
    return pd.DataFrame({"second": float(row["pin_from"]) + np.arange(len(ends), dtype=float), "value": ends})


def _seconds(value: float | None) -> str:
    """A predicted hold: seconds, minutes from two of them, or beyond the model's horizon."""
    if value is None:
        return say("beyond", hours=f"{soak_outcomes.MODEL_HORIZON_S / 3600:g}")
    return wait(value)


def _when(value: float | None) -> str:
    """A predicted hold in a sentence: at N s or N min, or beyond the model's horizon."""
    return say("when.beyond", hours=f"{soak_outcomes.MODEL_HORIZON_S / 3600:g}") if value is None \
        else say("when.at", hold=_seconds(value))


def cpu_at(row, cpu_fit: tuple | None, rate: float) -> tuple | None:
    """The CPU limit's inputs at a reader's rate for the table of `row`, each on the side of a sooner fall: the
    fitted slope; the CPUs as busy before the hold as in the run at `row` (a lower rate keeps them less busy: 0.2
    cores at 18 % where 0.3 to 0.5 at 80 %, 2026-12-07); every worker's every poll empty (a queue idle more often
    polls more often, each poll reading the versions kept)."""
    poll_s = row.get("poll_s")  # an idle worker's wait between polls, as the run's procedure recorded it
    empty = None if poll_s is None or pd.isna(poll_s) or not poll_s else int(row["workers"]) / float(poll_s)
    at = {"busy_cores_before": row.get("busy_cores_before"), "empty_per_s": empty, "cpus": row.get("cpus")}
    return soak_outcomes.cpu_inputs(cpu_fit, at)


def _predict_at(row, rate: float, claim_ms: float, cpu_fit: tuple | None) -> float | None:
    """The model's hold for the table of `row` at `rate`, from the fitted claim and CPU slopes."""
    return soak_outcomes.predict_fall_behind(claim_ms, rate, int(row["workers"]), float(row["sustained_rate"]),
                                             cpu=cpu_at(row, cpu_fit, rate))


def _hold(mine, position: int, rate: float) -> float | None | bool:
    """The model's hold for the table of the run at `position`, at `rate`, fitted on every held run of that table
    stored (outcomes.fitted); False where no fit exists."""
    row = mine.summaries.iloc[position].to_dict()
    summaries = [r.to_dict() for _, r in mine.summaries.iterrows()]
    fit = soak_outcomes.fitted(summaries, row)
    if fit is None or not row.get("sustained_rate"):
        return False
    return _predict_at(row, rate, fit[0], soak_outcomes.fitted_cpu(summaries, row))


def hold_at_rate(mine, position: int, rate: float) -> str:
    """_hold as the page says it; a dash where no fit exists."""
    hold = _hold(mine, position, rate)
    return DASH if hold is False else _when(hold)


def at_share(mine, position: int, share: float) -> dict[str, str]:
    """The model's hold at `share` of the rate of the run at `position`: what the decision says beside the measured
    hold, where the model of that run's table holds (standing); where it was off, what it was off by; nothing
    where it is untested or no fit exists."""
    runs = mine.summaries
    found = _alike(checked(runs), runs, runs.iloc[position])
    word = standing(found)
    if word == soak_outcomes.MODEL_OFF:
        return {"model_off": say("decision.off", **_off_said(found, runs))}
    rate = share * float(runs.iloc[position]["rate"])
    hold = _hold(mine, position, rate)
    if word != soak_outcomes.MODEL_HOLDS or hold is False:
        return {}
    return {"model_at": say("at_rate", rate=number(rate, 0), share=f"{share:.0%}"), "model_hold": _when(hold)}


def _ratio(found: dict, row) -> str:
    if found["predicted"] is None:
        return DASH
    if found["measured"] is None:  # held without falling behind: the ratio is at least this
        return say("ratio.at_least", ratio=number(watched(row) / max(found["predicted"], 1.0), 2))
    return number(max(found["measured"], 1.0) / max(found["predicted"], 1.0), 2)


def _check_said(word: str) -> str:
    if word == soak_outcomes.MODEL_HOLDS:
        return say("check.holds")
    return say("check.off") if word == soak_outcomes.MODEL_OFF else say("check.untested")


def _slope(value) -> str:
    return DASH if value is None or pd.isna(value) else number(value, 1)


def _limit_said(limit: str | None) -> str:
    if limit is None:
        return DASH
    return say("limit.cpus") if limit == soak_outcomes.CPUS_LIMIT else say("limit.workers")


def _cpu_slopes(fit: tuple | None, own) -> str:
    """The CPU slope fitted (over how many runs: a run stored before the CPUs were sampled has none) and the run's."""
    if fit is None:
        return say("cpu_slopes.none", own=_slope(own))
    return say("cpu_slopes", fitted=number(fit[0], 1), runs=count(fit[1]), own=_slope(own))


def rows(runs: pd.DataFrame) -> pd.DataFrame:
    out = []
    for found in checked(runs):
        row = runs.iloc[found["position"]]
        median, low, high, fitted_runs = found["fit"]
        out.append(dict(zip(COLUMNS, (
            arm_label(row), held_label(row), f"{number(row['rate'], 0)} ({row['rate_asked']})",
            say("fitted_on", runs=count(fitted_runs), rate=number(found["fit_rate"], 0),
                which=say("fitted.others") if found["in_fit_arm"] else say("fitted.all")),
            say("slopes", fitted=number(median, 1), range=span(low, high, lambda v: number(v, 1)),
                own=number(row["claim_ms_per_100k"], 1)),
            _cpu_slopes(found["cpu_fit"], row.get("cpu_ms_per_100k")), _seconds(found["predicted"]),
            _limit_said(found["limit"]),
            onset_text(runs, [found["position"]], "seconds_to_fall_behind"),
            _ratio(found, row), _check_said(found["check"])))))
    return pd.DataFrame(out, columns=list(COLUMNS))


def model_table(mine) -> str:
    """The model's predictions beside what was measured, run by run."""
    frame = rows(mine.summaries) if mine is not None else pd.DataFrame()
    if not len(frame):
        return ""
    return table(frame, caption=say("caption", factor=f"{soak_outcomes.MODEL_FACTOR:g}",
                                    per=count(soak_outcomes.PER_VERSIONS),
                                    busy=f"{soak_outcomes.CPU_BUSY_SHARE:.0%}"), css_class="wide")


def values(mine) -> dict[str, str]:
    """What the section's prose and the decision say of the model: how its checks came out, the slopes, and the
    hold it predicts at a reader's rates."""
    found = checked(mine.summaries) if mine is not None else []
    if not found:
        return {"model_outcome": say("none"), "model_reader": ""}
    runs = mine.summaries
    words = [f["check"] for f in found]
    tested = [w for w in words if w != soak_outcomes.MODEL_UNTESTED]
    said = say("outcome", held=count(words.count(soak_outcomes.MODEL_HOLDS)), tested=count(len(tested)),
               runs=count(len(found)), factor=f"{soak_outcomes.MODEL_FACTOR:g}",
               untested=say("outcome.untested", n=count(words.count(soak_outcomes.MODEL_UNTESTED)))
               if len(tested) < len(words) else "")
    # the model's hold at a reader's rates: the table fitted on the most runs, at shares of what its workers
    # sustain, where its model holds (standing)
    best = max(found, key=lambda f: f["fit"][3])
    row = runs.iloc[best["position"]]
    mine_found = _alike(found, runs, row)
    word = standing(mine_found)
    if word == soak_outcomes.MODEL_OFF:
        return {"model_outcome": said, "model_reader": say("reader.off", table=arm_label(row),
                                                           **_off_said(mine_found, runs))}
    if word == soak_outcomes.MODEL_UNTESTED:
        return {"model_outcome": said, "model_reader": say("reader.untested", table=arm_label(row))}
    at = [say("at_share", share=f"{share:.0%}", rate=number(share * row["sustained_rate"], 0),
              hold=_seconds(_predict_at(row, share * row["sustained_rate"], best["fit"][0], best["cpu_fit"])))
          for share in SHARES]
    # the CPUs' limit is said only where it was modelled: a fit and the run's own CPUs before its hold
    modelled = cpu_at(row, best["cpu_fit"], float(row["rate"])) is not None
    figures = {"table": arm_label(row), "slope": number(best["fit"][0], 1), "workers": str(int(row["workers"])),
               "sustained": number(row["sustained_rate"], 0), "holds": join(at)}
    reader = say("reader", cpu=number(best["cpu_fit"][0], 1), **figures) if modelled \
        else say("reader.workers_only", **figures)
    return {"model_outcome": said, "model_reader": reader}
