"""Between two SLOs: configs that miss different bounds are bisected before the GP proposes."""

from __future__ import annotations

import math
from collections.abc import Callable

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from autotune.bench import Summary
from autotune.engine import EngineConfig
from autotune.space import SearchSpace, load_space
from autotune.spec import TuneSpec
from autotune.store import StudyStore
from autotune.study import Harness, Measurement, StudyRunner, make_sampler
from autotune.study._bracket import MARK, MIDPOINT, OPPOSITE, BracketSampler
from autotune.study._speed import HostSpeed
from autotune.study._told import ToldSampler
from study.test_runner import FakeMeasure

SPACE = {
    "max_num_seqs": IntDistribution(8, 512, log=True),
    "max_num_batched_tokens": IntDistribution(512, 16384, log=True),
    "gpu_memory_utilization": FloatDistribution(0.80, 0.98, step=0.01),
    "tensor_parallel_size": CategoricalDistribution([1, 2, 4]),
}
SLOS = ["p99_ttft_ms", "p99_tpot_ms"]


def study_with(points: list[tuple[dict[str, object], dict[str, float]]]) -> optuna.Study:
    """A study told `points` (params, SLO constraints: > 0 missed), bisecting from trial 0."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    base = optuna.samplers.GPSampler(seed=0)  # as the default; it proposes from 10 trials on
    study = optuna.create_study(direction="maximize", sampler=BracketSampler(base, SLOS, after=0))
    for params, constraints in points:
        study.enqueue_trial(params)
        trial = study.ask(SPACE)
        for name in ("failed", *SLOS):
            trial.set_constraint(name, constraints.get(name, 0.0))
        study.tell(trial, 0.0 if any(v > 0 for v in constraints.values()) else 1.0)
    return study


def config(seqs: int, tokens: int = 2048, mem: float = 0.9, tp: int = 4) -> dict[str, object]:
    return {
        "max_num_seqs": seqs,
        "max_num_batched_tokens": tokens,
        "gpu_memory_utilization": mem,
        "tensor_parallel_size": tp,
    }


QUEUE = {"p99_ttft_ms": 80.0}  # a queue: TTFT 81x its bound, TPOT within
SLOW = {"p99_tpot_ms": 0.1}  # batches too large: TPOT 1.1x its bound, TTFT within


def proposed(study: optuna.Study) -> tuple[dict[str, object], object]:
    trial = study.ask(SPACE)
    return trial.params, study._storage.get_trial_system_attrs(trial._trial_id).get(MARK)


def test_configs_missing_different_slos_are_bisected_in_each_parameters_scale() -> None:
    study = study_with([(config(8, 512, 0.80), QUEUE), (config(512, 8192, 0.90), SLOW)])
    params, mark = proposed(study)
    assert mark == MIDPOINT
    assert params == config(64, 2048, 0.85)  # log scales: sqrt(8 * 512), sqrt(512 * 8192)


def test_a_measured_midpoint_makes_the_next_bracket_narrower() -> None:
    study = study_with(
        [(config(8), QUEUE), (config(512), SLOW), (config(64), QUEUE)]  # 64: still a queue
    )
    params, mark = proposed(study)
    assert (mark, params["max_num_seqs"]) == (MIDPOINT, 181)  # sqrt(64 * 512)


def test_no_bracket_across_tensor_parallel_sizes_nor_between_misses_of_one_slo() -> None:
    across = study_with([(config(8, tp=2), QUEUE), (config(512, tp=4), SLOW)])
    assert proposed(across)[1] != MIDPOINT
    both = {"p99_ttft_ms": 3.0, "p99_tpot_ms": 0.2}
    same = study_with([(config(8), QUEUE), (config(512), both)])
    assert proposed(same)[1] != MIDPOINT


def test_a_one_sided_group_gets_the_opposite_config_once() -> None:
    study = study_with([(config(8, 512, 0.80), QUEUE)])
    params, mark = proposed(study)
    assert (mark, params) == (OPPOSITE, config(512, 16384, 0.98))
    opposite = study.trials[-1]
    for name in ("failed", *SLOS):
        study._storage.set_trial_system_attr(opposite._trial_id, f"constraints:{name}", 0.0)
    study._storage.set_trial_system_attr(opposite._trial_id, "constraints:p99_ttft_ms", 40.0)
    study.tell(opposite.number, 0.0)  # the opposite misses the same SLO
    assert proposed(study)[1] is None  # opposed once: the base sampler proposes


def test_an_opposite_that_fails_to_start_brackets_with_the_miss() -> None:
    """It took more memory than there is (an OOM): the boundary and the strip lie between."""
    study = study_with([(config(8, 512, 0.80), QUEUE)])
    assert proposed(study)[1] == OPPOSITE
    study.tell(study.trials[-1].number, 0.0)  # no measurement: no SLO constraints
    params, mark = proposed(study)
    assert (mark, params) == (MIDPOINT, config(64, 2896, 0.89))
    midpoint = study.trials[-1]  # it misses TPOT: a bracket of two misses, not toward the OOM
    for name, value in {"failed": 0.0, **{n: 0.0 for n in SLOS}, **SLOW}.items():
        study._storage.set_trial_system_attr(midpoint._trial_id, f"constraints:{name}", value)
    study.tell(midpoint.number, 0.0)
    params, mark = proposed(study)
    assert (mark, params["max_num_seqs"]) == (MIDPOINT, 23)  # sqrt(8 * 64)


def test_once_a_config_meets_both_slos_the_base_sampler_refines() -> None:
    study = study_with([(config(8), QUEUE), (config(512), SLOW), (config(64), {})])
    assert proposed(study)[1] is None


def test_a_running_trial_counts_as_tried() -> None:
    study = study_with([(config(8), QUEUE), (config(512), SLOW)])
    first, _ = proposed(study)  # asked, still running
    second, mark = proposed(study)
    assert first == config(64) and second != first and mark != MIDPOINT


def strip(seqs: int) -> dict[str, float]:
    """A trade-off along max_num_seqs: a queue below 50 sequences, TPOT too long above 80."""
    return {
        "p99_ttft_ms": max(-0.5, 100.0 * (50 - seqs) / 50),
        "p99_tpot_ms": (seqs - 80) / 400,
    }


def test_bisection_finds_a_narrow_strip_that_the_corners_miss() -> None:
    """The strip is 0.11 of max_num_seqs' log range; bisection from the corners finds it in
    three midpoints (it halves the bracket each time, log2(1 / 0.11) = 3.2)."""
    study = study_with([(config(8), strip(8)), (config(512), strip(512))])
    for n in range(1, 5):
        params, mark = proposed(study)
        assert mark == MIDPOINT
        seqs = int(params["max_num_seqs"])  # type: ignore[call-overload]
        trial = study.trials[-1]
        study._storage.set_trial_system_attr(trial._trial_id, "constraints:failed", 0.0)
        for name, value in strip(seqs).items():
            study._storage.set_trial_system_attr(trial._trial_id, f"constraints:{name}", value)
        study.tell(trial.number, 1.0)
        if 50 <= seqs <= 80:
            assert n <= 3
            break
    else:
        raise AssertionError("the strip was not found")
    assert math.log(50) <= math.log(seqs) <= math.log(80)


def test_the_default_gp_brackets_under_two_slos_on_a_probed_study_only(
    make_spec: Callable[..., TuneSpec],
) -> None:
    space = load_space("cpu-quick")
    two = make_spec(search="goal", sampler="auto", slos={"p99_ttft_ms": 500, "p99_tpot_ms": 50})
    told = make_sampler(two, space, probing=True)
    assert isinstance(told, ToldSampler) and isinstance(told.base, BracketSampler)
    assert isinstance(told.base.base, optuna.samplers.GPSampler)
    unprobed = make_sampler(two, space, probing=False)  # a miss may be the host's: no bracket
    assert isinstance(unprobed, ToldSampler)
    assert isinstance(unprobed.base, optuna.samplers.GPSampler)
    one = make_spec(search="goal", sampler="auto", slos={"p99_ttft_ms": 500})
    told = make_sampler(one, space, probing=True)
    assert isinstance(told, ToldSampler) and isinstance(told.base, optuna.samplers.GPSampler)
    tpe = make_spec(search="goal", sampler="tpe", slos={"p99_ttft_ms": 500, "p99_tpot_ms": 50})
    assert not isinstance(make_sampler(tpe, space, probing=True).base, BracketSampler)  # type: ignore[attr-defined]


def test_a_default_study_under_two_slos_bisects_between_its_misses(
    make_spec: Callable[..., TuneSpec],
    space: SearchSpace,
    summary_of: Callable[..., Summary],
) -> None:
    """`autotune tune`'s default search (goal, GP, probed) on an engine whose TTFT queues below 16
    sequences and whose TPOT is too long above 48: a marked midpoint lies, in max_num_seqs'
    log scale, halfway between two configs that missed different SLOs, and the study ends with
    a config that meets both."""

    def engine(index: int, config: EngineConfig) -> Measurement:
        seqs = int(config.args["max_num_seqs"])
        ttft = 200.0 * max(1.0, 16 / seqs) ** 4
        tpot = 40.0 * seqs / 32
        summary = summary_of(throughput=10.0 * seqs, ttft_p99=ttft, tpot_p99=tpot)
        return Measurement(status="ok", summary=summary, engine={}, device_s=2.0)

    slos = {"p99_ttft_ms": 1000.0, "p99_tpot_ms": 60.0}
    for seed in range(2):
        spec = make_spec(
            trials=9, search="goal", sampler="auto", seed=seed, study=f"s{seed}", slos=slos
        )
        measure = FakeMeasure(summary_of, script=engine)
        harness = Harness(spec, space, measure, speed=HostSpeed("cpu"))  # a probed study
        StudyRunner(harness, StudyStore(spec.storage_url)).run()
        trials = optuna.load_study(study_name=spec.study, storage=spec.storage_url).trials
        marked = [t for t in trials if t.system_attrs.get(MARK) == MIDPOINT]
        assert marked, seed
        seqs = [int(t.params["max_num_seqs"]) for t in trials]
        first = marked[0]
        missed = {
            t.number: frozenset(n for n in slos if t.constraints[n] > 0)
            for t in trials[: first.number]
        }
        assert any(  # the midpoint of two earlier misses of different SLOs
            missed[a]
            and missed[b]
            and not missed[a] & missed[b]
            and abs(math.log(seqs[first.number]) - math.log(seqs[a] * seqs[b]) / 2) < 0.05
            for a in missed
            for b in missed
        ), seed
        assert any(16 <= n <= 48 for n in seqs), seed
