"""The stages of a mixture-of-experts study: its layout first, then the rest within it.

A study whose model is MoE and whose space has layout parameters (`Harness.layout`: TP, DP,
expert parallel, all2all, EPLB, context parallel) runs in two stages, as vLLM's recipes sweep a
MoE deployment (the TP/DP layout first) and as the figures say it should (a MoE model's
throughput moved more than 2x between EP8 and EP1 on one node):

1. **layout**: the baseline, then `space.layout_plan`'s layouts (a few valid ones that fill the
   study's devices, nearest the baseline first), every other parameter at its baseline: the
   layouts compared at fixed scheduler settings. Queued when the study is created.
2. **scheduler**: every proposal after them; the sampler searches the other parameters with the
   layout parameters fixed to the winner of stage 1 (`search.StagedSampler`).

Each trial records its stage (user attribute `stage`), shown with it as it starts and in `show
--format csv|json`. A dense model's study has one stage, as before.
"""

from __future__ import annotations

import logging
from typing import Any

import optuna

from autotune import store as keys
from autotune.search import StagedSampler
from autotune.space import layout_plan
from autotune.study._harness import Harness

logger = logging.getLogger(__name__)


def staged(harness: Harness, sampler: optuna.samplers.BaseSampler) -> optuna.samplers.BaseSampler:
    """The study's sampler: within the winning layout where the study is staged."""
    if not harness.layout:
        return sampler
    first = harness.spec.objectives[0]
    return StagedSampler(sampler, harness.layout, (first.metric, first.direction))


def baseline_attrs(harness: Harness) -> dict[str, Any]:
    """The baseline's user attributes: its role, and in a staged study its stage."""
    attrs: dict[str, Any] = {keys.ROLE: keys.ROLE_BASELINE}
    if harness.layout:
        attrs[keys.STAGE] = keys.STAGE_LAYOUT
    return attrs


def queue_layouts(harness: Harness, study: optuna.Study, baseline: dict[str, Any]) -> int:
    """Queue the layout stage's configs after the baseline (a new staged study); how many."""
    if not harness.layout:
        return 0
    devices = harness.machine.pool.size if harness.machine.pool is not None else 1
    plan = layout_plan(harness.space, baseline, harness.model_info, devices)
    for params in plan:
        study.enqueue_trial(params, user_attrs={keys.STAGE: keys.STAGE_LAYOUT})
    shown = ", ".join(harness.layout)
    logger.info(
        "a mixture-of-experts model: the study runs %d layouts first (%s), every other "
        "parameter at its baseline, then searches the rest within the best",
        len(plan) + 1,
        shown,
    )
    return len(plan)


def stage_of(harness: Harness, attrs: dict[str, Any]) -> str | None:
    """The stage of a trial of user attributes `attrs` (None: an unstaged study). A trial the
    sampler proposed (no stage queued with it) belongs to the scheduler stage."""
    if not harness.layout:
        return None
    return str(attrs.get(keys.STAGE) or keys.STAGE_SCHEDULER)
