"""docs/router.md's example runs as written."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

DOC = pathlib.Path(__file__).parents[3] / "docs" / "router.md"


def test_the_router_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 1
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "__main__"})
    assert out.getvalue().splitlines() == [
        "EXECUTED_LOCALLY hello (turn 1)",
        "FORWARDED again (turn 2)",
    ]
