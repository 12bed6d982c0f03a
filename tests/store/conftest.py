"""The study-store backends every contract test runs against."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import fresh_postgres

from autotune.store import StudyStore


def _sqlite(tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'studies' / 'study.db'}"


def _postgres(tmp_path: Path) -> Iterator[str]:
    """A fresh schema-free database per test: tables of an earlier test would leak studies."""
    with fresh_postgres() as url:
        yield url


# One line per backend: name -> generator of a fresh, empty storage URL.
BACKENDS: dict[str, Callable[[Path], Iterator[str]]] = {
    "sqlite": _sqlite,
    "postgresql": _postgres,
}


@pytest.fixture(params=sorted(BACKENDS))
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from BACKENDS[request.param](tmp_path)


@pytest.fixture
def store(storage_url: str) -> StudyStore:
    return StudyStore(storage_url)
