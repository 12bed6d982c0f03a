"""How a study searches: what Optuna is told, and which sampler proposes.

`search: goal` (the default) searches for what the user will deploy: the first objective, under
the SLO, error-rate and failure constraints; every objective is still measured and stored, and
the Pareto front of all of them is what `show`, `export` and the dashboard read.
`search: pareto` tells Optuna every objective, with no preference among them.

Samplers: `tpe`, `gp` (Optuna's Gaussian-process sampler, constraints included; needs torch
and scipy), `random`, `nsga2`; `auto` is the default of the search: `gp` for goal,
`tpe` for pareto (see docs/benchmarks.md for the figures that chose it). The GP's first
proposals after the baseline are a Latin hypercube (`_design`), not random draws.
"""

from __future__ import annotations

import importlib.util
import logging

import optuna

from autotune.inputs.limits import MAX_SEED
from autotune.search._design import LatinStart
from autotune.search._told import ToldSampler
from autotune.spec import TuneSpec
from autotune.vocab.objectives import Objective

logger = logging.getLogger(__name__)

# Chosen by benchmarks/search_efficiency.py --landscape; its figures: docs/benchmarks.md.
DEFAULT_SAMPLER = {"goal": "gp", "pareto": "tpe"}
GP_STARTUP = 4  # completed trials (the baseline and the design's) before the GP proposes


def told_objectives(spec: TuneSpec) -> list[Objective]:
    """The objectives Optuna is told: the first one (goal search) or all (pareto)."""
    return list(spec.objectives[:1]) if spec.search == "goal" else list(spec.objectives)


def sampler_name(spec: TuneSpec) -> str:
    """The sampler that runs: the spec's, or the search's default (`gp` where its libraries
    are installed, else `tpe`)."""
    if spec.sampler != "auto":
        return spec.sampler
    name = DEFAULT_SAMPLER[spec.search]
    if name == "gp" and not _gp_available():
        logger.warning("the GP sampler needs torch and scipy; searching with TPE instead")
        return "tpe"
    return name


def _gp_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "scipy"))


def make_sampler(spec: TuneSpec, offset: int = 0) -> optuna.samplers.BaseSampler:
    """The spec's sampler, seeded with `spec.seed + offset` (a resumed study passes the number
    of trials it has, so that it does not propose its first configs again)."""
    # Folded into numpy's seed range: a seed near its top plus a resumed study's offset.
    sampler = _base_sampler(spec, (spec.seed + offset) % (MAX_SEED + 1))
    if isinstance(sampler, optuna.samplers.RandomSampler):
        return sampler  # it reads nothing of the study
    slos = [*spec.slos, *spec.relative_slos]  # a relative SLO is a constraint once fixed
    if not slos:
        return sampler  # without SLOs it would be told the stored values
    return ToldSampler(sampler, slos)  # SLO constraints on a log scale (see `_told`)


def _base_sampler(spec: TuneSpec, seed: int) -> optuna.samplers.BaseSampler:
    name = sampler_name(spec)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "gp":
        # Its first proposals after the baseline (one of its GP_STARTUP) are a Latin
        # hypercube (`_design`), not random draws (docs/benchmarks.md has what it gains).
        # One design per study (spec.seed): a resumed study or a joining worker, seeded
        # apart for its own draws, goes on with it.
        opening = LatinStart(GP_STARTUP - 1, seed=spec.seed, random_seed=seed)
        return optuna.samplers.GPSampler(
            seed=seed, n_startup_trials=GP_STARTUP, independent_sampler=opening
        )
    return optuna.samplers.TPESampler(
        seed=seed, multivariate=True, constant_liar=True, n_startup_trials=4
    )
