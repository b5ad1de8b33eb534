"""``server.relocate`` of a Spot (spec 06 §6, §6.1, §8; docs/relocation.md, "Spots").

The checks shared with the Actor relocation run here for a Spot hosted on this node: it
must be Ready here, its type's policy must allow a move (DisableRelocation refuses) and
the target must be another node. The move itself (seal, capture, restore, target-only
CAS, Message Follow; a SpotWide User Spot with its members in one aggregate commit) is not
built yet: a Spot that passes the checks is refused with NotConfigured, and stays Ready
here, untouched.
"""

from __future__ import annotations

from typing import NoReturn

from ..errors import NotConfigured, NotFound
from ..ids import NodeRid, SpotId
from ..objects.relocation import refuse_unless_relocatable
from .host import SpotHost

__all__ = ["relocate_spot"]


async def relocate_spot(host: SpotHost, spot_id: SpotId, to: NodeRid, me: NodeRid) -> NoReturn:
    """Refuse the relocation of the Spot ``spot_id`` (see the module docstring).

    Raises:
        NotFound: the Spot is not hosted (Ready) on this node.
        InvalidOperation: its type is DisableRelocation, or ``to`` is this node.
        NotConfigured: the Spot could move, but Spot relocation is not built yet.
    """
    hosted = host.ready(spot_id)
    if hosted is None:
        raise NotFound(f"spot {spot_id.value!r} is not hosted (Ready) on this node")
    spot_type = hosted.spot_type
    refuse_unless_relocatable(spot_type.relocation, "spot", spot_type.stable_type, to=to, me=me)
    raise NotConfigured(
        f"spot {spot_id.value!r}: Spot relocation is not built yet "
        "(only Actors move; the Spot stays here, untouched)"
    )
