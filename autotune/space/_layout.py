"""An engine's layout: the parameters that place it on devices, and the layouts a MoE study
tries first.

The layout of a mixture-of-experts deployment (TP x DP x PP, context parallel, expert
parallel) is its largest decision: one MoE model's throughput moved more
than 2x between EP8 and EP1 on one node. So a study of a MoE model decides it first: its first
stage runs `layout_plan` (a few valid layouts, every other parameter at its baseline), its
second searches the rest (the scheduler, and the all-to-all backend and EPLB of the layout)
within the winner (`autotune.search` fixes the layout parameters there). A dense model is never
offered a MoE-only option, nor a model a choice its architecture rules out
(`restrict_to_model`).
"""

from __future__ import annotations

import itertools
from typing import Any

from autotune.engine import DEVICE_FACTORS, devices_of
from autotune.space._constraints import check_constraints
from autotune.space._errors import SpaceError
from autotune.space._host import prune_conditions
from autotune.space._knob_rules import attention_backend_vs_model, mtp_needs_mtp_layers
from autotune.space._layout_rules import MOE_ONLY_OPTIONS
from autotune.space._params import BoolParam, CategoricalParam, Parameter, format_value
from autotune.space._setting import ModelInfo, Setting
from autotune.space._space import SearchSpace

# What places an engine on its devices: the parallel sizes and whether experts are placed whole
# (expert parallel). The all2all backend and EPLB tune a layout once chosen, with the scheduler.
LAYOUT_OPTIONS = frozenset(
    {*DEVICE_FACTORS, "decode_context_parallel_size", "enable_expert_parallel"}
)
# Layouts the first stage runs at most, the baseline's among them.
LAYOUT_LIMIT = 6


def is_layout(param: Parameter) -> bool:
    """Whether `param` sets part of the engine's layout (a parallel size, expert parallel)."""
    return param.env is None and param.target_option in LAYOUT_OPTIONS


def layout_names(space: SearchSpace) -> list[str]:
    """The space's layout parameters, in its order."""
    return [p.name for p in space.parameters if is_layout(p)]


def restrict_to_model(space: SearchSpace, model: ModelInfo | None) -> tuple[SearchSpace, list[str]]:
    """The space without what `model` cannot use, one line each: for a dense model the
    parameters of experts (expert parallel, EPLB, all2all, expert placement, and those set
    only with them); for any model the choices its architecture rules out (an *_MLA attention
    backend for a model without MLA and the others for one with it, the `mtp` draft method
    for a checkpoint without multi-token-prediction layers). Unchanged for an unknown model
    (a hub name)."""
    if model is None:
        return space, []
    space, notes = _without_choices(space, model)
    if model.is_moe:
        return space, notes
    dropped = [
        p.name for p in space.parameters if p.env is None and p.target_option in MOE_ONLY_OPTIONS
    ]
    for p in space.parameters:  # set only with a dropped one
        if p.name not in dropped and any(name in dropped for name in p.only_if or {}):
            dropped.append(p.name)
    if not dropped:
        return space, notes
    if len(dropped) == len(space.parameters):
        raise SpaceError(f"{space.label}: every parameter is for mixture-of-experts models")
    data = space.model_dump()
    data["parameters"] = [p.model_dump() for p in space.parameters if p.name not in dropped]
    kept = SearchSpace.model_validate(data)
    kept._source = space.source
    notes += [
        f"search space {space.name}: dropped parameter {name} before the study: the model is "
        "dense (no experts), so it would change nothing"
        for name in dropped
    ]
    return kept, notes


# The rules a choice breaks by the model's architecture alone, whatever else a config sets.
_MODEL_RULES = (attention_backend_vs_model, mtp_needs_mtp_layers)


def _without_choices(space: SearchSpace, model: ModelInfo) -> tuple[SearchSpace, list[str]]:
    """The space without the categorical choices `_MODEL_RULES` rule out for `model`."""
    notes: list[str] = []
    data = space.model_dump()
    for raw, param in zip(data["parameters"], space.parameters, strict=True):
        if not isinstance(param, CategoricalParam) or param.variants or param.env is not None:
            continue
        why = {}
        for choice in param.choices:
            if choice is None or param.target_option is None:
                continue
            options = {param.target_option: param.engine_value(choice)}
            setting = Setting(options=options, model=model, devices=1, platform=space.platform)
            problem = next((p for rule in _MODEL_RULES if (p := rule(setting))), None)
            if problem is not None:
                why[format_value(choice)] = problem
        kept = [c for c in param.choices if format_value(c) not in why]
        if not why or not kept:
            continue
        raw["choices"] = kept
        if format_value(param.baseline) in why:
            raw["baseline"] = kept[0]
        notes.append(
            f"search space {space.name}: dropped {param.name} {', '.join(why)} before the "
            f"study ({next(iter(why.values()))})"
        )
    if not notes:
        return space, []
    prune_conditions(data)
    restricted = SearchSpace.model_validate(data)
    restricted._source = space.source
    return restricted, notes


def layout_plan(
    space: SearchSpace,
    baseline: dict[str, Any],
    model: ModelInfo | None,
    devices: int,
    limit: int = LAYOUT_LIMIT,
) -> list[dict[str, Any]]:
    """The layouts the first stage of a study of a MoE `model` runs after its baseline: the
    baseline's parameters with the layout ones set otherwise, each an engine of its own that
    breaks no known rule on `devices` devices. Those that fill the most devices come first (a
    node is deployed whole: TP8 against DP8 with EP), then those nearest the baseline (fewest
    parallel sizes changed, then fewest expert options: each shape is tried without and with
    expert parallel before the next shape); at most `limit` - 1 (the baseline is one). Empty
    for a dense or unknown model, or a space without layout parameters."""
    names = layout_names(space)
    if model is None or not model.is_moe or not names:
        return []
    by_name = {p.name: p for p in space.parameters}
    seen = [_engine(space, baseline)]
    found: list[tuple[tuple[int, int, int], dict[str, Any]]] = []
    for values in itertools.product(*(_layout_values(by_name[n], baseline[n]) for n in names)):
        params = {**baseline, **dict(zip(names, values, strict=True))}
        engine = _engine(space, params)
        if engine in seen:
            continue
        seen.append(engine)
        options = engine[0]
        if check_constraints(options, model, devices=devices, platform=space.platform):
            continue
        changed = [n for n in names if params[n] != baseline[n]]
        expert = sum(by_name[n].target_option in MOE_ONLY_OPTIONS for n in changed)
        found.append(((-devices_of(options), len(changed) - expert, expert), params))
    found.sort(key=lambda item: item[0])  # stable: the space's order among equals
    return [params for _, params in found[: max(0, limit - 1)]]


def _layout_values(param: Parameter, baseline: Any) -> list[Any]:
    """The values the plan tries: every choice; a range's baseline only (the search's)."""
    if isinstance(param, CategoricalParam):
        return list(param.choices)
    if isinstance(param, BoolParam):
        return [False, True]
    return [baseline]


def _engine(space: SearchSpace, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    return space.to_engine(space.effective(params))
