"""One colour and marker per method, the same in every plot (:mod:`learngene.bench.plots`), and compare's plots."""

from __future__ import annotations

import matplotlib.colors as mcolors
import pytest

from learngene.bench.plots import METHOD_STYLES, REFERENCE_STYLES, missing_notes, style_per_method
from learngene.bench.rows import Row

from .conftest import own_methods


def test_every_method_of_the_project_has_its_own_colour_and_the_references_are_greys():
    styled = set(METHOD_STYLES) | set(REFERENCE_STYLES)
    assert set(own_methods()) <= styled, sorted(set(own_methods()) - styled)
    colours = [c.lower() for c, _ in METHOD_STYLES.values()]
    assert len(set(colours)) == len(colours)  # no two methods share a colour
    pairs = [*METHOD_STYLES.values(), *REFERENCE_STYLES.values()]
    assert len(set(pairs)) == len(pairs)
    for colour, _ in REFERENCE_STYLES.values():
        r, g, b = mcolors.to_rgb(colour)
        assert r == g == b  # black or a grey
    for colour, _ in METHOD_STYLES.values():
        r, g, b = mcolors.to_rgb(colour)
        assert max(r, g, b) - min(r, g, b) > 0.1  # a colour, not a grey a reference could be taken for


def test_a_methods_style_does_not_depend_on_the_other_methods_of_the_plot():
    alone = style_per_method(["tleg"])
    many = style_per_method(["scratch", "scratch ×10", "mimetic", "peg", "tleg", "tleg +kd", "my_plugin"])
    assert alone["tleg"] == many["tleg"] and many["tleg +kd"]["color"] == many["tleg"]["color"]
    assert many["tleg +kd"].get("mfc") == "white" and "mfc" not in many["tleg"]  # a variant: hollow
    assert many["scratch"] != many["scratch ×10"]  # the long reference is its own row: its own style
    assert many["my_plugin"]["color"] not in {c for c, _ in METHOD_STYLES.values()}


def _row(method: str, size: str, note: str = "", accs=()) -> Row:
    return Row(method, "data", size, 2, 32, 2, 0, accs=list(accs), note=note)


@pytest.mark.parametrize("left_out", [(), (("tleg", "tleg expands in depth only"),)])
def test_the_notes_under_a_plot_name_every_method_it_lacks(left_out):
    rows = [_row("grow", "L1-D32-H2", note="grow makes larger models"), _row("mimetic", "L1-D32-H2", accs=(0.5,))]
    notes = missing_notes(rows, "data", left_out)
    assert "n/a: grow at L1-D32-H2: grow makes larger models" in notes
    assert ("left out: tleg: tleg expands in depth only" in notes) == bool(left_out)
    assert not any("mimetic" in n for n in notes)
