"""A soak run as a list of phases: at what rate jobs arrive, and what holds the horizon, second by second
(harness.experiments.soak.measure).

An arm that gives `phases` is raced as written, each phase `label=kind:seconds`, one after the other:

    warmup           jobs arrive at the arm's rate; not judged, and no reference (workers connecting, a first
                     autovacuum pass);
    clean            jobs arrive at the arm's rate, nothing held: the reference every phase after it is judged
                     against, until the next clean phase;
    hold, hold(H)    jobs arrive at the arm's rate, and H (the arm's holder where none is named) holds the horizon,
                     under the arm's mitigation;
    ramp(R)          jobs arrive at R: jobs per second, or a share of the rate the workers sustain (ramp(120%));
    recovery         jobs arrive at the arm's rate, nothing held: judged on whether the backlog is back at the
                     reference's level.

    phases: [warm=warmup:5, base=clean:20, r400=ramp(400):20, r600=ramp(600):20, r800=ramp(800):20]

A rising load, a burst, or a second hold is then an arm in a params file. An arm without `phases` is raced as
the same list, made from its `seconds`, `pin_from` and `pin_to` (classic): warm-up, clean, hold, recovery. The
rule (harness.experiments.soak.outcomes.judge_phases) judges each hold, ramp and recovery against the clean
phase before it.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from harness.errors import UserError
from harness.experiments.contract import _sequence
from harness.experiments.soak import outcomes as soak_outcomes
from harness.experiments.soak.holders import HOLDERS

KINDS = ("warmup", "clean", "hold", "ramp", "recovery")
JUDGED = ("hold", "ramp")  # the phases the queue may fail in
MAX_PHASES = 20
MIN_REFERENCE_S = 5.0  # a clean phase's seconds after the rule's warm-up, at least: the spread to judge by
MIN_JUDGED_S = float(soak_outcomes.BEHIND_RUN_S)  # a hold or ramp at least this long: the rule's run of seconds
SPEC = re.compile(r"(?:(?P<label>[a-z][a-z0-9_]{0,19})=)?(?P<kind>[a-z]+)(?:\((?P<arg>[^()]*)\))?"
                  r":(?P<seconds>[0-9]+(?:\.[0-9]+)?)s?")


@dataclass(frozen=True)
class Phase:
    label: str
    kind: str
    start_s: float
    seconds: float
    holder: str = "none"  # what holds the horizon in it
    rate: float | str | None = None  # jobs/s or a share of the sustained rate; None: the arm's

    @property
    def end_s(self) -> float:
        return self.start_s + self.seconds

    def as_dict(self) -> dict:
        return {"label": self.label, "kind": self.kind, "start_s": self.start_s, "end_s": self.end_s,
                "holder": self.holder, "rate_asked": self.rate}


def as_rate(name: str, value) -> float | str:
    """Jobs per second (a number), or a share of the sustained rate ("50%")."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    try:
        return f"{float(text[:-1]):g}%" if text.endswith("%") else float(text)
    except ValueError:
        raise UserError(f"rate must be jobs per second, or a share of the sustained rate like 50%, not {value!r}") \
            from None


def as_phases(name: str, values) -> tuple[str, ...]:
    """A list of phases, or one text of them separated by commas; each `label=kind:seconds` (the module's
    docstring), one line for anything else. The texts are kept as written, without spaces: they are the run's
    setting."""
    if isinstance(values, str):
        values = [part for part in values.split(",") if part.strip()]
    specs = tuple(str(value).replace(" ", "") for value in (_sequence(name, values) if values is not None else ()))
    if len(specs) > MAX_PHASES:
        raise UserError(f"give at most {MAX_PHASES} phases, not {len(specs)}")
    for spec in specs:
        _one(spec, 0.0, "none", 0)
    return specs


def _one(spec: str, start_s: float, arm_holder: str, index: int) -> Phase:
    match = SPEC.fullmatch(spec)
    if match is None:
        raise UserError(f"a phase is label=kind:seconds, like base=clean:20 or r400=ramp(400):20, not {spec!r}")
    kind, arg, seconds = match["kind"], match["arg"], float(match["seconds"])
    if kind not in KINDS:
        raise UserError(f"phase {spec!r}: the kind must be one of {', '.join(KINDS)}, not {kind!r}")
    if arg is not None and kind not in ("hold", "ramp"):
        raise UserError(f"phase {spec!r}: only hold(holder) and ramp(rate) take a value")
    if kind == "ramp" and arg is None:
        raise UserError(f"phase {spec!r}: a ramp names its rate, like ramp(400) or ramp(120%)")
    if seconds <= 0:
        raise UserError(f"phase {spec!r}: its seconds must be more than 0")
    holder, rate = "none", None
    if kind == "hold":
        holder = arg if arg is not None else arm_holder
        if holder not in HOLDERS:
            raise UserError(f"phase {spec!r}: the holder must be one of {', '.join(HOLDERS)}, not {holder!r}")
    if kind == "ramp":
        rate = as_rate("rate", arg)
    return Phase(match["label"] or f"{kind}{index + 1}", kind, start_s, seconds, holder, rate)


def parse(specs, arm_holder: str) -> list[Phase]:
    """The phases of an arm's `phases`, each with its start in seconds from the run's start."""
    phases, start_s = [], 0.0
    for index, spec in enumerate(specs):
        phase = _one(spec, start_s, arm_holder, index)
        phases.append(phase)
        start_s = phase.end_s
    return phases


def check(phases: list[Phase]) -> None:
    """What a list of phases must be for the rule to judge it: labels once each; a warm-up only first; a clean phase
    with MIN_REFERENCE_S after the rule's warm-up before any phase judged; holds and ramps long enough for the
    rule's run of seconds; a recovery only after a hold or a ramp."""
    labels = [phase.label for phase in phases]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise UserError(f"phase label {twice[0]!r} is given twice")
    reference = False
    for index, phase in enumerate(phases):
        if phase.kind == "warmup" and index:
            raise UserError(f"phase {phase.label}: a warm-up comes first")
        if phase.kind == "clean" and phase.end_s - max(phase.start_s, soak_outcomes.WARMUP_S) >= MIN_REFERENCE_S:
            reference = True
        if phase.kind in (*JUDGED, "recovery") and not reference:
            raise UserError(f"phase {phase.label}: a clean phase with {MIN_REFERENCE_S:g} s after the first "
                            f"{soak_outcomes.WARMUP_S:g} s of the run comes before it (its reference)")
        if phase.kind in JUDGED and phase.seconds < MIN_JUDGED_S:
            raise UserError(f"phase {phase.label}: a {phase.kind} lasts {MIN_JUDGED_S:g} s at least (the rule's "
                            f"run of seconds), not {phase.seconds:g}")
        if phase.kind == "recovery" and phases[index - 1].kind not in (*JUDGED, "recovery"):
            raise UserError(f"phase {phase.label}: a recovery follows a hold or a ramp")
    if not any(phase.kind in JUDGED for phase in phases):
        raise UserError("the phases judge nothing: give a hold or a ramp")


def classic(seconds: float, pin_from: float, pin_to: float, holder: str) -> list[Phase]:
    """The phases of an arm without `phases`: warm-up, clean until pin_from, the hold to pin_to (its cap with
    hold_until_failure), recovery to the run's end."""
    warmup = soak_outcomes.WARMUP_S
    return [Phase("warmup", "warmup", 0.0, warmup), Phase("clean", "clean", warmup, pin_from - warmup),
            Phase("hold", "hold", pin_from, pin_to - pin_from, holder),
            Phase("recovery", "recovery", pin_to, seconds - pin_to)]


def first_judged(phases: list[Phase]) -> Phase:
    """The first hold or ramp: the window a run's summary judges as its hold (the rule's one-window verdict)."""
    return next(phase for phase in phases if phase.kind in JUDGED)


def length(phases: list[Phase]) -> float:
    return phases[-1].end_s if phases else 0.0


class Schedule:
    """When each job falls due: `segments` are (start s, jobs/s), each running to the next's start, the last on
    without end. Read in the arrivals' loop, once per job: each answer is a search over the segments' bounds, kept
    from the start."""

    def __init__(self, segments):
        self.segments = tuple(segments)
        self.starts = [start_s for start_s, _ in self.segments]
        self.firsts = [0.0]  # the jobs due by each segment's start
        for (start_s, rate), (end_s, _) in zip(self.segments, self.segments[1:]):
            self.firsts.append(self.firsts[-1] + rate * (end_s - start_s))

    def due_by(self, t_s: float) -> float:
        """The jobs due by t_s seconds from the start (a fraction: job k falls due as this reaches k)."""
        i = max(bisect.bisect_right(self.starts, t_s) - 1, 0)
        return self.firsts[i] + self.segments[i][1] * max(0.0, t_s - self.starts[i])

    def due_s(self, k: int) -> float:
        """When job k (from 0) falls due, in seconds from the start."""
        i = bisect.bisect_right(self.firsts, k) - 1
        return self.starts[i] + (k - self.firsts[i]) / self.segments[i][1]


def rates(phases: list[Phase], arm_rate: float, sustained_rate: float | None) -> list[float]:
    """Each phase's jobs per second: the arm's rate, or a ramp's own (a share of the sustained rate, measured
    first)."""
    def resolved(rate) -> float:
        return rate if not isinstance(rate, str) else sustained_rate * float(rate[:-1]) / 100
    return [arm_rate if phase.rate is None else resolved(phase.rate) for phase in phases]


def schedule(phases: list[Phase], phase_rates: list[float]) -> Schedule:
    """The arrivals' schedule; phases at one rate run as one segment (a classic arm's is its rate from the start)."""
    segments = []
    for phase, rate in zip(phases, phase_rates):
        if not segments or segments[-1][1] != rate:
            segments.append((phase.start_s, rate))
    return Schedule(segments)


def needs_sustained(phases: list[Phase]) -> bool:
    return any(isinstance(phase.rate, str) for phase in phases)
