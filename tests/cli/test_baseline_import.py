"""`autotune tune --baseline serve.sh`: what the user runs today becomes trial 0, and what the
space does not search stays fixed for every trial (fake engine)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from autotune.store import StudyStore

TuneArgv = Callable[..., list[str | Path]]

SCRIPT = """\
#!/bin/sh
export VLLM_CPU_SGL_KERNEL=1
vllm serve {model} \\
    --served-model-name today \\
    --max-num-seqs=64 --max-num-batched-tokens 1024 \\
    --kv-cache-memory-bytes 268435456 --no-enable-prefix-caching \\
    --enforce-eager --max-model-len 512 --port 8000
"""


def tune_from_script(
    cli: Callable[..., object], model: Path, tmp_path: Path, study: str, *more: str
) -> Path:
    """`tune` on the fake engine with SCRIPT as `--baseline`; returns the studies' root."""
    script = tmp_path / "serve.sh"
    script.write_text(SCRIPT.format(model=model))
    root = tmp_path / "studies"
    result = cli(
        "tune", "--study", study, "--baseline", script, "--engine-command",
        f"{{python}} {Path(__file__).parents[1] / 'fake_engine.py'}",
        "--workload", "random:input=32,output=8,prompts=8,warmup=1", "--rate", "100",
        "--root", root, *more,
    )  # fmt: skip
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    return root


def test_baseline_script_is_trial_zero_and_fixes_the_rest(
    tiny_model: Path, tmp_path: Path, cli: Callable[..., object]
) -> None:
    root = tune_from_script(
        cli, tiny_model, tmp_path, "b", "--space", "cpu-quick", "--trials", "2",
        "--sampler", "random",
    )  # fmt: skip
    trials = StudyStore(f"sqlite:///{root / 'b' / 'study.db'}", create=False).trials("b")
    zero = trials[0]
    assert zero.role == "baseline" and zero.status == "ok"
    assert zero.params == {
        "max_num_seqs": 64,
        "max_num_batched_tokens": 1024,
        "kv_cache_mib": 256,
        "enable_prefix_caching": False,
    }
    for trial in trials:  # the model came from the script; its other options hold for all
        assert trial.config["model"] == str(tiny_model)
        assert trial.config["served-model-name"] == "today"
        assert trial.config["max-model-len"] == 512 and trial.config["enforce-eager"] is True
        assert "port" not in trial.config
        assert trial.env["VLLM_CPU_SGL_KERNEL"] == "1"


def test_a_baseline_outside_the_space_is_one_error_line(
    tune_argv: TuneArgv, tmp_path: Path, cli: Callable[..., object]
) -> None:
    script = tmp_path / "serve.sh"
    script.write_text("vllm serve /m --max-num-seqs 100000\n")
    result = cli(*tune_argv("o", "--baseline", script))
    assert result.exit_code == 2  # type: ignore[attr-defined]
    (line,) = result.output.strip().splitlines()  # type: ignore[attr-defined]
    assert line.startswith(f"error: --baseline {script}: ")
    assert "max_num_seqs=100000 is not a value parameter max_num_seqs can take" in line


def test_an_imported_baseline_is_not_called_vllms_defaults(
    tiny_model: Path, tmp_path: Path, cli: Callable[..., object]
) -> None:
    """The cpu space asks for vLLM's batch defaults as its baseline; a `--baseline` script
    replaces them, so the export's header must not name them."""
    root = tune_from_script(cli, tiny_model, tmp_path, "v", "--space", "cpu", "--trials", "1")
    out = tmp_path / "best.yaml"
    exported = cli("export", "v", "--root", root, "-o", out)
    assert exported.exit_code == 0, exported.output  # type: ignore[attr-defined]
    header = out.read_text()
    assert "max-num-seqs: 64" in header and "batch defaults here" not in header
