"""How a study searches, used only by `autotune.study`: which sampler proposes (`make_sampler`,
the Latin-hypercube opening of the GP), what it is told (`told_objectives`, the SLO-aware view),
when the incumbent runs again (`queue_remeasure`), and the scheduler stage of a
MoE study within its winning layout (`StagedSampler`)."""

from autotune.search._design import FIXED, LatinStart, design_index, from_unit
from autotune.search._remeasure import queue_remeasure, remeasure_on
from autotune.search._samplers import make_sampler, sampler_name, told_objectives
from autotune.search._staged import StagedSampler, layout_winner

__all__ = [
    "FIXED",
    "LatinStart",
    "StagedSampler",
    "design_index",
    "from_unit",
    "layout_winner",
    "make_sampler",
    "queue_remeasure",
    "remeasure_on",
    "sampler_name",
    "told_objectives",
]
