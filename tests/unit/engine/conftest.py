"""Engine test fixtures."""

from __future__ import annotations

import pytest
from engine_kit import Recorder


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()
