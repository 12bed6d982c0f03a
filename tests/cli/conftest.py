"""The CLI under CliRunner, and one study tuned against the fake engine for the read commands."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from autotune.cli import app

FAKE_ENGINE = Path(__file__).resolve().parents[1] / "fake_engine.py"
ENGINE_COMMAND = f"{{python}} {FAKE_ENGINE}"
WORKLOAD = "random:input=32,output=8,prompts=8,warmup=1"

Invoke = Callable[..., Result]


def invoke(*args: str | Path) -> Result:
    """Run `autotune ARGS...`; exceptions other than SystemExit are left in `result.exception`."""
    return CliRunner().invoke(app, [str(a) for a in args])


def tune_args(model: Path, root: Path, study: str, *more: str | Path) -> list[str | Path]:
    return [
        "tune",
        "--study", study,
        "--model", model,
        "--engine-command", ENGINE_COMMAND,
        "--space", "cpu-quick",
        "--workload", WORKLOAD,
        "--rate", "100",
        "--root", root,
        # One batch per trial: these tests read what the CLI does with a trial, not how long
        # its run goes (tests/measure/test_sized_runs.py does).
        "--precision", "off",
        *more,
    ]  # fmt: skip


@pytest.fixture(autouse=True)
def fast_fake_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake engine starts in 0.1 s; the launcher passes the environment through."""
    monkeypatch.setenv("FAKE_ENGINE_STARTUP_S", "0.1")
    monkeypatch.delenv("FAKE_ENGINE_FAIL", raising=False)


@dataclass(frozen=True)
class Tuned:
    root: Path
    study: str
    result: Result


@pytest.fixture(scope="package")
def tuned(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Tuned:
    """`autotune tune` of three trials, run once for every test that reads a study."""
    root = tmp_path_factory.mktemp("studies")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FAKE_ENGINE_STARTUP_S", "0.1")
        mp.delenv("FAKE_ENGINE_FAIL", raising=False)
        result = invoke(*tune_args(tiny_model, root, "s1", "--trials", "3", "--sampler", "random"))
    return Tuned(root, "s1", result)


@pytest.fixture
def cli() -> Invoke:
    """`cli("show", "s1", ...)`: run the CLI in-process."""
    return invoke


@pytest.fixture
def tune_argv(tiny_model: Path, tmp_path: Path) -> Callable[..., list[str | Path]]:
    """`tune_argv(study, *more)`: a `tune` command line on the tiny model, root under tmp_path."""

    def make(study: str, *more: str | Path) -> list[str | Path]:
        return tune_args(tiny_model, tmp_path / "studies", study, *more)

    return make


@pytest.fixture
def fake_engine() -> Path:
    return FAKE_ENGINE
