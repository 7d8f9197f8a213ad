"""Every job library module (harness.libraries) and every model (harness.libraries.models) declares the interface the
library kinds run it through, and agrees with the other lists that name the libraries."""

from __future__ import annotations

import inspect
import types
from pathlib import Path

import pytest
import yaml

from harness import libraries
from harness.claims import protocols as library_claims
from harness.experiments import registry
from harness.experiments.libraries import wakeups
from harness.claims.strategies import STRATEGIES

# What every module declares (harness/libraries/__init__.py and harness/libraries/models/__init__.py say what each is).
TEXT = str
COMMON = {"NAME": TEXT, "SOURCE": TEXT, "CLAIMED": TEXT, "COMPLETED": TEXT, "SETTINGS": dict, "RECOVERY": dict,
          "JOBS_TABLE": TEXT, "ID_COLUMN": TEXT}
RACED = {**COMMON, "PACKAGE": TEXT, "CLAIM_LOGGED": TEXT}
MODELLED = {**COMMON, "CLAIM": TEXT, "CONNECTIONS": int, "PROTOCOL": object}
OPTIONAL = {"JOBS_SCHEMA": TEXT, "STATS_TABLE": TEXT, "AUDIT_ID_SQL": TEXT, "JOB_CAP": int, "NOTIFIES_ON_CHANGE": bool,
            "CONNECTIONS": int, "STOPS_ON_ITS_OWN": bool, "INSTALL_HINT": TEXT, "CLAIM_FUNCTION": TEXT, "WAKEUP": dict}
RECOVERY_KEYS = {"mechanism", "setting", "default_s", "raced_s"}
# name -> the parameters it takes, in order
FUNCTIONS = {"install": ("url",), "enqueue": ("url", "n", "job_s"), "work": ("url", "log", "ready", "start", "job_s")}
WAKE_FUNCTIONS = {"wake_install": ("url",), "wake_work": ("url", "log", "ready", "start", "listen"),
                  "enqueue_paced": ("url", "n", "interval_s", "listen")}


def _accepted(module, function: str, parameters: tuple) -> list[tuple]:
    """The parameter lists a function may take: enqueue may number its jobs from `first` (the soak's arrivals call
    it again and again), and must where the audit reads that number (AUDIT_ID_SQL)."""
    if function != "enqueue":
        return [parameters]
    numbered = (*parameters, "first")
    return [numbered] if getattr(module, "AUDIT_ID_SQL", None) else [parameters, numbered]


def interface_problems(module, name: str, declared: dict[str, type]) -> list[str]:
    """What a library module lacks or declares wrongly, one line each (nothing where it holds)."""
    problems = []
    for attribute, kind in {**declared, **{k: v for k, v in OPTIONAL.items() if hasattr(module, k)}}.items():
        if not hasattr(module, attribute):
            problems.append(f"{name}: no {attribute}")
        elif not isinstance(getattr(module, attribute), kind):
            problems.append(f"{name}: {attribute} is {type(getattr(module, attribute)).__name__}, not {kind.__name__}")
    if getattr(module, "NAME", name) != name:
        problems.append(f"{name}: NAME is {module.NAME!r}")
    missing = RECOVERY_KEYS - set(getattr(module, "RECOVERY", None) or {})
    if isinstance(getattr(module, "RECOVERY", None), dict) and missing:
        problems.append(f"{name}: RECOVERY lacks {', '.join(sorted(missing))}")
    functions = {**FUNCTIONS, **(WAKE_FUNCTIONS if hasattr(module, "WAKEUP") else {})}
    for function, parameters in functions.items():
        found = getattr(module, function, None)
        if not callable(found):
            problems.append(f"{name}: no {function}()")
        elif tuple(inspect.signature(found).parameters) not in _accepted(module, function, parameters):
            problems.append(f"{name}: {function}{inspect.signature(found)} does not take ({', '.join(parameters)})")
    return problems


@pytest.mark.parametrize("name", libraries.NAMES)
def test_every_raced_library_declares_the_shared_interface(name):
    module = libraries.get(name)
    assert interface_problems(module, name, RACED) == []
    assert name in STRATEGIES and STRATEGIES[name].protocol, "its claim protocol races in the tight loop"


@pytest.mark.parametrize("name", libraries.MODELS)
def test_every_model_declares_the_shared_interface(name):
    module = libraries.get(name)
    assert interface_problems(module, name, MODELLED) == []
    assert module.CLAIM in STRATEGIES, "its claim races in the tight loop under this name"


def test_every_library_module_is_declared_once_and_every_declaration_has_a_module():
    """Adding a library takes its module and its declaration in harness.claims.protocols.LIBRARIES: a module without
    a declaration, or a declaration without a module, fails here."""
    declared = [library.name for library in library_claims.LIBRARIES]
    assert len(declared) == len(set(declared))
    root = Path(libraries.__file__).parent
    own = {path.stem for path in root.glob("*.py")} - {"__init__", "node", "runtime"}
    modelled = {path.stem for path in (root / "models").glob("*.py")} - {"__init__"}
    assert own == {library.name for library in library_claims.LIBRARIES if library.runs_here}
    assert modelled == {library.name for library in library_claims.LIBRARIES if not library.runs_here}


def test_no_params_file_names_every_library_one_by_one():
    """A params section that runs every library says so in one word (`all`, `models`, `libraries` among strategies),
    which its kind reads off the declaration: a list naming each of them would need a new library added to it."""
    groups = {"raced here": libraries.NAMES, "modelled": libraries.MODELS,
              "whose protocol races": library_claims.LIBRARY_STRATEGIES}
    spelled = []
    for path in sorted((Path(__file__).resolve().parent.parent / "notebooks" / "params").glob("*.yml")):
        for section, settings in yaml.safe_load(path.read_text()).items():
            woken = {"that can both listen and poll": wakeups.offering()} if registry.SECTIONS.get(section) == \
                "wakeups" else {}
            for key, listed in (settings.items() if isinstance(settings, dict) else ()):
                spelled += [f"{path.name}: {section}.{key} names every library {group}"
                            for group, names in {**groups, **woken}.items()
                            if isinstance(listed, list) and all(isinstance(item, str) for item in listed)
                            and set(names) <= set(listed)]
    assert spelled == []


def test_the_interface_check_names_what_a_module_gets_wrong():
    def work(url, log, ready):  # one parameter short
        pass

    broken = types.SimpleNamespace(NAME="other", SOURCE="x", CLAIMED="true", COMPLETED="DELETE", SETTINGS={},
                                   RECOVERY={"mechanism": "none"}, JOBS_TABLE="jobs", ID_COLUMN="id", PACKAGE="x",
                                   JOB_CAP="40", install=lambda url: None, work=work, WAKEUP={})
    assert interface_problems(broken, "broken", RACED) == [
        "broken: no CLAIM_LOGGED", "broken: JOB_CAP is str, not int", "broken: NAME is 'other'",
        "broken: RECOVERY lacks default_s, raced_s, setting", "broken: no enqueue()",
        "broken: work(url, log, ready) does not take (url, log, ready, start, job_s)", "broken: no wake_install()",
        "broken: no wake_work()", "broken: no enqueue_paced()"]
