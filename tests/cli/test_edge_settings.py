"""Settings read from the environment are read by the CLI, once, and a bad one is one line."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from autotune.cli._common import store_settings, worker_host
from autotune.store import StoreSettings, StudyStore
from cli.conftest import invoke, tune_args


def test_store_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTOTUNE_SQLITE_TIMEOUT_S", raising=False)
    monkeypatch.delenv("AUTOTUNE_HEARTBEAT_S", raising=False)
    assert store_settings() == StoreSettings()
    monkeypatch.setenv("AUTOTUNE_SQLITE_TIMEOUT_S", "2.5")
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", "0.5")
    assert store_settings() == StoreSettings(sqlite_timeout_s=2.5, heartbeat_s=0.5)


def test_the_store_reads_no_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Below the CLI, a variable changes nothing: the store takes its settings as given."""
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", "0.5")
    store = StudyStore(f"sqlite:///{tmp_path / 'a.db'}")
    assert store.heartbeat_s == StoreSettings().heartbeat_s
    fast = StudyStore(f"sqlite:///{tmp_path / 'b.db'}", settings=StoreSettings(heartbeat_s=0.5))
    assert fast.heartbeat_s == 0.5 and fast.stale_after_s == 3


def test_worker_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTOTUNE_WORKER_HOST", raising=False)
    assert worker_host() == socket.gethostname()
    monkeypatch.setenv("AUTOTUNE_WORKER_HOST", "pod-7")
    assert worker_host() == "pod-7"


@pytest.mark.parametrize("value", ["soon", "0", "-3"])
def test_a_bad_setting_is_one_line_and_exit_2(
    value: str, monkeypatch: pytest.MonkeyPatch, tiny_model: Path, tmp_path: Path
) -> None:
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", value)
    result = invoke(*tune_args(tiny_model, tmp_path, "bad", "--trials", "1"))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1] == f"error: AUTOTUNE_HEARTBEAT_S={value!r}: expected a number of seconds > 0"
    assert not (tmp_path / "bad").exists()  # nothing was created
