"""Routing (implementation package): the positive route cache, message delivery to an
object's current owner (:mod:`.deliver`, one component with an adapter per target kind)
and, later, Message Follow."""
