"""The fluent Create / GetOrCreate call of every kind's manager (spec 04 §6.2, spec 06 §3):
options ``in_mesh``, ``request``, ``timeout`` and ``operation_id``, each at most once, then
one submit (``await call``). It holds its arguments; the manager that made it runs it."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Generic, Self, TypeVar, final

from ..errors import InvalidOperation
from ..ids import MeshName, OperationId, StableType
from .calls import FluentCall

__all__ = ["CreateCall"]

IdT = TypeVar("IdT")
R = TypeVar("R")


@final
class CreateCall(FluentCall[R], Generic[IdT, R]):
    """``create(...)`` / ``get_or_create(...)``: options ``in_mesh``, ``request``,
    ``timeout`` and ``operation_id``, each at most once, then one ``submit()``."""

    __slots__ = (
        "_exclusive",
        "_mesh",
        "_object_id",
        "_operation",
        "_request",
        "_run_with",
        "_type",
    )

    def __init__(
        self,
        run: Callable[[CreateCall[IdT, R], float], Coroutine[Any, Any, R]],
        object_id: IdT,
        stable_type: StableType,
        *,
        exclusive: bool,
        default_timeout: float,
    ) -> None:
        super().__init__(default_timeout)
        self._run_with = run
        self._object_id = object_id
        self._type = stable_type
        self._exclusive = exclusive
        self._mesh: MeshName | None = None
        self._request: bytes | None = None
        self._operation: OperationId | None = None

    @property
    def object_id(self) -> IdT:
        return self._object_id

    @property
    def stable_type(self) -> StableType:
        return self._type

    @property
    def exclusive(self) -> bool:
        return self._exclusive

    @property
    def mesh(self) -> MeshName | None:
        return self._mesh

    @property
    def creation_request(self) -> bytes | None:
        return self._request

    @property
    def operation(self) -> OperationId | None:
        return self._operation

    def in_mesh(self, mesh_name: str | MeshName) -> Self:
        """The mesh where the object is first placed (not part of its identity)."""
        bit = self._option("in_mesh")
        self._mesh = MeshName.parse(mesh_name)
        self._options |= bit
        return self

    def request(self, request: bytes) -> Self:
        """The encoded creation request (<= max_request_bytes, 1 MiB by default) given to
        the create callback (an Actor's: its Spot's OnCreateActor; a Spot's: its CREATE)."""
        bit = self._option("request")
        if not isinstance(request, bytes | bytearray | memoryview):
            raise InvalidOperation(f"request must be bytes, got {type(request).__name__}")
        self._request = bytes(request)
        self._options |= bit
        return self

    def operation_id(self, operation_id: OperationId) -> Self:
        """Re-submit an earlier operation: while its terminal record is retained (its
        deadline + 5 min) the result is that terminal, and nothing runs again."""
        bit = self._option("operation_id")
        if not isinstance(operation_id, OperationId):
            raise InvalidOperation("operation_id must be an OperationId")
        self._operation = operation_id
        self._options |= bit
        return self

    def _run(self, deadline: float) -> Coroutine[Any, Any, R]:
        return self._run_with(self, deadline)
