"""``zlink-trio bench``: run the benchmark suite and write ``docs/performance.md``.

::

    zlink-trio bench [--quick] [--only bench_wire.py ...] [--benchmarks benchmarks] \\
        [--output docs/performance.md] [--template FILE] [--timeout 900] [-- ARGS]
    zlink-trio bench --render [--output docs/performance.md] [--template FILE]

Run from a checkout (``benchmarks/`` is not part of the installed package). Each
``benchmarks/bench_*.py`` runs as its own process (``PYTHONPATH`` = the checkout); a line
every 10 s says which one runs and for how long. Every benchmark prints its same-run raw
baseline and the ratio of ours to it last. The whole file is generated: the template
(``zlink_trio/ops/performance_template.md``, the prose; :mod:`zlink_trio.ops.perfdoc`) is
rendered around the run's figures, each under the command that reproduces it (a script that
failed gives no figures). Next to it go ``performance-output.md`` (every script's whole
output), ``performance-run.json`` (the run, so that ``--render`` can render an edited template
again without running anything) and, with matplotlib (the ``plot`` extra),
``performance-ratios.png``. ``--quick`` gives each script short settings (:data:`QUICK`).

Exit status 0 when every script exited 0, 1 otherwise (the file is written either way, with
the failure shown), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import trio

from .perfdoc import (
    Result,
    Run,
    TemplateError,
    default_template,
    figures,
    load_run,
    ratio_lines,
    ratio_value,
    render,
    render_outputs,
    save_run,
    script_command,
)

__all__ = [
    "QUICK",
    "add_bench_parser",
    "ratio_lines",
    "ratio_value",
    "run",
    "script_command",
]

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


def add_bench_parser(commands: Any) -> None:
    bench = commands.add_parser("bench", help="run benchmarks/ and write docs/performance.md")
    bench.add_argument("--benchmarks", type=Path, default=Path("benchmarks"))
    bench.add_argument("--only", action="append", metavar="SCRIPT", help="repeatable")
    bench.add_argument("--output", type=Path, default=Path("docs/performance.md"))
    bench.add_argument(
        "--template", type=Path, default=None,
        help="the prose to render around the figures (default: the package's "
        "zlink_trio/ops/performance_template.md)",
    )  # fmt: skip
    bench.add_argument("--timeout", type=float, default=900.0, metavar="SECONDS")
    bench.add_argument(
        "--quick", action="store_true",
        help="short settings for every script (1 round of about 1 s; see QUICK)",
    )  # fmt: skip
    bench.add_argument(
        "--render", action="store_true",
        help="run nothing: render the template again around the run saved in "
        "performance-run.json next to --output",
    )  # fmt: skip
    bench.add_argument("script_args", nargs="*", help="arguments for every script, after --")


def _load() -> tuple[float, ...]:
    return tuple(os.getloadavg()) if hasattr(os, "getloadavg") else ()


def _arguments(script: Path, args: argparse.Namespace) -> tuple[str, ...]:
    quick = QUICK.get(script.name, ()) if args.quick else ()
    return (*quick, *args.script_args)


async def _run_one(script: Path, args: argparse.Namespace, out: TextIO) -> Result:
    env = {**os.environ, "PYTHONPATH": str(Path.cwd()), "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    load = _load()
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
    return Result(
        script.name, _arguments(script, args), status, seconds, text, load[0] if load else None
    )


def draw_plot(run: Run, path: Path) -> bool:
    """The run's ratios as bars on a log scale, one per figure, named by its tag (as in the
    tables); False without matplotlib or figures."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels, values = [], []
    for r in run.results:
        for f in figures(r):
            value = ratio_value(f.text)
            if value is not None and value > 0:
                labels.append(f"{f.tag}: {f.label[:80]}")
                values.append(value)
    if not values:
        return False
    figure, axes = plt.subplots(figsize=(13, 0.3 * len(values) + 1.5))
    rows = list(range(len(values)))[::-1]  # by position: equal labels stay separate bars
    axes.barh(rows, values)
    axes.set_yticks(rows, labels, fontsize=8)
    axes.set_ylim(-0.6, len(values) - 0.4)
    axes.set_xscale("log")  # ratios span 0.05 .. 200: equal factors, equal lengths
    axes.axvline(1.0, color="grey", linewidth=1)
    axes.set_xlabel("ours / same-run raw baseline (for a latency or a size, above 1 is costlier)")
    axes.set_title(f"{run.command}, {run.started} UTC")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return True


PLOT = "performance-ratios.png"
OUTPUTS = "performance-output.md"
RECORD = "performance-run.json"


def write_documents(run: Run, output: Path, template: str, plot: bool) -> None:
    """Render and write the document and the output file next to it (the template is
    rendered first, so a template error leaves the old files as they were)."""
    text = render(template, run, PLOT if plot else None, OUTPUTS)
    banner = (
        "<!-- Generated by `zlink-trio bench` from zlink_trio/ops/performance_template.md "
        "and the run in performance-run.json: edit the prose in the template, then "
        "`zlink-trio bench --render`. -->\n"
    )
    output.write_text(banner + text.rstrip("\n") + "\n")
    output.with_name(OUTPUTS).write_text(render_outputs(run))


def _template(args: argparse.Namespace) -> str:
    return args.template.read_text() if args.template is not None else default_template()


def _command(args: argparse.Namespace) -> str:
    return (
        "zlink-trio bench"
        + (" --quick" if args.quick else "")
        + "".join(f" --only {s}" for s in args.only or ())
        + (" -- " + " ".join(args.script_args) if args.script_args else "")
    )


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
    template = _template(args)
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    load_start = _load()
    results = tuple([await _run_one(script, args, out) for script in scripts])
    run = Run(_command(args), started, load_start, _load(), os.cpu_count() or 0, results)
    save_run(run, args.output.with_name(RECORD))
    plotted = draw_plot(run, args.output.with_name(PLOT))
    try:
        write_documents(run, args.output, template, plotted)
    except TemplateError as error:
        print(f"zlink-trio bench: the template does not fit this run: {error} "
              f"(the run is saved in {args.output.with_name(RECORD)}; fix the template and "
              "use --render)", file=sys.stderr)  # fmt: skip
        return 2
    print(f"bench: wrote {args.output}, {OUTPUTS}, {RECORD}" + (f" and {PLOT}" if plotted else
          " (no plot: pip install 'zlink-trio[plot]')"), file=out)  # fmt: skip
    return 0 if all(r.status == 0 for r in results) else 1


def _render(args: argparse.Namespace, out: TextIO) -> int:
    record = args.output.with_name(RECORD)
    if not record.exists():
        print(f"zlink-trio bench --render: no saved run ({record}); run zlink-trio bench first",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        run = load_run(record)
        template = _template(args)
        plotted = (
            draw_plot(run, args.output.with_name(PLOT)) or args.output.with_name(PLOT).exists()
        )
        write_documents(run, args.output, template, plotted)
    except (TemplateError, ValueError, KeyError) as error:
        print(f"zlink-trio bench --render: {error}", file=sys.stderr)
        return 2
    print(f"bench: rendered {args.output} from {record}", file=out)
    return 0


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """The ``bench`` command."""
    stream = out if out is not None else sys.stdout
    if args.render:
        return _render(args, stream)
    return trio.run(_main, args, stream)
