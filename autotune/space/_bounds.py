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

from autotune.inputs.limits import MAX_PARAMETER, MAX_SEED
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
        return above and value <= self.high and math.isfinite(value)

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
_SEED = OptionRange(0, MAX_SEED)  # vLLM seeds numpy with it
# Any other tuned number: Optuna holds every value as a float, exact for integers up to 2**53.
_ANY = OptionRange(-MAX_PARAMETER, MAX_PARAMETER)

OPTION_RANGES: dict[str, OptionRange] = {
    "max_num_seqs": _COUNT,
    "max_num_batched_tokens": _COUNT,
    "max_model_len": _COUNT,
    "block_size": _COUNT,
    "tensor_parallel_size": _COUNT,
    "pipeline_parallel_size": _COUNT,
    "data_parallel_size": _COUNT,
    "prefill_context_parallel_size": _COUNT,
    "decode_context_parallel_size": _COUNT,
    "api_server_count": _COUNT,
    "max_cudagraph_capture_size": _COUNT,
    "max_num_partial_prefills": _COUNT,
    "max_long_partial_prefills": _COUNT,
    "kv_cache_memory_bytes": _BYTES,
    "gpu_memory_utilization": _FRACTION,
    "swap_space": _NON_NEGATIVE,
    "cpu_offload_gb": _NON_NEGATIVE,
    "kv_offloading_size": _NON_NEGATIVE,
    "seed": _SEED,
}


def range_issues(parameters: Sequence[Parameter]) -> list[Issue]:
    """`(parameters[i].field, message)` for each bound or choice outside its option's range,
    then for each number of any parameter past +-MAX_PARAMETER."""
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
    return issues + _size_issues(parameters)


def _size_issues(parameters: Sequence[Parameter]) -> list[Issue]:
    """Optuna holds every value as a float, exact for integers only up to 2**53: a bound,
    step, scale or choice past that (or a bound scaled past it) is refused, whatever it sets."""
    issues: list[Issue] = []
    limit = f"{MAX_PARAMETER:,}"
    for i, param in enumerate(parameters):
        checks = [(field, value, param.scale or 1) for field, value in _values(param)]
        checks += [("step", getattr(param, "step", None), 1), ("scale", param.scale, 1)]
        for field, value, times in checks:
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if not _ANY.holds(value * times):
                scaled = f" = {value * times:g}" if times != 1 else ""
                message = f"expected a number from -{limit} to {limit} (got {value}{scaled})"
                issues.append((f"parameters[{i}].{field}", message))
    return issues


def _values(param: Parameter) -> list[tuple[str, Any]]:
    if isinstance(param, IntParam | FloatParam):
        return [("low", param.low), ("high", param.high)]
    if isinstance(param, CategoricalParam):
        return [(f"choices[{k}]", c) for k, c in enumerate(param.choices) if c is not None]
    return []


def option_range_problem(name: str, value: Any) -> str | None:
    """Why `value` cannot be vLLM option `name`'s (`must be >= 1 (got 0)`); None when it can,
    or when the option's range is not one of OPTION_RANGES."""
    bound = OPTION_RANGES.get(name)
    if bound is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if bound.holds(value) else f"must be {bound.describe(value)} (got {value})"


def fixed_range_issues(fixed: dict[str, Any], variants: dict[str, dict[str, Any]]) -> list[Issue]:
    """`(fixed.NAME, message)` and `(variants.V.NAME, message)` for each fixed option value
    outside its range."""
    named = [(f"fixed.{k}", k, v) for k, v in fixed.items()]
    named += [(f"variants.{n}.{k}", k, v) for n, o in variants.items() for k, v in o.items()]
    return [
        (path, f"{name} {problem}")
        for path, name, value in named
        if (problem := option_range_problem(name, value)) is not None
    ]
