"""Renders the record layouts of docs/wire.md from the records' wire metadata.

Regenerate after a layout change with::

    python tests/unit/wire/wire_layout_doc.py

and paste the output between the ``<!-- layouts -->`` markers of docs/wire.md (the test
``test_wire_docs.py`` fails until the doc matches).
"""

from __future__ import annotations

from typing import Any

from zlink_trio.wire import ALL_RECORDS
from zlink_trio.wire.fields import FieldType, IntEnumField, Nullable
from zlink_trio.wire.nested import ListOf, Nested, TaggedUnion


def _type_name(ftype: FieldType, parts: dict[str, Any]) -> str:
    if isinstance(ftype, IntEnumField):
        parts.setdefault(f"enum {ftype.cls.__name__}", ftype.cls)
        return f"enum `{ftype.cls.__name__}`"
    if isinstance(ftype, Nullable):
        return f"optional {_type_name(ftype.inner, parts)}"
    if isinstance(ftype, ListOf):
        return f"list (at most {ftype.max_items}) of {_type_name(ftype.inner, parts)}"
    if isinstance(ftype, Nested):
        parts.setdefault(ftype.cls.__name__, ftype)
        return f"`{ftype.cls.__name__}`"
    if isinstance(ftype, TaggedUnion):
        names = []
        for cls in ftype.variants:
            parts.setdefault(cls.__name__, Nested(cls, prefix=cls.TAG))
            names.append(f"{cls.TAG} `{cls.__name__}`")
        return "tagged union: " + " \\| ".join(names)
    return ftype.name


def _fields(nested: Nested, parts: dict[str, Any]) -> list[str]:
    start = 0 if nested.prefix is None else 1
    return [
        f"| {i} | `{name}` | {_type_name(ftype, parts)} |"
        for i, (name, ftype) in enumerate(zip(nested.names, nested.types, strict=True), start)
    ]


def render_layouts() -> str:
    lines: list[str] = []
    parts: dict[str, Any] = {}
    for cls in sorted(ALL_RECORDS, key=lambda c: int(c.COMMAND)):
        nested = Nested(cls, prefix=int(cls.COMMAND))
        lines += [
            f"#### {int(cls.COMMAND)} `{cls.COMMAND.name}` (`{cls.__name__}`)",
            "",
            "| # | field | wire type |",
            "|---|---|---|",
            f"| 0 | command | {int(cls.COMMAND)} |",
            *_fields(nested, parts),
            "",
        ]
    lines += ["### Nested parts", ""]
    done: set[str] = set()
    while len(done) < len(parts):
        for name in sorted(set(parts) - done):
            nested = parts[name]
            done.add(name)
            if not isinstance(nested, Nested):
                continue
            head = "" if nested.prefix is None else f" (tag {nested.prefix})"
            lines += [
                f"#### `{name}`{head}",
                "",
                "| # | field | wire type |",
                "|---|---|---|",
                *([f"| 0 | tag | {nested.prefix} |"] if nested.prefix is not None else []),
                *_fields(nested, parts),
                "",
            ]
    lines += ["### Enumerations", ""]
    for name in sorted(n for n in parts if n.startswith("enum ")):
        members = ", ".join(f"{m.name} = {int(m)}" for m in parts[name])
        lines.append(f"- `{parts[name].__name__}`: {members}")
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    print(render_layouts(), end="")
