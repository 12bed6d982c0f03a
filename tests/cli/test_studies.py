"""`autotune studies` (its listing as a process): a line per study, files that are no study database
skipped, and no database ever written."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from support import Ran

from autotune.answer.export import choose_export
from autotune.store import StudyStore
from autotune.vocab.numbers import readable

if TYPE_CHECKING:
    from tests.cli.conftest import Tuned


def autotune(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autotune", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def digests(root: Path) -> dict[str, str]:
    """Every file under `root` by its bytes (a journal or WAL file left behind shows too)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_studies_lists_each_study_and_skips_other_files(tuned: Tuned, tmp_path: Path) -> None:
    root = tmp_path / "studies"
    for name in ("b-copy", "a-copy"):
        (root / name).mkdir(parents=True)
        shutil.copy(tuned.root / tuned.study / "study.db", root / name / "study.db")
    (root / "junk").mkdir()
    (root / "junk" / "study.db").write_text("not a database")
    (root / "other").mkdir()
    with sqlite3.connect(root / "other" / "study.db") as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    (root / "empty").mkdir()  # a folder without a study.db: not looked at
    before = digests(root)

    result = autotune("studies", "--root", root)
    assert result.returncode == 0, result.stderr
    assert digests(root) == before  # nothing written, not even a journal

    store = StudyStore(f"sqlite:///{root / 'a-copy' / 'study.db'}", create=False)
    # The trial `export` writes: one answer in every view.
    best = choose_export(store.trials(tuned.study), store.study_facts(tuned.study))[0]
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["study", "measured", "winner", "out", "tok/s", "created"]
    body = [line.split() for line in lines[1:]]
    assert len(body) == 2 and all(row[0] == tuned.study for row in body)  # each copy: s1
    for row in body:
        assert row[1] == "3/3"
        assert row[2] == readable(best.metric("output_throughput"))  # e.g. 667.8, 1,234
        assert row[3:5] == ["(trial", f"{best.number})"]
        assert row[5].startswith("20") and len(row[5]) == 10  # the created date
    skipped = result.stderr.splitlines()
    assert len(skipped) == 2, result.stderr
    assert skipped[0].startswith(f"skipped {root / 'junk' / 'study.db'}: not an autotune")
    assert "file is not a database" in skipped[0]
    assert skipped[1].startswith(f"skipped {root / 'other' / 'study.db'}: not an autotune")


def test_studies_of_one_storage_url(
    tuned: Tuned, tmp_path: Path, autotune_here: Callable[..., Ran]
) -> None:
    db = tmp_path / "copy.db"
    shutil.copy(tuned.root / tuned.study / "study.db", db)
    before = db.read_bytes()
    result = autotune_here("studies", "--storage", f"sqlite:///{db}")
    assert result.returncode == 0, result.stderr
    assert [line.split()[:2] for line in result.stdout.splitlines()[1:]] == [["s1", "3/3"]]
    assert db.read_bytes() == before and sorted(tmp_path.iterdir()) == [db]


def test_studies_bad_input_is_one_error_line(
    tmp_path: Path, autotune_here: Callable[..., Ran]
) -> None:
    junk = tmp_path / "junk.db"
    junk.write_text("not a database")
    for args in (["--storage", f"sqlite:///{junk}"], ["--root", tmp_path / "none"]):
        result = autotune_here("studies", *args)
        assert result.returncode == 2, result.stdout
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert junk.read_text() == "not a database"
    empty = tmp_path / "root"
    empty.mkdir()
    result = autotune_here("studies", "--root", empty)
    assert result.returncode == 0 and result.stdout.strip() == f"no study in {empty}/*/study.db"
