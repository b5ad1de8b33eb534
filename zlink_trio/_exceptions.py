"""Leaving a nursery with one error, not an ExceptionGroup of it.

Trio nurseries always raise an ``ExceptionGroup`` (strict groups). The runtime's context
managers (``open_server``, ``open_engine``, ``zlink_trio.testing.open_cluster``) promise
that one error leaves them as itself; :func:`raise_single_error` is the one rule they
share (docs/decisions.md, "One error leaves as itself"):

* ``trio.Cancelled`` members (at any depth, as :meth:`BaseExceptionGroup.split` finds
  them) do not count: they are the surrounding scope's cancellation, which an error
  supersedes.
* What remains has exactly one member: that member is raised. When Cancelled members
  were dropped, the member's ``__context__`` becomes the group of those Cancelled, whose
  own ``__context__`` is the member's previous context (nothing of the chain is lost).
  Otherwise the member's ``__context__`` is kept as it was.
* Nothing remains (only Cancelled): the first Cancelled is raised, its context kept, so
  the cancel scope it belongs to catches it as usual.
* Otherwise (two or more real errors): the group is raised unchanged.

Only the group the caller's nursery produced is unwrapped: a member that is itself a
group (from a nested nursery) is raised as that group (with its Cancelled removed, when
it had any).
"""

from __future__ import annotations

from typing import NoReturn

import trio

__all__ = ["raise_single_error", "single_error", "startup_failure"]


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


def single_error(
    group: BaseExceptionGroup[BaseException],
) -> tuple[BaseException, BaseException | None] | None:
    """The exception ``group`` stands for and the ``__context__`` it must carry, or None
    when the group stands for several errors (the module docstring gives the rule).

    Pure except for one thing: the split-off group of dropped Cancelled (a new object)
    gets the member's previous ``__context__``."""
    cancelled, rest = group.split(trio.Cancelled)
    if cancelled is None:
        rest = group  # split copies; with nothing dropped, raise the very members
    if rest is None:
        first = _first_leaf(group)
        return first, first.__context__
    if len(rest.exceptions) != 1:
        return None
    member = rest.exceptions[0]
    if cancelled is None:
        return member, member.__context__
    cancelled.__context__ = member.__context__
    return member, cancelled


def raise_single_error(group: BaseExceptionGroup[BaseException]) -> NoReturn:
    """Raise what ``group`` stands for: its one error, else the group itself.

    Call it from the ``except BaseExceptionGroup as group:`` clause around a nursery."""
    found = single_error(group)
    if found is None:
        raise group
    exc, context = found
    try:
        raise exc
    finally:
        exc.__context__ = context  # raising inside the handler set it to ``group``
        del exc, context, found


def startup_failure(
    exc: BaseException, expected: tuple[type[Exception], ...]
) -> BaseException | None:
    """What a command tells its user in one line when it cannot run: ``exc`` itself when it
    is one of the ``expected`` types (the commands pass ``ZLinkError`` and ``OSError``: an
    unreachable store, a taken port), or the first of those inside a group whose members
    are only such errors and ``trio.Cancelled``; None for anything else (a bug: its
    traceback is shown)."""
    if isinstance(exc, expected):
        return exc
    if not isinstance(exc, BaseExceptionGroup):
        return None
    found, rest = exc.split(expected)
    if found is None or (rest is not None and rest.split(trio.Cancelled)[1] is not None):
        return None
    return _first_leaf(found)
