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
def contract(session: nox.Session) -> None:
    """The contract tests (public surface, real TCP, websocket and PostgreSQL)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", "-n", "2", "tests/contract", *session.posargs)


@nox.session(python=PYTHON)
def faults(session: nox.Session) -> None:
    """The fault tests (real OS processes, SIGKILL, PostgreSQL restarts)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", "-n", "2", "tests/faults", *session.posargs)


@nox.session(python=PYTHON)
def property(session: nox.Session) -> None:
    """The property-based tests (hypothesis state machines and fuzzers)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", "-n", "2", "tests/property", *session.posargs)


@nox.session(python=PYTHON)
def e2e(session: nox.Session) -> None:
    """The demo command and the browser client in headless Chromium (needs the Debian
    packages chromium and chromium-driver; .ci/run installs them)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", "-n", "0", "tests/e2e", *session.posargs)


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """The README's main command: ``zlink-trio demo`` (extra args go to it)."""
    session.install("-e", ".")
    session.run("zlink-trio", "demo", *session.posargs)


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
    """Every benchmark (each printing its same-run raw baseline and the ratio last), written
    into docs/performance.md by ``zlink-trio bench`` (with the ratio plot)."""
    session.install("-e", ".[test,bench,plot]")
    session.run("zlink-trio", "bench", *session.posargs)
