"""Spots: Entry, User and Instance Spots (implementation package)."""
