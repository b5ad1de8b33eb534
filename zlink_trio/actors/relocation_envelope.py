"""What a relocating Actor carries besides its relay: the object-kind-neutral
:class:`~zlink_trio.objects.relocation_envelope.RelocationEnvelope` (a Spot's move writes
the same envelope)."""

from __future__ import annotations

from ..objects.relocation_envelope import RelocationEnvelope

__all__ = ["RelocationEnvelope"]
