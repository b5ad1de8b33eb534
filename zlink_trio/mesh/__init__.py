"""Implementation package; the public surface is re-exported from zlink_trio."""
