"""The `autotune` command line, run in-process with CliRunner against the fake engine."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml
from support import one_error_line
from typer.testing import Result

from autotune.engine import EngineConfig, LaunchSettings, launch
from autotune.space import list_spaces
from autotune.store import StudyStore

if TYPE_CHECKING:
    from tests.cli.conftest import Tuned

Invoke = Callable[..., Result]
TuneArgv = Callable[..., list]


def header(path: Path) -> str:
    return "\n".join(line for line in path.read_text().splitlines() if line.startswith("#"))


# tune, and the commands that read its study


def test_tune_runs_a_study(tuned: Tuned) -> None:
    result = tuned.result
    assert result.exit_code == 0, result.output
    assert "[1/3] trial 0:" in result.stdout and "[3/3]" in result.stdout
    assert "3 measured, 0 failed" in result.stdout
    assert "Study s1: Pareto front of 3 trials" in result.stdout
    assert (tuned.root / "s1" / "study.db").is_file()

    trial_dirs = sorted((tuned.root / "s1").glob("trial-*"))
    assert [d.name for d in trial_dirs] == ["trial-0000", "trial-0001", "trial-0002"]
    for folder in trial_dirs:
        for name in ("engine.yaml", "engine.log", "requests.jsonl"):
            assert (folder / name).is_file(), folder / name
        lines = (folder / "requests.jsonl").read_text().splitlines()
        assert len(lines) >= 8
    baseline = yaml.safe_load((trial_dirs[0] / "engine.yaml").read_text())
    assert baseline["max-num-seqs"] == 128 and baseline["enforce-eager"] is True
    assert "fake vLLM engine" in (trial_dirs[0] / "engine.log").read_text()


def test_tuned_trials_are_measured(tuned: Tuned) -> None:
    store = StudyStore(f"sqlite:///{tuned.root / 's1' / 'study.db'}", create=False)
    trials = store.trials("s1")
    assert len(trials) == 3 and trials[0].role == "baseline"
    assert all(t.status == "ok" and t.metric("output_throughput") > 0 for t in trials)
    assert store.study_facts("s1").space == "cpu-quick"


def test_show_front(cli: Invoke, tuned: Tuned) -> None:
    result = cli("show", "s1", "--root", tuned.root)
    assert result.exit_code == 0, result.output
    assert "Study s1: Pareto front of 3 trials (b baseline)" in result.stdout
    assert "objectives: output_throughput (max)" in result.stdout
    # Each p99 with its 90% interval: over 8 requests it has no upper end.
    assert re.search(r"\d / [\d.]+ [\d.]+-\?", result.stdout)


def test_show_all_by_storage_url(cli: Invoke, tuned: Tuned) -> None:
    url = f"sqlite:///{tuned.root / 's1' / 'study.db'}"
    result = cli("show", "s1", "--all", "--storage", url)
    assert result.exit_code == 0, result.output
    assert "Study s1: all 3 trials (* Pareto front, b baseline)" in result.stdout
    assert "max_num_seqs=128" in result.stdout


def test_export_best(cli: Invoke, tuned: Tuned, tmp_path: Path) -> None:
    out = tmp_path / "best.yaml"
    result = cli("export", "s1", "--root", tuned.root, "-o", out)
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.stdout and "serve it with:" in result.stdout
    config = yaml.safe_load(out.read_text())
    assert Path(config["model"]).name == "tiny" and config["served-model-name"] == "tiny"
    assert {"max-num-seqs", "max-num-batched-tokens", "kv-cache-memory-bytes"} <= set(config)
    text = header(out)
    assert text.startswith("# vllm-autotune: study 's1', trial ")
    assert "(pick max-throughput)" in text and "output tok/s" in text
    # How precisely the figures were measured: each with its 90% interval (a p99 over 8
    # requests has no upper end; a run of 0.1 s is too short for batch means of its rate).
    assert "# 90% intervals of this run: p99 TTFT " in text and "-?" in text
    assert not out.with_suffix(".env").exists()


def test_export_knee(cli: Invoke, tuned: Tuned, tmp_path: Path) -> None:
    out = tmp_path / "knee.yaml"
    result = cli("export", "s1", "--root", tuned.root, "-o", out, "--pick", "knee")
    assert result.exit_code == 0, result.output
    assert "(pick knee)" in header(out)


def test_export_trial_zero_is_the_baseline(cli: Invoke, tuned: Tuned, tmp_path: Path) -> None:
    out = tmp_path / "zero.yaml"
    result = cli("export", "s1", "--root", tuned.root, "-o", out, "--trial", "0")
    assert result.exit_code == 0, result.output
    assert "trial 0 (trial 0)" in header(out)
    measured = yaml.safe_load((tuned.root / "s1" / "trial-0000" / "engine.yaml").read_text())
    assert yaml.safe_load(out.read_text()) == measured  # what was measured is what is exported


def test_export_unknown_trial(cli: Invoke, tuned: Tuned, tmp_path: Path) -> None:
    result = cli("export", "s1", "--root", tuned.root, "-o", tmp_path / "x.yaml", "--trial", "99")
    assert "no trial 99" in one_error_line(result)
    assert not (tmp_path / "x.yaml").exists()


def test_export_unknown_pick(cli: Invoke, tuned: Tuned, tmp_path: Path) -> None:
    result = cli("export", "s1", "--root", tuned.root, "-o", tmp_path / "x.yaml", "--pick", "best")
    assert "unknown pick 'best'" in one_error_line(result)


def test_show_unknown_study(cli: Invoke, tuned: Tuned) -> None:
    line = one_error_line(cli("show", "nope", "--root", tuned.root))
    assert f"no study database at {(tuned.root / 'nope' / 'study.db').resolve()}" in line
    assert not (tuned.root / "nope").exists()  # reading never creates a database

    url = f"sqlite:///{tuned.root / 's1' / 'study.db'}"
    line = one_error_line(cli("show", "nope", "--storage", url))
    assert "no study named 'nope'" in line and "(has: s1)" in line


def test_show_unreachable_storage(cli: Invoke) -> None:
    url = "postgresql+psycopg://u:secret@127.0.0.1:1/x"
    line = one_error_line(cli("show", "s1", "--storage", url))
    assert line.startswith("error: storage postgresql+psycopg://u:***@127.0.0.1:1/x: ")


# tune input errors: exit 2, one line, nothing launched


def test_tune_missing_model_path(cli: Invoke, tmp_path: Path) -> None:
    model = tmp_path / "no-model"
    result = cli("tune", "--study", "s", "--model", model, "--root", tmp_path)
    line = one_error_line(result)
    assert line.startswith(f"error: model path {model} does not exist")
    assert "make-tiny-model" in line
    assert not (tmp_path / "s").exists()
    model.mkdir()  # a folder of something else: no hint to write a model into it
    line = one_error_line(cli("tune", "--study", "s", "--model", model, "--root", tmp_path))
    assert line == f"error: model path {model} has no config.json (not a Hugging Face model)"


def test_tune_malformed_space_file(cli: Invoke, tune_argv: TuneArgv, tmp_path: Path) -> None:
    space = tmp_path / "bad.yaml"
    space.write_text("name: bad\nparameters:\n  - {name: max_num_seqs, type: int, low: 4\n")
    argv = [a if a != "cpu-quick" else space for a in tune_argv("s")]
    line = one_error_line(cli(*argv))
    assert str(space) in line and "invalid YAML at line" in line


def test_tune_unreachable_storage(cli: Invoke, tune_argv: TuneArgv) -> None:
    argv = tune_argv("s", "--storage", "postgresql+psycopg://u@127.0.0.1:1/x")
    assert one_error_line(cli(*argv)).startswith("error: storage postgresql+psycopg://u@")


def test_tune_bad_slo(cli: Invoke, tune_argv: TuneArgv) -> None:
    line = one_error_line(cli(*tune_argv("s", "--slo", "bad")))
    assert "--slo 'bad': expected NAME=NUMBER" in line


def test_tune_unknown_slo_metric(cli: Invoke, tune_argv: TuneArgv) -> None:
    line = one_error_line(cli(*tune_argv("s", "--slo", "p99_foo_ms=5")))
    assert "unknown SLO metric 'p99_foo_ms'" in line


def test_tune_bad_workload(cli: Invoke, tune_argv: TuneArgv) -> None:
    argv = tune_argv("s", "--workload", "random:inptu=3")  # the later flag wins in click
    assert "unknown workload key 'inptu'" in one_error_line(cli(*argv))


def test_tune_needs_a_study_name(cli: Invoke, tiny_model: Path) -> None:
    result = cli("tune", "--model", tiny_model)
    assert "--study NAME is required" in one_error_line(result)


# a failing baseline: exit 1, the failure kept in the store


def test_failing_baseline_stops_the_study(
    cli: Invoke, tune_argv: TuneArgv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ENGINE_FAIL", "oom")
    result = cli(*tune_argv("s2", "--trials", "3"))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    error = result.stderr.strip()
    assert error.startswith("error: the baseline trial (vLLM defaults) failed: oom: ")
    assert "CUDA out of memory" in error

    db = tmp_path / "studies" / "s2" / "study.db"
    (only,) = StudyStore(f"sqlite:///{db}", create=False).trials("s2")
    assert only.role == "baseline" and only.status == "oom" and only.state == "complete"
    assert "out of memory" in only.log_tail


# search spaces


def test_spaces_list(cli: Invoke) -> None:
    result = cli("spaces", "list")
    assert result.exit_code == 0, result.output
    for name in ("cpu", "cpu-quick", "cuda", "ascend"):
        assert f"│ {name} " in result.stdout


def test_spaces_validate_shipped(cli: Invoke) -> None:
    files = list_spaces()
    assert len(files) >= 4
    result = cli("spaces", "validate", *files)
    assert result.exit_code == 0, result.output
    assert result.stdout.count(": ok (") == len(files)


def test_spaces_validate_bad_file(cli: Invoke, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nparameters: []\n")
    assert str(bad) in one_error_line(cli("spaces", "validate", bad))


# bench against a running endpoint


def test_bench_url(cli: Invoke, fake_engine: Path, tiny_model: Path, tmp_path: Path) -> None:
    config = EngineConfig(model="fake")
    settings = LaunchSettings(command=f"{sys.executable} {fake_engine}", startup_timeout_s=15)
    with launch(config, settings, tmp_path / "engine") as engine:
        url = engine.url
        out = tmp_path / "out.json"
        records = tmp_path / "requests.jsonl"
        result = cli(
            "bench", "--url", url, "--workload", "random:input=16,output=4,prompts=6",
            "--model-path", tiny_model, "--concurrency", "4",
            "--json", out, "--records", records,
        )  # fmt: skip
        assert result.exit_code == 0, result.output
    summary = json.loads(out.read_text())
    assert summary["output_throughput"] > 0
    assert summary["completed"] == 6 and summary["errors"] == 0
    assert len(records.read_text().splitlines()) == 6


def test_bench_needs_rate_or_concurrency(cli: Invoke) -> None:
    result = cli("bench", "--url", "http://127.0.0.1:1", "--workload", "random")
    assert "give --rate R or --concurrency C" in one_error_line(result)


def test_bench_unreachable_url(cli: Invoke) -> None:
    result = cli("bench", "--url", "http://127.0.0.1:1", "--workload", "random", "--rate", "1")
    assert "cannot read the model name from http://127.0.0.1:1/v1/models" in one_error_line(result)


# the demo model


def test_make_tiny_model(cli: Invoke, tmp_path: Path) -> None:
    result = cli("make-tiny-model", tmp_path / "tiny")
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "tiny" / "config.json").read_text())
    assert config["max_position_embeddings"] == 4096
    assert (tmp_path / "tiny" / "tokenizer.json").is_file()
