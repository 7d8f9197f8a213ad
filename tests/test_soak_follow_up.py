"""The mitigations a soak section races where its held arms failed (harness.experiments.soak.sweep.SoakSweep's
follow_up): one test per reason it asks or does not, on synthetic summaries; one through real stored runs is in
tests/test_soak.py."""

from __future__ import annotations

import pytest

from harness.errors import UserError
from harness.experiments.soak.sweep import SoakSweep

SHARED = {"rate": "80%", "workers": 4, "seconds": 120, "pin_from": 20, "hold_until_failure": True, "hold_max": 60,
          "repeats": 2, "mitigate": ["idle_timeout", "statement_timeout", "autovacuum"]}


def sweep(*arms, **more) -> SoakSweep:
    return SoakSweep.from_mapping(SHARED | more | {"arms": list(arms)}, "soak")


def stored(request: SoakSweep, verdict_of=lambda p: "fell_behind" if p.holder != "none" else "slowed") -> list:
    """A summary per run the request asks for, as the store keeps it."""
    return [{"shape": p.shape, "strategy": p.strategy, "holder": p.holder, "mitigation": p.mitigation,
             "rate_asked": p.rate, "workers": p.workers, "job_ms": p.job_ms, "history_rows": p.history_rows,
             "synchronous_commit": p.synchronous_commit, "seconds": p.seconds, "pin_from": p.pin_from,
             "hold_until_failure": p.hold_until_failure, "repeat": p.repeat, "library": None,
             "analytics_s": p.analytics_s, "analytics_sessions": p.analytics_sessions,
             "verdict_if_judged": verdict_of(p)} for p in request.runs()]


DELETE = [{"shape": "delete", "holder": "none"}, {"shape": "delete", "holder": "repeatable_read"}]


def test_a_held_arm_whose_repeats_all_fell_behind_gets_each_mitigation_that_acts_on_its_holder_once():
    request = sweep(*DELETE)
    wanted = request.follow_up(stored(request))
    # statement_timeout acts on analytics statements, not on an idle snapshot
    assert [(p.shape, p.holder, p.mitigation, p.repeat) for p in wanted] == [
        ("delete", "repeatable_read", "idle_timeout", 0), ("delete", "repeatable_read", "autovacuum", 0)]
    assert request.follow_up(stored(request) + stored(sweep(*[dict(DELETE[1], mitigation=m, repeats=1)
                                                              for m in ("idle_timeout", "autovacuum")]))) == []


def test_planetscales_case_is_held_against_the_plain_control_and_gets_its_fix_with_its_own_statements():
    """Three overlapping analytics statements of 120 s: their control holds nothing, so has no statements to match;
    the fixes raced keep the case's length and sessions."""
    case = {"shape": "delete", "holder": "analytics", "analytics_s": 120, "analytics_sessions": 3}
    request = sweep(DELETE[0], case, mitigate=["statement_timeout", "one_analytics"])
    wanted = request.follow_up(stored(request))
    assert [(p.holder, p.mitigation, p.analytics_s, p.analytics_sessions) for p in wanted] == [
        ("analytics", "statement_timeout", 120.0, 3), ("analytics", "one_analytics", 120.0, 3)]
    # the default analytics arm stored in its place is not the case: nothing known to have failed
    default = sweep(DELETE[0], {"shape": "delete", "holder": "analytics"})
    assert request.follow_up(stored(default)) == []


def test_no_mitigation_is_raced_where_the_arm_did_not_fail_most_repeats_or_was_not_all_stored():
    request = sweep(*DELETE)
    one_kept_up = stored(request, lambda p: "held_without_failing" if p.holder == "none" or p.repeat else
                         "fell_behind")
    assert request.follow_up(one_kept_up) == []  # one of two: not more than half
    assert request.follow_up(stored(request)[:-1]) == []  # its second repeat not stored


@pytest.mark.parametrize("fell, asked", [((0, 1), True), ((0,), False)])
def test_an_arm_that_fell_behind_in_more_than_half_its_repeats_gets_its_mitigations(fell, asked):
    """Changed after a run: the cold build of 2026-12-07 at 2a3f4f2 held one of three repeats the 90 s cap."""
    request = sweep(*DELETE, repeats=3)
    summaries = stored(request, lambda p: "fell_behind" if p.holder != "none" and p.repeat in fell else
                       "held_without_failing")
    assert [p.mitigation for p in request.follow_up(summaries)] == (["idle_timeout", "autovacuum"] if asked else [])


def test_no_mitigation_is_raced_on_an_arm_without_its_control_or_with_one_already_set():
    assert sweep(DELETE[1]).follow_up(stored(sweep(DELETE[1]))) == []  # the model's check at another rate
    explicit = sweep(*DELETE, {"shape": "delete", "holder": "repeatable_read", "mitigation": "idle_timeout",
                               "repeats": 1})
    assert [p.mitigation for p in explicit.follow_up(stored(explicit))] == ["autovacuum"]
    assert sweep(*DELETE, mitigate=[]).follow_up(stored(sweep(*DELETE))) == []


@pytest.mark.parametrize("mitigate, said", [
    (["transaction_timeout"], "mitigate may list idle_timeout, statement_timeout, one_analytics, autovacuum, not "
                              "'transaction_timeout'"),
    (["autovacuum", "autovacuum"], "mitigate lists a mitigation twice"),
    ("autovacuum", "must be a list"),
])
def test_a_bad_list_of_mitigations_is_one_line(mitigate, said):
    with pytest.raises(UserError, match=said):
        sweep(*DELETE, mitigate=mitigate)
