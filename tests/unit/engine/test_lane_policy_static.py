"""Spec 02 §11 static check: the lane policy types cannot express a combination outside
the lane table, and transitions only apply to the lane kind they belong to.

Each snippet below is type-checked by ``mypy --strict`` (one run over all of them, with
the repository on ``MYPYPATH``). Every misuse snippet must be rejected on the line marked
``# E``, and the correct snippet must pass.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import attrs
import pytest

REPO = Path(__file__).resolve().parents[3]

HEADER = """\
from __future__ import annotations
from zlink_trio.engine import (
    ActorDeliveryLane, AwaitingReturn, ConnectionClosed, Lane, Open, RelocationSealed,
    SessionLane, SpotLane, close_connection, lend_turn, return_turn, seal, unseal,
)
"""

MISUSES: dict[str, str] = {
    "session_lane_relocation_sealed": """
        policy = SessionLane(state=RelocationSealed("r1"))  # E
    """,
    "session_lane_awaiting_return": """
        policy = SessionLane(state=AwaitingReturn())  # E
    """,
    "spot_lane_connection_closed": """
        policy = SpotLane(state=ConnectionClosed())  # E
    """,
    "actor_delivery_lane_with_a_state": """
        policy = ActorDeliveryLane(state=Open())  # E
    """,
    "actor_delivery_lane_has_no_state_to_read": """
        def state_of(policy: ActorDeliveryLane) -> object:
            return policy.state  # E
    """,
    "seal_a_session_lane": """
        policy = seal(SessionLane(), "r1")  # E
    """,
    "seal_an_actor_delivery_lane": """
        policy = seal(ActorDeliveryLane(), "r1")  # E
    """,
    "unseal_a_session_lane": """
        policy = unseal(SessionLane(), "r1")  # E
    """,
    "lend_the_turn_of_a_session_lane": """
        policy = lend_turn(SessionLane())  # E
    """,
    "return_the_turn_of_an_actor_delivery_lane": """
        policy = return_turn(ActorDeliveryLane())  # E
    """,
    "close_the_connection_of_a_spot_lane": """
        policy = close_connection(SpotLane())  # E
    """,
    "transition_result_is_still_a_spot_lane": """
        policy: SessionLane = seal(SpotLane(), "r1")  # E
    """,
    "policies_are_frozen": """
        policy = SessionLane()
        policy.state = ConnectionClosed()  # E
    """,
    "lane_seal_on_a_session_lane": """
        def go(lane: Lane[SessionLane, int]) -> None:
            lane.seal("r1")  # E
    """,
    "lane_close_connection_on_a_spot_lane": """
        def go(lane: Lane[SpotLane, int]) -> None:
            lane.close_connection()  # E
    """,
    "lane_take_held_on_an_actor_delivery_lane": """
        def go(lane: Lane[ActorDeliveryLane, int]) -> None:
            lane.take_held()  # E
    """,
    "lane_lend_turn_on_a_session_lane": """
        def go(lane: Lane[SessionLane, int]) -> None:
            lane.lend_turn()  # E
    """,
    "lane_item_type_is_checked": """
        def go(lane: Lane[ActorDeliveryLane, int]) -> None:
            lane.submit_nowait("not an int")  # E
    """,
}

CORRECT = """
    from zlink_trio.engine import Engine, SessionLaneState, SpotLaneState

    def spot_states(relocation_id: str) -> list[SpotLaneState]:
        open_ = SpotLane()
        sealed = seal(open_, relocation_id)
        back = unseal(sealed, relocation_id)
        lent = lend_turn(back)
        returned = return_turn(lent)
        return [open_.state, sealed.state, lent.state, returned.state]

    def session_states() -> list[SessionLaneState]:
        return [SessionLane().state, close_connection(SessionLane()).state]

    def describe(state: SpotLaneState) -> str:
        match state:
            case Open():
                return "open"
            case AwaitingReturn():
                return "awaiting return"
            case RelocationSealed(relocation_id=rid):
                return f"sealed {rid!r}"

    async def handle(item: int) -> None:
        pass

    def lanes(engine: Engine) -> None:
        spot = engine.new_lane(SpotLane(), handle)
        spot.seal("r1")
        spot.take_held()
        spot.unseal("r1")
        spot.lend_turn()
        spot.return_turn()
        session = engine.new_lane(SessionLane(), handle, on_drop=print)
        session.close_connection()
        actor = engine.new_lane(ActorDeliveryLane(), handle, gate=engine.new_gate())
        actor.submit_nowait(1, lifecycle=True)
        actor.close()
"""

ERROR_LINE = re.compile(r"^(?P<file>[^:]+\.py):(?P<line>\d+): error: ")


def _source(body: str) -> str:
    return HEADER + textwrap.dedent(body)


def _marked_lines(source: str) -> set[int]:
    return {n for n, line in enumerate(source.splitlines(), 1) if line.endswith("# E")}


@attrs.frozen
class MypyRun:
    errors: dict[str, set[int]]
    """Snippet name -> lines mypy reported an error on."""
    output: str


@pytest.fixture(scope="module")
def mypy_run(tmp_path_factory: pytest.TempPathFactory) -> MypyRun:
    """Run mypy once over every snippet."""
    root = tmp_path_factory.mktemp("lane_policy_snippets")
    for name, body in [*MISUSES.items(), ("correct", CORRECT)]:
        (root / f"{name}.py").write_text(_source(body))
    env = dict(os.environ, MYPYPATH=str(REPO))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--show-error-codes",
            "--cache-dir",
            str(REPO / ".mypy_cache" / "lane_policy_static"),
            *sorted(str(p.name) for p in root.glob("*.py")),
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert "[import" not in proc.stdout, proc.stdout  # snippets must see zlink_trio.engine
    errors: dict[str, set[int]] = {}
    for line in proc.stdout.splitlines():
        match = ERROR_LINE.match(line)
        if match:
            errors.setdefault(Path(match["file"]).stem, set()).add(int(match["line"]))
    return MypyRun(errors, proc.stdout)


@pytest.mark.parametrize("name", sorted(MISUSES))
def test_misuse_is_rejected_by_the_type_checker(name: str, mypy_run: MypyRun) -> None:
    expected = _marked_lines(_source(MISUSES[name]))
    assert expected, "snippet lacks its '# E' marker"
    found = mypy_run.errors.get(name, set())
    assert expected <= found, (
        f"mypy accepted {name}: errors on lines {sorted(found)}, expected {sorted(expected)}\n"
        + mypy_run.output
    )


def test_correct_use_type_checks(mypy_run: MypyRun) -> None:
    assert "correct" not in mypy_run.errors, mypy_run.output
