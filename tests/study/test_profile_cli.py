"""`autotune profile` under CliRunner: a study tuned on the fake engine, profiled on a fake
engine with vLLM's profiler endpoints; bad input is one error line and a non-zero exit."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import optuna
import pytest
import typer
from optuna.trial import TrialState
from typer.testing import CliRunner, Result

from autotune.answer.export import choose_export
from autotune.cli._profile import profile
from autotune.cli._tune import tune
from autotune.store import StudyStore, default_storage_url

TESTS = Path(__file__).resolve().parents[1]
FAKE_ENGINE = "{python} " + shlex.quote(str(TESTS / "fake_engine.py"))
PROFILING_ENGINE = "{python} " + shlex.quote(
    str(TESTS / "fixtures" / "profile" / "fake_profiling_engine.py")
)
TRACE = TESTS / "fixtures" / "profile" / "trace.pt.trace.json.gz"

app = typer.Typer()
app.command()(tune)
app.command()(profile)


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(autouse=True)
def fast_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_ENGINE_STARTUP_S", "0.1")
    monkeypatch.setenv("FAKE_PROFILE_TRACE", str(TRACE))


@pytest.fixture(scope="module")
def root(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-trial study tuned on the fake engine."""
    root = tmp_path_factory.mktemp("studies")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FAKE_ENGINE_STARTUP_S", "0.1")
        result = invoke(
            "tune", "--study", "s1", "--model", tiny_model, "--engine-command", FAKE_ENGINE,
            "--space", "cpu-quick", "--workload", "random:input=32,output=8,prompts=8,warmup=1",
            "--rate", "100", "--root", root, "--trials", "2", "--sampler", "random",
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    return root


def profile_args(root: Path, *more: str) -> list[str | Path]:
    return ["profile", "s1", "--root", root, "--engine-command", PROFILING_ENGINE, *more]


def test_profile_a_trial_prints_operators_and_phases(root: Path) -> None:
    result = invoke(*profile_args(root, "--trial", "1", "--requests", "3"))
    assert result.exit_code == 0, result.output
    folder = root / "s1" / "profiles" / "trial-0001"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["trial"] == 1 and summary["requests"] == 3
    assert summary["mechanism"] == "profiler-config"
    assert "top operators by self time" in result.output
    assert summary["top_ops"][0]["name"] in result.output
    assert "prefill" in result.output and "decode" in result.output
    assert (folder / "engine.log").is_file() and (folder / summary["trace"]).is_file()


def test_the_default_trial_is_the_export_pick(root: Path) -> None:
    # As `export` picks it (configs compared as measured, drift and re-measures merged), not a
    # max over raw trials: two close trials swap places on a busy host's noise.
    store = StudyStore(default_storage_url(root, "s1"), create=False)
    best, _ = choose_export(store.trials("s1"), store.study_facts("s1"))
    result = invoke(*profile_args(root))
    assert result.exit_code == 0, result.output
    assert f"profiling trial {best.number} " in result.output
    assert (root / "s1" / "profiles" / f"trial-{best.number:04d}" / "summary.json").is_file()


def test_the_studys_engine_without_profiler_endpoints_fails_cleanly(root: Path) -> None:
    result = invoke("profile", "s1", "--root", root, "--trial", "0")  # the stored fake command
    assert result.exit_code == 1
    assert "no /start_profile" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "no study database"),
        (["s1", "--trial", "99"], "no trial 99 in study 's1'"),
        (["s1", "--requests", "0"], "--requests 0: expected a whole number >= 1 and <= 1000000"),
        (["s1", "--requests", "9" * 20], "--requests 99999999999999999999: expected a whole"),
    ],
)
def test_bad_input_is_one_error_line(root: Path, args: list[str], message: str) -> None:
    result = invoke("profile", *args, "--root", root)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_a_trial_without_config_and_a_study_without_spec(root: Path, tmp_path: Path) -> None:
    url = default_storage_url(root, "s1")
    study = optuna.load_study(study_name="s1", storage=url)
    failed = study.ask()
    study.tell(failed, state=TrialState.FAIL)
    result = invoke("profile", "s1", "--root", root, "--trial", str(failed.number))
    assert result.exit_code == 2
    assert f"trial {failed.number} has no engine config to profile" in result.output

    other = tmp_path / "o"
    (other / "bare").mkdir(parents=True)
    bare = optuna.create_study(study_name="bare", storage=default_storage_url(other, "bare"))
    bare.set_user_attr("objectives", [])
    result = invoke("profile", "bare", "--root", other)
    assert result.exit_code == 2
    assert "has no stored spec" in result.output
