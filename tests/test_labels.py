"""The article's library labels are read off the libraries' declaration (harness.libraries.catalogue.LIBRARIES): every
strategy a race runs has its place in the order and its own hue, every library raced here its own tone, shape and
dash, and a library the palettes have no value left for fails at import, in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.article import labels
from harness.libraries.catalogue import RACED_LIBRARY_STRATEGIES
from harness.claims.strategies import STRATEGIES


def test_every_strategy_has_one_place_in_the_order_and_a_hue_of_its_own():
    assert sorted(labels.STRATEGY_ORDER) == sorted(STRATEGIES)
    assert len(set(labels.STRATEGY_ORDER)) == len(labels.STRATEGY_ORDER)
    assert sorted(labels.STRATEGY_COLOURS) == sorted(STRATEGIES)
    hues = [*labels.STUDY_COLOURS.values(), *labels.MODELLED_HUES, *labels.RACED_HUES, *labels.VARIANT_HUES]
    assert len(set(hues)) == len(hues), "no two strategies, drawn or spare, share a hue"
    assert not set(hues) & set(labels.NEUTRAL.values()), "no strategy's hue is a neutral tone"


def test_every_library_raced_here_is_told_apart_by_its_tone_shape_and_dash():
    for marks in (labels.LIBRARY_COLOURS, labels.LIBRARY_SHAPES, labels.LIBRARY_DASHES):
        assert list(marks) == list(RACED_LIBRARY_STRATEGIES)
    for palette in (labels.LIBRARY_TONES, labels.LIBRARY_SHAPE_CYCLE, labels.LIBRARY_DASH_CYCLE):
        assert len({str(value) for value in palette}) == len(palette)
    assert set(labels.LIBRARY_TONES) <= set(labels.NEUTRAL.values())


def test_a_palette_gives_values_by_position_and_names_what_it_lacks():
    assert labels.by_position(("a", "b"), ("red", "blue", "green"), "HUES") == {"a": "red", "b": "blue"}
    with pytest.raises(ValueError, match=r"^c, d: no value left in HUES \(harness/article/labels.py has 2 for 4 "
                                         r"names\); add one there$"):
        labels.by_position(("a", "b", "c", "d"), ("red", "blue"), "HUES")


def test_a_library_beyond_the_palettes_fails_the_import_in_one_line():
    """Declared libraries past every palette's spare values: importing the labels fails, the last line of the
    traceback naming the libraries and the palette to extend."""
    extra = tuple(f"new_library_{n}" for n in range(len(labels.LIBRARY_DASH_CYCLE)))
    script = ("import harness.libraries.catalogue as declared\n"
              f"declared.RACED_LIBRARY_STRATEGIES += {extra!r}\n"
              "import harness.article.labels\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: new_library_") and "no value left in RACED_HUES" in last, last
