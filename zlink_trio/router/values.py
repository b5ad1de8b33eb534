"""Request-side values: priority, user input (and its wire form), option maps, the
principal, :class:`SubmitRequest`, the input hash, the deployment mode (spec 10 §5.6, §9.2,
§9.3, §11)."""

from __future__ import annotations

import base64
import enum
import hashlib
import unicodedata
from collections.abc import Mapping
from typing import Any, TypeAlias

import attrs

from .ids import AgentRef, IdempotencyKey, SessionId
from .primitives import Json, JsonMap, check_json, from_text, to_text

__all__ = [
    "CompositeInput",
    "DeploymentMode",
    "DocumentInput",
    "ImageInput",
    "LiveSessionOptions",
    "OpenAttributes",
    "Principal",
    "Priority",
    "SubmitOptions",
    "SubmitRequest",
    "TextInput",
    "UserInput",
    "input_hash",
    "user_input_from_wire",
    "user_input_to_wire",
]


class Priority(enum.IntEnum):
    """``QueuedInputPriority`` (§9.3). The value is the sort ordinal: NOW first."""

    NOW = 0
    NEXT = 1
    LATER = 2


class DeploymentMode(enum.Enum):
    """§11.2: SINGLE_NODE fills missing SPIs in memory; DISTRIBUTED requires every SPI and a
    node id and fails at build otherwise (in-memory SPIs across nodes are a silent
    split-brain, §10.3)."""

    SINGLE_NODE = "single_node"
    DISTRIBUTED = "distributed"


# --- user input ---------------------------------------------------------------------------


def _str(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{attr.name}: expected str, got {type(value).__name__}")


def _bytes(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bytes):
        raise TypeError(f"{attr.name}: expected bytes, got {type(value).__name__}")


@attrs.frozen
class TextInput:
    """Plain text (``TextInput.of`` in the original; a ``str`` converts to this)."""

    text: str = attrs.field(validator=_str)

    def as_text(self) -> str:
        return self.text


@attrs.frozen
class ImageInput:
    media_type: str = attrs.field(validator=_str)
    data: bytes = attrs.field(validator=_bytes, repr=False)
    caption: str = attrs.field(default="", validator=_str)

    def as_text(self) -> str:
        return self.caption


@attrs.frozen
class DocumentInput:
    media_type: str = attrs.field(validator=_str)
    name: str = attrs.field(validator=_str)
    data: bytes = attrs.field(validator=_bytes, repr=False)

    def as_text(self) -> str:
        return ""


def _parts(value: object) -> tuple[TextInput | ImageInput | DocumentInput, ...]:
    parts = tuple(value) if isinstance(value, list | tuple) else ()
    if not parts or not all(isinstance(p, TextInput | ImageInput | DocumentInput) for p in parts):
        raise TypeError("CompositeInput: expected a non-empty sequence of single inputs")
    return parts


@attrs.frozen
class CompositeInput:
    """Several inputs in one turn (text with images or documents)."""

    parts: tuple[TextInput | ImageInput | DocumentInput, ...] = attrs.field(converter=_parts)

    def as_text(self) -> str:
        return "\n".join(t for t in (p.as_text() for p in self.parts) if t)


UserInput: TypeAlias = TextInput | ImageInput | DocumentInput | CompositeInput
"""What a user submits: text, image, document or a combination (§5.6)."""


def _encode_single(part: TextInput | ImageInput | DocumentInput) -> JsonMap:
    if isinstance(part, TextInput):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImageInput):
        return {
            "type": "image",
            "mediaType": part.media_type,
            "data": base64.b64encode(part.data).decode("ascii"),
            "caption": part.caption,
        }
    return {
        "type": "document",
        "mediaType": part.media_type,
        "name": part.name,
        "data": base64.b64encode(part.data).decode("ascii"),
    }


def _decode_single(m: Json) -> TextInput | ImageInput | DocumentInput:
    if not isinstance(m, dict):
        raise ValueError(f"userInputEncoded: expected an object, got {m!r}")
    kind = m.get("type")
    try:
        if kind == "text":
            return TextInput(str(m["text"]))
        if kind == "image":
            return ImageInput(
                str(m["mediaType"]), base64.b64decode(str(m["data"])), str(m.get("caption", ""))
            )
        if kind == "document":
            return DocumentInput(
                str(m["mediaType"]), str(m["name"]), base64.b64decode(str(m["data"]))
            )
    except KeyError as exc:
        raise ValueError(f"userInputEncoded: missing {exc}") from None
    raise ValueError(f"userInputEncoded: unknown part type {kind!r}")


def user_input_to_wire(value: UserInput) -> JsonMap:
    """The envelope keys of a user input (§5.6): ``userInput`` is always the text form (its
    spelling and type unchanged since it was a ``String``); only non-text input adds
    ``userInputEncoded``, so entries written by old and new builds read both ways."""
    out: JsonMap = {"userInput": value.as_text()}
    if isinstance(value, CompositeInput):
        out["userInputEncoded"] = {
            "type": "composite",
            "parts": [_encode_single(p) for p in value.parts],
        }
    elif not isinstance(value, TextInput):
        out["userInputEncoded"] = _encode_single(value)
    return out


def user_input_from_wire(fields: Mapping[str, Json]) -> UserInput:
    """Read the envelope keys back; an old entry with only ``userInput`` is text input."""
    encoded = fields.get("userInputEncoded")
    if encoded is None:
        text = fields.get("userInput")
        if not isinstance(text, str):
            raise ValueError(f"userInput: expected a string, got {text!r}")
        return TextInput(text)
    if isinstance(encoded, dict) and encoded.get("type") == "composite":
        parts = encoded.get("parts")
        if not isinstance(parts, list):
            raise ValueError("userInputEncoded: composite without parts")
        return CompositeInput(tuple(_decode_single(p) for p in parts))
    return _decode_single(encoded)


def _user_input(value: object) -> UserInput:
    if isinstance(value, str):
        return TextInput(value)
    if isinstance(value, TextInput | ImageInput | DocumentInput | CompositeInput):
        return value
    raise TypeError(f"user_input: expected a str or a UserInput, got {type(value).__name__}")


def input_hash(value: UserInput) -> str:
    """SHA-256 (hex) of the normalized input (§9.2), compared to detect key reuse.

    Normalization: every text is NFC-normalized with CRLF/CR line ends turned into LF, then
    the wire form is serialized as canonical JSON (sorted keys, no whitespace). Nothing
    else is normalized: leading/trailing space and case are part of the input.
    """

    def norm(text: str) -> str:
        return unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))

    def walk(v: Json) -> Json:
        if isinstance(v, str):
            return norm(v)
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v

    canonical = to_text(walk(user_input_to_wire(value)))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# --- option maps -----------------------------------------------------------------------------

Scalar: TypeAlias = bool | int | float | str | None


def _scalar_items(value: object) -> tuple[tuple[str, Scalar], ...]:
    if isinstance(value, tuple) and all(isinstance(i, tuple) and len(i) == 2 for i in value):
        value = dict(value)
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a mapping of primitives, got {type(value).__name__}")
    items: list[tuple[str, Scalar]] = []
    for k, v in value.items():
        if not isinstance(k, str):
            raise TypeError(f"option key {k!r} is not a str")
        if v is not None and not isinstance(v, bool | int | float | str):
            raise TypeError(f"option {k!r}: {type(v).__name__} is not a primitive")
        check_json(v, k)
        items.append((k, v))
    return tuple(sorted(items))


@attrs.frozen
class _ScalarMap:
    items: tuple[tuple[str, Scalar], ...] = attrs.field(default=(), converter=_scalar_items)

    def as_dict(self) -> dict[str, Scalar]:
        return dict(self.items)

    def get(self, key: str, default: Scalar = None) -> Scalar:
        return self.as_dict().get(key, default)


@attrs.frozen
class LiveSessionOptions(_ScalarMap):
    """Options used only when a handle is opened; ignored on a cache hit (§11.1)."""


@attrs.frozen
class SubmitOptions(_ScalarMap):
    """Per-turn metadata; reaches every turn (§11.1)."""


@attrs.frozen
class OpenAttributes(_ScalarMap):
    """Caller domain attributes (a tenant id, ...) given to the opener on a cache miss only."""


@attrs.frozen
class Principal:
    """Who initiated a submit; the router carries it and never authorizes (§1.2)."""

    name: str = attrs.field(validator=_str)


# --- SubmitRequest ---------------------------------------------------------------------------


def _discriminator(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise TypeError(f"context_discriminator: expected str, got {type(value).__name__}")
    if value == "" or any(c.isspace() for c in value) or ":" in value:
        raise ValueError(
            "context_discriminator: must be non-empty with no whitespace and no ':' "
            f"(AgentRuntimeId splits on ':'), got {value!r}"
        )


def _type(t: type) -> Any:
    return attrs.validators.instance_of(t)


def _opt(t: type) -> Any:
    return attrs.validators.optional(attrs.validators.instance_of(t))


@attrs.frozen(kw_only=True)
class SubmitRequest:
    """One submit (§11.1), immutable. ``session_id``, ``agent_ref`` and ``user_input`` are
    required; a ``str`` user input becomes :class:`TextInput`. Change a copy with
    ``attrs.evolve`` (the builder of the original).

    ``context_discriminator`` rejects an empty value, any whitespace and ``':'``.
    """

    session_id: SessionId = attrs.field(validator=_type(SessionId))
    agent_ref: AgentRef = attrs.field(validator=_type(AgentRef))
    user_input: UserInput = attrs.field(converter=_user_input)
    context_discriminator: str | None = attrs.field(default=None, validator=_discriminator)
    options: LiveSessionOptions = attrs.field(
        factory=LiveSessionOptions, validator=_type(LiveSessionOptions)
    )
    submit_options: SubmitOptions = attrs.field(
        factory=SubmitOptions, validator=_type(SubmitOptions)
    )
    open_attributes: OpenAttributes = attrs.field(
        factory=OpenAttributes, validator=_type(OpenAttributes)
    )
    idempotency_key: IdempotencyKey | None = attrs.field(
        default=None, validator=_opt(IdempotencyKey)
    )
    priority: Priority = attrs.field(default=Priority.NEXT, validator=_type(Priority))
    initiator: Principal | None = attrs.field(default=None, validator=_opt(Principal))

    def input_hash(self) -> str:
        return input_hash(self.user_input)


def json_roundtrip(value: Json) -> Json:
    """Serialize and parse back: what every cross-node value goes through."""
    return from_text(to_text(value))
