"""A store opened `read_only=True` reads every study and cannot write (every backend)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.store import StorageError, StudyStore


def test_a_read_only_store_reads_and_refuses_writes(storage_url: str) -> None:
    study, _ = StudyStore(storage_url).create_or_load(
        "s1", ["maximize"], optuna.samplers.RandomSampler(seed=0)
    )
    study.set_user_attr("model", "tiny")
    study.tell(study.ask(), [1.0])
    reader = StudyStore(storage_url, read_only=True)
    assert [s.name for s in reader.studies()] == ["s1"]
    assert [t.values for t in reader.trials("s1")] == [[1.0]]
    with pytest.raises(StorageError, match=r"read.?only"):
        reader.write_study_facts("s1", model="other")
    assert StudyStore(storage_url).load("s1").user_attrs == {"model": "tiny"}  # unchanged


def test_a_read_only_sqlite_path_may_hold_what_a_uri_quotes(tmp_path: Path) -> None:
    path = tmp_path / "a b#c&d=e" / "study.db"
    StudyStore(f"sqlite:///{path}").create_or_load(
        "s1", ["maximize"], optuna.samplers.RandomSampler()
    )
    assert [s.name for s in StudyStore(f"sqlite:///{path}", read_only=True).studies()] == ["s1"]


def test_read_only_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "study.db"
    with pytest.raises(StorageError, match="no study database at"):
        StudyStore(f"sqlite:///{path}", read_only=True)
    assert not path.parent.exists()
