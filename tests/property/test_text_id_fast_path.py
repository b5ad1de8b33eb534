"""``ids.check_text_id``'s ASCII fast path accepts and refuses exactly what the general
path (UTF-8 length of any ``str`` or UTF-8 ``bytes``) does, with the same message."""

from __future__ import annotations

from hypothesis import given, strategies as st

from zlink_trio.ids import MAX_ID_BYTES, InvalidId, check_text_id


def _reference(value: object, what: str) -> str:
    """The general path alone (no fast path): the validation as it was."""
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            value = bytes(value).decode("utf-8", errors="strict")
        except UnicodeDecodeError:
            raise InvalidId(f"{what}: not valid UTF-8") from None
    if not isinstance(value, str):
        raise InvalidId(f"{what}: expected str, got {type(value).__name__}")
    try:
        n = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidId("not valid UTF-8 (lone surrogate)") from None
    if n == 0:
        raise InvalidId(f"{what}: empty")
    if n > MAX_ID_BYTES:
        raise InvalidId(f"{what}: {n} bytes, the limit is {MAX_ID_BYTES}")
    return value


def _outcome(check: object, value: object) -> tuple[str, object]:
    try:
        return "ok", check(value, "packet name")  # type: ignore[operator]
    except InvalidId as exc:
        return "refused", str(exc)


_TEXT = st.one_of(
    st.text(alphabet=st.characters(max_codepoint=127), max_size=MAX_ID_BYTES + 4),
    st.text(max_size=MAX_ID_BYTES + 4),  # any code point, lone surrogates included
    st.just("x" * MAX_ID_BYTES),
    st.just("x" * (MAX_ID_BYTES + 1)),
    st.just("é" * (MAX_ID_BYTES // 2 + 1)),
)
_VALUES = st.one_of(
    _TEXT,
    st.binary(max_size=MAX_ID_BYTES + 4),
    _TEXT.map(lambda text: text.encode("utf-8", errors="surrogatepass")),
    st.integers(),
    st.none(),
)


@given(_VALUES)
def test_the_fast_path_agrees_with_the_general_path(value: object) -> None:
    assert _outcome(check_text_id, value) == _outcome(_reference, value)
