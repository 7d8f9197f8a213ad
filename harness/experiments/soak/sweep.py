"""What a params-file section asks of the soak: a list of arms, each a run's settings where it differs from the
section's shared ones, raced `repeats` times (harness.experiments.soak.measure).

    soak:
      seconds: 55          # shared by every arm unless the arm says otherwise
      arms:
        - {shape: delete, holder: none}
        - {shape: delete, holder: repeatable_read}
        - {shape: delete, holder: repeatable_read, storage: disk}

An arm may give `phases` instead (harness.experiments.soak.phases): a rising load, a burst, a second hold; the
section's seconds, pin and hold settings are not read for it.

An arm is read against the arm that differs from it in one setting only: its control (holder none), the same arm
without its mitigation, or on tmpfs (harness.article.sections.soak). An arm that names a library races its own
workers on its own table (harness.experiments.soak.library); the section `library_soak` holds those.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from harness.errors import UserError
from harness.experiments.soak import holders as soak_holders
from harness.experiments.soak import library as library_soak
from harness.experiments.soak import measure as soak
from harness.experiments.soak import outcomes as soak_outcomes
from harness.experiments.soak import show as soak_show
from harness.experiments.contract import Kind, implied_settings
from harness.experiments.contract import Parameters, _sequence, as_bool, as_float, as_int, one_of, setting

MAX_ARMS = 32  # arms in one section: at a minute or two each, more than a build would wait for
MAX_REPEATS = 10
# the mitigations a section may ask to race on every held arm that failed (mitigate): transaction_timeout needs a
# server of 17 or later, which the section does not know before its runs, so it stays an arm of its own (soak_pg18)
CHOSEN_MITIGATIONS = ("idle_timeout", "statement_timeout", "one_analytics", "autovacuum")
# what a run's summary says of the settings that tell it apart (a follow-up asks only for runs not yet among them)
SAID = {"shape": "shape", "strategy": "strategy", "holder": "holder", "mitigation": "mitigation",
        "rate": "rate_asked", "workers": "workers", "job_ms": "job_ms", "history_rows": "history_rows",
        "synchronous_commit": "synchronous_commit", "seconds": "seconds", "pin_from": "pin_from",
        "hold_until_failure": "hold_until_failure", "repeat": "repeat", "phases": "phases",
        "analytics_s": "analytics_s", "analytics_sessions": "analytics_sessions", "vacuum_every": "vacuum_every"}
ANALYTICS = ("analytics_s", "analytics_sessions")
WINDOW = ("seconds", "pin_from", "pin_to", "hold_until_failure", "hold_max")  # not read by an arm in phases
ARM_SETTINGS = tuple(spec.name for spec in dataclasses.fields(soak.SoakParameters) if spec.name != "repeat")


def as_arms(name: str, values) -> tuple:
    """A list of arms, each a mapping of SoakParameters settings: one line for anything else. An empty list races
    nothing: a params file keeps the section (soak_pg18 in report.yml) without paying for its runs."""
    arms = _sequence(name, values) if values is not None else ()
    if len(arms) > MAX_ARMS:
        raise UserError(f"give at most {MAX_ARMS} arms, not {len(arms)}")
    for index, arm in enumerate(arms, 1):
        if not isinstance(arm, dict):
            raise UserError(f"arm {index} must be a mapping of settings, not {arm!r}")
        unknown = [key for key in arm if key not in (*ARM_SETTINGS, "repeats")]
        if unknown:
            raise UserError(f"arm {index}: unknown setting {unknown[0]!r} (known: {', '.join(ARM_SETTINGS)}, "
                            "repeats)")
    return tuple(dict(arm) for arm in arms)


def as_mitigations(name: str, values) -> tuple[str, ...]:
    """A list of CHOSEN_MITIGATIONS, each once: one line for anything else."""
    chosen = _sequence(name, values) if values is not None else ()
    for value in chosen:
        if value not in CHOSEN_MITIGATIONS:
            raise UserError(f"{name} may list {', '.join(CHOSEN_MITIGATIONS)}, not {value!r}")
    if len(set(chosen)) < len(chosen):
        raise UserError(f"{name} lists a mitigation twice")
    return tuple(chosen)


@dataclass(frozen=True)
class SoakSweep(Parameters):
    arms: tuple = setting(({"holder": "none"}, {"holder": "repeatable_read"}), as_arms)
    shape: str = setting("history", one_of(soak.SHAPES, "shape"))
    strategy: str = setting("skip_locked", one_of(soak.STRATEGIES, "strategy"))
    rate: float | str = setting("50%", soak.as_rate)
    workers: int = setting(4, as_int)
    seconds: float = setting(120.0, as_float)
    pin_from: float = setting(40.0, as_float)
    pin_to: float = setting(80.0, as_float)
    job_ms: float = setting(5.0, as_float)
    hold_until_failure: bool = setting(False, as_bool)
    hold_max: float = setting(120.0, as_float)
    repeats: int = setting(1, as_int)  # each arm's, unless the arm sets its own
    # raced once on every held arm with its control in the section, more than half of whose repeats fell behind,
    # where it acts on the holder (holders.APPLIES_TO): chosen at run time by which arms failed (follow_up)
    mitigate: tuple = setting((), lambda name, values: as_mitigations(name, values))

    def check(self) -> None:
        for index, repeats in enumerate([self.repeats, *(arm.get("repeats", 1) for arm in self.arms)]):
            if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
                raise UserError(f"{'arm ' + str(index) + ': ' if index else ''}repeats must be between 1 and "
                                f"{MAX_REPEATS}, not {repeats}")
        for index, arm in enumerate(self.arms, 1):  # each arm's own check: the rate, the window, the bounds
            try:
                self._arm(arm, 0)
            except UserError as exc:
                raise UserError(f"arm {index}: {exc}") from None

    def _arm(self, arm: dict, repeat: int) -> soak.SoakParameters:
        shared = {name: getattr(self, name) for name in ("shape", "strategy", "rate", "workers", "seconds",
                                                          "pin_from", "pin_to", "job_ms", "hold_until_failure",
                                                          "hold_max")}
        settings = {key: value for key, value in arm.items() if key != "repeats"}
        if settings.get("phases"):  # an arm in phases reads none of the section's window: its phases are its own
            shared = {key: value for key, value in shared.items() if key not in WINDOW}
        return soak.SoakParameters(**(shared | settings), repeat=repeat)

    def follow_up(self, summaries: list[dict]) -> list[soak.SoakParameters]:
        """The mitigations asked for (mitigate), once each, on every held arm with nothing else changed whose
        control is among the arms and whose repeats were all stored, more than half of them fallen behind (the
        rule's verdict, judged or not); none already stored. Asked after the arms, then never again: the loop ends.
        Changed after a run (docs/soak.md): every repeat was asked to have fallen behind until one of three held the
        90 s cap in the cold build of 2026-12-07 at 2a3f4f2, and no timeout was raced."""
        wanted = []
        for arm in self.arms:
            held = [self._arm(arm, r) for r in range(arm.get("repeats", self.repeats))]
            first = held[0]
            if first.phases or first.holder == "none" or first.mitigation != "none" or first.storage != "tmpfs" \
                    or first.synchronous_commit != "on" or first.library != "none" or not self._has_control(arm):
                continue
            stored = [_stored(summaries, p) for p in held]
            if any(s is None for s in stored) or not soak_outcomes.fell_mostly(
                    s.get("verdict_if_judged") in soak_outcomes.FAILED for s in stored):
                continue
            for mitigation in self.mitigate:
                if first.holder not in soak_holders.APPLIES_TO[mitigation]:
                    continue
                mitigated = self._arm({key: value for key, value in arm.items() if key != "repeats"}
                                      | {"mitigation": mitigation}, 0)
                if _stored(summaries, mitigated) is None and mitigated not in wanted:
                    wanted.append(mitigated)
        return wanted

    def _has_control(self, arm: dict) -> bool:
        # the analytics holder's settings are not the control's: nothing is held there
        control = {key: value for key, value in arm.items() if key not in ("repeats", *ANALYTICS)} | {"holder": "none"}
        return any(self._arm({k: v for k, v in other.items() if k != "repeats"}, 0) == self._arm(control, 0)
                   for other in self.arms)

    def runs(self) -> list[soak.SoakParameters]:
        """One run per arm and repeat (the section's repeats, or the arm's own), arm by arm."""
        return [self._arm(arm, repeat) for arm in self.arms for repeat in range(arm.get("repeats", self.repeats))]


def _stored(summaries: list[dict], p: soak.SoakParameters) -> dict | None:
    """The summary of the stored run of `p` among `summaries`, or None."""
    for summary in summaries:
        if summary.get("library") is None and all(_said(summary, name, said) == getattr(p, name)
                                                  for name, said in SAID.items()):
            return summary
    return None


IMPLIED = implied_settings(soak.SoakParameters)  # a setting added later: its default in a run stored before it


def _said(summary: dict, name: str, said: str):
    """A summary's value of setting `name` (stored as `said`) as the parameters hold it: a setting added later its
    default in a run stored before it; phases a tuple."""
    value = summary.get(said, IMPLIED.get(name))
    return tuple(value or ()) if name == "phases" else value


def measure_arm(db, p: soak.SoakParameters, run_id: str, progress: bool = False):
    """One arm: a job library's workers on its own table where it names one (harness.experiments.soak.library),
    else the soak's own shape and claim."""
    return (soak.measure if p.library == "none" else library_soak.measure)(db, p, run_id, progress)


def workers_needed(p: soak.SoakParameters) -> int:
    return soak.workers_needed(p) if p.library == "none" else library_soak.workers_needed(p)


# The kind as the store, the command line and the report see it (harness.experiments.registry).
KIND = Kind("soak", soak.SoakParameters, measure_arm, soak.summarise,
            help="a queue that runs for minutes: jobs arriving at a steady rate, workers claiming and finishing them, "
                 "and a transaction holding the MVCC horizon for part of the run, sampled every second, with a "
                 "verdict per run (drops and recreates claimrace.jobs; with --library, the library's own workers on its "
                 "own table in the database claimrace_libraries, made and dropped for the run)",
            show=soak_show.show_runs, sections=("soak", "soak_pg18", "library_soak"), request=SoakSweep,
            expand=SoakSweep.runs, command=soak.SoakParameters, workers=workers_needed,
            follow_up=lambda request, summaries: request.follow_up(summaries),
            label=soak.label, storage=lambda parameters: parameters.storage)
