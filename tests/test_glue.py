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
