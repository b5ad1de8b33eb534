"""The performance document ``zlink-trio bench`` writes: a template (prose in the package,
``performance_template.md``) rendered around the figures of one run.

A *figure* is a line a benchmark printed that states a ratio of ours to the raw baseline
measured in the same run (:func:`ratio_value` finds it). The template holds no measured
number of its own: it places the run's figures with placeholders, ``{{ NAME ARGS }}``:

``{{ header }}``
    which command produced the file, when, and the load average at the start and the end.
``{{ plot }}``
    the ratio plot (or a line saying there is none).
``{{ figures SCRIPT [| TEXT] }}``
    a table of SCRIPT's figures (those containing TEXT), under the command that produced
    them; or a line saying the script failed or did not run.
``{{ ratio SCRIPT | TEXT }}``
    the ratio of SCRIPT's first figure containing TEXT, for a sentence of the prose.
``{{ rest }}``
    a table per script of every figure no ``figures`` placeholder showed.
``{{ outputs }}``
    a link to the file with every script's whole output.

An unknown placeholder, or a ``ratio`` that names no figure of a script that ran, is a
:class:`TemplateError`: the document never says a number the run did not print.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

__all__ = [
    "Figure",
    "Result",
    "Run",
    "TemplateError",
    "default_template",
    "figures",
    "load_run",
    "ratio_lines",
    "ratio_text",
    "ratio_value",
    "render",
    "render_outputs",
    "save_run",
    "script_command",
]

_RATIO = re.compile(r"ratio", re.I)
_NUMBER = re.compile(
    r"\bratio\b.*?(?<![\w.])(([0-9]+(?:\.[0-9]+)?)(?:\s*/\s*[0-9]+(?:\.[0-9]+)?)*)\s*$", re.I
)
"""A figure line's ratio: the number(s) ending the line after ``ratio`` (``a`` or ``a / b``);
a header line (``ratio = our p50 / raw p50``) has none."""
_MEASURE = re.compile(
    r"(?<![\w.])[0-9][0-9,]*(?:\.[0-9]+)?\s*(?:ops/s|/s|us|µs|ms|B)(?![\w])(?:\s*server CPU)?"
)
"""A measured amount inside a figure line (a rate, a time, a size)."""
_GROUP = re.compile(r"^\[([^\]]+)\]")
"""A line opening with ``[name]`` names the group of the figure lines after it."""
_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*([^}]*?)\s*\}\}")


class TemplateError(ValueError):
    """The template names a placeholder or a figure that does not exist."""


@attrs.frozen
class Result:
    script: str
    arguments: tuple[str, ...]
    """The script's arguments in this run (``--quick``'s, then those after ``--``)."""
    status: int | None
    """None: it ran past the timeout and was killed."""
    seconds: float
    output: str
    load: float | None = None
    """The one-minute load average when the script started."""


@attrs.frozen
class Run:
    command: str
    started: str
    """UTC, ``YYYY-MM-DD HH:MM``."""
    load_start: tuple[float, ...]
    load_end: tuple[float, ...]
    cpus: int
    results: tuple[Result, ...]


@attrs.frozen
class Figure:
    script: str
    text: str
    """The line as printed (with its scenario and group names)."""
    ratio: str
    """The ratio (``0.42`` or ``0.42 / 1.12``) the line ends with."""
    index: int = 1
    """Its place among its script's figures (from 1): with the script, its bar in the plot."""

    @property
    def tag(self) -> str:
        """How the plot and the tables name it: ``actors 3``."""
        return f"{self.script.removeprefix('bench_').removesuffix('.py')} {self.index}"

    @property
    def label(self) -> str:
        """The line without its measured numbers and its ratio (for the plot)."""
        found = _NUMBER.search(self.text)
        text = self.text[: found.start(1)] if found else self.text
        text = _MEASURE.sub("", text)
        text = re.sub(r"\(\s+\)|\\?\|", " ", text)
        short = re.sub(r"\s+", " ", re.sub(r"\bratio\b.*$", "", text)).strip(" :,")
        return short or re.sub(r"\s+", " ", text).strip()


def ratio_value(line: str) -> float | None:
    """The ratio a figure line states (the first of ``a / b``; None for a line that only
    explains one)."""
    found = _NUMBER.search(line)
    return float(found.group(2)) if found else None


def ratio_text(line: str) -> str | None:
    """The ratio a figure line ends with, as printed (``0.71`` or ``0.71 / 1.95``)."""
    found = _NUMBER.search(line)
    return re.sub(r"\s*/\s*", " / ", found.group(1)) if found else None


def ratio_lines(output: str) -> list[str]:
    """The lines of a benchmark's output that mention a ratio; a line whose scenario name is
    the line before it (that line ends with ``:``) gets the name first, and lines after a
    ``[group]`` line get that group first."""
    lines = output.splitlines()
    found = []
    group = ""
    for i, line in enumerate(lines):
        opened = _GROUP.match(line.strip())
        if opened:
            group = f"[{opened.group(1)}]"
        if not _RATIO.search(line):
            continue
        before = lines[i - 1].strip() if i > 0 else ""
        name = before if before.endswith(":") and not _RATIO.search(before) else ""
        text = f"{name} {line.strip()}".strip()
        if group and not opened:
            text = f"{group} {text}"
        found.append(text)
    return found


def figures(result: Result) -> list[Figure]:
    """The figures of a script that exited 0 (one that failed gives none)."""
    if result.status != 0:
        return []
    found: list[Figure] = []
    for line in ratio_lines(result.output):
        ratio = ratio_text(line)
        if ratio is not None:
            found.append(Figure(result.script, line, ratio, len(found) + 1))
    return found


def script_command(r: Result) -> str:
    """The command that reproduces one script's figures (from the checkout's root)."""
    return " ".join(["PYTHONPATH=$PWD python", f"benchmarks/{r.script}", *r.arguments])


def status_text(r: Result) -> str:
    return "timed out" if r.status is None else ("exit 0" if r.status == 0 else f"exit {r.status}")


def default_template() -> str:
    return resources.files("zlink_trio.ops").joinpath("performance_template.md").read_text()


def _loads(values: Sequence[float]) -> str:
    return " ".join(f"{x:.1f}" for x in values) if values else "unknown"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _figure_table(r: Result, shown: Sequence[Figure]) -> str:
    load = f", load average {r.load:.1f} at its start" if r.load is not None else ""
    lines = [
        f"Command: `{script_command(r)}` ({status_text(r)} after {r.seconds:.0f} s{load})",
        "",
    ]
    legend = [line for line in ratio_lines(r.output) if ratio_text(line) is None]
    if legend:
        lines += [f"> {line}  " for line in legend] + [""]
    lines += [
        "| figure, as the benchmark printed it | ratio to the same-run baseline | in the plot |",
        "|---|---|---|",
    ]
    lines += [f"| {_cell(f.text)} | {f.ratio} | {f.tag} |" for f in shown]
    return "\n".join(lines)


class _Renderer:
    def __init__(self, run: Run, plot: str | None, outputs: str) -> None:
        self.run = run
        self.plot_path = plot
        self.outputs_path = outputs
        self.by_script = {r.script: r for r in run.results}
        self.shown: set[tuple[str, str]] = set()
        self.mentioned: set[str] = set()

    def _result(self, script: str) -> Result | None:
        return self.by_script.get(script)

    @staticmethod
    def _split(args: str) -> tuple[str, str]:
        script, _, text = args.partition("|")
        return script.strip(), text.strip()

    def header(self, args: str) -> str:
        run = self.run
        return (
            f"Produced by `{run.command}` on {run.started} UTC, on {run.cpus} CPU(s); load "
            f"average (1, 5, 15 min) {_loads(run.load_start)} at the start, "
            f"{_loads(run.load_end)} at the end."
        )

    def plot(self, args: str) -> str:
        if self.plot_path is None:
            return "(No plot: matplotlib is not installed; `pip install 'zlink-trio[plot]'`.)"
        return f"![ratios of ours to the same-run baselines]({self.plot_path})"

    def outputs(self, args: str) -> str:
        return f"[{self.outputs_path}]({self.outputs_path})"

    def figures(self, args: str) -> str:
        script, text = self._split(args)
        r = self._result(script)
        self.mentioned.add(script)
        if r is None:
            return f"`{script}` did not run in this run."
        if r.status != 0:
            return (
                f"Command: `{script_command(r)}` ({status_text(r)} after {r.seconds:.0f} s): "
                f"no figures (its output is in {self.outputs(args)})."
            )
        shown = [f for f in figures(r) if text in f.text]
        if not shown:
            raise TemplateError(
                f"{{{{ figures {args} }}}}: no figure of {script} contains {text!r}"
            )
        self.shown.update((f.script, f.text) for f in shown)
        return _figure_table(r, shown)

    def ratio(self, args: str) -> str:
        script, text = self._split(args)
        r = self._result(script)
        if r is None or r.status != 0:
            return "(not measured in this run)"
        for f in figures(r):
            if text and text in f.text:
                return f"**{f.ratio}**"
        raise TemplateError(f"{{{{ ratio {args} }}}}: no figure of {script} contains {text!r}")

    def rest(self, args: str) -> str:
        parts = []
        for r in self.run.results:
            left = [f for f in figures(r) if (f.script, f.text) not in self.shown]
            if left:
                parts.append(f"### `{r.script}`\n\n{_figure_table(r, left)}")
            elif r.status != 0 and r.script not in self.mentioned:
                parts.append(f"### `{r.script}`\n\n{self.figures(r.script)}")
        return "\n\n".join(parts) if parts else "Every figure of this run is shown above."


def render(template: str, run: Run, plot: str | None, outputs: str) -> str:
    """The document: ``template`` with every placeholder replaced by what ``run`` printed
    (``rest`` last, so that it knows which figures the others showed)."""
    renderer = _Renderer(run, plot, outputs)
    names: dict[str, Callable[[str], str]] = {
        "header": renderer.header,
        "plot": renderer.plot,
        "outputs": renderer.outputs,
        "figures": renderer.figures,
        "ratio": renderer.ratio,
        "rest": renderer.rest,
    }

    def replace(found: re.Match[str]) -> str:
        name, args = found.group(1), found.group(2)
        if name == "rest":
            return found.group(0)
        if name not in names:
            raise TemplateError(f"unknown placeholder {found.group(0)}")
        return names[name](args)

    text = _PLACEHOLDER.sub(replace, template)
    text = _PLACEHOLDER.sub(lambda found: renderer.rest(found.group(2)), text)
    return text


def render_outputs(run: Run) -> str:
    """Every script's whole output (the figures' context: raw rates, counts)."""
    lines = [
        "<!-- Generated by `zlink-trio bench`; see performance.md. -->",
        "# Benchmark output",
        "",
        f"The whole output of each script of `{run.command}` ({run.started} UTC). Absolute "
        "rates and times depend on the machine and its load; performance.md shows the ratios.",
        "",
    ]
    for r in run.results:
        lines += [f"## `{r.script}`", "", f"`{script_command(r)}`: {status_text(r)}", "",
                  "```", r.output.rstrip(), "```", ""]  # fmt: skip
    return "\n".join(lines)


def save_run(run: Run, path: Path) -> None:
    path.write_text(json.dumps(attrs.asdict(run), indent=1) + "\n")


def _result(r: dict[str, Any]) -> Result:
    load = r.get("load")
    return Result(
        script=str(r["script"]), arguments=tuple(r["arguments"]), status=r["status"],
        seconds=float(r["seconds"]), output=str(r["output"]),
        load=float(load) if load is not None else None,
    )  # fmt: skip


def load_run(path: Path) -> Run:
    raw: dict[str, Any] = json.loads(path.read_text())
    results = tuple(_result(r) for r in raw["results"])
    return Run(
        command=raw["command"], started=raw["started"], load_start=tuple(raw["load_start"]),
        load_end=tuple(raw["load_end"]), cpus=int(raw["cpus"]), results=results,
    )  # fmt: skip
