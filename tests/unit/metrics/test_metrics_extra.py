"""Without the `metrics` extra, importing `zlink_trio.metrics` says which extra to install
(a newcomer following docs/embedding.md after the README's plain install)."""

from __future__ import annotations

import subprocess
import sys


def test_importing_metrics_without_prometheus_client_names_the_extra() -> None:
    blocked = (
        "import sys\n"
        "sys.modules['prometheus_client'] = None  # as if it were not installed\n"
        "import zlink_trio.metrics\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocked], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: zlink_trio.metrics needs the metrics extra: "), last
    assert "pip install 'zlink-trio[metrics]'" in last
