"""Reading `vllm serve` scripts and --config YAML as users write them (`--baseline`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.engine import ServeImportError, parse_serve_script, read_serve_file

# The shape of vLLM-Ascend's and vLLM's own deployment examples: exports, continuations, mixed
# `--flag value` / `--flag=value`, a JSON option, negated and bare booleans.
ASCEND_SCRIPT = """\
#!/bin/bash
# Qwen2.5-7B on two NPUs
export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True
export TASK_QUEUE_ENABLE=1
export HCCL_OP_EXPANSION_MODE="AIV"
vllm serve /models/Qwen2.5-7B-Instruct \\
    --served-model-name qwen \\
    --host 0.0.0.0 --port 8000 \\
    --tensor-parallel-size 2 \\
    --max-num-seqs=256 \\
    --max-num-batched-tokens 8192 \\
    --gpu-memory-utilization 0.92 \\
    --no-enable-prefix-caching \\
    --enforce-eager \\
    --compilation-config '{"cudagraph_mode": "FULL_DECODE_ONLY"}' \\
    --cudagraph-capture-sizes 1 2 4 8 \\
    --quantization ascend   # W8A8 weights from msModelSlim
"""


def test_an_ascend_deployment_script() -> None:
    command = parse_serve_script(ASCEND_SCRIPT)
    assert command.model == "/models/Qwen2.5-7B-Instruct"
    assert command.served_model_name == "qwen"
    assert command.options == {
        "tensor_parallel_size": 2,
        "max_num_seqs": 256,
        "max_num_batched_tokens": 8192,
        "gpu_memory_utilization": 0.92,
        "enable_prefix_caching": False,
        "enforce_eager": True,
        "compilation_config": {"cudagraph_mode": "FULL_DECODE_ONLY"},
        "cudagraph_capture_sizes": [1, 2, 4, 8],
        "quantization": "ascend",
    }
    assert command.env == {
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
        "TASK_QUEUE_ENABLE": "1",
        "HCCL_OP_EXPANSION_MODE": "AIV",
    }


def test_python_module_form_with_short_flags_and_an_env_prefix() -> None:
    command = parse_serve_script(
        "CUDA_VISIBLE_DEVICES=0,1 VLLM_USE_V1=1 python3 -m vllm.entrypoints.openai.api_server "
        "--model meta-llama/Llama-3.1-8B-Instruct -tp 2 --trust-remote-code "
        "--kv-cache-dtype fp8 --max-model-len 8192 --enable-chunked-prefill\n"
    )
    assert command.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert command.options == {
        "tensor_parallel_size": 2,
        "trust_remote_code": True,
        "kv_cache_dtype": "fp8",
        "max_model_len": 8192,
        "enable_chunked_prefill": True,
    }
    assert command.env == {"CUDA_VISIBLE_DEVICES": "0,1", "VLLM_USE_V1": "1"}


def test_config_file_is_read_and_the_command_line_wins(tmp_path: Path) -> None:
    (tmp_path / "serve.yaml").write_text(
        "model: /m\nmax-num-seqs: 64\nblock-size: 32\nport: 9000\nserved-model-name: [a, b]\n"
    )
    script = tmp_path / "serve.sh"
    script.write_text("vllm serve --config serve.yaml --max-num-seqs 128\n")
    command = read_serve_file(script)
    assert command.model == "/m" and command.served_model_name == "a"
    assert command.options == {"max_num_seqs": 128, "block_size": 32}  # port is the tuner's


def test_an_exported_yaml_reads_back(tmp_path: Path) -> None:
    best = tmp_path / "best.yaml"
    best.write_text("# exported\nmodel: /m\nmax-num-seqs: 32\nenable-prefix-caching: false\n")
    command = read_serve_file(best)
    assert command.model == "/m"
    assert command.options == {"max_num_seqs": 32, "enable_prefix_caching": False}


def test_the_last_server_command_of_a_script_counts() -> None:
    command = parse_serve_script(
        "export A=1\nvllm serve /old --max-num-seqs 8\necho starting\nB=2\n"
        "nohup vllm serve /new --max-num-seqs 16 > serve.log 2>&1 &\n"
    )
    assert command.model == "/new" and command.options == {"max_num_seqs": 16}
    assert command.env == {"A": "1", "B": "2"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("echo hello\n", "no vLLM server command found"),
        ("vllm serve /m --max-num-seqs '64\n", "cannot split"),
        ("vllm serve /m --compilation-config '{bad'\n", "invalid JSON value"),
        ("vllm serve /m /other\n", "the model is given twice"),
        ("export =1\nvllm serve /m\n", "expected KEY=VALUE"),
    ],
)
def test_what_cannot_be_read_is_one_line(text: str, message: str) -> None:
    with pytest.raises(ServeImportError, match=message) as exc:
        parse_serve_script(text)
    assert "\n" not in str(exc.value)


def test_a_script_or_its_config_is_read_within_a_bound(tmp_path: Path) -> None:
    # Issue 45: `--baseline /dev/zero` (or a `--config` naming it) was read until memory ran out.
    with pytest.raises(ServeImportError, match=r"^not a regular file \(a device, a pipe"):
        read_serve_file(Path("/dev/zero"))
    script = tmp_path / "serve.sh"
    script.write_text("vllm serve m --config /dev/zero\n")
    with pytest.raises(ServeImportError, match=r"^--config /dev/zero: not a regular file"):
        read_serve_file(script)
    with script.open("wb") as big:
        big.truncate(2 * 1024 * 1024)
    with pytest.raises(ServeImportError, match=r"^larger than 1 MiB"):
        read_serve_file(script)


def test_a_missing_file_or_a_yaml_that_is_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ServeImportError, match="No such file"):
        read_serve_file(tmp_path / "none.sh")
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    with pytest.raises(ServeImportError, match="expected a mapping"):
        read_serve_file(listed)
