"""The subsection "On a disk": each point's answer from its races on tmpfs and on the disk, one per outcome (the
races themselves run in tests/test_report.py's tiny build)."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.article.sections import durable


def races(rates, cpu_bound=False, storage="tmpfs", strategy="guarded", workers=4):
    return pd.DataFrame({"claims_per_second": rates, "cpu_bound": [cpu_bound] * len(rates), "storage": storage,
                         "strategy": strategy, "worker_count": workers, "job_count": 1000, "p99_ms": 1.0,
                         "losses_per_win": 2.0, "duplicate_jobs": 0})


@pytest.mark.parametrize("tmpfs, disk, answer", [
    (races([900, 1000]), races([300, 400]), durable.SLOWER),
    (races([300, 400]), races([900, 1000]), durable.FASTER),
    (races([300, 900]), races([400, 1000]), durable.OVERLAP),
    (races([900, 1000], cpu_bound=True), races([300, 400]), durable.CPU_BOUND),
    (races([900, 1000]), races([300, 400], cpu_bound=True), durable.CPU_BOUND),
    (races([]), races([300]), durable.ONE_SIDE),
    (races([900]), races([300, 400]), durable.ONE_RACE),
])
def test_a_point_on_the_disk_is_slower_faster_overlapping_cpu_bound_or_one_sided(tmpfs, disk, answer):
    assert durable.on_disk(tmpfs, disk) == answer


def test_the_table_says_each_point_s_answer_beside_its_figures_and_the_setup_counts_them():
    points = pd.concat([races([900, 1000]), races([300, 400], storage="disk"),
                        races([0.3, 0.4], strategy="naive", storage="disk", workers=2),
                        races([10.0], strategy="skip_locked", workers=8),
                        races([20.0], strategy="skip_locked", storage="disk", workers=8)], ignore_index=True)
    loaded = {"durable": durable.Loaded(points)}
    html = durable.disk_table(loaded)
    assert "900 to 1,000 / 300 to 400" in html and "slower beyond the spread" in html and "one side only" in html
    said = durable.values(loaded, {})["disk_setup"]
    assert "Of 3 points" in said and "1 slower beyond the spread" in said and "1 with races on one side" in said
    assert "1 with one race a side" in said and "one race a side, not decided" in html
    assert "0 / 0" in html  # skip_locked's duplicates, each side
    assert durable.values({"durable": None}, {})["disk_setup"] == "This build raced nothing on a disk."


def test_a_section_on_a_disk_is_left_out_in_one_line_with_a_server_not_started_here(db, tmp_path, monkeypatch,
                                                                                     capsys):
    """A DATABASE_URL server keeps its own storage: the report makes what it can of a section and says what not."""
    from conftest import PROJECT_ROOT
    from harness.experiments import registry

    params = registry.load_params(PROJECT_ROOT / "notebooks" / "params" / "tiny.yml")
    monkeypatch.setenv("DATABASE_URL", db.url)
    paths, made = registry.ensure_section(params, "disk_race", tmp_path, progress=False)
    assert (paths, made) == ([], 0)
    said = capsys.readouterr().err.strip().splitlines()
    assert said == ["disk_race: 3 of 3 runs on a disk not made: the server is not started here (unset DATABASE_URL "
                    "for the embedded one)"]


def test_pg_test_fsync_times_one_fdatasync_on_a_disk_and_says_nothing_without_its_tool(tmp_path):
    """PostgreSQL's own tool, stopped after its first comparison: an fdatasync on the disk the folder is on (a
    tmpfs answers in microseconds, a disk slower); a bin folder without the tool gives None."""
    from harness.server import database, flush_cost
    on_disk = flush_cost.fdatasync(database.pg_bin_dir(16), database._disk_root())
    in_memory = flush_cost.fdatasync(database.pg_bin_dir(16), database._tmpfs_root())
    assert on_disk["fdatasync_ms"] > in_memory["fdatasync_ms"] and on_disk["ops_per_s"] > 0, (on_disk, in_memory)
    assert flush_cost.fdatasync(tmp_path, tmp_path) is None
    assert not list(database._disk_root().glob("pg_test_fsync.out"))
