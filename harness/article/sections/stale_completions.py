"""The stale-completion probe on the page (harness.experiments.libraries.probe, read through
harness.experiments.libraries.outcomes): its runs loaded as one row per library, its part of A9 per library, its sentences in A9's
note, its cell in the advice table, and its table, each library's outcome beside what its source says. Not a
section: a part of "When a worker dies" (harness.article.sections.library_faults), which loads its rows and calls
these."""

from __future__ import annotations

import html
from collections import Counter

import pandas as pd

from harness import libraries
from harness.experiments.libraries import outcomes as probe_outcomes
from harness.article.findings import CONFIRMED, CORRECTED
from harness.article.formats import DASH, number
from harness.article.labels import library_label
from harness.article.prose import join, numbered, table
from harness.article.wording import Sentences

SENTENCES = "stale_completions"  # its sentences' file
say = Sentences(SENTENCES)


def probes(reads: dict) -> tuple:
    """One row per library over its probe runs (probe_outcomes.per_library); empty without any."""
    runs = reads["library_probe"].runs if "library_probe" in reads else ()
    return tuple(probe_outcomes.per_library([run.summary for run in runs]))


INSTALLED = "installed"  # a row of the release make install pinned (harness.libraries.releases)


def installed(probes) -> list[dict]:
    """The rows of the releases installed, as they come, their first holder lost as its hold says: what A9 and the
    advice decide on."""
    return [row for row in probes if row.get("release", INSTALLED) == INSTALLED
            and row.get("setting", "default") == "default" and not row.get("hung")]


def _installed_rows(probes, library: str) -> list[dict]:
    return [row for row in probes if row["library"] == library and row.get("release", INSTALLED) == INSTALLED]


def in_production(probes, library: str) -> dict | None:
    """A library's row under the production setting its docs give (its PRODUCTION), where it was probed."""
    return next((row for row in _installed_rows(probes, library)
                 if row.get("setting") == "production" and not row.get("hung")), None)


def hung(probes, library: str) -> dict | None:
    """A library's row with its first holder hung and still connected (--lost-by frozen), where it was probed."""
    return next((row for row in _installed_rows(probes, library)
                 if row.get("hung") and row.get("setting", "default") == "default"), None)


def _in_words(found: dict) -> str:
    """A row's outcome as a reader acts on it, marked observed (in the model, for a model), with its source's
    reading where the two disagree."""
    seen = say("seen.model") if found["model"] else say("seen.library")
    if found["agrees_with_source"] is False:
        return say("outcome.disagrees", outcome=outcome_said(found), seen=seen,
                   expected=_said_outcomes()[found["expected_from_source"]])
    said = say.each("outcome", ("accepted", "refused", "not_sent", "not_applied", "not_handed_on", "not_landed"),
                    seen=seen, bound=number(found["hand_on_bound_s"], 1))
    return said.get(found["stale_completion"] or "not_landed") or outcome_said(found)


def _production_setting(row: dict) -> str | None:
    """The production setting a row ran under, as its runs stored it (or, for runs stored before they did, as its
    library declares it)."""
    return row.get("production_setting") or (libraries.get(row["library"]).PRODUCTION or {}).get("setting")


def production(row: dict, probes) -> str:
    """What a hung worker's completion did under the library's production setting, and what a hung worker still
    connected did where its hold is its session, where each was probed; empty where neither was."""
    said = []
    found = in_production(probes, row["library"])
    if found is not None:
        said.append(say("production.lead", setting=_production_setting(found), outcome=_in_words(found)))
    found = hung(probes, row["library"])
    if found is not None:
        said.append(say("hung.lead", outcome=_in_words(found)))
    return ". ".join(said)


def earlier(probes, library: str) -> list[dict]:
    """The rows of a library's earlier releases probed beside the installed one."""
    return [row for row in probes if row["library"] == library and row.get("release", INSTALLED) != INSTALLED]


def since(row: dict, probes) -> tuple[str, bool]:
    """Where a library declares a release before its installed one: what its completion did there, observed where
    it was probed (its row in probes; with its source's reading where the two disagree), read in its source where
    not; and whether the installed release differs from it (an outcome observed otherwise, or a release read only,
    whose source says what differs). Empty, False where it declares none."""
    declared = libraries.get(row["library"]).EARLIER_RELEASES or {}
    probed = {e["release"]: e for e in earlier(probes, row["library"])}
    said, differs = [], False
    for release, read in declared.items():
        if release not in probed:
            said.append(say("since.read", release=release, checks=read["checks"], source=read["source"]))
            differs = True
            continue
        found = probed[release]
        differs |= found["stale_completion"] != row["stale_completion"]
        if found["agrees_with_source"] is False:
            said.append(say("since.disagrees", release=release, outcome=outcome_said(found),
                            expected=_said_outcomes()[found["expected_from_source"]]))
        else:
            said.append(say("since.observed", release=release, outcome=outcome_said(found),
                            checks=read["checks"]))
    return join(said), differs


def _release_of(row: dict) -> str:
    """The release a row ran: a model's is the release its source was read at."""
    return str(row["version"]).removeprefix("model of ")


def probe_verdict(row: dict | None) -> str | None:
    """What the stale-completion probe says of one library (a row of probe_outcomes.per_library): corrected where
    any repeat applied a stale holder's completion; confirmed where a repeat handed the job on and its stale holder's
    completion was seen refused or was seen never sent, and the live holder completed the job every time; None
    otherwise: no repeat handed the job on, the fault never landed, a job handed on was never completed (the fault
    runs decide what that means), or every repeat's completion was not_applied, where whether the stale holder sent
    one cannot be seen, so nothing was measured of it."""
    if row is None:
        return None
    outcomes = set(row["outcomes"])
    if "accepted" in outcomes:
        return CORRECTED
    handed_on = outcomes & {"refused", "not_sent"}
    return CONFIRMED if handed_on and row["completed_every_time"] else None


def a9_notes(probes) -> list[str]:
    """The probe's evidence in A9's note: the libraries whose stale holder's completion was applied, in one
    sentence, and each library where the probe and its source disagree."""
    notes = []
    accepted = [row for row in probes if probe_verdict(row) == CORRECTED]
    if accepted:
        every = all(row["outcomes"].count("accepted") == row["handed_on"] for row in accepted)
        names = join([library_label(row["library"]) for row in accepted])
        notes.append(say("A9.probe_accepted", libraries=names) if every else
                     say("A9.probe_accepted_some", libraries=names))
    for row in probes:
        if row["agrees_with_source"] is False:
            notes.append(say("A9.probe_disagrees", library=library_label(row["library"]), observed=outcome_said(row),
                             expected=_said_outcomes()[row["expected_from_source"]]))
    return notes


def advice(row: dict | None, probes=()) -> str:
    """The probe's outcome for a library, marked observed (in a model, for a library modelled), with its source's
    reading where the two disagree, and what its completion checks where the job was never handed on; then, where
    the library declares an earlier release, what its completion did there (since)."""
    if row is None:
        return DASH
    if row["agrees_with_source"] is False:
        said = say("advice.stale_disagrees", outcome=outcome_said(row),
                   expected=_said_outcomes()[row["expected_from_source"]])
    elif row["stale_completion"] == "not_handed_on":
        said = say("advice.stale_not_handed_on", checks=row["source_checks"])
    else:
        said = say("advice.stale_model", outcome=outcome_said(row)) if row["model"] else \
            say("advice.stale", outcome=outcome_said(row))
    before, differs = since(row, probes)
    if before:
        said = say("since.lead", current=said, version=_release_of(row), earlier=before) if differs else \
            say("since.same", current=said, earlier=before)
    return ". ".join(part for part in (said, production(row, probes)) if part)


PROBE_COLUMNS = ("library", "lost its job by", "waited for a second holder, s", "handed on", "its stale completion, observed",
                 "stale holder: sent / applied", "live holder: sent / applied",
                 "its completion checks, read in its source", "source says", "agree")


def _said_outcomes() -> dict[str, str]:
    """Each outcome of a probe run as the page says it, and a run whose fault did not land."""
    return say.each("probe", ("accepted", "refused", "not_sent", "not_applied", "not_handed_on", "not_landed"))


def outcome_said(row: dict) -> str:
    """A library's outcome over its repeats, as the table says it: 'varies' counts each outcome its repeats had."""
    said = _said_outcomes()
    if row["stale_completion"] == probe_outcomes.VARIES:
        counted = Counter(said[o or "not_landed"] for o in row["outcomes"])  # in the order they first came
        return say("probe.varies", outcomes=join([f"{n} {outcome}" for outcome, n in counted.items()]))
    return said[row["stale_completion"] or "not_landed"]


def _or_unseen(sent) -> str:
    return say("probe.unseen") if sent is None else str(sent)


def probe_table(probes) -> str:
    """One row per library probed (probe_outcomes.per_library's rows): how it lost the job, in how many repeats the
    job was handed on, what its stale holder's completion did (observed), the completions each holder sent and
    applied, and its source's reading beside it."""
    if not probes:
        return ""
    rows = []
    # a library's rows together, as they first came: its installed defaults, then its other releases and settings
    order = list(dict.fromkeys(row["library"] for row in probes))
    probes = sorted(probes, key=lambda row: order.index(row["library"]))
    releases = Counter(row["library"] for row in probes
                       if row.get("setting", "default") == "default" and not row.get("hung"))
    for row in probes:
        name = library_label(row["library"]) + (f" {_release_of(row)}" if releases[row["library"]] > 1 else "") \
            + (f" {say('probe.in_production')}" if row.get("setting") == "production" else "") \
            + (f" {say('probe.hung')}" if row.get("hung") else "")
        stale, live = (DASH if not row["handed_on"] else
                       f"{_or_unseen(row[f'{who}_completions_sent'])} / {row[f'{who}_completions_applied']}"
                       for who in ("stale", "live"))
        agree = DASH if row["agrees_with_source"] is None else say("probe.disagrees") \
            if not row["agrees_with_source"] else say("probe.by_construction") if row["model"] else say("probe.agrees")
        lost_by = say.each("probe.lost_by", ("frozen", "sessions_cut"))[row["lost_by"].replace(" ", "_")]
        cells = [html.escape(cell) for cell in (
            name, lost_by, number(row["hand_on_bound_s"], 1),
            f"{row['handed_on']} of {row['landed']}", outcome_said(row), stale, live)]
        # a source path has no break in it; as code it may break anywhere, so the table keeps to the column
        cells.append(f"{html.escape(row['source_checks'])} (<code>{html.escape(row['source_ref'])}</code>)")
        cells += [html.escape(_said_outcomes()[row["expected_from_source"]]), html.escape(agree)]
        rows.append(dict(zip(PROBE_COLUMNS, cells)))
    caption = say("probe_caption", repeats=numbered(max(row["repeats"] for row in probes), "repeat"))
    # a row under a production setting was made with its step too: say which, as the run did it
    settings = sorted({f"{library_label(row['library'])}: {_production_setting(row)}" for row in probes
                       if row.get("setting") == "production"})
    if settings:
        caption += " " + say("probe_caption_production", settings="; ".join(settings))
    return table(pd.DataFrame(rows), caption=caption, css_class="wide", escape=False)
