"""The article's contents: every section listed once, every placeholder produced by exactly one section."""

from __future__ import annotations

import importlib
import types
from pathlib import Path

import nbformat
import pytest

from harness import config
from harness.article import contents, glue
from harness.experiments import registry
from tiny_report import TINY_PARAMS, build_tiny_report

SECTIONS_DIR = Path(contents.__file__).parent / "sections"


def test_the_contents_list_every_section_module_once():
    """Every module of sections/ that declares a NAME is a section, listed once; the others (a section's charts,
    beside it) declare none."""
    modules = sorted(p.stem for p in SECTIONS_DIR.glob("*.py") if p.stem != "__init__"
                     and hasattr(importlib.import_module(f"harness.article.sections.{p.stem}"), "NAME"))
    listed = [section.NAME for section in contents.SECTIONS]
    assert sorted(listed) == modules and len(set(listed)) == len(listed)


def fake_section(name: str, values: dict):
    return types.SimpleNamespace(NAME=name, READS=(), load=lambda reads, loaded: None, findings=lambda loaded: [],
                                 values=lambda loaded, found: values)


def test_a_placeholder_two_sections_produce_fails_the_page_and_names_both(monkeypatch):
    monkeypatch.setattr(contents, "SECTIONS", (fake_section("first", {"shared": "1", "own": "2"}),
                                               fake_section("second", {"shared": "3"})))
    with pytest.raises(ValueError, match="shared is produced by both first and second"):
        contents.page({})


def test_placeholders_from_distinct_sections_each_name_their_producer(monkeypatch):
    monkeypatch.setattr(contents, "SECTIONS", (fake_section("first", {"a": 1}), fake_section("second", {"b": "x"})))
    page = contents.page({})
    assert page.values == {"a": "1", "b": "x"} and page.producers == {"a": "first", "b": "second"}


def test_every_placeholder_of_the_article_has_exactly_one_producing_section():
    """Over the tiny build's stored runs: each placeholder the article's markdown names is produced by one section,
    or sits in a finding's paragraph whose finding was not measured there (the paragraph then shows the finding's
    statement, which the summary section produces)."""
    tiny = build_tiny_report()
    runs = registry.stored_sections(registry.load_params(TINY_PARAMS), tiny.data_dir)
    page = contents.page(runs)
    names = {section.NAME for section in contents.SECTIONS}
    assert set(page.producers) == set(page.values) and set(page.producers.values()) <= names
    notebook = nbformat.read(config.NOTEBOOK_DIR / "04-article.ipynb", as_version=4)
    unproduced = []
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        finding = cell.get("metadata", {}).get(glue.FINDING)
        for name in glue.placeholders(cell.source):
            if name in page.values:
                continue
            if finding and glue.statement_key(finding) in page.values:
                continue
            unproduced.append(name)
    assert unproduced == []
