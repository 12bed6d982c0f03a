"""Constraint rules of an engine's layout: its parallel sizes, expert parallelism and EPLB.

Each rule mirrors a check of vLLM 0.32 (`vllm/config/parallel.py`, `ParallelConfig`, and
`vllm/model_executor/layers/fused_moe/layer.py`) or of vllm-ascend 0.23
(`vllm_ascend/platform.py`), cited beside it, or names a combination the engine runs as another
config (an option it ignores), which the study measures once. `tests/space/test_layout_rules.py`
checks each against vLLM's own classes where they can be built without a GPU.
"""

from __future__ import annotations

from typing import Any

from autotune.engine import DEVICE_FACTORS, devices_of
from autotune.space._setting import Setting
from autotune.vocab.platform import Platform

# Options that change nothing on a dense model: vLLM builds no MoE layer to apply them to.
MOE_ONLY_OPTIONS = (
    "enable_expert_parallel",
    "enable_eplb",
    "eplb_config",
    "all2all_backend",
    "expert_placement_strategy",
)


def _sizes(s: Setting) -> dict[str, int]:
    return {name: int(1 if s.get(name) is None else s.get(name)) for name in DEVICE_FACTORS}


def _shown(sizes: dict[str, int]) -> dict[str, int]:
    """TP and PP always, the other factors where they are not 1."""
    keep = ("tensor_parallel_size", "pipeline_parallel_size")
    return {n: v for n, v in sizes.items() if v != 1 or n in keep}


def ep_size(s: Setting) -> int:
    """The expert-parallel group: TP x PCP x DP ranks ("MoE layers will be sharded according to
    the product of the tensor, prefill-context, and data parallel sizes", ParallelConfig)."""
    sizes = _sizes(s)
    return (
        sizes["tensor_parallel_size"]
        * sizes["prefill_context_parallel_size"]
        * sizes["data_parallel_size"]
    )


def parallel_sizes_positive(s: Setting) -> str | None:
    sizes = {
        **_sizes(s),
        "decode_context_parallel_size": int(s.get("decode_context_parallel_size")),
    }
    if min(sizes.values()) >= 1:
        return None
    shown = [f"{name} ({value})" for name, value in _shown(sizes).items()]
    return f"{', '.join(shown[:-1])} and {shown[-1]} must be >= 1"


def parallel_vs_devices(s: Setting) -> str | None:
    """One device per rank: TP x PP x PCP x DP of them (a DP rank is a world of its own)."""
    sizes = _shown(_sizes(s))
    need = devices_of(s.options)
    if need > s.devices and min(_sizes(s).values()) >= 1:
        names = " * ".join(sizes)
        values = " * ".join(str(v) for v in sizes.values())
        return f"{names} ({values}) must be <= the devices given ({s.devices})"
    return None


def dcp_vs_tp(s: Setting) -> str | None:
    # ParallelConfig._validate_parallel_config: DCP reuses the TP ranks without PCP.
    tp = int(s.get("tensor_parallel_size"))
    pcp = int(s.get("prefill_context_parallel_size"))
    dcp = int(s.get("decode_context_parallel_size"))
    if min(tp, pcp, dcp) < 1:
        return None
    if pcp == 1 and tp % dcp:
        return f"tp_size={tp} must be divisible by dcp_size={dcp}"
    if pcp > 1 and dcp not in (1, pcp, tp * pcp):
        valid = sorted({1, pcp, tp * pcp})
        return (
            "When PCP is enabled, DCP must be disabled, span the PCP axis, or span the full "
            f"TP x PCP axis. Got TP={tp}, PCP={pcp}, DCP={dcp}; valid DCP sizes are {valid}"
        )
    return None


def _moe_options_set(s: Setting) -> list[str]:
    """The MoE-only options `s` sets to something other than off."""
    return [name for name in MOE_ONLY_OPTIONS if s.options.get(name) not in (None, False, {}, "")]


def moe_options_on_dense(s: Setting) -> str | None:
    # A dense model has no expert to place: the engine is the one without these options.
    if s.model is None or s.model.is_moe:
        return None
    used = _moe_options_set(s)
    if used:
        return (
            f"{', '.join(used)} apply to mixture-of-experts models only; this model is dense: "
            "the same engine as without them"
        )
    return None


def expert_parallel_of_one(s: Setting) -> str | None:
    # FusedMoEParallelConfig: use_ep = enable_expert_parallel and TP x PCP x DP > 1.
    if s.get("enable_expert_parallel") and ep_size(s) == 1 and not s.get("enable_eplb"):
        return (
            "enable_expert_parallel over one rank (TP x PCP x DP = 1) splits no expert: the "
            "same engine as without it"
        )
    return None


def all2all_without_dispatch(s: Setting) -> str | None:
    # FusedMoEParallelConfig.use_all2all_kernels = dp_size > 1 and use_ep: the backend moves
    # tokens between DP ranks' experts; without both it is never called.
    backend = s.options.get("all2all_backend")
    if backend is None:
        return None
    dp = int(s.get("data_parallel_size"))
    if not (s.get("enable_expert_parallel") and dp > 1 and ep_size(s) > 1):
        return (
            f"all2all_backend ({backend}) is used only with expert parallel and "
            f"data_parallel_size > 1: the same engine as without it"
        )
    return None


def _redundant(s: Setting) -> int:
    return int(s.nested("eplb_config", "num_redundant_experts") or 0)


def eplb_needs_expert_parallel(s: Setting) -> str | None:
    # ParallelConfig._validate_parallel_config (vLLM 0.32), its own words.
    if not s.get("enable_eplb"):
        if _redundant(s):
            return (
                f"num_redundant_experts is set to {_redundant(s)} but EPLB is not enabled. "
                "Either enable EPLB or unset num_redundant_experts."
            )
        return None
    if s.platform not in (Platform.CUDA, "any"):
        return (
            "Expert parallelism load balancing is only supported on CUDA devices or ROCm "
            "devices or XPU devices now."
            + (
                " (vllm-ascend: additional_config.eplb_config)"
                if s.platform == Platform.ASCEND
                else ""
            )
        )
    if not s.get("enable_expert_parallel"):
        return "enable_expert_parallel must be True to use EPLB."
    if ep_size(s) <= 1:
        return (
            "EPLB requires tensor, prefill-context, or data parallelism, but got "
            f"TP={s.get('tensor_parallel_size')}, PCP={s.get('prefill_context_parallel_size')}, "
            f"DP={s.get('data_parallel_size')}."
        )
    return None


def eplb_even_experts(s: Setting) -> str | None:
    # fused_moe/layer.py (vLLM 0.32): EPLB places (experts + redundant) evenly, or raises.
    if not s.get("enable_eplb") or s.model is None or s.model.num_experts is None:
        return None
    size, total = ep_size(s), s.model.num_experts + _redundant(s)
    if size > 1 and total % size:
        return (
            "EPLB currently only supports even distribution of experts across ranks. Got "
            f"{total} experts and {size} EP ranks."
        )
    return None


def ascend_flashcomm_needs_ep(s: Setting) -> str | None:
    # vllm_ascend/platform.py (0.23.0, check_and_update_config): "Flash Comm v1 requires
    # enable_expert_parallel=True for MoE models."
    if s.platform != Platform.ASCEND or not s.nested("additional_config", "enable_flashcomm1"):
        return None
    if s.model is not None and s.model.is_moe and not s.get("enable_expert_parallel"):
        return "Flash Comm v1 requires enable_expert_parallel=True for MoE models."
    return None


LAYOUT_RULES: dict[str, Any] = {
    "parallel_sizes_positive": parallel_sizes_positive,
    "parallel_vs_devices": parallel_vs_devices,
    "dcp_vs_tp": dcp_vs_tp,
    "moe_options_on_dense": moe_options_on_dense,
    "expert_parallel_of_one": expert_parallel_of_one,
    "all2all_without_dispatch": all2all_without_dispatch,
    "eplb_needs_expert_parallel": eplb_needs_expert_parallel,
    "eplb_even_experts": eplb_even_experts,
    "ascend_flashcomm_needs_ep": ascend_flashcomm_needs_ep,
}
