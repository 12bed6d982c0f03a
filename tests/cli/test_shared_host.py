"""Issue 45's reproductions, through the CLI: on a host other users share, `tune` never writes
through a lock file another user planted, and `export` prints and writes a serve command that
runs nothing but the server, or refuses a path that would break its header."""

from __future__ import annotations

import logging
import os
import shlex
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support import one_error_line
from typer.testing import Result

if TYPE_CHECKING:
    from tests.cli.conftest import Tuned

Invoke = Callable[..., Result]
TuneArgv = Callable[..., list]
RECORD = 'vllm() { printf "%s\\n" "$@" > args; }; python() { vllm "$@"; }; '


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


def test_the_printed_serve_line_runs_only_the_server(
    cli: Invoke, tuned: Tuned, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    name = "my dir/$(touch PWNED) [b]x[/b] :smile:.yaml"
    result = cli("export", "s1", "--root", tuned.root, "-o", name)
    assert result.exit_code == 0, result.output
    assert f"wrote {name} (trial " in result.stdout  # as typed: no markup, no emoji read
    lines = result.stdout.splitlines()
    command = lines[lines.index("serve it with:") + 1].strip()
    assert f"# serve: {command}" in (tmp_path / name).read_text().splitlines()
    words = shlex.split(command)
    assert words[words.index("--config") + 1] == name
    subprocess.run(["bash", "-n", "-c", command], check=True)
    subprocess.run(["bash", "-c", RECORD + command], cwd=tmp_path, check=True)
    assert (tmp_path / "args").read_text().splitlines()[-2:] == ["--config", name]
    assert not list(tmp_path.rglob("PWNED"))


def test_a_line_break_in_the_output_path_is_refused(
    cli: Invoke, tuned: Tuned, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    hostile = "x\nenforce-eager: true\n#.yaml"
    line = one_error_line(cli("export", "s1", "--root", tuned.root, "-o", hostile))
    assert line.startswith(r"error: -o 'x\nenforce-eager: true\n#.yaml': a file name with a")
    assert list(tmp_path.iterdir()) == []  # nothing written
