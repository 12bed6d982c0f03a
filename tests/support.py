"""Helpers shared by tests that run engines (fake or real) as process trees."""

from __future__ import annotations

import fcntl
import logging
import os
import shlex
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from typer.testing import Result

from autotune.engine import LaunchSettings

FAKE_ENGINE = Path(__file__).resolve().parent / "fake_engine.py"
FAKE_COMMAND = "{python} " + shlex.quote(str(FAKE_ENGINE))


def processes_mentioning(text: str) -> list[psutil.Process]:
    """Live (non-zombie) processes whose command line mentions `text` (a trial folder)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and any(text in a for a in proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def wait_for(path: Path, proc: subprocess.Popen[str], timeout_s: float = 300) -> None:
    """Wait for `path`; a process (a tuner) that exits first fails the test at once, with its
    output. The deadline bounds a hang only: a busy host takes what it takes."""
    import pytest

    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None:
            out, _ = proc.communicate()
            pytest.fail(f"the tuner exited ({proc.returncode}) before {path} appeared:\n{out}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def fake_settings(tmp_path: Path, **kwargs: Any) -> LaunchSettings:
    """Launch settings for tests/fake_engine.py, fast; `kwargs` override."""
    values: dict[str, Any] = {
        "command": FAKE_COMMAND,
        "cache_dir": tmp_path / "cache",
        "startup_timeout_s": 20.0,
        "stop_timeout_s": 5.0,
        "poll_interval_s": 0.05,
        "extra_env": {"FAKE_ENGINE_STARTUP_S": "0.1"},
    }
    values.update(kwargs)
    return LaunchSettings(**values)


POSTGRES_ENV = "AUTOTUNE_TEST_POSTGRES_URL"
# Set by scripts/test.sh, which starts the server: there a test without it fails, never skips.
REQUIRE_POSTGRES = "AUTOTUNE_REQUIRE_POSTGRES"


@contextmanager
def fresh_postgres() -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database, dropped afterwards. Without a server given
    (`scripts/postgres.sh start` prints the variable to set) the test skips, or fails where
    `$REQUIRE_POSTGRES` is 1 (scripts/test.sh: CI must not pass on tests it did not run)."""
    import pytest
    from sqlalchemy import create_engine, text

    base = os.environ.get(POSTGRES_ENV)
    if not base:
        message = f"set {POSTGRES_ENV} to run against PostgreSQL"
        if os.environ.get(REQUIRE_POSTGRES) == "1":
            pytest.fail(f"{message}: {REQUIRE_POSTGRES}=1 (scripts/test.sh) requires it")
        pytest.skip(message)
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


def one_error_line(result: Result, code: int = 2) -> str:
    """The single `error: ...` line of a failed command, with no traceback anywhere."""
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


SHARED = "AUTOTUNE_TEST_SHARED"  # scripts/test.sh: one folder for its three pytest runs


def built_once(tmp_path_factory: Any, name: str, build: Callable[[Path], None]) -> Path:
    """The folder `name`, built by `build(folder)` once. Under scripts/test.sh (`$SHARED` set)
    once for all three of its pytest runs and their workers: the first process to ask builds
    it, under a file lock the others wait on, and marks it done; a build that failed is
    redone by the next to ask. Otherwise once per pytest process, in its own temporary
    folder (a session fixture)."""
    shared = os.environ.get(SHARED)
    if not shared:
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        return Path(folder)
    folder = Path(shared) / name
    done = Path(shared) / f"{name}.done"
    with (Path(shared) / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            if folder.exists():  # what a failed build left
                import shutil

                shutil.rmtree(folder)
            folder.mkdir(parents=True)
            build(folder)
            done.touch()
    return folder


@dataclass(frozen=True)
class Ran:
    """What `autotune ARGV` left: its exit status and what it wrote to each stream."""

    returncode: int
    stdout: str
    stderr: str


def run_in_process(
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> Ran:
    """`autotune ARGV` through the command's own entry point (`autotune.cli._usage.run`), in
    this process, as a fresh interpreter would run it: the root logger without handlers (the
    CLI configures its own), Python's default warning filters with the package's own, and
    every warning written to stderr as an interpreter writes it. It spares the test a Python
    start and the CLI's imports (about 1 s of CPU each); a test of what only a process shows
    (signals, stray output of a fresh interpreter) runs `python -m autotune`."""
    import warnings

    from autotune.cli import app
    from autotune.cli._usage import run
    from autotune.store._storage import quiet_heartbeat_warnings

    if cwd is not None:
        monkeypatch.chdir(cwd)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", logging.WARNING)
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning):
            warnings.simplefilter("ignore", category)
        warnings.simplefilter("ignore", ResourceWarning)
        quiet_heartbeat_warnings()  # the store's, set on its import (once, in an earlier test)
        try:
            run(app, [str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        else:  # pragma: no cover - `run` always exits
            code = 0
    out, err = capsys.readouterr()
    for w in caught:
        err += warnings.formatwarning(w.message, w.category, w.filename, w.lineno)
    return Ran(code, out, err)
