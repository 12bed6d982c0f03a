"""Recorded device-tool outputs (see tests/fixtures/smi/SOURCES.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

SMI_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "smi"


@pytest.fixture
def smi_text() -> Callable[[str], str]:
    """The text of a recorded output, by file name."""
    return lambda name: (SMI_FIXTURES / name).read_text()
