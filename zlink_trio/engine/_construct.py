"""A metaclass for classes that only their factory may instantiate (trio's pattern)."""

from __future__ import annotations

from abc import ABCMeta
from typing import Any, NoReturn, TypeVar

__all__ = ["NoPublicConstructor"]

C = TypeVar("C")


class NoPublicConstructor(ABCMeta):
    """``Cls(...)`` raises TypeError; the owning factory calls ``Cls._create(...)``.

    Use with ``@final``.
    """

    def __call__(cls, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(f"{cls.__module__}.{cls.__qualname__} has no public constructor")

    def _create(cls: type[C], *args: Any, **kwargs: Any) -> C:
        return super().__call__(*args, **kwargs)  # type: ignore[misc, no-any-return]
