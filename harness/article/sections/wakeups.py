"""The subsection "Woken or polling" of "When a worker dies": idle workers of the libraries that can both listen and
poll, woken by LISTEN/NOTIFY against polling only, jobs arriving one at a time at a low and a high rate
(harness.experiments.libraries.wakeups)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.article.formats import DASH, count, number, span
from harness.article.prose import join, numbered, table
from harness.article.wording import Sentences

NAME = "wakeups"
READS = ("wakeups",)
UPSTREAM = ()
say = Sentences(NAME)

SOONER, LATER, OVERLAP, CENSORED, ONE_RUN = "sooner", "later", "overlap", "censored", "one run"
ANSWERS = (SOONER, LATER, OVERLAP, CENSORED, ONE_RUN)


@dataclass(frozen=True)
class Loaded:
    runs: tuple
    summaries: pd.DataFrame  # one row per run: its summary (harness.experiments.libraries.wakeups.summarise)


def load(reads: dict, loaded: dict) -> Loaded | None:
    runs = reads["wakeups"].runs if "wakeups" in reads else ()
    if not runs:
        return None
    return Loaded(runs, pd.DataFrame([run.summary for run in runs]))


def findings(loaded: dict) -> list:
    return []


def listen_against_poll(listen: pd.DataFrame, poll: pd.DataFrame) -> str | None:
    """One library at one arrival rate: SOONER where every run's median pickup with LISTEN lies below every polling
    run's, LATER where every polling run's lies below every LISTEN run's, OVERLAP where they interleave (not
    distinguishable here); ONE_RUN where a side has a single run (no spread to judge by); None without a run of
    each. A median counted from a run with a job never started is a lower bound, whose true value may be higher:
    it decides only where that could not change the answer, and is CENSORED otherwise."""
    if not len(listen) or not len(poll):
        return None
    if len(listen) < 2 or len(poll) < 2:
        return ONE_RUN
    listen_censored = bool(listen["pickup_is_lower_bound"].any())
    poll_censored = bool(poll["pickup_is_lower_bound"].any())
    if listen["pickup_p50_ms"].max() < poll["pickup_p50_ms"].min() and not listen_censored:
        return SOONER
    if poll["pickup_p50_ms"].max() < listen["pickup_p50_ms"].min() and not poll_censored:
        return LATER
    return CENSORED if listen_censored or poll_censored else OVERLAP


def _points(summaries: pd.DataFrame):
    """(library, interval_s, worker_count, local_server, its LISTEN runs, its polling runs), in run order."""
    for (library, interval, workers, local), runs in summaries.groupby(
            ["library", "interval_s", "worker_count", "local_server"], sort=False):
        yield (library, float(interval), int(workers), bool(local), runs[runs["wake"] == "listen"],
               runs[runs["wake"] == "poll"])


def values(loaded: dict, found: dict) -> dict[str, str]:
    mine = loaded.get(NAME)
    if mine is None:
        return {"wk_setup": say("setup.no_runs")}
    runs = mine.summaries
    answers = [listen_against_poll(listen, poll) for *_, listen, poll in _points(runs)]
    decided = [a for a in answers if a is not None]
    setup = say("setup.runs", libraries=join(list(dict.fromkeys(runs["library"]))),
                workers=join([str(n) for n in dict.fromkeys(runs["worker_count"])]),
                poll=join([f"{number(s, 0)} s" for s in sorted(set(runs["poll_s"]))]),
                intervals=join([f"{i:g} s" for i in dict.fromkeys(runs["interval_s"])]).replace(" and ", " or "),
                repeats=numbered(int(runs["repeat"].nunique()), "run"))
    counted = {answer: count(answers.count(answer)) for answer in ANSWERS if answers.count(answer)}
    said = [{SOONER: say("outcome.sooner", n=n), LATER: say("outcome.later", n=n),
             OVERLAP: say("outcome.overlap", n=n), CENSORED: say("outcome.censored", n=n),
             ONE_RUN: say("outcome.one_run", n=n)}[answer] for answer, n in counted.items()]
    outcome = say("outcome.counted", points=numbered(len(decided), "point"), answers=join(said)) if decided \
        else say("outcome.none")
    return {"wk_setup": f"{setup} {outcome}"}


COLUMNS = ("library", "a job every", "pickup with LISTEN: median / worst ms", "polling only: median / worst ms",
           "transactions/s: LISTEN / polling", "LISTEN picks up")


def _answer(answer: str | None) -> str:
    return {SOONER: say("answer.sooner"), LATER: say("answer.later"), OVERLAP: say("answer.overlap"),
            CENSORED: say("answer.censored"), ONE_RUN: say("answer.one_run")}.get(answer, DASH)


def _range(runs: pd.DataFrame, column: str) -> str:
    """The lowest to the highest run's figure, '≥' where a run's is a lower bound."""
    if not len(runs):
        return DASH
    at_least = "≥ " if runs["pickup_is_lower_bound"].any() else ""
    return at_least + span(runs[column].min(), runs[column].max(), lambda v: number(v, 0))


def wakeup_table(loaded: dict) -> str:
    """One row per library and arrival rate: each wake-up's pickup, what waiting costs the server, and the answer."""
    mine = loaded.get(NAME)
    if mine is None:
        return ""
    rows, points = [], list(_points(mine.summaries))
    several = len({workers for _, _, workers, *_ in points}) > 1
    for library, interval, workers, local, listen, poll in points:
        rates = " / ".join(span(r["transactions_per_s"].min(), r["transactions_per_s"].max(), lambda v: number(v, 0))
                           if len(r) else DASH for r in (listen, poll))
        answer = listen_against_poll(listen, poll)
        name = library + (f" ({numbered(workers, 'worker')})" if several else "") \
            + ("" if local else " " + say("remote"))
        rows.append(dict(zip(COLUMNS, (
            name, f"{interval:g} s", f"{_range(listen, 'pickup_p50_ms')} / {_range(listen, 'pickup_max_ms')}",
            f"{_range(poll, 'pickup_p50_ms')} / {_range(poll, 'pickup_max_ms')}", rates,
            _answer(answer)))))
    runs = mine.summaries
    jobs = join([f"{count(n)} jobs {interval:g} s apart" for interval, n in
                 runs.groupby("interval_s", sort=False)["jobs"].max().items()])
    return table(pd.DataFrame(rows, columns=list(COLUMNS)),
                 caption=say("caption", jobs=jobs, repeats=numbered(int(runs["repeat"].nunique()), "run")),
                 css_class="wide")
