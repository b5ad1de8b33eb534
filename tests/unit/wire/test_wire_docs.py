"""docs/wire.md shows the layouts the code actually uses."""

from __future__ import annotations

import pathlib

from wire_layout_doc import render_layouts

DOC = pathlib.Path(__file__).parents[3] / "docs" / "wire.md"
START, END = "<!-- layouts -->\n", "<!-- /layouts -->"


def test_layout_section_matches_the_records() -> None:
    text = DOC.read_text()
    section = text[text.index(START) + len(START) : text.index(END)]
    assert section.strip() == render_layouts().strip(), (
        "docs/wire.md is out of date: run `python tests/unit/wire/wire_layout_doc.py` "
        "and paste its output between the layout markers"
    )
