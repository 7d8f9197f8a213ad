"""What every kind of experiment declares, and the small parts its declaration is made of.

A kind is a folder, experiments/<kind>/, whose main module declares:

- one frozen parameters dataclass (a subclass of `Parameters`): its fields and
  defaults are the kind's settings, written once; each field's `setting(...)`
  names the converter that checks its type and, if the command line sets it,
  its `Option` (flag, help, parser); `check()` raises UserError with one line
  for a value out of range. `dataclasses.asdict` of it IS the manifest's
  `parameters` and the key the run store finds runs by. A setting marked
  `added_later` was not there when older runs were stored: a stored run
  without it was made with its default and is found as such (or, where
  added_later is a function, with what it returns for that run's parameters).
- one measure function, `measure(db, parameters, run_id, progress) -> Measured`:
  it runs on an open server whose run lock the caller holds, and returns the
  tables and notes that the run store writes.

- its `KIND = Kind(...)`: what the command line and the report need of it.

`harness.experiments.registry` lists the kinds; the command line and the
report's data sections are built from that list.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.errors import UserError
from harness.claims.strategies import expand_strategies, get_strategy


@dataclass
class Measured:
    """What a measure function hands the run store (the store adds kind, ids, times, server and client)."""

    tables: dict  # name -> Arrow table or DataFrame, stored as <name>.parquet
    procedure: dict  # how it was measured: the SQL, scripts or steps
    checks: dict  # what must hold for the run to count, with `passed`
    results: dict = field(default_factory=dict)  # anything else the kind records about the run


# --------------------------------------------------------------------------- parameters


class Parameters:
    """Base of every kind's frozen parameters dataclass: converts each field, then checks the whole."""

    def __post_init__(self):
        for spec in dataclasses.fields(self):
            convert = spec.metadata.get("convert")
            if convert is not None:
                object.__setattr__(self, spec.name, convert(spec.name, getattr(self, spec.name)))
        self.check()

    def check(self) -> None:
        """Ranges and relations between fields; raise UserError with one line."""

    @classmethod
    def from_mapping(cls, mapping: dict, where: str):
        """An instance from a params-file section; an unknown key is one line naming the known ones."""
        if not isinstance(mapping, dict):
            raise UserError(f"{where} must be a mapping of settings, not {type(mapping).__name__}")
        known = [spec.name for spec in dataclasses.fields(cls)]
        unknown = [key for key in mapping if key not in known]
        if unknown:
            raise UserError(f"{where}: unknown setting {unknown[0]!r} (known: {', '.join(known)})")
        return cls(**mapping)


@dataclass(frozen=True)
class Option:
    """A command-line flag for one parameters field."""

    flag: str
    help: str
    parse: Callable[[str], Any] | None = None  # argparse's type: text -> value
    given: Any = None  # a flag without a value: the field's value when the flag is given
    default_text: str | None = None  # how the default reads in --help, when str(default) does not say it
    metavar: str | None = None  # how the value reads in --help, when the field's name does not say it

    @property
    def takes_value(self) -> bool:
        return self.given is None


REQUIRED = dataclasses.MISSING  # a setting without a default


def setting(default, convert: Callable[[str, Any], Any], option: Option | None = None,
            added_later: bool | Callable[[dict], Any] = False):
    """A parameters field: its default (or REQUIRED), the converter that checks its type, and its flag if any.

    added_later: runs stored before this setting existed were made with its default (and match it); or a function
    of such a run's stored parameters, returning the value it was made with (where that was not the default for
    every run).
    """
    return field(default=default, metadata={"convert": convert, "option": option, "added_later": added_later})


def check_each(values, name: str, low, high, none_given: str | None = None, bounds: str | None = None) -> None:
    """A list setting's check: at least one value, each between low and high (one line naming the first that is not)."""
    if not values:
        raise UserError(f"give at least one {none_given or name}")
    for value in values:
        if not low <= value <= high:
            raise UserError(f"{name} must be between {bounds or f'{low} and {high}'}, not {value}")


def implied_settings(parameters) -> dict:
    """{name: default, or a function of the stored parameters} of the settings added later: what a run stored
    without them was made with."""
    return {spec.name: spec.metadata["added_later"] if callable(spec.metadata["added_later"]) else spec.default
            for spec in dataclasses.fields(parameters) if spec.metadata.get("added_later")}


def _words(name: str) -> str:
    return name.replace("_", " ")


def as_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise UserError(f"{_words(name)} must be a whole number, not {value!r}")
    return int(value)


def as_float(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"{_words(name)} must be a number, not {value!r}")
    return float(value)


def one_of(allowed, what: str):
    """A converter for a setting that takes one of `allowed` (a tuple of names): one line naming them otherwise."""
    def convert(name: str, value) -> str:
        if value not in allowed:
            raise UserError(f"{what} must be one of {', '.join(allowed)}, not {value!r}")
        return str(value)
    return convert


def as_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{_words(name)} must be true or false, not {value!r}")
    return value


def _sequence(name: str, values) -> tuple:
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise UserError(f"{_words(name)} must be a list, not {values!r}")
    return tuple(values)


def as_ints(name: str, values) -> tuple[int, ...]:
    return tuple(as_int(name, v) for v in _sequence(name, values))


def as_floats(name: str, values) -> tuple[float, ...]:
    return tuple(as_float(name, v) for v in _sequence(name, values))


def as_floats_or_one(name: str, values) -> tuple[float, ...]:
    """A list of numbers, or one number standing for a list of one (a setting that became a sweep)."""
    if isinstance(values, (int, float)) and not isinstance(values, bool):
        return (float(values),)
    return as_floats(name, values)


def as_bools(name: str, values) -> tuple[bool, ...]:
    return tuple(as_bool(name, v) for v in _sequence(name, values))


def as_bools_or_one(name: str, values) -> tuple[bool, ...]:
    """A list of true/false, or one standing for a list of one (a setting that became a sweep)."""
    return (values,) if isinstance(values, bool) else as_bools(name, values)


def as_strategy(name: str, value) -> str:
    return get_strategy(str(value)).name


def as_strategies(name: str, values) -> tuple[str, ...]:
    """A list of strategies, where `libraries` stands for every job library's protocol (strategies.STRATEGY_GROUPS)."""
    names = tuple(as_strategy(name, v) for v in expand_strategies(_sequence(name, values)))
    if not names:
        raise UserError("give at least one strategy")
    return names


# --------------------------------------------------------------------------- command-line parsers


def _numbers(text: str, convert: Callable[[str], Any], expected: str) -> tuple:
    """Comma-separated values read by `convert`; their range is checked by the parameters."""
    try:
        values = tuple(convert(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one number")
    return values


def int_list(text: str) -> tuple[int, ...]:
    """Comma-separated whole numbers; their range is checked by the parameters."""
    return _numbers(text, int, "comma-separated whole numbers")


def int_list_or_none(text: str) -> tuple[int, ...]:
    """int_list, or `none` for an empty list."""
    return () if text.strip() in ("", "none") else int_list(text)


def number_list(text: str) -> tuple[float, ...]:
    """Comma-separated numbers; their range is checked by the parameters."""
    return _numbers(text, float, "comma-separated numbers such as 0,1,5,20")


def fraction_list(text: str) -> tuple[float, ...]:
    return _numbers(text, float, "comma-separated fractions such as 0,0.5,0.99")


def on_off(text: str) -> bool:
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected on or off, got {text!r}")
    return text == "on"


@dataclass(frozen=True)
class Kind:
    """One kind of experiment as the store, the command line and the report see it."""

    name: str  # the manifest's kind, the run folder, the subcommand
    parameters: type  # one run's frozen parameters dataclass (contract.Parameters)
    measure: Callable  # (db, parameters, run_id, progress) -> contract.Measured
    summarise: Callable  # (storage.Run) -> the run's summary: what Run.summary returns
    help: str  # the subcommand's help: what it measures and what it drops
    show: Callable  # (run folders, as_json) -> None: what the subcommand prints
    sections: tuple[str, ...]  # the report's params-file sections of this kind
    request: type | None = None  # what a section or the command line fills in, when not one run's parameters
    expand: Callable | None = None  # request -> [parameters, ...], one run each
    workers: Callable = lambda parameters: 0  # connections a run opens besides the harness's own
    check_size: Callable | None = None  # (parameter sets, server on this machine, pg_version): before any server
    label: Callable | None = None  # parameters -> a few words for the progress bar of a sweep
    command: type | None = None  # what the subcommand's flags fill in, when not what a params section asks
    # (request, [stored run summaries]) -> the parameter sets to run next, [] once none is needed: runs whose need
    # depends on what the runs before them measured (production: C5's rounds until its interval is decided). Each
    # call must ask for sets not yet among the summaries, so the loop ends.
    follow_up: Callable | None = None
    # parameters -> where the embedded server keeps its data ("tmpfs" or "disk"), for a kind that asks; the sets
    # are run on one server per storage
    storage: Callable | None = None

    @property
    def command_asks(self) -> type:
        """The dataclass the subcommand's flags fill in."""
        return self.command or self.asks

    @property
    def asks(self) -> type:
        """The dataclass a params section or the command line fills in."""
        return self.request or self.parameters

    def runs(self, asked) -> list:
        """One run's parameters per run that `asked` (an instance of `asks`) stands for."""
        return self.expand(asked) if self.expand is not None else [asked]
