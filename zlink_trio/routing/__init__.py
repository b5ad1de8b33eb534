"""Route cache and Message Follow (implementation package)."""
