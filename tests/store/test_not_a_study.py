"""A database that holds no study is refused before Optuna can create its tables in it."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import optuna
import pytest
from sqlalchemy import create_engine, inspect
from support import fresh_postgres

from autotune.store import StorageError, StudyStore


def _foreign(path: Path) -> str:
    """Another application's SQLite file; returns its SHA-256."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER, body TEXT)")
        conn.execute("INSERT INTO notes VALUES (1, 'keep me')")
    conn.close()
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("create", [False, True])
def test_a_foreign_sqlite_file_is_refused_and_left_as_it_is(tmp_path: Path, create: bool) -> None:
    path = tmp_path / "app.db"
    digest = _foreign(path)
    with pytest.raises(StorageError, match=r"is not a study database \(it holds: notes\)"):
        StudyStore(f"sqlite:///{path}", create=create)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_an_empty_sqlite_file_becomes_a_store_but_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    with pytest.raises(StorageError, match=r"is not a study database \(it is empty\)"):
        StudyStore(f"sqlite:///{path}", create=False)
    assert path.stat().st_size == 0
    store = StudyStore(f"sqlite:///{path}")
    store.create_or_load("s1", ["maximize"], optuna.samplers.RandomSampler(seed=0))
    assert [s.name for s in StudyStore(f"sqlite:///{path}", create=False).studies()] == ["s1"]


def test_a_server_database_without_studies_is_not_read() -> None:
    with fresh_postgres() as url:
        with pytest.raises(StorageError, match="no study tables there"):
            StudyStore(url, create=False)
        engine = create_engine(url)
        try:
            assert inspect(engine).get_table_names() == []
        finally:
            engine.dispose()
