"""The GP's opening: a Latin hypercube over the space after the baseline, then random draws."""

from __future__ import annotations

import math
from collections.abc import Callable

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from study.fakes import FakeMeasure

from autotune.search import make_sampler
from autotune.search._design import LatinStart
from autotune.search._told import ToldSampler
from autotune.space import SearchSpace
from autotune.spec import TuneSpec
from autotune.store import StudyStore
from autotune.study import Harness, StudyRunner

SPACE = {
    "max_num_seqs": IntDistribution(8, 512, log=True),
    "max_num_batched_tokens": IntDistribution(512, 16384, log=True),
    "gpu_memory_utilization": FloatDistribution(0.80, 0.98, step=0.01),
    "tensor_parallel_size": CategoricalDistribution([1, 2, 4]),
}
BASELINE = {
    "max_num_seqs": 256,
    "max_num_batched_tokens": 2048,
    "gpu_memory_utilization": 0.92,
    "tensor_parallel_size": 1,
}


def unit(value: float, dist: IntDistribution | FloatDistribution) -> float:
    """`value`'s share of its (log) range."""
    low, high, x = float(dist.low), float(dist.high), float(value)
    if dist.log:
        low, high, x = math.log(low), math.log(high), math.log(x)
    return (x - low) / (high - low)


def in_thirds(values: list[float], dist: IntDistribution | FloatDistribution) -> bool:
    """One value in each third of the range (within half a step, which rounding may move)."""
    slack = 0.5 * float(dist.step or 0) / (float(dist.high) - float(dist.low)) + 1e-9
    units = sorted(unit(v, dist) for v in values)
    return all(k / 3 - slack <= u <= (k + 1) / 3 + slack for k, u in enumerate(units))


def proposals(seed: int, n: int) -> list[dict[str, object]]:
    """The params of the baseline (enqueued) and `n` proposals of a study opened by the design."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=LatinStart(3, seed=seed))
    study.enqueue_trial(BASELINE)
    for _ in range(n + 1):
        trial = study.ask(SPACE)
        study.tell(trial, 1.0)
    return [t.params for t in study.trials]


def test_the_design_puts_one_point_in_each_third_of_every_range_and_each_choice_once() -> None:
    for seed in range(20):
        trials = proposals(seed, 3)
        assert trials[0] == BASELINE  # enqueued: not a design point
        design = trials[1:]
        assert sorted(p["tensor_parallel_size"] for p in design) == [1, 2, 4]  # type: ignore[type-var]
        for name, dist in SPACE.items():
            if isinstance(dist, IntDistribution | FloatDistribution):
                assert in_thirds([p[name] for p in design], dist), (seed, name)  # type: ignore[misc]


def test_independent_draws_miss_a_choice_that_the_design_does_not() -> None:
    """What the design is for: three random draws of tensor_parallel_size leave one of
    1, 2, 4 unseen in about 30% of seeds ((2/3)**3); the design in none."""
    missed = 0
    for seed in range(40):
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
        seen = {study.ask(SPACE).params["tensor_parallel_size"] for _ in range(3)}
        missed += len(seen) < 3
    assert missed >= 5
    assert all(
        {p["tensor_parallel_size"] for p in proposals(seed, 3)[1:]} == {1, 2, 4}
        for seed in range(40)
    )


def test_past_the_design_it_draws_at_random_within_the_space() -> None:
    trials = proposals(0, 12)
    beyond = trials[4:]
    assert len({tuple(sorted(p.items())) for p in beyond}) == len(beyond)  # type: ignore[arg-type]
    for params in beyond:
        for name, dist in SPACE.items():
            assert dist._contains(dist.to_internal_repr(params[name]))


def test_seeds_give_other_designs_and_a_seed_the_same() -> None:
    assert proposals(1, 3) == proposals(1, 3)
    assert proposals(1, 3) != proposals(2, 3)


def test_the_default_gp_opens_with_the_design() -> None:
    spec = TuneSpec.model_validate({"study": "s", "model": "m", "slos": {"p99_ttft_ms": 500}})
    sampler = make_sampler(spec)
    assert isinstance(sampler, ToldSampler)
    gp = sampler.base
    assert isinstance(gp, optuna.samplers.GPSampler)
    assert isinstance(gp._independent_sampler, LatinStart)
    assert gp._independent_sampler.size == gp._n_startup_trials - 1  # the baseline is one


def test_a_resumed_study_or_a_joining_worker_goes_on_with_the_same_design() -> None:
    """The design is the study's (its seed); a sampler seeded apart for its own draws, as a
    resumed study's or a joining worker's is, proposes the same design points."""
    assert [LatinStart(3, seed=5, random_seed=r).unit("x", 1) for r in (0, 17)] == [
        LatinStart(3, seed=5).unit("x", 1)
    ] * 2
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=LatinStart(3, seed=5))
    study.enqueue_trial(BASELINE)
    for _ in range(2):
        study.tell(study.ask(SPACE), 1.0)
    study.sampler = LatinStart(3, seed=5, random_seed=99)  # the study resumed
    for _ in range(2):
        study.tell(study.ask(SPACE), 1.0)
    assert [t.params for t in study.trials] == proposals(5, 3)


def test_a_default_study_opens_with_the_design_after_its_baseline(
    make_spec: Callable[..., TuneSpec], space: SearchSpace, measure: FakeMeasure
) -> None:
    """`autotune tune`'s default search (goal, GP): the three trials after the baseline put
    max_num_seqs in each third of its log range and try prefix caching both ways."""
    seeds = space.distributions()["max_num_seqs"]
    assert isinstance(seeds, IntDistribution)
    for seed in range(3):
        spec = make_spec(trials=4, search="goal", sampler="auto", seed=seed, study=f"s{seed}")
        StudyRunner(Harness(spec, space, measure), StudyStore(spec.storage_url)).run()
        trials = StudyStore(spec.storage_url).trials(spec.study)
        assert len(trials) == 4 and trials[0].role == "baseline"
        design = [t.params for t in trials[1:]]
        assert in_thirds([p["max_num_seqs"] for p in design], seeds), seed
        assert {p["enable_prefix_caching"] for p in design} == {True, False}, seed
