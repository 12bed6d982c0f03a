"""The study-store backends every contract test runs against."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from autotune.store import StudyStore

POSTGRES_ENV = "AUTOTUNE_TEST_POSTGRES_URL"


def _sqlite(tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'studies' / 'study.db'}"


def _postgres(tmp_path: Path) -> Iterator[str]:
    """A fresh schema-free database per test: tables of an earlier test would leak studies."""
    base = os.environ.get(POSTGRES_ENV)
    if not base:
        pytest.skip(f"set {POSTGRES_ENV} to run the PostgreSQL backend")
    name = f"autotune_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield base.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


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
