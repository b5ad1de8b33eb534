"""`zlink-trio bench`: runs each benchmark script as a process and writes its ratio lines
and output into the marked region of the performance document, keeping the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from zlink_trio.cli import main
from zlink_trio.ops.bench import BEGIN, END, QUICK, ratio_lines, ratio_value


def scripts(where: Path) -> Path:
    bench = where / "benchmarks"
    bench.mkdir()
    (bench / "bench_fast.py").write_text(
        "print('raw baseline: 1000 ops/s')\nprint('ours: 800 ops/s')\n"
        "print('ratio ours/raw: 0.80')\n"
    )
    (bench / "bench_broken.py").write_text(
        "import sys\nprint('ratio ours/raw: 1.5')\nsys.exit(3)\n"
    )
    (bench / "helper.py").write_text("raise SystemExit('not a benchmark')\n")
    return bench


def test_bench_writes_the_region_and_keeps_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = scripts(tmp_path)
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\nhand-written analysis\n")
    argv = ["bench", "--benchmarks", str(bench), "--output", str(doc)]
    assert main(argv) == 1  # bench_broken exits 3
    text = doc.read_text()
    assert text.startswith("# Performance\n\nhand-written analysis\n")
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    assert "ratio ours/raw: 0.80" in text
    assert (
        "| `bench_broken.py` | `PYTHONPATH=$PWD python benchmarks/bench_broken.py` | exit 3 |"
        in text
    )
    broken_row = next(line for line in text.splitlines() if line.startswith("| `bench_broken"))
    assert "1.5" not in broken_row and "none (the run failed)" in broken_row  # no figures
    assert "| `PYTHONPATH=$PWD python benchmarks/bench_fast.py` | ok |" in text
    assert "raw baseline: 1000 ops/s" in text  # the whole output is kept
    assert "helper.py" not in text
    assert "bench: running bench_fast.py" in capsys.readouterr().out

    (bench / "bench_broken.py").unlink()
    assert main(argv) == 0
    again = doc.read_text()
    assert again.count(BEGIN) == 1 and "bench_broken" not in again
    assert "hand-written analysis" in again


def test_bench_only_names_existing_scripts(tmp_path: Path) -> None:
    bench = scripts(tmp_path)
    argv = ["bench", "--benchmarks", str(bench), "--output", str(tmp_path / "p.md")]
    assert main([*argv, "--only", "bench_nope.py"]) == 2
    assert main([*argv, "--only", "bench_fast.py"]) == 0
    assert "bench_broken" not in (tmp_path / "p.md").read_text()


def test_bench_quick_gives_each_script_its_short_settings(tmp_path: Path) -> None:
    """`--quick`: a script gets its own short settings (QUICK), then the arguments after
    `--`; the row's command shows both."""
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "bench_wire.py").write_text(
        "import sys\nprint('args', sys.argv[1:])\nprint('ratio ours/raw: 0.50')\n"
    )
    doc = tmp_path / "p.md"
    argv = ["bench", "--benchmarks", str(bench), "--output", str(doc), "--quick", "--", "-x"]
    assert main(argv) == 0
    text = doc.read_text()
    quick = " ".join(QUICK["bench_wire.py"])
    assert f"`PYTHONPATH=$PWD python benchmarks/bench_wire.py {quick} -x`" in text
    assert f"args {[*QUICK['bench_wire.py'], '-x']}" in text
    assert "Produced by `zlink-trio bench --quick -- -x`" in text


def test_a_ratio_line_gets_its_scenario_name_from_the_line_before() -> None:
    output = "cross-node request, 2nd process:\n     172/s  raw 449/s  ratio 0.38\nratio 1.0\n"
    assert ratio_lines(output) == [
        "cross-node request, 2nd process: 172/s  raw 449/s  ratio 0.38",
        "ratio 1.0",
    ]


@pytest.mark.parametrize(
    ("line", "value"),
    [
        ("local send     43,591/s  raw  23,384/s  ratio  1.86", 1.86),
        ("ratio p99 ours / baseline    1.07", 1.07),
        ("raw   1 task  109 ops/s  8 tasks  429 ops/s  ratio 0.71 / 1.95", 0.71),
        ("PostgresLocationStore  1 task  463 ops/s  ratio to raw asyncpg 3.43 / 1.80", 3.43),
        ("echo  457/s (  362 us) \\| ratio 0.50", 0.50),
        ("p50 / p95 / p99 in ms; original = JVM on Redis; ratio = our p50 / raw NOTIFY p50", None),
        ("engine vs raw trio; the ratio (lane / same-run baseline) is LAST on each line", None),
        ("ratio = store / raw asyncpg of the same round (target >= 0.80)", None),
    ],
)
def test_the_plot_reads_the_ratio_a_line_states(line: str, value: float | None) -> None:
    assert ratio_value(line) == value
