"""Re-export of :mod:`zlink_trio.objects.sinks` for the Actor message path (the messenger
and hosted Actors import their terminal sinks from here); new code imports from
``objects``."""

from __future__ import annotations

from ..objects.sinks import (
    LocalReply,
    LocalSink,
    RemoteSink,
    ReplySink,
    TerminalSink,
    decode_terminal,
    encode_terminal,
    failure,
    ok,
    public_error,
    raise_for_failure,
)

__all__ = [
    "LocalReply",
    "LocalSink",
    "RemoteSink",
    "ReplySink",
    "TerminalSink",
    "decode_terminal",
    "encode_terminal",
    "failure",
    "ok",
    "public_error",
    "raise_for_failure",
]
