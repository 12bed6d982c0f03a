"""The pure cost model of a simulated vLLM engine: its memory budget and its step time.

No I/O and no randomness. A `Hardware` (model + GPU figures + fitted efficiencies) and a
`SimConfig` (vLLM's option names) give:

- `memory_plan`: vLLM's start-up budget. Inside `gpu_memory_utilization * total`: the weights
  (divided by TP), the activation peak of the profiling run (proportional to
  max_num_batched_tokens) and the non-torch memory (cuBLAS workspace, NCCL buffers); the KV
  cache is what is left. Outside it (vLLM 0.32 captures CUDA graphs after sizing the KV cache):
  the CUDA-graph pool (grows with the largest captured batch, min(2 * max_num_seqs, 512)) and
  the sampler's float32 logits (max_num_seqs rows), plus the CUDA context. A config fails
  start-up when the KV cache is <= 0, cannot hold one max_model_len request, or when budget +
  graphs + sampler exceed the device.
- `step_time`: one scheduler step over `tokens` batched tokens of `seqs` sequences that attend
  to `context` cached tokens in all: fixed overhead + per-sequence CPU overhead + roofline of
  the linear layers (weight read vs FLOPs at a batch-dependent efficiency) + attention (KV
  read) + TP all-reduces.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from autotune.predict import SchedulerConfig

GIB = 2**30


@dataclass(frozen=True)
class ModelSpec:
    """A decoder's shape, from its config.json."""

    name: str
    params: float  # all parameters
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    weight_bytes: int  # bf16 checkpoint as vLLM loads it ("Model loading took ... GiB")

    @property
    def lm_head_params(self) -> float:
        return float(self.hidden * self.vocab)


@dataclass(frozen=True)
class GpuSpec:
    """One device, from its datasheet."""

    name: str
    total_bytes: int  # as nvidia-smi / torch.cuda.mem_get_info report it
    bandwidth: float  # HBM bytes/s
    flops: float  # dense bf16 FLOP/s
    link_bandwidth: float  # NVLink bytes/s per direction, per GPU


@dataclass(frozen=True)
class Costs:
    """Efficiencies and overheads fitted so that known behaviour comes out (see landscapes)."""

    bandwidth_eff: float = 0.80  # share of HBM bandwidth a weight-streaming GEMM reaches
    attention_eff: float = 0.80  # share reached by attention's KV reads (FlashAttention)
    mfu: float = 0.70  # share of dense bf16 peak reached by large serving GEMMs
    # GEMM efficiency grows with the batch: a step of T tokens reaches mfu * T / (T + this)
    # (tile and wave quantization; small batches leave SMs idle).
    gemm_half_tokens: int = 128
    step_overhead_s: float = 1.6e-3  # scheduler + launch + sampler per step, CUDA graphs on
    per_seq_s: float = 12e-6  # per running sequence per step (scheduling, output processing)
    eager_per_layer_s: float = 45e-6  # kernel launches per layer when a batch is not graphed
    allreduce_latency_s: float = 9e-6  # one small NCCL all-reduce over NVLink
    context_bytes: int = int(0.55 * GIB)  # CUDA context + driver, outside vLLM's budget
    non_torch_bytes: int = int(0.45 * GIB)  # cuBLAS workspace etc., inside the budget
    nccl_bytes: int = int(0.30 * GIB)  # NCCL buffers per device when TP > 1
    graph_base_bytes: int = int(0.25 * GIB)
    graph_bytes_per_token_layer: int = 0  # set per model: bytes per captured token per layer


@dataclass(frozen=True)
class Hardware:
    model: ModelSpec
    gpu: GpuSpec
    costs: Costs
    gpus: int = 1  # devices on the host (TP must fit)


@dataclass(frozen=True)
class SimConfig:
    """The engine options the model reads (vLLM's names, underscores)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    gpu_memory_utilization: float = 0.92
    tensor_parallel_size: int = 1
    enable_chunked_prefill: bool = True
    block_size: int = 16
    kv_cache_dtype: str = "auto"
    max_model_len: int = 8192
    enforce_eager: bool = False
    max_cudagraph_capture_size: int | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any], defaults: SimConfig) -> SimConfig:
        """Options as the tuner writes them (dashes or underscores); others are ignored."""
        names = {f.name for f in fields(cls)}
        given = {str(k).replace("-", "_").lstrip("_"): v for k, v in options.items()}
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = given.get(f.name)
            if value is None:
                continue
            default = getattr(defaults, f.name)
            if isinstance(default, bool):
                values[f.name] = value if isinstance(value, bool) else str(value) in ("1", "true")
            elif isinstance(default, int) or f.name == "max_cudagraph_capture_size":
                values[f.name] = int(value)
            elif isinstance(default, float):
                values[f.name] = float(value)
            else:
                values[f.name] = str(value)
        assert set(values) <= names
        return replace(defaults, **values)

    @property
    def capture_size(self) -> int:
        """The largest batch run as a CUDA graph (0 when eager), as vLLM 0.32 derives it."""
        if self.enforce_eager:
            return 0
        size = self.max_cudagraph_capture_size
        if size is None:
            size = min(2 * self.max_num_seqs, 512)
        return min(size, self.max_num_batched_tokens)


@dataclass(frozen=True)
class MemoryPlan:
    """One device's memory at start-up; `failure` is None when the engine starts."""

    weights: int
    activation: int
    kv_bytes: int
    kv_tokens: int
    num_blocks: int
    kv_bytes_per_token: int
    outside: int  # CUDA graphs + sampler + context, outside the budget
    budget: int
    failure: str | None  # "oom", "kv_capacity" or "invalid_config"
    reason: str = ""


def kv_bytes_per_token(hw: Hardware, cfg: SimConfig) -> int:
    """K and V of every layer, this device's share of the KV heads (replicated below TP)."""
    m = hw.model
    dtype = 1 if cfg.kv_cache_dtype.startswith("fp8") else 2
    heads = max(1, m.kv_heads // cfg.tensor_parallel_size)
    return 2 * m.layers * heads * m.head_dim * dtype


def invalid_reason(hw: Hardware, cfg: SimConfig) -> str | None:
    """vLLM's own argument checks (pydantic `Value error, ...`), or None."""
    tp = cfg.tensor_parallel_size
    if cfg.max_num_batched_tokens < cfg.max_num_seqs:
        return (
            f"max_num_batched_tokens ({cfg.max_num_batched_tokens}) must be greater than or "
            f"equal to max_num_seqs ({cfg.max_num_seqs})"
        )
    if not cfg.enable_chunked_prefill and cfg.max_num_batched_tokens < cfg.max_model_len:
        return (
            f"max_num_batched_tokens ({cfg.max_num_batched_tokens}) is smaller than "
            f"max_model_len ({cfg.max_model_len})"
        )
    if tp < 1 or hw.model.heads % tp or tp > hw.gpus:
        return (
            f"tensor_parallel_size {tp} must divide {hw.model.heads} heads and fit {hw.gpus} GPUs"
        )
    return None


def memory_plan(hw: Hardware, cfg: SimConfig) -> MemoryPlan:
    m, c, tp = hw.model, hw.costs, cfg.tensor_parallel_size
    total = hw.gpu.total_bytes
    budget = math.ceil(cfg.gpu_memory_utilization * total)
    weights = m.weight_bytes // tp
    # The profiling run's peak: the MLP's gate/up output and a few hidden-wide tensors per
    # token, plus the sampler's dummy run over max_num_seqs rows of float32 logits.
    per_token = (2 * m.intermediate // tp + 4 * m.hidden) * 2
    activation = cfg.max_num_batched_tokens * per_token
    non_torch = c.non_torch_bytes + (c.nccl_bytes if tp > 1 else 0)
    kv = budget - weights - activation - non_torch
    graphs = 0
    if cfg.capture_size:
        graphs = c.graph_base_bytes + cfg.capture_size * m.layers * c.graph_bytes_per_token_layer
    sampler = cfg.max_num_seqs * m.vocab * 4 * 2  # logits + probabilities, float32
    outside = graphs + sampler + c.context_bytes
    per_kv = kv_bytes_per_token(hw, cfg)
    blocks = max(0, kv) // (per_kv * cfg.block_size)
    tokens = blocks * cfg.block_size
    plan = MemoryPlan(
        weights, activation, max(0, kv), tokens, blocks, per_kv, outside, budget, None
    )
    invalid = invalid_reason(hw, cfg)
    if invalid:
        return replace(plan, failure="invalid_config", reason=invalid)
    free = total - c.context_bytes
    if budget > free:
        return replace(plan, failure="oom", reason="free memory below the requested budget")
    if kv <= 0:
        return replace(plan, failure="oom", reason="no available memory for the cache blocks")
    if budget + outside > total:
        return replace(plan, failure="oom", reason="CUDA graph capture ran out of memory")
    if tokens < cfg.max_model_len:
        return replace(plan, failure="kv_capacity", reason="KV cache below max_model_len")
    return plan


@dataclass(frozen=True)
class StepCost:
    """The step-time terms that do not depend on the batch (precomputed once per config)."""

    weight_read_s: float
    flop_s_per_token: float  # linear layers, per batched token at full efficiency
    gemm_half_tokens: int
    flop_s_per_seq: float  # lm_head, per sampled sequence
    kv_read_s_per_token: float  # attention, per cached token attended
    attn_flop_s_per_pair: float  # prefill attention, per (query, key) pair
    comm_fixed_s: float
    comm_s_per_token: float
    overhead_s: float
    per_seq_s: float
    eager_s: float
    capture: int


def step_cost(hw: Hardware, cfg: SimConfig) -> StepCost:
    m, g, c, tp = hw.model, hw.gpu, hw.costs, cfg.tensor_parallel_size
    flops = g.flops * c.mfu * tp
    comm_fixed = comm_token = 0.0
    if tp > 1:  # two all-reduces per layer (attention out, MLP out), ring algorithm
        comm_fixed = 2 * m.layers * c.allreduce_latency_s * math.log2(2 * tp)
        comm_token = 2 * m.layers * 2 * (tp - 1) / tp * m.hidden * 2 / g.link_bandwidth
    return StepCost(
        weight_read_s=m.weight_bytes / (g.bandwidth * c.bandwidth_eff * tp),
        flop_s_per_token=2 * (m.params - m.lm_head_params) / flops,
        gemm_half_tokens=c.gemm_half_tokens,
        flop_s_per_seq=2 * m.lm_head_params / flops,
        kv_read_s_per_token=kv_bytes_per_token(hw, cfg) / (g.bandwidth * c.attention_eff),
        attn_flop_s_per_pair=4 * m.layers * m.heads * m.head_dim / flops,
        comm_fixed_s=comm_fixed,
        comm_s_per_token=comm_token,
        overhead_s=c.step_overhead_s,
        per_seq_s=c.per_seq_s,
        eager_s=c.eager_per_layer_s * m.layers,
        capture=cfg.capture_size,
    )


def slowed(cost: StepCost, speed: float) -> StepCost:
    """The step costs of a host `speed` times as fast (every seconds term over `speed`)."""
    if speed == 1.0:
        return cost
    names = [f.name for f in fields(cost) if f.name.endswith("_s") or "_s_per_" in f.name]
    return replace(cost, **{name: getattr(cost, name) / speed for name in names})


@dataclass(frozen=True)
class RooflineTimer:
    """`step_time` of one config's costs, as the scheduler (`autotune.predict`) asks for it."""

    cost: StepCost

    def duration(self, tokens: int, seqs: int, context: int, pairs: int) -> float:
        return step_time(self.cost, tokens, seqs, context, pairs)


def scheduler_config(cfg: SimConfig, memory: MemoryPlan) -> SchedulerConfig:
    """The scheduler's view of `cfg` with the KV pool of its memory plan."""
    return SchedulerConfig(
        cfg.max_num_seqs,
        cfg.max_num_batched_tokens,
        memory.num_blocks,
        cfg.block_size,
        cfg.enable_chunked_prefill,
    )


def step_time(cost: StepCost, tokens: int, seqs: int, context: int, prefill_pairs: int) -> float:
    """Seconds of one step: `tokens` batched tokens of `seqs` sequences attending to `context`
    cached tokens in all; `prefill_pairs` (query, key) pairs of the prefill chunks."""
    compute = (tokens + cost.gemm_half_tokens) * cost.flop_s_per_token
    linear = max(cost.weight_read_s, compute + seqs * cost.flop_s_per_seq)
    attention = context * cost.kv_read_s_per_token + prefill_pairs * cost.attn_flop_s_per_pair
    comm = cost.comm_fixed_s + tokens * cost.comm_s_per_token if cost.comm_fixed_s else 0.0
    launch = cost.overhead_s + seqs * cost.per_seq_s
    if tokens > cost.capture:
        launch += cost.eager_s
    return linear + attention + comm + launch
