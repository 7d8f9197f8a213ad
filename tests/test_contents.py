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


def fake_section(name: str, values: dict, upstream: tuple = (), load=None, findings=None):
    return types.SimpleNamespace(NAME=name, READS=(), UPSTREAM=upstream, load=load or (lambda reads, loaded: None),
                                 findings=findings or (lambda loaded: []), values=lambda loaded, found: values)


def test_every_section_declares_the_sections_it_reads_and_each_loads_after_them():
    order = [section.NAME for section in contents.load_order()]
    for section in contents.SECTIONS:
        assert isinstance(section.UPSTREAM, tuple) and section.NAME not in section.UPSTREAM, section.NAME
        assert all(order.index(name) < order.index(section.NAME) for name in section.UPSTREAM), section.NAME
    assert contents.races.NAME in contents.decision.UPSTREAM


def test_a_section_loads_after_its_upstream_and_is_handed_it_alone(monkeypatch):
    """The loader moves a section after what it names, and hands it its own and its UPSTREAM's loaded data; a read
    of any other section fails, in load, findings and values alike."""
    seen = {}

    def reads_first(reads, loaded):
        seen["first"] = loaded["first"]
        return "second's"

    first = fake_section("first", {}, load=lambda reads, loaded: "first's")
    second = fake_section("second", {}, upstream=("first",), load=reads_first)
    prying = fake_section("prying", {}, findings=lambda loaded: [loaded.get("first")])
    monkeypatch.setattr(contents, "SECTIONS", (second, first, prying))
    assert [s.NAME for s in contents.load_order()] == ["first", "second", "prying"]
    loaded = contents.load({})
    assert seen == {"first": "first's"} and loaded["second"] == "second's"
    with pytest.raises(contents.UndeclaredUpstream, match="section prying reads section first"):
        contents.evaluate(loaded)
    view = contents.Upstream({"first": "first's"}, second)
    assert view["first"] == "first's" and view.get("second") is None and sorted(view) == ["first", "second"]
    with pytest.raises(contents.UndeclaredUpstream):
        view["prying"]


def test_an_upstream_naming_no_section_or_a_circle_fails():
    with pytest.raises(ValueError, match="UPSTREAM names nowhere, which is no section"):
        contents.load_order([fake_section("a", {}, upstream=("nowhere",))])
    with pytest.raises(ValueError, match="sections a, b name each other in UPSTREAM: a circle"):
        contents.load_order([fake_section("a", {}, upstream=("b",)), fake_section("b", {}, upstream=("a",))])


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
