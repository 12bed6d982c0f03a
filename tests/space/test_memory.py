"""The pre-launch memory estimate: safetensors weights, CPU and accelerator fit rules."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

from autotune.space import MemoryEstimate, ModelInfo, estimate_memory, weights_bytes

GIB = 2**30
_ITEM_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I8": 1, "U8": 1, "F8_E4M3": 1, "I32": 4}

Tensors = dict[str, tuple[str, list[int]]]


def write_safetensors(path: Path, tensors: Tensors, *, with_data: bool = True) -> int:
    """Write a safetensors file by hand (numpy has no bf16); return the stored data bytes.

    Without data only the header is written: the reader must never need more.
    """
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * _ITEM_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as out:
        out.write(len(raw).to_bytes(8, "little") + raw)
        if with_data:
            out.write(bytes(offset))
    return offset


def llama_tensors(
    hidden: int, inter: int, layers: int, vocab: int, heads: int, kv_heads: int
) -> Tensors:
    """The tensor shapes of a Llama checkpoint, in BF16."""
    kv = hidden // heads * kv_heads
    tensors: Tensors = {"model.embed_tokens.weight": ("BF16", [vocab, hidden])}
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors |= {
            p + "self_attn.q_proj.weight": ("BF16", [hidden, hidden]),
            p + "self_attn.k_proj.weight": ("BF16", [kv, hidden]),
            p + "self_attn.v_proj.weight": ("BF16", [kv, hidden]),
            p + "self_attn.o_proj.weight": ("BF16", [hidden, hidden]),
            p + "mlp.gate_proj.weight": ("BF16", [inter, hidden]),
            p + "mlp.up_proj.weight": ("BF16", [inter, hidden]),
            p + "mlp.down_proj.weight": ("BF16", [hidden, inter]),
            p + "input_layernorm.weight": ("BF16", [hidden]),
            p + "post_attention_layernorm.weight": ("BF16", [hidden]),
        }
    tensors |= {
        "model.norm.weight": ("BF16", [hidden]),
        "lm_head.weight": ("BF16", [vocab, hidden]),
    }
    return tensors


def numel(tensors: Tensors) -> int:
    return sum(math.prod(shape) for _, shape in tensors.values())


def fake_llama(folder: Path, *, hidden: int, inter: int, layers: int, heads: int, kv: int) -> Path:
    """A header-only Llama checkpoint (with config.json) of any size."""
    folder.mkdir()
    write_safetensors(
        folder / "model.safetensors",
        llama_tensors(hidden, inter, layers, 32000, heads, kv),
        with_data=False,
    )
    config = {
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "max_position_embeddings": 4096,
        "vocab_size": 32000,
        "torch_dtype": "bfloat16",
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


TINY = llama_tensors(256, 688, 4, 2048, 4, 4)


@pytest.fixture
def tiny_ckpt(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny"
    folder.mkdir()
    write_safetensors(folder / "model.safetensors", TINY)
    return folder


@pytest.fixture
def llama7b(tmp_path: Path) -> Path:
    return fake_llama(tmp_path / "7b", hidden=4096, inter=11008, layers=32, heads=32, kv=32)


@pytest.fixture
def llama70b(tmp_path: Path) -> Path:
    return fake_llama(tmp_path / "70b", hidden=8192, inter=28672, layers=80, heads=64, kv=8)


# --- weights ------------------------------------------------------------------------------


def test_bf16_weights_are_the_sum_of_tensor_sizes(tiny_ckpt: Path) -> None:
    stored = (tiny_ckpt / "model.safetensors").stat().st_size
    assert weights_bytes(tiny_ckpt) == numel(TINY) * 2
    assert weights_bytes(tiny_ckpt, "auto") == numel(TINY) * 2
    assert weights_bytes(tiny_ckpt, "bfloat16") == numel(TINY) * 2 < stored


def test_float32_doubles_bf16_weights(tiny_ckpt: Path) -> None:
    assert weights_bytes(tiny_ckpt, "float32") == 2 * numel(TINY) * 2


def test_float32_checkpoint_written_by_safetensors_is_downcast_under_auto(tmp_path: Path) -> None:
    arrays: dict[str, Any] = {"a": np.zeros((64, 32), np.float32), "b": np.zeros((7,), np.float16)}
    save_file(arrays, str(tmp_path / "model.safetensors"))
    elements = 64 * 32 + 7
    assert weights_bytes(tmp_path) == elements * 2  # vLLM serves float32 configs in 16 bits
    assert weights_bytes(tmp_path, "float32") == elements * 4


def test_quantized_tensors_keep_their_stored_size(tmp_path: Path) -> None:
    tensors: Tensors = {
        "w8.weight": ("I8", [512, 256]),
        "w8.weight_scale": ("F16", [512]),
        "w4.qweight": ("I32", [32, 512]),  # 8 int4 values packed per int32
        "w4.scales": ("F16", [2, 512]),
        "fp8.weight": ("F8_E4M3", [128, 256]),
        "fp8.weight_scale": ("F32", [1]),
    }
    write_safetensors(tmp_path / "model.safetensors", tensors)
    integers = 512 * 256 + 32 * 512 * 4 + 128 * 256
    floats = 512 + 2 * 512 + 1
    assert weights_bytes(tmp_path) == integers + floats * 2
    assert weights_bytes(tmp_path, "float32") == integers + floats * 4


def test_sharded_checkpoint_sums_the_files_of_its_index(tmp_path: Path) -> None:
    items = list(TINY.items())
    half = len(items) // 2
    write_safetensors(tmp_path / "model-00001-of-00002.safetensors", dict(items[:half]))
    write_safetensors(tmp_path / "model-00002-of-00002.safetensors", dict(items[half:]))
    assert weights_bytes(tmp_path) == numel(TINY) * 2
    # A consolidated copy beside the shards, or a file the index leaves out, is not loaded.
    write_safetensors(tmp_path / "consolidated.safetensors", TINY)
    assert weights_bytes(tmp_path) == numel(TINY) * 2
    weight_map = {
        name: f"model-0000{1 + (i >= half)}-of-00002.safetensors"
        for i, (name, _) in enumerate(items)
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    write_safetensors(tmp_path / "extra.safetensors", TINY)
    assert weights_bytes(tmp_path) == numel(TINY) * 2


def test_only_headers_are_read(llama70b: Path) -> None:
    assert (llama70b / "model.safetensors").stat().st_size < 2**20
    assert weights_bytes(llama70b) == pytest.approx(69e9 * 2, rel=0.01)


def test_no_safetensors_means_unknown(tmp_path: Path) -> None:
    assert weights_bytes(tmp_path) is None
    (tmp_path / "pytorch_model.bin").write_bytes(b"\0" * 64)
    assert weights_bytes(tmp_path) is None
    assert weights_bytes(Path("meta-llama/Llama-3.1-8B")) is None
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 16)  # corrupt header
    assert weights_bytes(tmp_path) is None


# --- CPU ----------------------------------------------------------------------------------


def cpu(
    options: dict[str, Any],
    model: ModelInfo,
    path: Path | None,
    *,
    devices: int = 1,
    margin: float = 0.0,
) -> MemoryEstimate:
    """Estimate on a NUMA node of 12 GiB with 9 GiB available."""
    est = estimate_memory(options, model, path, "cpu", 12 * GIB, 9 * GIB, devices, margin)
    assert est is not None
    return est


def test_cpu_kv_above_available_is_a_problem_naming_both(tiny: ModelInfo, tiny_ckpt: Path) -> None:
    est = cpu({"kv_cache_memory_bytes": 100 * GIB}, tiny, tiny_ckpt)
    assert est.problem is not None
    assert "100.00 GiB" in est.problem and "9.00 GiB" in est.problem
    assert est.needed_bytes == est.weights_bytes + 100 * GIB > est.available_bytes


def test_cpu_explicit_kv_that_fits(tiny: ModelInfo, tiny_ckpt: Path) -> None:
    est = cpu({"kv_cache_memory_bytes": 256 * 2**20}, tiny, tiny_ckpt)
    assert est.problem is None
    assert est.kv_bytes == 256 * 2**20
    assert est.kv_tokens == 65536  # 4,096 bytes per token (FACTS.md)
    assert est.weights_bytes == numel(TINY) * 2


def test_cpu_weights_count_against_the_explicit_kv(tiny: ModelInfo, tiny_ckpt: Path) -> None:
    weights = numel(TINY) * 2
    kv = 9 * GIB - weights // 2
    assert cpu({"kv_cache_memory_bytes": kv}, tiny, None).problem is None
    assert cpu({"kv_cache_memory_bytes": kv}, tiny, tiny_ckpt).problem is not None


def test_cpu_workers_on_one_node_share_it(tiny: ModelInfo, tiny_ckpt: Path) -> None:
    options = {"kv_cache_memory_bytes": GIB, "tensor_parallel_size": 2}
    one_node = cpu(options, tiny, tiny_ckpt)
    assert one_node.weights_bytes == numel(TINY)  # each worker holds half
    assert one_node.needed_bytes == numel(TINY) * 2 + GIB  # both halves are on the node
    assert cpu(options, tiny, tiny_ckpt, devices=2).needed_bytes == numel(TINY) + GIB


def test_cpu_default_utilization_above_available(tiny: ModelInfo, tiny_ckpt: Path) -> None:
    est = cpu({}, tiny, tiny_ckpt)
    assert est.problem is not None
    assert "0.92" in est.problem and "11.04 GiB" in est.problem and "9.00 GiB" in est.problem
    assert cpu({"gpu_memory_utilization": 0.7}, tiny, tiny_ckpt).problem is None


def test_cpu_automatic_kv_must_hold_one_request(tiny: ModelInfo) -> None:
    # 0.0001 of 12 GiB is 1.2 MiB: about 300 tokens, fewer than 4,096 positions.
    est = cpu({"gpu_memory_utilization": 0.0001}, tiny, None)
    assert est.problem is not None and "KV cache capacity" in est.problem
    assert est.kv_tokens < 4096


def test_margin_only_adds_headroom(tiny: ModelInfo, tiny_ckpt: Path) -> None:
    options = {"kv_cache_memory_bytes": 6 * GIB}
    assert cpu(options, tiny, tiny_ckpt).problem is None
    assert cpu(options, tiny, tiny_ckpt, margin=0.3).problem is not None


def test_unknown_model_gives_no_estimate() -> None:
    assert estimate_memory({}, None, None, "cpu", 12 * GIB, 9 * GIB) is None


# --- CUDA ---------------------------------------------------------------------------------


def cuda(
    options: dict[str, Any], path: Path, devices: int = 1, available: int = 79 * GIB
) -> MemoryEstimate:
    """Estimate on an H100-like device: 80 GiB, 79 GiB free."""
    model = ModelInfo.from_path(path)
    est = estimate_memory(options, model, path, "cuda", 80 * GIB, available, devices)
    assert est is not None
    return est


def test_cuda_7b_fits_an_80gb_device(llama7b: Path) -> None:
    est = cuda({"gpu_memory_utilization": 0.9}, llama7b)
    assert est.problem is None
    assert est.weights_bytes == pytest.approx(6.74e9 * 2, rel=0.01)
    # KV = 0.9 * 80 GiB - weights - activations (a lower bound, well under 1 GiB)
    assert 0 < 72 * GIB - est.weights_bytes - est.kv_bytes < GIB
    assert est.kv_tokens == est.kv_bytes // (2 * 32 * 4096 * 2)
    assert cuda({}, llama7b).problem is None  # default utilization 0.92 fits too


def test_cuda_70b_needs_tensor_parallel(llama70b: Path) -> None:
    one = cuda({}, llama70b)
    assert one.problem is not None and "no available memory for the cache blocks" in one.problem
    four = cuda({"tensor_parallel_size": 4}, llama70b, devices=4)
    assert four.problem is None
    assert four.weights_bytes == pytest.approx(69e9 * 2 / 4, rel=0.01)


def test_cuda_free_memory_below_utilization(llama7b: Path) -> None:
    est = cuda({"gpu_memory_utilization": 0.9}, llama7b, available=60 * GIB)
    assert est.problem is not None and "60.00 GiB" in est.problem and "72.00 GiB" in est.problem
    # vLLM checks it even with an explicit KV size.
    est = cuda({"kv_cache_memory_bytes": GIB}, llama7b, available=60 * GIB)
    assert est.problem is not None and "gpu_memory_utilization" in est.problem
    assert cuda({"gpu_memory_utilization": 0.7}, llama7b, available=60 * GIB).problem is None


def test_cuda_kv_tokens_below_max_model_len(llama7b: Path) -> None:
    # 0.175 * 80 GiB = 14 GiB, minus 12.6 GiB of weights: about 2,900 tokens of 0.5 MiB.
    est = cuda({"gpu_memory_utilization": 0.175}, llama7b)
    assert est.problem is not None and "KV cache capacity" in est.problem
    assert 0 < est.kv_tokens < 4096
    assert cuda({"gpu_memory_utilization": 0.175, "max_model_len": 2048}, llama7b).problem is None


def test_cuda_explicit_kv_beyond_free_memory(llama7b: Path) -> None:
    assert cuda({"kv_cache_memory_bytes": 40 * GIB}, llama7b).problem is None
    est = cuda({"kv_cache_memory_bytes": 70 * GIB}, llama7b)
    assert est.problem is not None and "70.00 GiB" in est.problem


def test_cuda_graphs_count_unless_eager(llama7b: Path) -> None:
    eager = cuda({"enforce_eager": True}, llama7b)
    graphs = cuda({}, llama7b)
    assert graphs.activation_bytes > eager.activation_bytes
    assert graphs.kv_bytes == eager.kv_bytes - (graphs.activation_bytes - eager.activation_bytes)
    no_graphs = cuda({"compilation_config": {"cudagraph_mode": "NONE"}}, llama7b)
    assert no_graphs.activation_bytes == eager.activation_bytes


# --- against the installed vLLM -------------------------------------------------------------


def test_cpu_estimate_agrees_with_vllm_on_this_machine(tiny_model: Path) -> None:
    """vLLM's own node numbers and tiny model: KV above its available memory fails."""
    from safetensors import safe_open
    from vllm.utils.cpu_resource_utils import get_memory_node_info

    with safe_open(str(tiny_model / "model.safetensors"), framework="pt") as f:
        elements = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())  # noqa: SIM118
    assert weights_bytes(tiny_model) == elements * 2

    node = get_memory_node_info(0)
    model = ModelInfo.from_path(tiny_model)
    memory = {"total_bytes": node.total_memory, "available_bytes": node.available_memory}

    def problem(options: dict[str, Any]) -> str | None:
        est = estimate_memory(options, model, tiny_model, "cpu", **memory)
        assert est is not None
        return est.problem

    assert problem({"kv_cache_memory_bytes": node.available_memory + 2**20}) is not None
    assert problem({"kv_cache_memory_bytes": node.available_memory // 4}) is None
    # Without a KV size, vLLM's own start-up check decides, and the estimate agrees with it.
    vllm_fails = math.ceil(node.total_memory * 0.92) > node.available_memory
    assert (problem({}) is not None) == vllm_fails
