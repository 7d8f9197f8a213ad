"""One way to write each kind of number, everywhere on the page."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.article import formats, prose


@pytest.mark.parametrize("value, text", [(0.0274, "0.027 ms"), (0.214, "0.214 ms"), (3.414, "3.41 ms"),
                                         (15.234, "15.2 ms"), (15.2, "15.2 ms"), (152.4, "152 ms"),
                                         (5857.2, "5,857 ms")])
def test_durations_have_one_precision_rule(value, text):
    assert formats.ms(value) == text


def test_counts_numbers_shares_ratios():
    assert formats.count(12345) == "12,345"
    assert formats.number(1234.56) == "1,235" and formats.number(2.345, 2) == "2.35"
    assert formats.percent(0.9763) == "97.6%"
    assert formats.ratio(12.3) == "12x" and formats.ratio(3.44) == "3.4x"
    assert formats.rate(6983.2) == "6,983 claims/s"


@pytest.mark.parametrize("value", [None, math.nan, float("nan"), pd.NA])
def test_a_missing_figure_reads_n_a(value):
    assert formats.missing(value)
    assert formats.count(value) == formats.ms(value) == formats.MISSING


def test_a_spread_is_median_min_max_with_the_unit_once():
    assert formats.spread(15.2, 14.1, 16.04, formats.ms) == "15.2 ms [14.1\u201316.0]"
    assert formats.spread(2.2, 2.2, 2.2) == "2.2", "repeats that agree, or one repeat, show one figure"
    assert formats.spread(2.2) == "2.2"
    assert formats.spread(-0.05, -0.1, 0.02, formats.percent) == "-5.0% [-10.0\u20132.0]"


def test_not_applicable_is_a_dash():
    assert formats.applicable(0.0, False) == formats.DASH
    assert formats.applicable(0.5, True, lambda v: formats.number(v, 2)) == "0.50"


def test_prose_writes_numbers_with_the_same_functions():
    for name in ("count", "number", "ms", "percent", "ratio", "missing"):
        assert getattr(prose, name) is getattr(formats, name)
