"""``zlink-trio bench``: run the benchmark suite and write its results into
``docs/performance.md``.

::

    zlink-trio bench [--quick] [--only bench_wire.py ...] [--benchmarks benchmarks] \\
        [--output docs/performance.md] [--timeout 900] [-- ARGS for every script]

Run from a checkout (``benchmarks/`` is not part of the installed package). Each
``benchmarks/bench_*.py`` runs as its own process (``PYTHONPATH`` = the checkout); a line
every 10 s says which one runs and for how long. Every benchmark prints its same-run raw
baseline and the ratio of ours to it last; the command keeps each script's whole output and
collects its ratio lines into a table, each row with the command that reproduces it (a
script that failed gives no figures). ``--quick`` gives each script short settings
(:data:`QUICK`). The results replace the region between
``<!-- zlink-trio bench -->`` and ``<!-- /zlink-trio bench -->`` of the output file (appended
when the file has none), so the hand-written analysis around it stays. With matplotlib (the
``plot`` extra) the ratios are also drawn into ``performance-ratios.png`` next to it.

Exit status 0 when every script exited 0, 1 otherwise (the file is written either way, with
the failure shown).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import attrs
import trio

__all__ = [
    "BEGIN",
    "END",
    "QUICK",
    "add_bench_parser",
    "ratio_lines",
    "ratio_value",
    "run",
    "write_region",
]

BEGIN = "<!-- zlink-trio bench -->"
END = "<!-- /zlink-trio bench -->"
_RATIO = re.compile(r"ratio", re.I)
QUICK: dict[str, tuple[str, ...]] = {
    "bench_actors.py": ("--seconds", "1", "--rounds", "1", "--actors", "5000"),
    "bench_engine.py": ("--rounds", "1", "--tells", "5000", "--asks", "2000", "--lanes", "5000"),
    "bench_mesh.py": ("--seconds", "1", "--rounds", "1"),
    "bench_pg_bridge.py": ("--seconds", "1", "--rounds", "1"),
    "bench_relocation.py": ("--moves", "10"),
    "bench_router.py": ("--count", "60"),
    "bench_spots.py": ("--seconds", "1", "--rounds", "1", "--activations", "60"),
    "bench_store_cas.py": ("--seconds", "1", "--rounds", "1"),
    "bench_store_change_owners.py": ("--moves", "6", "--rounds", "1"),
    "bench_stream.py": ("--seconds", "1", "--rounds", "1"),
    "bench_wire.py": ("--seconds", "1", "--rounds", "1"),
}
"""``--quick``: each script's short settings (a script not listed gets none); the scripts
take different options, so one set of arguments for all cannot be short for each."""
_NUMBER = re.compile(r"\bratio\b.*?(?<![\w.])([0-9]+(?:\.[0-9]+)?)\s*(?:/\s*[0-9.]+\s*)?$", re.I)
"""A figure line's ratio: the number ending the line after ``ratio`` (the first of an
``a / b`` pair); a header line (``ratio = our p50 / raw p50``) has none."""


def add_bench_parser(commands: Any) -> None:
    bench = commands.add_parser("bench", help="run benchmarks/ and write docs/performance.md")
    bench.add_argument("--benchmarks", type=Path, default=Path("benchmarks"))
    bench.add_argument("--only", action="append", metavar="SCRIPT", help="repeatable")
    bench.add_argument("--output", type=Path, default=Path("docs/performance.md"))
    bench.add_argument("--timeout", type=float, default=900.0, metavar="SECONDS")
    bench.add_argument(
        "--quick", action="store_true",
        help="short settings for every script (1 round of about 1 s; see QUICK)",
    )  # fmt: skip
    bench.add_argument("script_args", nargs="*", help="arguments for every script, after --")


@attrs.frozen
class Result:
    script: str
    arguments: tuple[str, ...]
    """The script's arguments in this run (``--quick``'s, then those after ``--``)."""
    status: int | None
    """None: it ran past the timeout and was killed."""
    seconds: float
    output: str


def ratio_value(line: str) -> float | None:
    """The ratio a figure line states (None for a line that only explains one)."""
    found = _NUMBER.search(line)
    return float(found.group(1)) if found else None


def ratio_lines(output: str) -> list[str]:
    """The lines of a benchmark's output that state a ratio to its baseline; a line whose
    scenario name is the line before it (that line ends with ``:``) gets the name first."""
    lines = output.splitlines()
    found = []
    for i, line in enumerate(lines):
        if not _RATIO.search(line):
            continue
        before = lines[i - 1].strip() if i > 0 else ""
        name = before if before.endswith(":") and not _RATIO.search(before) else ""
        found.append(f"{name} {line.strip()}".strip())
    return found


def _arguments(script: Path, args: argparse.Namespace) -> tuple[str, ...]:
    quick = QUICK.get(script.name, ()) if args.quick else ()
    return (*quick, *args.script_args)


def script_command(r: Result) -> str:
    """The command that reproduces one script's figures (from the checkout's root)."""
    return " ".join(["PYTHONPATH=$PWD python", f"benchmarks/{r.script}", *r.arguments])


async def _run_one(script: Path, args: argparse.Namespace, out: TextIO) -> Result:
    env = {**os.environ, "PYTHONPATH": str(Path.cwd()), "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    print(f"bench: running {script.name}", file=out, flush=True)
    status: int | None = None
    done = trio.Event()
    output = b""

    async def liveness() -> None:
        while not done.is_set():
            with trio.move_on_after(10):
                await done.wait()
            if not done.is_set():
                print(f"bench: {script.name} running ({time.monotonic() - started:.0f} s)",
                      file=out, flush=True)  # fmt: skip

    async with trio.open_nursery() as nursery:
        nursery.start_soon(liveness)
        with trio.move_on_after(args.timeout):
            completed = await trio.run_process(
                [sys.executable, str(script), *_arguments(script, args)],
                capture_stdout=True, stderr=subprocess.STDOUT, check=False, env=env,
            )  # fmt: skip
            status, output = completed.returncode, completed.stdout
        done.set()
    seconds = time.monotonic() - started
    text = output.decode(errors="replace")
    return Result(script.name, _arguments(script, args), status, seconds, text)


def _region(results: list[Result], command: str, plot: str | None = None) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    lines = [
        BEGIN,
        "",
        "## Latest `zlink-trio bench` run",
        "",
        f"Produced by `{command}` on {stamp} (load average {load}). Each line is a ratio of",
        "ours to the raw baseline measured in the same run, as the benchmark printed it; the",
        "command column reproduces that row. A script that failed or timed out gives no",
        "figures (its output is kept below, for the failure).",
        "",
        "| benchmark | command | status | seconds | ratios (as printed) |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        status = (
            "timed out" if r.status is None else ("ok" if r.status == 0 else f"exit {r.status}")
        )
        ratios = "<br>".join(line.replace("|", "\\|") for line in ratio_lines(r.output)) or "-"
        if r.status != 0:
            ratios = "none (the run failed)"
        lines.append(
            f"| `{r.script}` | `{script_command(r)}` | {status} | {r.seconds:.0f} | {ratios} |"
        )
    lines.append("")
    if plot is not None:
        lines += [f"![ratios of ours to the same-run baselines]({plot})", ""]
    for r in results:
        lines += [f"<details><summary>{r.script} output</summary>", "", "```", r.output.rstrip(),
                  "```", "", "</details>", ""]  # fmt: skip
    lines.append(END)
    return "\n".join(lines)


def write_region(path: Path, region: str) -> None:
    """Replace the bench region of ``path`` (or append one); the rest stays as it is."""
    text = path.read_text() if path.exists() else "# Performance\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + region + tail
    else:
        text = text.rstrip("\n") + "\n\n" + region + "\n"
    path.write_text(text)


def _plot(results: list[Result], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels, values = [], []
    for r in results:
        if r.status != 0:
            continue
        for line in ratio_lines(r.output):
            value = ratio_value(line)
            if value is not None and value > 0:
                labels.append(f"{r.script.removeprefix('bench_').removesuffix('.py')}: {line[:40]}")
                values.append(value)
    if not values:
        return False
    figure, axes = plt.subplots(figsize=(10, 0.35 * len(values) + 1.5))
    axes.barh(labels, values)
    axes.set_xscale("log")  # ratios span 0.05 .. 200: equal factors, equal lengths
    axes.axvline(1.0, color="grey", linewidth=1)
    axes.set_xlabel("ours / same-run raw baseline")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return True


async def _main(args: argparse.Namespace, out: TextIO) -> int:
    scripts = sorted(args.benchmarks.glob("bench_*.py"))
    if args.only:
        scripts = [s for s in scripts if s.name in set(args.only)]
        missing = set(args.only) - {s.name for s in scripts}
        if missing:
            print(f"zlink-trio bench: no such benchmark: {', '.join(sorted(missing))}",
                  file=sys.stderr)  # fmt: skip
            return 2
    if not scripts:
        print(f"zlink-trio bench: no benchmarks in {args.benchmarks} (run it from a checkout)",
              file=sys.stderr)  # fmt: skip
        return 2
    results = [await _run_one(script, args, out) for script in scripts]
    command = (
        "zlink-trio bench"
        + (" --quick" if args.quick else "")
        + "".join(f" --only {s}" for s in args.only or ())
        + (" -- " + " ".join(args.script_args) if args.script_args else "")
    )
    plotted = _plot(results, args.output.with_name("performance-ratios.png"))
    region = _region(results, command, "performance-ratios.png" if plotted else None)
    write_region(args.output, region)
    print(f"bench: wrote {args.output}" + (" and performance-ratios.png" if plotted else
          " (no plot: pip install 'zlink-trio[plot]')"), file=out)  # fmt: skip
    return 0 if all(r.status == 0 for r in results) else 1


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """The ``bench`` command."""
    return trio.run(_main, args, out if out is not None else sys.stdout)
