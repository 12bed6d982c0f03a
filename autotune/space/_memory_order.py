"""Which configs need more memory than others: the order that lets an OOM teach the search.

Each parameter has a memory order: `up` (a larger value needs more memory: max_num_seqs, the
KV-cache size, gpu_memory_utilization), `down` (tensor_parallel_size: more devices, less per
device), `none` (no effect on the memory that runs out: block_size, prefix caching), a list of
choices from least to most memory (enforce_eager: [true, false]), or, when nothing is known,
`exact`: two configs are comparable only if they agree on it.

A config that needs at least as much memory as a known OOM config on every parameter would run
out of memory too (`needs_at_least`), and `repair` proposes the smallest step back from an OOM
config towards what is known to fit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from autotune.space._params import BoolParam, CategoricalParam, FloatParam, IntParam, Parameter
from autotune.space._space import SearchSpace

EXACT = "exact"

# Defaults by vLLM option name (a parameter's `memory` field overrides them).
DEFAULT_MEMORY: dict[str, str | list[Any]] = {
    "max_num_seqs": "up",
    "max_num_batched_tokens": "up",
    "max_model_len": "up",
    "kv_cache_memory_bytes": "up",
    "gpu_memory_utilization": "up",
    "num_gpu_blocks_override": "up",
    "max_cudagraph_capture_size": "up",
    "tensor_parallel_size": "down",
    "pipeline_parallel_size": "down",
    "enforce_eager": [True, False],  # graphs (false) take memory of their own
    "enable_chunked_prefill": [True, False],  # without it a step holds a whole prompt
    "dtype": ["float16", "bfloat16", "half", "auto", "float32", "float"],
    "block_size": "none",
    "enable_prefix_caching": "none",
    "kv_cache_dtype": "none",  # changes how many tokens fit, not how much memory is reserved
    "swap_space": "none",
}

# Knobs a repair turns down, most direct first.
REPAIR_KNOBS = (
    "kv_cache_memory_bytes",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
)


def memory_order(param: Parameter) -> str | list[Any]:
    """`up`, `down`, `none`, a list (least memory first) or `exact` for this parameter."""
    if param.memory is not None:
        return param.memory
    option = param.target_option
    if option is None:
        return EXACT  # env vars and variants: unknown effect
    order = DEFAULT_MEMORY.get(option, EXACT)
    if isinstance(order, list) and isinstance(param, CategoricalParam | BoolParam):
        choices = list(param.distribution().choices)  # type: ignore[attr-defined]
        if not all(any(c == o for o in order) for c in choices):
            return EXACT  # a choice the default order does not rank
    return order


def _rank(order: str | list[Any], value: Any) -> float | None:
    if value is None:
        return None
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if order == "up":
        return float(value) if numeric else None  # a derived choice: ranks with itself only
    if order == "down":
        return -float(value) if numeric else None
    if isinstance(order, list):
        for i, item in enumerate(order):
            if type(item) is type(value) and item == value:
                return float(i)
    return None


def needs_at_least(space: SearchSpace, a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether config `a` needs at least the memory of config `b` on every parameter."""
    for param in space.parameters:
        order = memory_order(param)
        va, vb = a.get(param.name), b.get(param.name)
        if order == "none":
            continue
        if order == EXACT:
            if va != vb or type(va) is not type(vb):
                return False
            continue
        ra, rb = _rank(order, va), _rank(order, vb)
        if ra is None or rb is None:
            if va != vb:
                return False
        elif ra < rb:
            return False
    return True


def comparable(space: SearchSpace, a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two configs agree on every parameter whose effect on memory is unknown."""
    return all(
        a.get(p.name) == b.get(p.name) and type(a.get(p.name)) is type(b.get(p.name))
        for p in space.parameters
        if memory_order(p) == EXACT
    )


def dominating_oom(
    space: SearchSpace, params: Mapping[str, Any], ooms: Iterable[tuple[int, Mapping[str, Any]]]
) -> int | None:
    """The number of a known OOM config that `params` needs at least the memory of, if any."""
    for number, oom_params in ooms:
        if needs_at_least(space, params, oom_params):
            return number
    return None


def repair(
    space: SearchSpace, params: Mapping[str, Any], fits: Iterable[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """Params one step back from an OOM config, or None if no memory knob can be turned down.

    The first knob of `REPAIR_KNOBS` that the space tunes and that is above its low end is set
    halfway (geometrically for log-scaled ones) between its OOM value and the largest value
    known to fit (a measured config's value below it, else the knob's low end), on its grid.
    Halving the gap is the smallest change that still halves what is unknown about the boundary.
    """
    fitting = list(fits)
    by_option = {p.target_option: p for p in space.parameters if p.target_option}
    for knob in REPAIR_KNOBS:
        param = by_option.get(knob)
        if not isinstance(param, IntParam | FloatParam):
            continue
        current = params.get(param.name)
        if current is None or current <= param.low:
            continue
        below = [f[param.name] for f in fitting if f.get(param.name) is not None]
        below = [v for v in below if v < current]
        floor = max(below) if below else param.low
        value = _snap(param, _between(param, floor, current), floor, current)
        if value is not None:
            return {**params, param.name: value}
    return None


def _between(param: IntParam | FloatParam, low: float, high: float) -> float:
    if param.log and low > 0:
        return math.sqrt(low * high)
    return (low + high) / 2


def _snap(param: IntParam | FloatParam, value: float, floor: float, ceiling: float) -> Any:
    """The grid value nearest `value` that is >= floor and < ceiling; None if there is none."""
    if isinstance(param, IntParam):
        step = param.step
        k = math.floor((value - param.low) / step)
        snapped: float = param.low + k * step
        if snapped >= ceiling:
            snapped -= step
        return int(snapped) if floor <= snapped < ceiling else None
    if param.step is not None:
        k = math.floor((value - param.low) / param.step + 1e-9)
        snapped = round(param.low + k * param.step, 10)
        if snapped >= ceiling:
            snapped = round(snapped - param.step, 10)
        return snapped if floor <= snapped < ceiling else None
    return value if floor <= value < ceiling else None
