"""`scripts/test.sh`, the README's test command and CI's: a service it starts must start. A
PostgreSQL that did not start once left `eval ""` to succeed and the store's PostgreSQL tests
to skip, the suite green (issue 49). Run on a copy of the script, beside stand-ins for setup,
the server and the tools, which record how they were called."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
URL = "postgresql+psycopg://postgres@127.0.0.1:1/autotune"


def _script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/usr/bin/env bash\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """scripts/test.sh in a folder of stand-ins; every tool it runs appends a line to
    `calls` (the tool, and the variables the tests read)."""
    shutil.copy(REPO / "scripts" / "test.sh", tmp_path / "test.sh")
    (tmp_path / "scripts").mkdir()
    shutil.move(tmp_path / "test.sh", tmp_path / "scripts" / "test.sh")
    _script(tmp_path / "scripts" / "setup.sh", "exit 0")
    record = (
        'echo "$(basename "$0") $* url=${AUTOTUNE_TEST_POSTGRES_URL:-} '
        'require=${AUTOTUNE_REQUIRE_POSTGRES:-}" >> "$(dirname "$0")/../../calls"'
    )
    for tool in ("ruff", "mypy", "python"):
        _script(tmp_path / ".venv" / "bin" / tool, record)
    return tmp_path


def run(checkout: Path, postgres: str) -> subprocess.CompletedProcess[str]:
    _script(checkout / "scripts" / "postgres.sh", postgres)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    return subprocess.run(
        ["bash", str(checkout / "scripts" / "test.sh")],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip


def test_a_postgresql_that_does_not_start_fails_the_run_before_any_test(checkout: Path) -> None:
    done = run(checkout, 'if [ "$1" = start ]; then echo "initdb: failed" >&2; exit 1; fi')
    assert done.returncode != 0
    assert "the throwaway PostgreSQL did not start" in done.stderr
    assert not (checkout / "calls").exists()  # no lint, no pytest: nothing passed untested


def test_a_started_postgresql_is_required_by_every_pytest_run(checkout: Path) -> None:
    done = run(
        checkout, f'if [ "$1" = start ]; then echo "export AUTOTUNE_TEST_POSTGRES_URL={URL}"; fi'
    )
    assert done.returncode == 0, done.stderr
    pytest_runs = [
        line for line in (checkout / "calls").read_text().splitlines() if "-m pytest" in line
    ]
    assert len(pytest_runs) == 3
    assert all(f"url={URL} require=1" in line for line in pytest_runs), pytest_runs


def test_without_the_server_the_postgresql_tests_fail_where_it_is_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from support import fresh_postgres

    monkeypatch.delenv("AUTOTUNE_TEST_POSTGRES_URL", raising=False)
    monkeypatch.setenv("AUTOTUNE_REQUIRE_POSTGRES", "1")
    with pytest.raises(pytest.fail.Exception, match="requires it"), fresh_postgres():
        pass
    monkeypatch.delenv("AUTOTUNE_REQUIRE_POSTGRES")
    with pytest.raises(pytest.skip.Exception), fresh_postgres():  # pytest run by hand: skips
        pass
