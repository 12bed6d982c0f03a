"""The values some vLLM options can take at all, checked against every value a space can set.

A space that tunes `max_num_seqs` from -8 or `gpu_memory_utilization` up to 1.5 is refused when
it is read, naming the field, rather than by every trial's engine at start-up. Only options
whose range is fixed by what they mean are listed (a count of at least one, a fraction of the
device memory); the rest are vLLM's to judge.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.space._params import (
    CategoricalParam,
    FloatParam,
    IntParam,
    Issue,
    Parameter,
    format_value,
)


@dataclass(frozen=True)
class OptionRange:
    """`low <= value <= high` (`low < value` when `low_open`)."""

    low: float
    high: float = math.inf
    low_open: bool = False

    def holds(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        return above and value <= self.high

    def describe(self, value: float | None = None) -> str:
        """The side of the range `value` falls out of (`>= 1`, `<= 2,147,483,647`), or the
        whole range where it is a fraction's."""
        if self.high != math.inf and self.high <= 1:
            return f"in {'(' if self.low_open else '['}{_number(self.low)}, {_number(self.high)}]"
        if value is not None and value > self.high:
            return f"<= {_number(self.high)}"
        return f"{'>' if self.low_open else '>='} {_number(self.low)}"


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


# A count vLLM holds in an int32 (token and sequence budgets, sizes): 1e23 batched tokens was
# passed to the engine as it was.
_COUNT = OptionRange(1, 2**31 - 1)
_BYTES = OptionRange(1, 2**50)  # a KV cache of up to 1 PiB
_FRACTION = OptionRange(0, 1, low_open=True)
_NON_NEGATIVE = OptionRange(0)

OPTION_RANGES: dict[str, OptionRange] = {
    "max_num_seqs": _COUNT,
    "max_num_batched_tokens": _COUNT,
    "max_model_len": _COUNT,
    "block_size": _COUNT,
    "tensor_parallel_size": _COUNT,
    "pipeline_parallel_size": _COUNT,
    "data_parallel_size": _COUNT,
    "max_cudagraph_capture_size": _COUNT,
    "max_num_partial_prefills": _COUNT,
    "max_long_partial_prefills": _COUNT,
    "kv_cache_memory_bytes": _BYTES,
    "gpu_memory_utilization": _FRACTION,
    "swap_space": _NON_NEGATIVE,
    "cpu_offload_gb": _NON_NEGATIVE,
}


def range_issues(parameters: Sequence[Parameter]) -> list[Issue]:
    """`(parameters[i].field, message)` for each bound or choice outside its option's range."""
    issues: list[Issue] = []
    for i, param in enumerate(parameters):
        bound = OPTION_RANGES.get(param.target_option or "")
        if bound is None or len(param.option_path) != 1:
            continue
        for field, value in _values(param):
            engine = param.engine_value(value)
            if isinstance(engine, bool) or not isinstance(engine, int | float):
                continue
            if not bound.holds(engine):
                scaled = f" = {engine:g}" if param.scale is not None else ""
                issues.append(
                    (
                        f"parameters[{i}].{field}",
                        f"{param.target_option} must be {bound.describe(engine)} "
                        f"(got {format_value(value)}{scaled})",
                    )
                )
    return issues


def _values(param: Parameter) -> list[tuple[str, Any]]:
    if isinstance(param, IntParam | FloatParam):
        return [("low", param.low), ("high", param.high)]
    if isinstance(param, CategoricalParam):
        return [(f"choices[{k}]", c) for k, c in enumerate(param.choices) if c is not None]
    return []
