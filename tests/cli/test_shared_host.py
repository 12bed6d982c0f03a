"""Issue 45's reproductions, through the CLI: on a host other users share, `tune` never writes
through a lock file another user planted."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

Invoke = Callable[..., Result]
TuneArgv = Callable[..., list]


def test_tune_never_writes_through_a_symlinked_lock_file(
    cli: Invoke,
    tune_argv: TuneArgv,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # `mkdir L; ln -s $PWD/victim L/cpu-core-N.lock` for every core, then root's `tune`.
    victim = tmp_path / "victim"
    victim.write_text("root:secret:::\n")
    victim.chmod(0o600)
    locks = tmp_path / "L"
    locks.mkdir()
    for core in os.sched_getaffinity(0):
        (locks / f"cpu-core-{core}.lock").symlink_to(victim)
    monkeypatch.setenv("AUTOTUNE_LOCK_DIR", str(locks))
    with caplog.at_level(logging.WARNING):
        result = cli(*tune_argv("locked", "--trials", "1"))
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "root:secret:::\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    said = [r.getMessage() for r in caplog.records if "device locks in" in r.getMessage()]
    assert len(said) == 1 and ".lock is a symbolic link" in said[0], said
    assert "set AUTOTUNE_LOCK_DIR to a writable folder" in said[0]
