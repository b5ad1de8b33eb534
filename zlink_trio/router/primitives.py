"""Plain JSON primitives: the only things that cross nodes (spec 10 §2, §5.5.2).

``Json`` is ``None | bool | int | float | str | list[Json] | dict[str, Json]``.
:func:`check_json` rejects anything else (a typed object in a payload is a silent no-op on a
real bus), and :func:`to_text` / :func:`from_text` are the one serialization every bus and
inbox backend uses. Numbers are read back as numbers: JSON turns ``3`` and ``3.0`` into
whichever it likes, so readers use :func:`read_int` / :func:`read_float`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TypeAlias

__all__ = ["Json", "JsonMap", "check_json", "from_text", "read_float", "read_int", "to_text"]

Json: TypeAlias = "bool | int | float | str | list[Json] | dict[str, Json] | None"
JsonMap: TypeAlias = "dict[str, Json]"


def check_json(value: object, where: str = "payload") -> Json:
    """Return a deep copy of ``value`` made of plain JSON primitives, or raise TypeError."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{where}: non-finite float {value!r} has no JSON form")
        return value
    if isinstance(value, list | tuple):
        return [check_json(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out: dict[str, Json] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{where}: key {k!r} is not a str")
            out[k] = check_json(v, f"{where}.{k}")
        return out
    raise TypeError(f"{where}: {type(value).__name__} is not a JSON primitive")


def check_json_map(value: object, where: str = "payload") -> JsonMap:
    checked = check_json(value, where)
    if not isinstance(checked, dict):
        raise TypeError(f"{where}: expected a mapping, got {type(value).__name__}")
    return checked


def to_text(value: Json) -> str:
    """Canonical JSON text: sorted keys, no whitespace, no NaN."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def from_text(text: str) -> Json:
    """Parse JSON text into plain primitives (dicts and lists, never typed objects)."""
    value: Json = json.loads(text)
    return value


def read_int(value: Json, where: str) -> int:
    """An integer that may have arrived as ``3`` or ``3.0``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where}: expected a number, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{where}: expected an integer, got {value!r}")
    return int(value)


def read_float(value: Json, where: str) -> float:
    """A number that may have arrived as an int or a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where}: expected a number, got {value!r}")
    return float(value)
