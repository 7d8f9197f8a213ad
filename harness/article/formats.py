"""How the article writes numbers: one rule per kind of figure, used by the findings, the prose and the tables.

Every function takes a plain number (or None/NaN, shown as MISSING) and returns text.
Durations have one precision rule, three significant figures, so one page never
shows "15.2 ms" beside "15.23 ms".
"""

from __future__ import annotations

MISSING = "n/a"  # a figure that should exist but was not measured
DASH = "\u2014"  # a figure that cannot exist, e.g. lost races per win of a strategy that cannot lose
RANGE = "\u2013"  # between min and max; a hyphen would read as a minus sign before a negative figure


def missing(value) -> bool:
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN (float, numpy, NaT) is the one value unequal to itself
    except TypeError:
        return True  # pandas' NA, whose comparisons are NA


def count(value) -> str:
    """12,345"""
    return MISSING if missing(value) else f"{int(round(float(value))):,}"


def number(value, digits: int = 1) -> str:
    """1,234 or 12.3 (no decimals from 1,000 up)."""
    if missing(value):
        return MISSING
    value = float(value)
    return f"{value:,.{0 if abs(value) >= 1000 else digits}f}"


def ms(value) -> str:
    """A duration in milliseconds to three significant figures: 0.214 ms, 3.41 ms, 15.2 ms, 152 ms, 5,857 ms."""
    if missing(value):
        return MISSING
    value = float(value)
    magnitude = abs(value)
    digits = 3 if magnitude < 1 else 2 if magnitude < 10 else 1 if magnitude < 100 else 0
    return f"{value:,.{digits}f} ms"


def round_trip(value) -> str:
    """A round trip the harness was asked to add, as it was given: 0 ms, 1 ms, 5 ms, 0.5 ms."""
    return MISSING if missing(value) else f"{float(value):,g} ms"


def wait(seconds: float) -> str:
    """A wait as a reader plans for it: whole seconds under two minutes, then minutes (one decimal under ten: 149 s
    is 2.5 min, not 2), then hours."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 600:
        return f"{seconds / 60:.1f} min".replace(".0 min", " min")
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h".replace(".0 h", " h")


def percent(value, digits: int = 1) -> str:
    """A share (0.976) as 97.6%."""
    return MISSING if missing(value) else f"{100 * float(value):.{digits}f}%"


def ratio(value) -> str:
    """How many times: 3.4x, 12x."""
    if missing(value):
        return MISSING
    value = float(value)
    return f"{value:.1f}x" if abs(value) < 10 else f"{value:,.0f}x"


def rate(value) -> str:
    """Claims per second: 6,983 claims/s."""
    return MISSING if missing(value) else f"{number(value, 0)} claims/s"


def spread(median, low=None, high=None, fmt=number) -> str:
    """A figure over repeats: "median [min-max]", or the median alone when the repeats agree or there is one.

    A unit the formatter appends (" ms", "%") is written once, after the median.
    """
    text = fmt(median)
    if missing(median) or missing(low) or missing(high) or fmt(low) == fmt(high) == text:
        return text
    low_text, high_text = fmt(low), fmt(high)
    unit = _common_unit(text, low_text, high_text)
    if unit:
        low_text, high_text = low_text[:-len(unit)], high_text[:-len(unit)]
    return f"{text} [{low_text}{RANGE}{high_text}]"


def _common_unit(*texts: str) -> str:
    for unit in (" claims/s", " ms", "%", "x"):
        if all(t.endswith(unit) for t in texts):
            return unit
    return ""


def applicable(value, applies: bool, fmt=number) -> str:
    """fmt(value), or DASH where the figure cannot exist."""
    return fmt(value) if applies else DASH


def span(low, high, fmt=number) -> str:
    """Where a figure lay across runs: "0.52", or "0.52 to 1.30" when it varied."""
    if missing(low) or missing(high):
        return MISSING
    return fmt(low) if fmt(low) == fmt(high) else f"{fmt(low)} to {fmt(high)}"
