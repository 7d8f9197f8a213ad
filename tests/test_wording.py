"""The findings' sentences live in the templates files, one per section: every key a section says is there, fills
every field its template names, and every template is said; the rules' code holds no sentence of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.article import wording

SECTIONS_DIR = Path(wording.__file__).parent / "sections"
WORDED = sorted(p for p in SECTIONS_DIR.glob("*.py") if "Sentences(NAME)" in p.read_text())
SENTENCE_WORDS = 4  # a string of this many words or more is a sentence (or most of one), not a label or a join


def said(path: Path) -> list[ast.Call]:
    return [node for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "say"]


def docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


@pytest.mark.parametrize("path", WORDED, ids=lambda p: p.stem)
def test_every_key_said_exists_fills_its_fields_and_every_template_is_said(path):
    templates = wording.sentences(path.stem)
    keys, problems = set(), []
    for call in said(path):
        if not call.args or not isinstance(call.args[0], ast.Constant):
            problems.append(f"line {call.lineno}: a key that is not a literal")
            continue
        key = call.args[0].value
        keys.add(key)
        if key not in templates:
            problems.append(f"line {call.lineno}: no template {key}")
            continue
        given = {kw.arg for kw in call.keywords}
        if None in given:  # **values: checked when it runs
            continue
        if wording.fields(templates[key]) - given:
            problems.append(f"line {call.lineno}: {key} needs {sorted(wording.fields(templates[key]) - given)}")
        if given - wording.fields(templates[key]):
            problems.append(f"line {call.lineno}: {key} does not use {sorted(given - wording.fields(templates[key]))}")
    assert problems == [] and sorted(set(templates) - keys) == []


@pytest.mark.parametrize("path", WORDED, ids=lambda p: p.stem)
def test_the_sections_code_holds_no_sentence(path):
    """No function of a section writes a sentence; labels (a table's columns, a gate's name) are module constants."""
    tree = ast.parse(path.read_text())
    skip = docstrings(tree)
    sentences = [f"line {node.lineno}: {node.value!r}"
                 for function in ast.walk(tree) if isinstance(function, ast.FunctionDef)
                 for node in ast.walk(function)
                 if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
                 and len(node.value.split()) >= SENTENCE_WORDS]
    assert sentences == []


def test_a_missing_key_or_field_fails_naming_it(tmp_path, monkeypatch):
    (tmp_path / "demo.yml").write_text("greeting: 'hello {name}, {count} jobs'\n")
    monkeypatch.setattr(wording, "SENTENCES_DIR", tmp_path)
    wording.sentences.cache_clear()
    say = wording.Sentences("demo")
    try:
        assert say("greeting", name="guarded", count="3") == "hello guarded, 3 jobs"
        with pytest.raises(KeyError, match="needs count"):
            say("greeting", name="guarded")
        with pytest.raises(KeyError, match="no sentence 'farewell'"):
            say("farewell")
    finally:
        wording.sentences.cache_clear()
