"""docs/operations.md documents every tunable with its real default, and every flag of
`zlink-trio node` as a config key."""

from __future__ import annotations

import re
from pathlib import Path

import attrs

from zlink_trio.cli import build_parser
from zlink_trio.config import ServerConfig, StreamConfig

DOC = Path(__file__).parents[2] / "docs" / "operations.md"
ROW = re.compile(r"^\| `([a-z_]+)` \| `([^`]*)` \|", re.M)


def section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(title)
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def default_text(field: attrs.Attribute) -> str:  # type: ignore[type-arg]
    default = field.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        return f"{default.factory.__name__}()"  # type: ignore[attr-defined]
    return repr(default)


def test_every_tunable_with_its_default() -> None:
    text = section("## Every tunable")
    stream_at = text.index("`StreamConfig` (the STREAM")
    for cls, part in ((ServerConfig, text[:stream_at]), (StreamConfig, text[stream_at:])):
        documented = dict(ROW.findall(part))
        expected = {f.name: default_text(f) for f in attrs.fields(cls)}
        assert set(documented) == set(expected), (
            f"docs/operations.md: add/remove {cls.__name__} fields "
            f"{sorted(set(expected) ^ set(documented))}"
        )
        assert documented == expected


def test_every_node_flag_is_a_documented_key() -> None:
    commands = next(a for a in build_parser()._actions if a.dest == "command")
    node = commands.choices["node"]  # type: ignore[index]
    flags = {o for a in node._actions for o in a.option_strings if o.startswith("--")} - {"--help"}
    table = section("### Flags and config file keys")
    for flag in flags:
        assert f"`{flag}`" in table, flag
