"""`tune --speed-probe`: each trial times the fixed work (for real, on this host's CPU) before
its benchmark; the study records it, sends its fixed rate at rate x speed, and export compares
as at the study's first reading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.drift import SPEED
from autotune.store import StudyStore
from cli.conftest import invoke, tune_args


def _launched(root: Path, study: str) -> list:  # type: ignore[type-arg]
    store = StudyStore(f"sqlite:///{root / study / 'study.db'}", create=False)
    return [t for t in store.trials(study) if t.device_s is not None]


def test_a_probed_study_records_each_reading_and_follows_it(
    tiny_model: Path, tmp_path: Path
) -> None:
    args = tune_args(tiny_model, tmp_path, "p", "--trials", "2", "--speed-probe", "on")
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    launched = _launched(tmp_path, "p")
    assert len(launched) == 2
    first, second = (t.engine[SPEED] for t in launched)
    assert first["speed"] == 1.0 and first["reading"] == first["reference"] > 0
    assert second["reference"] == first["reference"]
    # The ratio counts as far as the two readings say the host moved (the probe's weight).
    assert first["weight"] == 0.0 and 0.0 <= second["weight"] < 1.0
    ratio = second["reading"] / first["reference"]
    assert second["speed"] == pytest.approx(ratio ** second["weight"])
    assert second["rate"] == pytest.approx(100.0 * second["speed"])  # the rate it sent
    for parts in first["units"].values():  # a core of this host each, timed for real
        assert set(parts) == {"small_ops_s", "matmul_s", "copy_s"}
    shown = invoke("show", "p", "--root", tmp_path, "--format", "json")
    assert shown.exit_code == 0, shown.output
    speeds = [row["host_speed"] for row in json.loads(shown.output) if row["device_s"]]
    assert speeds == [1.0, pytest.approx(second["speed"])]
    out = tmp_path / "best.yaml"
    exported = invoke("export", "p", "--root", tmp_path, "-o", out)
    assert exported.exit_code == 0, exported.output
    assert "as at the study's start (host speed then x" in out.read_text()


def test_a_custom_engine_command_is_not_probed_by_default(tiny_model: Path, tmp_path: Path) -> None:
    result = invoke(*tune_args(tiny_model, tmp_path, "d", "--trials", "1"))
    assert result.exit_code == 0, result.output
    assert all(SPEED not in t.engine for t in _launched(tmp_path, "d"))
    shown = invoke("show", "d", "--root", tmp_path, "--format", "json")
    assert all(row["host_speed"] is None for row in json.loads(shown.output))
