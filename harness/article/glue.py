"""Prose in markdown, numbers from code: named placeholders filled when the page is built.

A code cell computes values once and glues them under names:

    glue(f5_lost_per_win_high="16.5", f5_verdict="corrected")

which shows nothing in the notebook (an empty text/plain beside a glue
mimetype). Markdown cells write the names in double braces, `{{f5_lost_per_win_high}}`,
and the build fills them in from every glued value of the executed notebook
before rendering. A placeholder with no value fails the build, so a page never
shows a raw placeholder, and a value may be markdown (a list, a link, a phrase
chosen by a finding's rule).

A markdown cell that states one finding names it in its metadata
(`"finding": "F5"`). Where the build lacks a figure that cell names (the finding
was not measured, or measured in part), the cell shows the finding's own
statement instead, glued as `f5_statement`: its verdict, figure and note.
"""

from __future__ import annotations

import re

from IPython.display import display

from harness.errors import UserError

MIMETYPE = "application/vnd.claimrace.glue+json"
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.]*)\s*\}\}")


def glue(**values) -> None:
    """Store values under names for the markdown cells' placeholders (shown as nothing in the notebook)."""
    display({MIMETYPE: {name: str(value) for name, value in values.items()}, "text/plain": ""}, raw=True)


def glued_values(notebook) -> dict[str, str]:
    """Every value glued by the notebook's code cells, later cells overriding earlier ones."""
    values: dict[str, str] = {}
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if MIMETYPE in data:
                values.update(data[MIMETYPE])
    return values


def placeholders(text: str) -> list[str]:
    return PLACEHOLDER.findall(text)


FINDING = "finding"  # a markdown cell's metadata: the finding whose figures the cell states


def statement_key(finding_id: str) -> str:
    return f"{finding_id.lower()}_statement"


def fill(notebook, name: str = "the notebook"):
    """The notebook with every markdown placeholder replaced by its glued value (in place; returned)."""
    values = glued_values(notebook)
    for cell in notebook.cells:
        finding = cell.get("metadata", {}).get(FINDING) if cell.cell_type == "markdown" else None
        if finding and statement_key(finding) in values and any(p not in values for p in placeholders(cell.source)):
            cell.source = values[statement_key(finding)]
    unknown = sorted({p for cell in notebook.cells if cell.cell_type == "markdown"
                      for p in placeholders(cell.source) if p not in values})
    if unknown:
        raise UserError(f"{name} has placeholders with no glued value: {', '.join(unknown)}")
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            cell.source = PLACEHOLDER.sub(lambda m: values[m.group(1)], cell.source)
        else:
            # the glue outputs have done their work; drop them so the page carries no empty divs
            cell["outputs"] = [o for o in cell.get("outputs", []) if MIMETYPE not in o.get("data", {})]
    return notebook
