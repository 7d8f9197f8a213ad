"""The findings' sentences live in the templates files, one per section: every key a section says is there, fills
every field its template names, and every template is said; the rules' code holds no sentence of its own.

A sentence per library is said with `say.each(prefix, names)`: the check reads the names as the section gives them
(a literal list, or a tuple the section imports by name, such as harness.libraries.catalogue.RACED_LIBRARY_STRATEGIES),
so every `<prefix>.<name>` is checked and counted as said, as a literal key would be."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from harness.article import wording

SECTIONS_DIR = Path(wording.__file__).parent / "sections"
# a section (Sentences(NAME)), or a part of one with its own sentences' file named for it (Sentences(SENTENCES))
WORDED = sorted(p for p in SECTIONS_DIR.glob("*.py")
                if "Sentences(NAME)" in p.read_text() or "Sentences(SENTENCES)" in p.read_text())
SENTENCE_WORDS = 4  # a string of this many words or more is a sentence (or most of one), not a label or a join


def said(tree: ast.AST, method: str | None = None) -> list[ast.Call]:
    """The calls of `say(...)`, or of `say.<method>(...)`."""
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and (
        isinstance(node.func, ast.Name) and node.func.id == "say" if method is None else
        isinstance(node.func, ast.Attribute) and node.func.attr == method
        and isinstance(node.func.value, ast.Name) and node.func.value.id == "say")]


def docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def imported_names(tree: ast.AST) -> dict[str, tuple[str, str]]:
    """{name as the source spells it: (the module it is imported from, its name there)} for every `from module
    import name` of the source."""
    return {alias.asname or alias.name: (node.module, alias.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}


def names_given(node: ast.expr, imported: dict[str, tuple[str, str]]) -> tuple[str, ...] | None:
    """The names a `say.each` call is given: a literal list or tuple of strings, or a name the source imports (read
    from its module); None where the check cannot tell them."""
    if isinstance(node, ast.Name) and node.id in imported:
        module, name = imported[node.id]
        value = getattr(importlib.import_module(module), name, None)
    else:
        try:
            value = ast.literal_eval(node)
        except (ValueError, TypeError):
            return None
    if isinstance(value, str) or not isinstance(value, (tuple, list, dict)) \
            or not all(isinstance(name, str) for name in value):
        return None
    return tuple(value)


def own_values(call: ast.Call, imported: dict[str, tuple[str, str]]):
    """The fields a `say.each` call's `own=` function adds for a name (read by calling it, as the section imports
    it): none where the call has none; every field where the check cannot read it (checked when it runs)."""
    own = next((kw.value for kw in call.keywords if kw.arg == "own"), None)
    if own is None:
        return lambda name: set()
    if isinstance(own, ast.Name) and own.id in imported:
        module, name = imported[own.id]
        function = getattr(importlib.import_module(module), name)
        return lambda library: set(function(library))
    return lambda name: {None}


def wording_problems(source: str, templates: dict[str, str]) -> list[str]:
    """What a section's source gets wrong against its templates, one line each: a key said that is not a literal or
    has no template, a field its template needs and the call does not fill or one it fills and no template uses,
    a template never said."""
    tree = ast.parse(source)
    keys, problems = set(), []
    for call in said(tree):
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
    imported = imported_names(tree)
    for call in said(tree, "each"):
        if len(call.args) != 2 or not isinstance(call.args[0], ast.Constant):
            problems.append(f"line {call.lineno}: say.each without a literal prefix and its names")
            continue
        prefix, names = call.args[0].value, names_given(call.args[1], imported)
        if names is None:
            problems.append(f"line {call.lineno}: say.each({prefix!r}, ...) is given names the check cannot read "
                            "(a literal list, or a tuple the section imports by name)")
            continue
        given = {kw.arg for kw in call.keywords} - {"own"}
        own = own_values(call, imported)
        used = set()
        for name in names:
            key = f"{prefix}.{name}"
            keys.add(key)
            if key not in templates:
                problems.append(f"line {call.lineno}: no template {key}")
                continue
            used |= wording.fields(templates[key])
            needs = wording.fields(templates[key]) - given - own(name)
            if None not in given and needs:
                problems.append(f"line {call.lineno}: {key} needs {sorted(needs)}")
        if None not in given and given - used:
            problems.append(f"line {call.lineno}: no {prefix}.<name> template uses {sorted(given - used)}")
    problems += [f"template {key} is never said" for key in sorted(set(templates) - keys)]
    return problems


@pytest.mark.parametrize("path", WORDED, ids=lambda p: p.stem)
def test_every_key_said_exists_fills_its_fields_and_every_template_is_said(path):
    assert wording_problems(path.read_text(), wording.sentences(path.stem)) == []


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


@pytest.fixture
def demo_sentences(tmp_path, monkeypatch):
    """Sentences("demo") over a made-up templates file: call it with the file's text."""
    monkeypatch.setattr(wording, "SENTENCES_DIR", tmp_path)

    def written(text: str) -> wording.Sentences:
        (tmp_path / "demo.yml").write_text(text)
        wording.sentences.cache_clear()
        return wording.Sentences("demo")

    yield written
    wording.sentences.cache_clear()


def test_a_missing_key_or_field_fails_naming_it(demo_sentences):
    say = demo_sentences("greeting: 'hello {name}, {count} jobs'\n")
    assert say("greeting", name="guarded", count="3") == "hello guarded, 3 jobs"
    with pytest.raises(KeyError, match="needs count"):
        say("greeting", name="guarded")
    with pytest.raises(KeyError, match="no sentence 'farewell'"):
        say("farewell")


# A section said through say.each, on made-up templates: the check finds each thing the per-name call can get wrong.
EACH_SOURCE = """
from harness.libraries.catalogue import MODELLED_LIBRARY_STRATEGIES

say = Sentences(NAME)


def advice(default):
    return say.each("advice", ["a", "b"], default=default)


def claims():
    return say.each("claim", MODELLED_LIBRARY_STRATEGIES)


def caption():
    return say("caption")
"""


def each_templates() -> dict[str, str]:
    from harness.libraries.catalogue import MODELLED_LIBRARY_STRATEGIES

    return {"caption": "Every library.", "advice.a": "set it to {default}", "advice.b": "nothing to set",
            **{f"claim.{name}": f"{name} claims" for name in MODELLED_LIBRARY_STRATEGIES}}


def test_say_each_counts_every_name_s_template_as_said():
    assert wording_problems(EACH_SOURCE, each_templates()) == []


def test_say_each_fails_on_a_missing_template_for_a_name_it_is_given():
    from harness.libraries.catalogue import MODELLED_LIBRARY_STRATEGIES

    templates = each_templates()
    del templates["advice.b"], templates[f"claim.{MODELLED_LIBRARY_STRATEGIES[-1]}"]
    assert wording_problems(EACH_SOURCE, templates) == [
        "line 8: no template advice.b", f"line 12: no template claim.{MODELLED_LIBRARY_STRATEGIES[-1]}"]


def test_say_each_fails_on_a_template_no_name_says():
    templates = {**each_templates(), "advice.c": "a library not given", "claim.gone": "a library not declared"}
    assert wording_problems(EACH_SOURCE, templates) == ["template advice.c is never said",
                                                        "template claim.gone is never said"]


def test_say_each_fails_on_a_field_unfilled_or_filled_for_no_template():
    unfilled = {**each_templates(), "advice.b": "wait {seconds}"}
    assert wording_problems(EACH_SOURCE, unfilled) == ["line 8: advice.b needs ['seconds']"]
    unused = {**each_templates(), "advice.a": "nothing to set either"}
    assert wording_problems(EACH_SOURCE, unused) == ["line 8: no advice.<name> template uses ['default']"]


def test_say_each_fails_on_names_the_check_cannot_read():
    source = "say = Sentences(NAME)\n\n\ndef claims(names):\n    return say.each('claim', names)\n"
    assert wording_problems(source, {}) == [
        "line 5: say.each('claim', ...) is given names the check cannot read (a literal list, or a tuple the "
        "section imports by name)"]


def test_say_each_fills_each_name_s_template(demo_sentences):
    say = demo_sentences("advice.a: 'set it to {default}'\nadvice.b: nothing to set\n")
    assert say.each("advice", ("a", "b"), default="5 s") == {"a": "set it to 5 s", "b": "nothing to set"}
    with pytest.raises(KeyError, match="needs default"):
        say.each("advice", ("a", "b"))
    with pytest.raises(KeyError, match="no sentence 'advice.c'"):
        say.each("advice", ("a", "c"), default="5 s")
