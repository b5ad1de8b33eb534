"""The one rule by which a nursery's ExceptionGroup leaves the runtime's context managers
(zlink_trio/_exceptions.py): Cancelled members do not count; one remaining member is
raised as itself; only Cancelled leaves a Cancelled; two real errors stay a group."""

from __future__ import annotations

from collections.abc import Callable

import trio
from hypothesis import given, strategies as st

from zlink_trio._exceptions import raise_single_error


class Boom(Exception):
    pass


def cancelled() -> trio.Cancelled:
    """A real Cancelled, caught from a cancelled scope."""

    async def capture() -> trio.Cancelled:
        with trio.CancelScope() as scope:
            scope.cancel()
            try:
                await trio.lowlevel.checkpoint()
            except trio.Cancelled as exc:
                return exc
        raise AssertionError("not cancelled")

    return trio.run(capture)


def boom(n: int = 0) -> Boom:
    """A Boom that already carries a context (which must survive the unwrapping)."""
    exc = Boom(n)
    exc.__context__ = LookupError(f"before {n}")
    return exc


def group(*members: BaseException) -> BaseExceptionGroup[BaseException]:
    return BaseExceptionGroup("nursery", list(members))


def outcome(g: BaseExceptionGroup[BaseException]) -> BaseException:
    """What leaves an ``except BaseExceptionGroup`` clause that calls the helper."""
    try:
        try:
            raise g
        except BaseExceptionGroup as caught:
            raise_single_error(caught)
    except BaseException as exc:
        return exc
    raise AssertionError("nothing raised")


def leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for member in exc.exceptions for leaf in leaves(member)]
    return [exc]


def is_cancelled(exc: BaseException) -> bool:
    return isinstance(exc, trio.Cancelled)


def test_a_group_of_one_error_raises_it_with_its_context() -> None:
    error = boom()
    before = error.__context__
    assert outcome(group(error)) is error
    assert error.__context__ is before


def test_a_group_of_one_cancelled_raises_it() -> None:
    c = cancelled()
    assert outcome(group(c)) is c


def test_a_group_of_only_cancelled_raises_the_first_cancelled() -> None:
    first, second, third = cancelled(), cancelled(), cancelled()
    assert outcome(group(group(first, second), third)) is first


def test_cancelled_plus_one_error_raises_the_error_with_the_cancelled_as_context() -> None:
    error, c1, c2 = boom(), cancelled(), cancelled()
    before = error.__context__
    raised = outcome(group(c1, group(c2), error))
    assert raised is error
    context = error.__context__
    assert isinstance(context, BaseExceptionGroup)
    assert leaves(context) == [c1, c2]
    assert context.__context__ is before  # the error's own chain is kept behind it


def test_cancelled_plus_keyboard_interrupt_raises_the_interrupt() -> None:
    interrupt = KeyboardInterrupt()
    assert outcome(group(cancelled(), interrupt)) is interrupt


def test_two_errors_stay_a_group_with_or_without_cancelled() -> None:
    for g in (group(boom(1), boom(2)), group(boom(1), cancelled(), boom(2))):
        assert outcome(g) is g


def test_a_nested_group_member_is_unwrapped_one_level_only() -> None:
    error = boom()
    inner = group(error)
    assert outcome(group(inner)) is inner  # the caller's nursery's group, not deeper
    raised = outcome(group(cancelled(), group(cancelled(), error)))
    assert isinstance(raised, BaseExceptionGroup)
    assert leaves(raised) == [error]


Leaf = Callable[[], BaseException]
LEAVES: st.SearchStrategy[Leaf] = st.sampled_from([cancelled, cancelled, boom])


def trees() -> st.SearchStrategy[list[object]]:
    """Nested lists of leaf factories: the shape of a nursery's group."""
    return st.lists(
        st.recursive(LEAVES, lambda inner: st.lists(inner, min_size=1, max_size=3), max_leaves=6),
        min_size=1,
        max_size=4,
    )


def build(shape: object) -> BaseException:
    if isinstance(shape, list):
        return group(*(build(part) for part in shape))
    assert callable(shape)
    return shape()  # type: ignore[no-any-return]


@given(trees())
def test_the_rule_on_any_tree(shape: list[object]) -> None:
    g = build(shape)
    assert isinstance(g, BaseExceptionGroup)
    real = [m for m in g.exceptions if not all(is_cancelled(x) for x in leaves(m))]
    all_cancelled = [x for x in leaves(g) if is_cancelled(x)]
    contexts = {id(x): x.__context__ for x in leaves(g)}
    raised = outcome(g)
    if not real:
        assert raised is all_cancelled[0]
        assert raised.__context__ is contexts[id(raised)]
    elif len(real) > 1:
        assert raised is g
    else:
        (member,) = real
        if isinstance(member, BaseExceptionGroup):
            assert isinstance(raised, BaseExceptionGroup)
            assert leaves(raised) == [x for x in leaves(member) if not is_cancelled(x)]
        else:
            assert raised is member
            if all_cancelled:
                context = raised.__context__
                assert isinstance(context, BaseExceptionGroup)
                assert leaves(context) == all_cancelled
                assert context.__context__ is contexts[id(member)]
            else:
                assert raised.__context__ is contexts[id(member)]
