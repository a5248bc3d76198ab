"""The console's colour pairs meet WCAG 2.1 AA contrast (4.5:1 for text), computed from its CSS."""

from __future__ import annotations

import re

import pytest

from labels_party.console import asset

CSS = asset("console.css").decode()
VARIABLES = dict(re.findall(r"--([a-z-]+):\s*(#[0-9a-fA-F]{6})", CSS))
# (text, background) pairs the console draws text with.
PAIRS = [
    ("fg", "bg"),
    ("fg", "panel"),
    ("muted", "bg"),
    ("muted", "panel"),
    ("accent", "bg"),
    ("ok", "ok-bg"),
    ("bad", "bad-bg"),
    ("#ffffff", "accent"),  # the primary buttons
]


def luminance(hex_colour: str) -> float:
    """WCAG 2.1 relative luminance of an sRGB colour."""
    channels = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_contrast_formula_on_known_values() -> None:
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)


@pytest.mark.parametrize(("text", "background"), PAIRS)
def test_text_colours_meet_aa(text: str, background: str) -> None:
    fg = text if text.startswith("#") else VARIABLES[text]
    bg = background if background.startswith("#") else VARIABLES[background]
    assert contrast(fg, bg) >= 4.5, (text, background, contrast(fg, bg))
