"""The soak as phases (harness.experiments.soak.phases): the grammar and its one-line errors, the arrivals'
schedule, and the per-phase rule with every outcome it returns (one real run in phases is tests/test_soak.py's, in
its pool of runs)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from conftest import run_cli
from harness.errors import UserError
from harness.experiments.soak import measure as soak
from harness.experiments.soak import outcomes as rule
from harness.experiments.soak import phases
from harness.experiments.soak.sweep import SoakSweep


@pytest.mark.parametrize("asked, said", [
    ("x", "a phase is label=kind:seconds"),
    ("a=clean:0", "its seconds must be more than 0"),
    ("a=soak:20", "the kind must be one of"),
    ("a=clean(3):20", "only hold(holder) and ramp(rate) take a value"),
    ("a=clean:20,b=ramp:20", "a ramp names its rate"),
    ("a=clean:20,b=ramp(fast):20", "rate must be jobs per second"),
    ("a=clean:20,b=ramp(500%):20", "a share of the sustained rate must be between"),
    ("a=clean:20,b=ramp(9000):20", "rate must be between"),
    ("a=clean:20,b=hold(lock):20", "the holder must be one of"),
    ("w=warmup:5,h=hold:20", "a clean phase with 5 s after the first 5 s of the run comes before it"),
    ("c=clean:20,w=warmup:5,h=hold:20", "a warm-up comes first"),
    ("a=clean:20,b=hold:5", "lasts 10 s at least"),
    ("a=clean:20,a=hold:20", "given twice"),
    ("a=clean:20,r=recovery:10", "a recovery follows a hold or a ramp"),
    ("a=clean:20,b=clean:10", "the phases judge nothing"),
    ("a=clean:20,b=hold:15000", "the phases must last between"),
])
def test_a_bad_phase_is_one_line(asked, said):
    with pytest.raises(UserError, match=said.replace("(", r"\(").replace(")", r"\)")) as caught:
        soak.SoakParameters(shape="delete", rate=100.0, phases=asked)
    assert "\n" not in str(caught.value)


def test_phases_do_not_take_a_hold_until_failure_a_library_or_a_mitigation_that_does_nothing_to_a_hold():
    for settings, said in [({"hold_until_failure": True}, "--hold-until-failure is not raced with --phases"),
                           ({"holder": "analytics", "mitigation": "statement_timeout"},
                            "does nothing to phase h's holder"),
                           ({"library": "pgmq"}, "--library is not raced with --phases")]:
        with pytest.raises(UserError, match=said):
            soak.SoakParameters(**{"shape": "delete", "rate": 100.0, "phases": "c=clean:20,h=hold(repeatable_read):20"}
                                | settings)


def test_the_command_says_a_bad_phase_in_one_line_and_exits_2(tmp_path):
    done = run_cli("soak", "--shape", "delete", "--phases", "c=clean:20,r=ramp:20", "--data-dir", str(tmp_path))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "a ramp names its rate" in done.stderr


def test_the_connections_asked_of_a_server_count_every_hold_phase_s_sessions():
    """Each hold phase's holder connects as the run starts: two phases of three analytics sessions hold six."""
    two = ("w=warmup:5", "c=clean:10", "h1=hold(analytics):10", "r=recovery:5", "h2=hold(analytics):10",
           "r2=recovery:5")
    asked = soak.SoakParameters(holder="analytics", analytics_sessions=3, rate=100, phases=two)
    assert soak.holder_sessions(asked) == 6
    assert soak.holder_sessions(soak.SoakParameters(holder="analytics", analytics_sessions=3, rate=100)) == 3
    assert soak.holder_sessions(soak.SoakParameters(holder="repeatable_read", rate=100)) == 2
    assert soak.workers_needed(asked) - soak.workers_needed(dataclasses.replace(asked, phases=two[:4])) == 3


def test_the_schedule_falls_due_phase_by_phase_and_a_classic_arm_is_its_rate_from_the_start():
    asked = soak.SoakParameters(shape="delete", rate=100.0,
                                phases=["w=warmup:5", "c=clean:10", "up=ramp(50%):10", "back=recovery:10"])
    plan = asked.plan()
    rates = phases.rates(plan, 100.0, 600.0)
    assert rates == [100.0, 100.0, 300.0, 100.0] and asked.length_s == 35 and phases.first_judged(plan).start_s == 15
    due = phases.schedule(plan, rates)
    assert due.due_by(15) == pytest.approx(1500) and due.due_by(25) == pytest.approx(4500)
    assert due.due_s(1500) == pytest.approx(15) and due.due_s(1800) == pytest.approx(16)
    assert due.due_s(4600) == pytest.approx(26)
    classic = soak.SoakParameters(shape="delete", rate=100.0, seconds=60, pin_from=20, pin_to=40)
    plan = classic.plan()
    assert [(p.kind, p.start_s, p.end_s) for p in plan] == [("warmup", 0, 5), ("clean", 5, 20), ("hold", 20, 40),
                                                             ("recovery", 40, 60)]
    flat = phases.schedule(plan, phases.rates(plan, 100.0, None))
    assert all(flat.due_s(k) == pytest.approx(k / 100) for k in (0, 1, 1999, 2000, 5999))


def test_an_arm_in_phases_reads_none_of_the_section_s_window_and_gets_no_mitigation_after_it():
    sweep = SoakSweep(rate="80%", seconds=120, pin_from=20, hold_until_failure=True, hold_max=60,
                      mitigate=("idle_timeout",),
                      arms=({"shape": "delete", "holder": "none", "phases": ["c=clean:20", "h=hold:20"]},
                            {"shape": "delete", "holder": "repeatable_read", "phases": ["c=clean:20", "h=hold:20"]}))
    held = sweep.runs()[1]
    assert not held.hold_until_failure and held.seconds == 120 and held.length_s == 40
    stored = [{"shape": "delete", "strategy": "skip_locked", "holder": "repeatable_read", "mitigation": "none",
               "library": None, "verdict_if_judged": rule.FELL_BEHIND, "phases": list(held.phases)}]
    assert sweep.follow_up(stored) == []


def _series(backlog, p50, arrived=None) -> pd.DataFrame:
    backlog = np.asarray(backlog, float)
    arrived = np.full(len(backlog), 100.0) if arrived is None else np.asarray(arrived, float)
    claimed = arrived - np.diff(backlog, prepend=0.0)
    return pd.DataFrame({"second": np.arange(len(backlog), dtype=float), "arrived": arrived, "claimed": claimed,
                         "backlog": backlog, "claim_p50_ms": p50, "claim_p99_ms": np.asarray(p50) * 2,
                         "claim_mean_ms": p50})


PLAN = [{"label": "w", "kind": "warmup", "start_s": 0, "end_s": 5, "holder": "none", "rate": 100.0},
        {"label": "c", "kind": "clean", "start_s": 5, "end_s": 20, "holder": "none", "rate": 100.0},
        {"label": "h", "kind": "hold", "start_s": 20, "end_s": 40, "holder": "repeatable_read", "rate": 100.0},
        {"label": "back", "kind": "recovery", "start_s": 40, "end_s": 55, "holder": "none", "rate": 100.0}]


def test_each_phase_is_judged_against_the_clean_one_before_it_with_every_outcome():
    quiet, level = np.full(55, 5.0), np.full(55, 1.0)
    judged = {p["label"]: p for p in rule.judge_phases(_series(quiet, level), PLAN)}
    assert judged["w"]["verdict"] == rule.WARMUP and judged["c"]["verdict"] == rule.REFERENCE
    assert judged["c"]["claim_level_ms"] == 1.0 and judged["h"]["reference"] == "c"
    assert judged["h"]["verdict"] == rule.HELD and judged["h"]["observed_s"] == 20
    assert judged["back"]["verdict"] == rule.RECOVERED and judged["back"]["recovered_s"] == 1

    slow = level.copy()
    slow[28:40] = 2.5  # twice the clean phase's level from 8 s into the hold
    judged = {p["label"]: p for p in rule.judge_phases(_series(quiet, slow), PLAN)}
    assert judged["h"]["verdict"] == rule.SLOWED and judged["h"]["seconds_to_slow"] == 8

    behind = quiet.copy()
    behind[30:] = np.linspace(150, 1500, 25)  # past a second of arrivals from 10 s into the hold, never back
    judged = {p["label"]: p for p in rule.judge_phases(_series(behind, level), PLAN)}
    assert judged["h"]["verdict"] == rule.FELL_BEHIND and judged["h"]["seconds_to_fall_behind"] == 10
    assert judged["back"]["verdict"] == rule.NOT_RECOVERED and judged["back"]["recovered_s"] is None

    back_late = quiet.copy()
    back_late[30:45] = 400  # behind, back 5 s into the recovery
    judged = {p["label"]: p for p in rule.judge_phases(_series(back_late, level), PLAN)}
    assert judged["back"]["recovered_s"] == 6

    cpu = {p["label"]: p for p in rule.judge_phases(_series(behind, level), PLAN, cpu_bound=True)}
    assert cpu["h"]["verdict"] == rule.NOT_JUDGED and cpu["h"]["verdict_if_judged"] == rule.FELL_BEHIND
    assert cpu["c"]["verdict"] == rule.REFERENCE


def test_a_ramp_is_behind_only_past_a_second_of_its_own_arrivals():
    """At 300 jobs/s a backlog of 200 is less than a second of arrivals: not behind, as it is at 100 jobs/s."""
    plan = [dict(PLAN[1]), dict(PLAN[2], label="up", kind="ramp", holder="none", rate=300.0)]
    arrived = np.r_[np.full(20, 100.0), np.full(20, 300.0)]
    backlog = np.r_[np.full(20, 5.0), np.full(20, 200.0)]
    ramp = rule.judge_phases(_series(backlog, np.full(40, 1.0), arrived), plan)[1]
    assert ramp["verdict"] == rule.HELD, ramp
    hold = rule.judge_phases(_series(backlog, np.full(40, 1.0)), [PLAN[1], PLAN[2]])[1]
    assert hold["verdict"] == rule.FELL_BEHIND, hold


def test_each_hold_or_ramp_carries_its_own_cpu_mark_read_from_its_reference_on():
    """Busy from 3 s into the hold: the hold is marked from 3 s, and the reference's seconds are its before; busy in
    the warm-up alone marks nothing (the mark reads from the reference's start); no samples of the share: none."""
    t = np.arange(0.0, 55.0)
    busy = np.where((t >= 23) & (t < 40), 0.95, 0.3)
    judged = {p["label"]: p for p in rule.judge_phases(_series(np.full(55, 5.0), np.full(55, 1.0)), PLAN,
                                                       samples=pd.DataFrame({"t_s": t, "cpu_busy_share": busy}))}
    assert judged["h"]["cpu_bound_from_s"] == 3 and judged["h"]["cpu_busy_before"] == 0.3, judged["h"]
    assert "cpu_bound_from_s" not in judged["c"] and "cpu_bound_from_s" not in judged["back"]
    warm = np.where(t < 5, 0.95, 0.3)
    judged = {p["label"]: p for p in rule.judge_phases(_series(np.full(55, 5.0), np.full(55, 1.0)), PLAN,
                                                       samples=pd.DataFrame({"t_s": t, "cpu_busy_share": warm}))}
    assert judged["h"]["cpu_bound_from_s"] is None and judged["h"]["cpu_measured"]
    unread = rule.judge_phases(_series(np.full(55, 5.0), np.full(55, 1.0)), PLAN, samples=pd.DataFrame({"t_s": t}))
    assert unread[2]["cpu_measured"] is False


def test_a_phase_s_cpu_mark_is_said_after_its_verdict_in_its_own_window():
    from harness.article.sections.soak_arms import cpu_text
    assert cpu_text([3.0], "ramp") == "; CPUs full (from 3 s into the ramp)"
    assert cpu_text([-2.0], "hold") == "; CPUs full (from before the hold)"
    assert cpu_text([None], "ramp") == ""
