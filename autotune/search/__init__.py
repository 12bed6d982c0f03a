"""How a study searches, used only by `autotune.study`: which sampler proposes (`make_sampler`,
the Latin-hypercube opening of the GP), what it is told (`told_objectives`, the SLO-aware view),
and when the incumbent runs again (`queue_remeasure`)."""

from autotune.search._design import FIXED, LatinStart, design_index, from_unit
from autotune.search._remeasure import queue_remeasure, remeasure_on
from autotune.search._samplers import make_sampler, sampler_name, told_objectives

__all__ = [
    "FIXED",
    "LatinStart",
    "design_index",
    "from_unit",
    "make_sampler",
    "queue_remeasure",
    "remeasure_on",
    "sampler_name",
    "told_objectives",
]
