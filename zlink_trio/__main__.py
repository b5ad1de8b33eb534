"""``python -m zlink_trio``: the ``zlink-trio`` command."""

import sys

from .cli import main

sys.exit(main())
