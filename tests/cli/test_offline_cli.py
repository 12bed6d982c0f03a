"""`autotune tune --scenario offline` with a fake batch child: the study records tokens/s,
peak memory and start-up per trial, learns from an OOM, and refuses what does not apply."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from support import one_error_line

from autotune.engine import DEFAULT_COMMAND
from autotune.spec import SpecError, load_spec
from autotune.store import StudyStore
from autotune.vocab.objectives import OFFLINE_OBJECTIVES

FAKE_OFFLINE = Path(__file__).resolve().parents[1] / "fake_offline.py"
TuneArgv = Callable[..., list[str | Path]]


def offline_spec(tmp_path: Path) -> Path:
    spec = tmp_path / "offline.yaml"
    command = "{python} " + shlex.quote(str(FAKE_OFFLINE))
    spec.write_text(yaml.safe_dump({"engine": {"offline_command": command}}))
    return spec


def offline_argv(tune_argv: TuneArgv, *more: str | Path) -> list[str | Path]:
    """A `tune` command line without `--engine-command`: an offline study refuses it (its
    batch program is the spec's `engine.offline_command`)."""
    argv = tune_argv(*more)
    at = argv.index("--engine-command")
    return argv[:at] + argv[at + 2 :]


def test_an_offline_study_scores_batches_by_tokens_per_second(
    tune_argv: TuneArgv, tmp_path: Path, cli: Callable[..., object], monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_OFFLINE_RSS_MB", "64")
    # Held for several of the sampler's 0.25 s polls, so that a loaded host does not miss it.
    monkeypatch.setenv("FAKE_OFFLINE_GENERATE_S", "1.0")
    argv = offline_argv(
        tune_argv,
        "off", "--scenario", "offline", "--trials", "3", "--spec", offline_spec(tmp_path),
        "--objective", "output_throughput:max", "--objective", "peak_memory_gib:min",
        "--search", "pareto",  # Optuna is told both objectives
    )  # fmt: skip
    result = cli(*argv)
    out = result.output  # type: ignore[attr-defined]
    assert result.exit_code == 0, out
    store = StudyStore(f"sqlite:///{tmp_path / 'studies' / 'off' / 'study.db'}", create=False)
    assert store.study_facts("off").scenario == "offline"
    trials = [t for t in store.trials("off") if t.device_s is not None]
    assert len(trials) == 3
    for t in trials:
        assert t.status == "ok", t.reason
        assert t.metrics["output_throughput"] > 0 and t.metrics["request_throughput"] > 0
        assert t.metrics["total_throughput"] > t.metrics["output_throughput"]
        assert t.metrics["peak_memory_gib"] > 64 / 1024  # the fake child held 64 MiB
        assert t.engine.startup_s > 0 and t.engine.generate_s > 0
        assert t.values == [t.metrics["output_throughput"], t.metrics["peak_memory_gib"]]
        folder = Path(t.trial_dir or "")
        assert (folder / "prompts.jsonl").is_file() and (folder / "requests.jsonl").is_file()
        assert json.loads((folder / "measurement.json").read_text())["status"] == "ok"
    assert "peak GiB" in out


def test_an_offline_oom_is_recorded_as_the_servers_is(
    tune_argv: TuneArgv, tmp_path: Path, cli: Callable[..., object], monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_OFFLINE_FAIL", "oom")
    argv = offline_argv(tune_argv, "oom", "--scenario", "offline", "--trials", "1",
                        "--spec", offline_spec(tmp_path))  # fmt: skip
    result = cli(*argv)
    # The baseline itself failed: the study stops and says why, the trial is kept.
    assert result.exit_code != 0
    assert "the baseline trial (vLLM defaults) failed: oom" in result.output  # type: ignore[attr-defined]
    store = StudyStore(f"sqlite:///{tmp_path / 'studies' / 'oom' / 'study.db'}", create=False)
    (trial,) = store.trials("oom")
    assert trial.status == "oom" and trial.constraints["oom"] == 1.0
    assert "can't allocate memory" in trial.reason


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"capacity": {}, "slos": {"p99_ttft_ms": 1}}, "--load capacity applies to online"),
        ({"repeats": 2}, "--repeats applies to online trials"),
        ({"prune": True}, "--prune applies to online trials"),
    ],
)
def test_what_an_offline_batch_cannot_do_is_one_error(fields: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        load_spec(None, {"study": "s", "model": "m", "scenario": "offline", **fields})


def test_an_offline_study_refuses_a_server_command_rather_than_ignore_it(
    tune_argv: TuneArgv, cli: Callable[..., object], tmp_path: Path
) -> None:
    # Issue 45: `--scenario offline --engine-command X` ran the local vLLM, X unread.
    line = one_error_line(cli(*tune_argv("off", "--scenario", "offline")))  # type: ignore[arg-type]
    assert "--engine-command (engine.command) starts a server" in line
    assert "engine.offline_command" in line
    assert not (tmp_path / "studies").exists()
    # The default command (what a stored offline study holds) is no refusal.
    spec = load_spec(None, {"study": "s", "model": "m", "scenario": "offline",
                            "engine": {"command": DEFAULT_COMMAND}})  # fmt: skip
    assert spec.engine.command == DEFAULT_COMMAND


def test_offline_defaults_to_tokens_per_second_and_memory_is_offline_only() -> None:
    spec = load_spec(None, {"study": "s", "model": "m", "scenario": "offline"})
    assert [(o.metric, o.direction) for o in spec.objectives] == list(OFFLINE_OBJECTIVES)
    with pytest.raises(SpecError, match="peak_memory_gib is measured only in the offline"):
        memory = [{"metric": "peak_memory_gib", "direction": "minimize"}]
        load_spec(None, {"study": "s", "model": "m", "objectives": memory})
    with pytest.raises(SpecError, match="scenario"):
        load_spec(None, {"study": "s", "model": "m", "scenario": "batch"})
