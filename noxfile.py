"""nox sessions: each wraps the same commands CI runs (see .ci/run and README.md)."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.default_venv_backend = "venv"

PYTHON = "3.11"


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The whole test suite (README's test command). Extra args go to pytest."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", "-n", "2", *session.posargs)


@nox.session(python=PYTHON)
def tests_lowest(session: nox.Session) -> None:
    """The whole test suite with the runtime dependencies at the floors pyproject.toml
    declares (constraints-lowest.txt): the floors are claims, this checks them."""
    session.install("-c", "constraints-lowest.txt", "-e", ".[test]")
    session.run("python", "-m", "pytest", "-n", "2", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    session.install("ruff>=0.8")
    session.run("ruff", "check", "zlink_trio", "tests", "benchmarks", "noxfile.py")
    session.run("ruff", "format", "--check", "zlink_trio", "tests", "benchmarks", "noxfile.py")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    session.install("-e", ".[test]")
    session.run("mypy")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Every benchmark, each printing its same-run raw baseline and the ratio last."""
    session.install("-e", ".[test,bench]")
    for script in (
        "bench_engine.py",
        "bench_wire.py",
        "bench_mesh.py",
        "bench_actors.py",
        "bench_store_cas.py",
    ):
        session.run("python", f"benchmarks/{script}")
