"""``zlink-trio demo``: a small multiplayer room application on a three-node cluster, driven
by scripted clients, with a live view and a summary whose invariants decide the exit status
(docs/getting-started.md)."""
