"""Fixtures of the engine tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support import processes_mentioning


@pytest.fixture
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    """The test ends with no process that was started from its folder."""
    yield
    survivors = processes_mentioning(str(tmp_path))
    for proc in survivors:  # keep later tests clean even when this one failed
        proc.kill()
    assert survivors == []
