"""Placeholders in markdown filled from values a real kernel glued."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from harness.article import glue
from harness.errors import UserError


def executed(markdown: str, code: str):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(code), nbformat.v4.new_markdown_cell(markdown)]
    NotebookClient(notebook, kernel_name="python3", timeout=120).execute()
    return notebook


def test_a_glued_value_fills_its_placeholder_and_leaves_no_output():
    notebook = executed("Lost races per win: {{ lost_per_win }}; verdict {{f5.verdict}}.",
                        "from harness.article.glue import glue\nglue(lost_per_win='16.5', **{'f5.verdict': 'corrected'})")
    assert notebook.cells[0].outputs, "the kernel published the glued values"
    glue.fill(notebook)
    assert notebook.cells[1].source == "Lost races per win: 16.5; verdict corrected."
    assert notebook.cells[0].outputs == []


def test_a_placeholder_without_a_value_fails_the_build_and_names_it():
    notebook = executed("{{ glued }} and {{ never_glued }}", "from harness.article.glue import glue\nglue(glued='x')")
    with pytest.raises(UserError, match="never_glued"):
        glue.fill(notebook, "04-article.ipynb")


def test_later_cells_override_earlier_values():
    notebook = executed("{{v}}", "from harness.article.glue import glue\nglue(v='first')\nglue(v='second')")
    assert glue.fill(notebook).cells[1].source == "second"


def finding_cell(markdown: str, finding: str):
    cell = nbformat.v4.new_markdown_cell(markdown)
    cell.metadata["finding"] = finding
    return cell


def test_a_finding_paragraph_shows_the_findings_statement_only_where_a_figure_it_names_is_missing():
    notebook = executed("", "from harness.article.glue import glue\n"
                            "glue(f5_workers='8', f5_statement='**F5, not measured.** One worker count.',"
                            " c4_statement='**C4, confirmed.**')")
    notebook.cells[1:] = [finding_cell("At {{f5_workers}} workers: {{f5_lost_per_win}}.", "F5"),
                          finding_cell("At {{f5_workers}} workers.", "F5"),
                          finding_cell("{{c9_never}}", "C9")]
    with pytest.raises(UserError, match="c9_never"):  # no statement glued for C9: the build still fails
        glue.fill(notebook)
    notebook.cells[3] = nbformat.v4.new_markdown_cell("plain")
    glue.fill(notebook)
    assert notebook.cells[1].source == "**F5, not measured.** One worker count."
    assert notebook.cells[2].source == "At 8 workers."


def test_every_finding_has_a_statement_that_says_its_verdict():
    from harness.article import findings
    measured = findings.make_finding("F5", findings.CONFIRMED, "2.0 lost races per win", "A note.")
    assert measured.statement == "**F5, confirmed.** 2.0 lost races per win. A note."
    unmeasured = findings.not_measured("C5", "Too few polls.")
    assert unmeasured.statement == "**C5, not measured.** Too few polls."
