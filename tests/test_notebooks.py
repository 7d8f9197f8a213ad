"""The notebooks: committed clean, one literal parameters cell each, and each one runs under papermill."""

from __future__ import annotations

import ast
import re
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import papermill
import pytest

from harness import config
from harness.errors import UserError
from harness.article import build as report
from harness.experiments import registry
from tiny_report import TINY_PARAMS, build_tiny_report

NOTEBOOKS = sorted(p.name for p in config.NOTEBOOK_DIR.glob("*.ipynb"))


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_report()


def read(name: str) -> nbformat.NotebookNode:
    return nbformat.read(config.NOTEBOOK_DIR / name, as_version=4)


def parameters_cell(notebook) -> nbformat.NotebookNode:
    return next(c for c in notebook.cells if c.cell_type == "code")


def test_there_are_numbered_notebooks():
    assert NOTEBOOKS, "no notebooks in notebooks/"
    for name in NOTEBOOKS:
        assert name[:2].isdigit() and name[2] == "-", f"{name} is not numbered like 01-races.ipynb"


def test_every_notebook_is_tested():
    # the tiny build executes exactly the notebooks report.py knows; a new notebook must be added there
    untested = set(NOTEBOOKS) - set(report.NOTEBOOK_SECTIONS)
    assert not untested, f"notebooks without a test (add them to report.NOTEBOOK_SECTIONS): {sorted(untested)}"
    assert set(report.NOTEBOOK_SECTIONS) <= set(NOTEBOOKS)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_without_outputs(name):
    notebook = read(name)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{name}: a code cell has outputs"
            assert cell.execution_count is None, f"{name}: a code cell has an execution count"
        assert "papermill" not in cell.metadata, f"{name}: papermill metadata left in a cell"
    assert "papermill" not in notebook.metadata


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_one_parameters_cell_first_and_literal(name):
    notebook = read(name)
    tagged = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{name}: {len(tagged)} cells tagged parameters"
    assert tagged[0] is parameters_cell(notebook), f"{name}: the parameters cell is not the first code cell"
    for statement in ast.parse(tagged[0].source).body:
        assert isinstance(statement, ast.AnnAssign), f"{name}: parameters must be annotated assignments"
        ast.literal_eval(statement.value)  # literals only: derived values belong in the next cell
    for line in tagged[0].source.splitlines():
        if line.strip() and not line.startswith("#"):
            assert "  # " in line, f"{name}: parameter without a comment: {line}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_papermill_documents_every_parameter(name):
    source = ast.parse(parameters_cell(read(name)).source)
    declared = {s.target.id for s in source.body}
    documented = {p["name"]: p for p in papermill.inspect_notebook(str(config.NOTEBOOK_DIR / name)).values()}
    assert set(documented) == declared
    for parameter in documented.values():
        assert parameter["help"], f"{name}: {parameter['name']} has no help text"
        assert parameter["inferred_type_name"] != "None", f"{name}: {parameter['name']} has no type"


# What a notebook may be told: where its runs are, or where to find them; and, empty by default, sweep values
# that replace its params file's (registry.overrides).
WHERE_RUNS_COME_FROM = {"runs": {}, "params_file": "", "data_dir": ""}
OVERRIDDEN_SECTION = {"01-races.ipynb": "races", "02-plans.ipynb": "plans", "03-churn.ipynb": "churn",
                      "04-article.ipynb": "races"}


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_parameters_say_where_runs_come_from_and_repeat_no_sweep(name):
    """The report hands a notebook its runs; no parameter repeats report.yml, so nothing can drift from it: the
    sweep values a reader may change are settings of one section, empty unless given."""
    namespace: dict = {}
    exec(parameters_cell(read(name)).source, namespace)
    defaults = {k: v for k, v in namespace.items() if not k.startswith("__")}
    assert {k: defaults[k] for k in WHERE_RUNS_COME_FROM} == WHERE_RUNS_COME_FROM
    sweep = {k: v for k, v in defaults.items() if k not in WHERE_RUNS_COME_FROM}
    assert sweep and all(v in ([], 0) for v in sweep.values()), sweep
    fields = {f.name for f in dataclasses.fields(registry.kind(registry.SECTIONS[OVERRIDDEN_SECTION[name]]).asks)}
    assert set(sweep) <= fields, set(sweep) - fields


@pytest.mark.parametrize("given, expected", [
    ({"worker_counts": "[1, 3]"}, {"races": {"worker_counts": [1, 3]}}),  # papermill -p hands lists as text
    ({"worker_counts": [1, 3], "job_count": 0, "strategies": []}, {"races": {"worker_counts": [1, 3]}}),
    ({"worker_counts": [], "repeats": 0, "strategies": ""}, {}),
    ({"strategies": "naive, skip_locked"}, {"races": {"strategies": "naive, skip_locked"}}),
])
def test_overrides_parse_text_and_leave_out_empty_values(given, expected):
    assert registry.overrides("races", **given) == expected


def test_overrides_are_checked_as_the_params_file_is():
    params = registry.load_params(TINY_PARAMS)
    merged = registry.with_overrides(params, {"races": {"worker_counts": [1, 3]}})
    assert list(registry.section_request(merged, "races").worker_counts) == [1, 3]
    assert params["races"]["worker_counts"] != [1, 3], "the file itself is left as it is"
    with pytest.raises(UserError, match="races"):
        registry.with_overrides(params, {"races": {"worker_counts": [0]}})
    with pytest.raises(UserError, match="not both"):
        registry.notebook_runs({"races": ["somewhere"]}, TINY_PARAMS, "", ["races"], {"races": {"repeats": 2}})


def test_the_build_hands_each_notebook_the_runs_of_its_sections(tmp_path):
    runs = {section: [tmp_path / f"{section}-run"] for section in registry.SECTIONS}
    for name in NOTEBOOKS:
        parameters = report.notebook_parameters(name, runs, TINY_PARAMS, tmp_path)
        assert set(parameters) == set(WHERE_RUNS_COME_FROM)
        assert parameters["runs"] == {section: [str(runs[section][0])] for section in report.NOTEBOOK_SECTIONS[name]}
        assert parameters["params_file"] == str(TINY_PARAMS.resolve())


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_under_papermill_with_tiny_parameters(tiny, name):
    executed = nbformat.read(tiny.report_dir / name, as_version=4)
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1, "papermill injected the tiny parameters"
    for key in WHERE_RUNS_COME_FROM:
        assert f"{key} = " in injected[0].source
    for section in report.NOTEBOOK_SECTIONS[name]:
        assert f"\"{section}\": [" in injected[0].source, f"{name} was handed the runs of {section}"
    charts = [o for c in executed.cells for o in c.get("outputs", []) if "text/vnd.claimrace.vega-embed+html"
              in o.get("data", {})]
    assert charts, f"{name} drew no chart"


@pytest.mark.slow
def test_papermill_command_line_takes_yaml_parameters(tiny, tmp_path):
    """docs/report.md's command: a notebook on its own finds its runs from a params file, reusing the tiny build's."""
    output = tmp_path / "races.ipynb"
    result = subprocess.run(
        [str(Path(sys.executable).with_name("papermill")), str(config.NOTEBOOK_DIR / "01-races.ipynb"), str(output),
         "-y", f"{{params_file: notebooks/params/tiny.yml, data_dir: '{tiny.data_dir}'}}", "--no-progress-bar"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 0, result.stderr[-2000:]
    executed = nbformat.read(output, as_version=4)
    text = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", []))
    assert "race: all 6 runs found" in text, "the notebook reused the stored runs"


@pytest.mark.slow
def test_a_reader_reruns_the_races_notebook_with_other_worker_counts(tmp_path):
    """The issue's command: -p worker_counts '[1, 3]' races and analyses exactly those worker counts."""
    output, data_dir = tmp_path / "races.ipynb", tmp_path / "data"
    result = subprocess.run(
        [str(Path(sys.executable).with_name("papermill")), str(config.NOTEBOOK_DIR / "01-races.ipynb"), str(output),
         "-p", "params_file", "notebooks/params/tiny.yml", "-p", "worker_counts", "[1, 3]",
         "-p", "data_dir", str(data_dir), "--no-progress-bar"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "unknown parameter" not in result.stderr
    manifests = [json.loads(path.read_text()) for path in (data_dir / "races").glob("*/manifest.json")]
    assert manifests and {m["parameters"]["worker_count"] for m in manifests} == {1, 3}


def test_article_prose_types_no_measured_number():
    """Numbers in the article come from data (code cells render them); its Markdown cells carry none."""
    allowed = {"409", "17", "3.11"}  # HTTP status, the example job id, the Python version
    notebook = read(report.ARTICLE)
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        prose = re.sub(r"```.*?```", "", cell.source, flags=re.DOTALL)  # commands and SQL
        prose = re.sub(r"`[^`]*`", "", prose)  # inline code
        prose = re.sub(r"\{\{.*?\}\}", "", prose)  # placeholders: the build fills them from glued values
        prose = re.sub(r"\bp(50|90|99)\b", "", prose)  # the names of percentiles, not figures
        prose = prose.replace("N-1", "")  # the number of rivals, a formula
        prose = re.sub(r"\b[FCA]\d{1,2}\b", "", prose)  # the findings' names (F1-F13, C1-C9, A1-A8)
        numbers = set(re.findall(r"\d+(?:[.,]\d+)*", prose)) - allowed
        assert not numbers, f"typed-in numbers in the article's prose: {sorted(numbers)}"
