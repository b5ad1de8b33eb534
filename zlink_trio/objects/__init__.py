"""The shared object layer: the lifecycle machinery every object kind uses.

Actors, User Spots and Instance Spots (``store.api.ObjectKind``) are created, replayed,
reclaimed and destroyed the same way (spec 04 §6, spec 06 §3–§4, §7); only what an object
*is* differs. This package holds the part that does not differ, generic over the kind's
id type (``ActorId``, ``SpotId``), its result type and the command that carries the
operation (110 for an Actor create today; 47, 48 and 39 for Spots next):

* :mod:`.authority` — every read of an authority row, teaching the positive route cache
  (``Authority[IdT]``, given the kind's ``id → ObjectKey``);
* :mod:`.create_source` — Create / GetOrCreate convergence on the caller's node: resolve,
  placement, the Store reservation CAS, waiting out someone else's Creating row, the
  durable drive of the attempt and giving the reservation back on every exit without a
  terminal;
* :mod:`.create_target` — the attempt on the reserved owner: retained terminal, fence
  check, the creation request read from the Store, staging, Ready commit or abort, each
  with its terminal record (``run_reserved`` is the part after the reservation, for a kind
  whose target reserves itself: an Instance Spot's cold activation);
* :mod:`.durable` — replay of a durable operation under one OperationId until its terminal;
* :mod:`.reclaim` — give-back of reservations (inline, background, orphan backstop);
* :mod:`.placement` — Object mesh selection and weighted placement by the kind's types;
* :mod:`.results` — ``Existing`` / ``Created`` / ``Rejected`` shapes, generic over the ref;
* :mod:`.sinks` — terminal sinks (local and command 20) and terminal records;
* :mod:`.destroy` — one destroy per incarnation in the runtime's nursery, and the Store
  step (Closing then release) every kind shares.

What a kind adapter must provide
--------------------------------
A kind plugs in through the protocols of :mod:`.kind` (``actors/kind.py`` and
``actors/destroy.py`` are the Actor's; ``tests/unit/objects/test_generic_create.py``
drives a User Spot kind built only from this package):

``SourceKind[IdT, ResultT]`` (the caller side)
    ``kind`` — its :class:`~zlink_trio.store.api.ObjectKind` (reservations, the
    TypeMismatch check, placement by ``actor_types`` / ``spot_types`` /
    ``instance_types``, error nouns); ``key(id)`` — the Store key; ``membership(descriptor)``
    — what a reservation on that node records as membership (an Actor's Entry Spot, None
    for a Spot); ``existing(row)`` and ``outcome(create_tail)`` — the caller's result values
    (``Existing`` for a Ready row found, and what an OK create terminal names);
    ``record(order)`` — the wire command that carries a :class:`~.kind.CreateOrder` to a
    remote target (``correlation=0``; the mesh stamps its own).

``TargetKind[IdT]`` (the owner side)
    ``refuse(order, row)`` — why this node cannot build that type at all (checked before
    the creation request is read); ``begin(order, row, request)`` — a
    :class:`~.kind.Staging` for the attempt, or the error that fails it. The staging's
    ``stage(deadline)`` runs the factory and the approval (``Commit(reply)`` /
    ``Refuse(reply)``; raising fails the attempt; the deadline cancels it),
    ``publish(committed_row)`` makes the object reachable after its Ready commit, and
    ``end()`` releases what staging held, published or not. The inbound handler of the
    kind's create command turns the record into a ``CreateOrder`` and calls
    ``CreateTarget.handle(order, sink)``.

``DestroyKind[IdT, HostedT]`` (destroy, :mod:`.destroy`)
    ``hosted(id)``, ``generation(hosted)``, ``in_own_turn(id)`` and
    ``destroy(hosted, release)`` — the kind's transaction around the shared Store step
    ``await release(fresh=...)`` (:class:`~.destroy.ReleaseOutcome`).

The runtime that owns a kind constructs one ``Authority``, one ``Reclaimer`` and the
``CreateSource`` / ``CreateTarget`` / ``Destroyer`` with its nursery: every task they start
(attempts, destroys, background give-backs) belongs to that nursery.

This package imports nothing from ``actors``, ``spots`` or ``app``.
"""
