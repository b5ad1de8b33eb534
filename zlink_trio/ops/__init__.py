"""Operator commands of ``zlink-trio``: ``status`` (what the Location Store says) and
``cluster`` (N local node processes sharing one store)."""
