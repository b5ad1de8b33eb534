"""Location Store: the protocol and its implementations."""
