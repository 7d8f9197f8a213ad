"""The decision the page opens with: each row gives its advice only where the findings it rests on bear it out."""

from __future__ import annotations

from harness.article.findings import (CONFIRMED, CONFIRMED_DIFFERENT_SIZE, CORRECTED, NOT_DISTINGUISHABLE,
                                      NOT_MEASURED, NOT_REPRODUCED, make_finding)
from harness.article.sections import decision, library_poolers

SWEEP = {"job_count": "5,000", "races": "three races"}
UNDECIDED = "not decided here"


def f7(faster=CONFIRMED, duplicates=CONFIRMED, bound=""):
    return make_finding("F7", CONFIRMED, values={"duplicate_jobs": "0", "wasted": "0", "attempts": "90,441",
                                                 "speedup": "3.6x [2.9–3.6]", "workers": "4", "bound_workers": bound},
                        parts=(("no duplicates", duplicates), ("no wasted attempts", CONFIRMED),
                               ("faster under contention", faster), ("about 20x at 100 workers", NOT_MEASURED)))


def f8(order):
    return make_finding("F8", NOT_DISTINGUISHABLE, values={"job_order": order, "job_workers": "4"})


def test_the_claim_row_advises_skip_locked_where_it_was_clean_and_says_what_its_speed_rests_on():
    row = decision.claim_row({"F7": f7()}, SWEEP)
    assert "SKIP LOCKED" in row["use"] and "3.6x [2.9–3.6] the claims/s" in row["because"]
    assert row["measured at"] == "three races a side of 5,000 jobs; speed at 4 workers"
    row = decision.claim_row({"F7": f7()}, SWEEP, repeats=1)  # one race a side: no spread to judge a speed by
    assert "in one race a side, which has no spread to judge by" in row["because"]
    row = decision.claim_row({"F7": f7(faster=NOT_DISTINGUISHABLE)}, SWEEP)
    assert "SKIP LOCKED" in row["use"] and "could not be told apart at 4 workers" in row["because"]
    row = decision.claim_row({"F7": f7(faster=NOT_MEASURED, bound="2, 4 and 8")}, SWEEP)
    assert "SKIP LOCKED" in row["use"] and "not tested here: at 2, 4 and 8 workers the CPUs" in row["because"]
    assert row["measured at"].startswith("the whole sweep, three races a side")
    row = decision.claim_row({"F7": f7(faster=NOT_MEASURED)}, SWEEP)
    assert "not tested here (no point with two or more workers" in row["because"]
    for finding in (f7(faster=NOT_REPRODUCED), f7(duplicates=CORRECTED)):
        row = decision.claim_row({"F7": finding}, SWEEP)
        assert row["use"] == UNDECIDED and "F7 confirmed" in row["because"]
    assert decision.claim_row({}, SWEEP)["use"] == UNDECIDED


def test_the_claim_row_adds_the_wait_for_a_job_only_where_it_was_lower_in_every_repeat():
    assert "a lower p99 wait for a job in every repeat (F8)" in decision.claim_row(
        {"F7": f7(), "F8": f8("lower")}, SWEEP)["because"]
    assert "F8" not in decision.claim_row({"F7": f7(), "F8": f8("lower")}, SWEEP, repeats=1)["because"]
    for order in ("higher", "overlap"):
        assert "F8" not in decision.claim_row({"F7": f7(), "F8": f8(order)}, SWEEP)["because"]


def test_the_guard_row_needs_naive_to_share_jobs_and_guarded_never_to():
    f1 = make_finding("F1", CONFIRMED_DIFFERENT_SIZE, values={"share": "84.9%", "workers": "2", "job_count": "5,000"})
    f4 = make_finding("F4", CONFIRMED, values={"duplicate_jobs": "0", "attempts": "496,377", "runs": "18"})
    row = decision.guard_row({"F1": f1, "F4": f4}, SWEEP)
    assert "status = 'pending'" in row["use"] and "84.9%" in row["because"] and "18 races" in row["measured at"]
    broken = make_finding("F4", CORRECTED, values=f4.values)
    row = decision.guard_row({"F1": f1, "F4": broken}, SWEEP)
    assert row["use"] == UNDECIDED and "F4 corrected" in row["because"]


def test_the_index_row_follows_f9():
    values = {"without_first_scan_buffers": "10,063", "with_first_scan_buffers": "65", "first_scan_cut": "155x",
              "job_count": "10,000", "consumed": "50%"}
    assert "10,063" in decision.index_row({"F9": make_finding("F9", CONFIRMED, values=values)})["because"]
    row = decision.index_row({"F9": make_finding("F9", NOT_MEASURED)})
    assert row["use"] == UNDECIDED and "F9 not measured" in row["because"]


def c7(holder_bad="0", fenced_bad="0", verdict=CONFIRMED, ran_twice="10"):
    return make_finding("C7", verdict, values={"stuck": "1", "leased_stuck": "0", "stale": "1", "fenced_runs": "8",
                                               "fenced_bad": fenced_bad, "holder_runs": "8",
                                               "holder_bad": holder_bad, "ran_twice": ran_twice,
                                               "checked_runs": "24"})


def test_the_lease_row_advises_only_the_checks_that_let_no_stale_holder_through():
    assert "the holder or a fencing token" in decision.lease_row({"C7": c7()})["use"]
    assert decision.lease_row({"C7": c7(holder_bad="1")})["use"].endswith("checks a fencing token")
    assert decision.lease_row({"C7": c7(fenced_bad="2")})["use"].endswith("checks the holder")
    assert decision.lease_row({"C7": c7(holder_bad="1", fenced_bad="1")})["use"] == UNDECIDED
    assert decision.lease_row({"C7": c7(verdict=CORRECTED)})["use"] == UNDECIDED


def test_the_lease_row_says_recovered_jobs_ran_twice_where_they_did():
    assert ("(C7); 10 of 24 jobs ran twice: make jobs safe to repeat"
            in decision.lease_row({"C7": c7()})["because"])
    said = decision.lease_row({"C7": c7(ran_twice="0")})["because"]
    assert said.endswith("none of 24 jobs ran twice here") and "safe to repeat" not in said


def pooled(name, mode, rate, bound=False, ran=100):
    return library_poolers.PooledPoint("library", name, 2, mode, 100, ran, 0, 0, None, 0, rate, bound)


def test_the_pooler_row_advises_session_mode_only_where_transaction_mode_went_wrong():
    wrong = make_finding("A10", CORRECTED, parts=(("procrastinate", CORRECTED), ("pgmq", CONFIRMED)))
    costs = [("pgqueuer", pooled("pgqueuer", "session", 582.0), pooled("pgqueuer", "documented", 12.4, True))]
    row = decision.pooler_row({"A10": wrong}, "1.18.0", costs)
    assert row["use"].startswith("session mode or no pooler") and row["because"].startswith("1 of 2 libraries and claims went wrong")
    assert row["because"] == ("1 of 2 libraries and claims went wrong in transaction mode, not in session mode "
                              "(procrastinate; A10); "
                              "pgqueuer, its documented setting: 12 jobs/s (CPU-bound), 582 jobs/s in session mode "
                              "(one run each)"), row["because"]
    named = make_finding("A10", CORRECTED, parts=(("chancy", CORRECTED), ("que (claim)", CORRECTED),
                                                  ("good_job (claim)", CORRECTED), ("pgmq", CONFIRMED)))
    assert "(chancy and the que and good_job claims; A10)" in decision.pooler_row({"A10": named}, "1.18.0")["because"]
    one = make_finding("A10", CORRECTED, parts=(("que (claim)", CORRECTED), ("pgmq", CONFIRMED)))
    assert "(the que claim; A10)" in decision.pooler_row({"A10": one}, "1.18.0")["because"]
    partial = [("pgmq", pooled("pgmq", "session", 800.0), pooled("pgmq", "documented", 500.0, ran=60))]
    assert "pgmq, its documented setting: only 60 of 100 jobs, 800 jobs/s" in decision.pooler_row(
        {"A10": wrong}, "1.18.0", partial)["because"]
    assert "A9" not in row["because"]
    assert row["measured at"] == ("PgBouncer 1.18.0, a run per library and mode; 1.21+ keeps prepared statements, "
                                  "not advisory locks (not run)")
    assert "1.21" not in decision.pooler_row({"A10": wrong}, "1.23.1")["measured at"]
    assert "1.21" not in decision.pooler_row({"A10": wrong}, "—")["measured at"]
    assert decision.pooler_row({"A10": wrong}, "1.18.0", [])["because"].endswith("(procrastinate; A10)")
    clean = make_finding("A10", CONFIRMED, parts=(("procrastinate", CONFIRMED), ("pgmq", CONFIRMED)))
    assert decision.pooler_row({"A10": clean}, "1.18.0")["use"] == "session or transaction mode"
    assert decision.pooler_row({"A10": make_finding("A10", NOT_MEASURED)}, "")["use"] == UNDECIDED


def test_the_table_has_a_row_per_choice_with_its_columns():
    frame = decision.rows({"F7": f7(), "C7": c7()}, SWEEP, "1.18.0")
    assert list(frame.columns) == list(decision.COLUMNS) and len(frame) == 6
    assert list(frame["use"]).count(UNDECIDED) == 4


def a11(helped="True", parts=(("history", CONFIRMED), ("delete", CORRECTED)), model=True, cpu="", share=""):
    values = {"slowed": "1", "decided": "2", "pin": "20 s", "rates": "350 to 600", "load": "80% of ...",
              "workers": "4", "pg": "16", "mitigation": "idle_in_transaction_session_timeout",
              "mitigated_arm": "history indexed", "unmitigated_verdict": "spirals", "mitigated_hold": "5 s",
              "mitigated_rate": "586", "mitigated_verdict": "held 5 s without failing",
              "mitigated_outcome": "kept up over the 100 s from the hold's start"
              if helped == "True" else "still fell behind 40 s into the run",
              "mitigation_helped": helped, "runs": "3 runs of each arm", "unmitigated_behind": "13 to 50 s",
              "unmitigated_slow": "2 to 5 s", "unmitigated_cpu": cpu, "unmitigated_share": share}
    if model:
        values |= {"model_at": "146 jobs/s (25% of that rate)", "model_hold": "at 19 min"}
    return make_finding("A11", CORRECTED, values=values, parts=parts)


def test_the_horizon_row_advises_a_timeout_only_where_a_hold_slowed_a_table_and_the_timeout_helped():
    row = decision.horizon_row({"A11": a11()})
    assert "idle_in_transaction_session_timeout" in row["use"] and "shorter than the hold" in row["use"]
    assert "held at 586 jobs/s, the history indexed table fell behind 13 to 50 s into the hold; with the hold ended " \
        "after 5 s, it kept up over the 100 s" in row["because"], row["because"]
    assert "At 146 jobs/s (25% of that rate), the model of these runs puts the fall at 19 min; a running report " \
        "needs <code>statement_timeout</code> (not raced) (A11)" in row["because"], row["because"]
    assert row["measured at"].endswith("3 runs of each arm, the timeout once")
    mostly = decision.horizon_row({"A11": a11(share=" in 2 of 3 runs")})  # one repeat held its cap
    assert "fell behind 13 to 50 s into the hold in 2 of 3 runs; with the hold ended" in mostly["because"]
    marked = decision.horizon_row({"A11": a11(cpu="; CPUs full (2 of 3, from 9 to 12 s into the hold)")})
    assert "fell behind 13 to 50 s into the hold; CPUs full (2 of 3, from 9 to 12 s into the hold); with the hold " \
        "ended" in marked["because"], marked["because"]  # the machine's mark beside the onsets it may have set
    assert "350 to 600 jobs/s" in row["measured at"] and "3 runs of each arm" in row["measured at"]
    off = a11(model=False)
    off.values["model_off"] = "the model of these runs was off (at 483 jobs/s: 85 s predicted, 43 s measured) " \
        "and gives no other hold"
    row = decision.horizon_row({"A11": off})  # a model off on its check is said so, and gives no hold
    assert "idle_in_transaction" in row["use"] and row["because"].endswith(
        "with the hold ended after 5 s, it kept up over the 100 s from the hold's start; the model of these runs was off "
        "(at 483 jobs/s: 85 s predicted, 43 s measured) and gives no other hold; a running report "
        "needs <code>statement_timeout</code> (not raced) (A11)"), row["because"]
    no_model = decision.horizon_row({"A11": a11(model=False)})  # no fit: the measured hold alone
    assert "idle_in_transaction" in no_model["use"] and "model" not in no_model["because"]
    assert no_model["because"].endswith("from the hold's start; a running report needs "
                                        "<code>statement_timeout</code> (not raced) (A11)")
    row = decision.horizon_row({"A11": a11(helped="False")})
    assert row["use"] == UNDECIDED and "it still fell behind 40 s into the run" in row["because"]
    assert "after 5 s" in row["because"] and "350 to 600 jobs/s" in row["measured at"]
    assert decision.horizon_row({"A11": a11(parts=(("delete", CORRECTED), ("history", NOT_DISTINGUISHABLE)))})[
        "use"] == UNDECIDED
    one = make_finding("A11", CONFIRMED, values=a11().values)  # one held arm: the verdict is its part
    assert "idle_in_transaction" in decision.horizon_row({"A11": one})["use"]
    assert decision.horizon_row({"A11": make_finding("A11", NOT_MEASURED)})["use"] == UNDECIDED
    no_timeout = make_finding("A11", CONFIRMED, values={k: v for k, v in a11().values.items()
                                                        if k in ("slowed", "decided", "pin", "rates", "workers")})
    assert decision.horizon_row({"A11": no_timeout})["use"] == UNDECIDED
    assert decision.horizon_row({})["use"] == UNDECIDED
