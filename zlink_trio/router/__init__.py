"""The sticky-less SessionRouter (spec 10), usable without the rest of zlink_trio.

Empty until the router issue lands. The package already exists so that its import contract
(``pyproject.toml``, ``[tool.importlinter]``: it may import only ``zlink_trio.ids``,
``zlink_trio.errors`` and ``zlink_trio.config``) holds from its first line of code.
"""
