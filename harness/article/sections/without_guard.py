"""What happens without the guard: naive's duplicates at two workers (F1) and how they compound (F2),
guarded's none (F4), and the slowed-down race that shows the window."""

from __future__ import annotations

from harness.article.analysis import race_summary, runs_of, timeline, timeline_counts
from harness.article.compare import Figure, OriginalFigure, Races, direction_beyond_noise, scaled, separated
from harness.article.findings import (CONFIRMED, CONFIRMED_DIFFERENT_SIZE, Finding, NOT_DISTINGUISHABLE, NOT_REPRODUCED,
                                      ORIGINAL_F1_DUPLICATE_JOBS, ORIGINAL_F4_ATTEMPTS, ORIGINAL_JOB_COUNT,
                                      make_finding, not_measured)
from harness.article.formats import count, ms, number, percent
from harness.article.prose import cpu_bound_shown, listing
from harness.article.sections.race_sweep import RACES, at_point, race_data
from harness.article.wording import Sentences

NAME = "without_guard"
# the sweep comes from the races section (loaded["races"]); original_size is naive at 2 workers on the original's
# 10,000 jobs, which F1 is judged on where it was raced
READS = ("original_size",)
UPSTREAM = ("races",)
say = Sentences(NAME)


# F1 needs a share of the jobs, not one duplicate: the original's point is that two workers already collide on
# nearly every job (98%), that is, the race window is hit as a matter of course. Below one job in a hundred,
# duplicates would be a rare accident; from 1% up they are routine whatever their exact rate, and the size
# is then compared with the original's.
F1_ROUTINE_SHARE = 0.01


def f1_duplicates_at_two_workers(races: Races, original_size: Races | None = None) -> Finding:
    """naive's duplicates at 2 workers: on original_size (naive at 2 workers, raced for F1 on the original's
    10,000 jobs) where it was raced, else on the sweep. Only a 2-worker point on 10,000 jobs can confirm the
    original's 9,763; any other size is compared as a share."""
    arm = original_size is not None and 2 in original_size.workers("naive")
    if arm:
        races = original_size
    contended = races.workers("naive", least=2)
    if not contended:
        return not_measured("F1", say("F1.not_raced"))
    workers = 2 if 2 in contended else contended[0]
    duplicates = races.figure("naive", workers, "duplicate_jobs")
    share = scaled(duplicates, 1 / races.job_count)
    values = {"workers": count(workers), "duplicate_jobs": duplicates.text(count), "job_count": count(races.job_count),
              "share": share.text(percent)}
    ours = say("F1.ours", duplicate_jobs=duplicates.text(count), job_count=count(races.job_count),
               share=share.text(percent), workers=workers)
    notes = [] if workers == 2 else [say("F1.no_two_workers", workers=workers)]
    if arm:
        repeats = races.repeats("naive", 2)
        notes.append(say("F1.original_size", races=f"{count(repeats)} race{'' if repeats == 1 else 's'}",
                         job_count=count(races.job_count)))
    routine = separated(share, Figure(*[F1_ROUTINE_SHARE] * 3))
    if routine < 0:
        notes.append(say("F1.rare", routine_share=percent(F1_ROUTINE_SHARE, 0)))
        return make_finding("F1", NOT_REPRODUCED, ours, notes, values)
    if routine == 0:
        notes.append(say("F1.spans", routine_share=percent(F1_ROUTINE_SHARE, 0)))
        return make_finding("F1", NOT_DISTINGUISHABLE, ours, notes, values)
    original = OriginalFigure(ORIGINAL_F1_DUPLICATE_JOBS / ORIGINAL_JOB_COUNT, 1 / ORIGINAL_JOB_COUNT)
    if workers == 2 and races.job_count == ORIGINAL_JOB_COUNT and original.met_by(share):
        return make_finding("F1", CONFIRMED, ours, notes, values)
    if races.job_count != ORIGINAL_JOB_COUNT:  # a share of a shorter or longer queue is not the original's figure
        notes.append(say("F1.other_queue", job_count=count(races.job_count),
                         original_job_count=count(ORIGINAL_JOB_COUNT)))
    notes.append(say("F1.different_size", share=share.text(percent), original_share=percent(original.value)))
    return make_finding("F1", CONFIRMED_DIFFERENT_SIZE, ours, notes, values)


def f2_duplicates_compound(races: Races) -> Finding:
    contended = races.workers("naive", least=2)
    if len(contended) < 2:
        return not_measured("F2", say("F2.too_few", worker_counts=len(contended)))
    # claims beyond the first, per job: keeps growing after nearly every job has a duplicate
    per_job = [(w, scaled(races.figure("naive", w, "extra_claims"), 1 / races.job_count)) for w in contended]
    direction = direction_beyond_noise(per_job)
    ours = say("F2.ours", per_job=listing(per_job, lambda f: f.text(lambda v: number(v, 2))))
    values = {"extra_per_job_low": number(per_job[0][1].median, 2), "extra_per_job_high": number(per_job[-1][1].median, 2),
              "workers_low": count(contended[0]), "workers_high": count(contended[-1])}
    shown = cpu_bound_shown(races.cpu_bound_workers("naive", least=2))
    if direction > 0:
        return make_finding("F2", CONFIRMED, ours, shown, values)
    if direction == 0:
        return make_finding("F2", NOT_DISTINGUISHABLE, ours,
                        [say("F2.overlap", workers_high=contended[-1], workers_low=contended[0]), shown], values)
    return make_finding("F2", NOT_REPRODUCED, ours,
                    [say("F2.falls", worker_counts=len(contended)), shown], values)


def f4_guarded_no_duplicates(races: Races) -> Finding:
    runs = races.runs("guarded")
    if not len(runs):
        return not_measured("F4", say("F4.not_raced"))
    duplicates, attempts = int(runs["duplicate_jobs"].sum()), int(runs["attempts"].sum())
    values = {"duplicate_jobs": count(duplicates), "attempts": count(attempts), "runs": count(len(runs))}
    ours = say("F4.ours", duplicate_jobs=count(duplicates), attempts=count(attempts), races=count(len(runs)))
    if duplicates:
        worst = runs.loc[runs["duplicate_jobs"].idxmax()]
        return make_finding("F4", NOT_REPRODUCED, ours,
                        say("F4.duplicates", duplicate_jobs=count(duplicates),
                            worst_duplicates=count(worst["duplicate_jobs"]), worst_workers=int(worst["worker_count"])),
                        values)
    fewer = attempts < ORIGINAL_F4_ATTEMPTS - 50_000  # "about 700,000": rounded to hundred thousands
    return make_finding("F4", CONFIRMED, ours,
                    say("F4.fewer_attempts", original_attempts=count(ORIGINAL_F4_ATTEMPTS)) if fewer else "",
                    values)


# --------------------------------------------------------------------------- the section


def load(reads: dict, loaded: dict) -> Races | None:
    """The original-size arm F1 reads (None where it was not raced); the sweep is the races section's."""
    paths = runs_of(reads, "original_size")
    return Races(race_summary(paths)) if paths else None


def findings(loaded: dict) -> list[Finding]:
    """F1 from the original-size arm where it was raced, else the sweep; F2 and F4 from the sweep."""
    races = Races(race_data(loaded).summary)
    return [f1_duplicates_at_two_workers(races, loaded.get(NAME)), f2_duplicates_compound(races),
            f4_guarded_no_duplicates(races)]


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    """naive's duplicates the prose names, and the slowed-down race's counts."""
    mine = loaded[RACES]
    by_workers, facts = mine.by_workers, mine.facts
    high, two = facts["high"], facts["two"]
    out = {"naive_duplicates_two": at_point(by_workers, "naive", two, "duplicate_jobs", count),
           "naive_duplicate_share_two": percent(facts["naive_duplicate_share_two"]),
           "naive_duplicates_high": at_point(by_workers, "naive", high, "duplicate_jobs", count),
           "naive_extra_claims_high": at_point(by_workers, "naive", high, "extra_claims", count),
           "naive_max_claims_per_job": count(facts["naive_max_claims_per_job"])}
    slow = mine.slow_request
    slow_counts = timeline_counts(timeline(list(mine.slow_runs))).set_index("strategy")
    out |= {"slow_workers": slow.worker_counts[0], "slow_jobs": count(slow.job_count), "slow_pause": ms(slow.pause_ms),
            "slow_jitter": ms(slow.jitter_ms), "slow_naive_wins": count(slow_counts.loc["naive", "wins"]),
            "slow_naive_duplicates": count(slow_counts.loc["naive", "duplicate_jobs"]),
            "slow_guarded_wins": count(slow_counts.loc["guarded", "wins"]),
            "slow_guarded_lost": count(slow_counts.loc["guarded", "lost"]),
            "slow_skip_locked_wins": count(slow_counts.loc["skip_locked", "wins"]),
            "slow_skip_locked_lost": count(slow_counts.loc["skip_locked", "lost"])}
    return out
