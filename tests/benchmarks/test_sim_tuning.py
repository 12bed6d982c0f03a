"""benchmarks/sim/tuning.py and compare.py: the tuner's own study loop scored by the truth."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# `benchmarks` here is tests/benchmarks: import benchmarks/sim as the top-level package `sim`.
sys.path.insert(0, str(REPO / "benchmarks"))

from sim.compare import _median, summarize  # noqa: E402
from sim.landscapes import LANDSCAPES  # noqa: E402
from sim.simulate import simulate  # noqa: E402
from sim.truth import Truth, sim_config  # noqa: E402
from sim.tuning import (  # noqa: E402
    METHODS,
    SimMeasure,
    Step,
    grid_points,
    reached,
    run_method,
)

from autotune.engine import EngineConfig  # noqa: E402
from autotune.space import load_space  # noqa: E402

LLAMA = LANDSCAPES["llama8b-h100-throughput"]
QWEN = LANDSCAPES["qwen32b-a100-slo"]


def test_a_study_of_the_default_search_is_scored_by_the_truth(tmp_path: Path) -> None:
    truth = Truth(LLAMA)
    steps = run_method(LLAMA, METHODS["tpe"], seed=0, trials=3, truth=truth, root=tmp_path)
    assert len(steps) == 3  # one step per launched trial
    space = load_space(LLAMA.space)
    baseline = truth.score(space.to_engine(space.baseline_params())[0])
    assert steps[0].truth == baseline  # after trial 0, export would deploy the baseline
    assert all(b.truth >= 0 for b in steps)
    assert [s.device_s for s in steps] == sorted(s.device_s for s in steps)
    assert steps[0].device_s > 60  # a start-up and the workload's simulated duration


def test_the_noise_moves_what_the_tuner_sees_not_the_truth(tmp_path: Path) -> None:
    truth = Truth(LLAMA)
    space = load_space(LLAMA.space)
    options, _ = space.to_engine(space.baseline_params())
    config = EngineConfig(model="m", args=options)
    quiet = SimMeasure(truth)(config, tmp_path / "quiet")  # a trial folder: its records
    noisy = SimMeasure(truth, noise=0.1, drift=0.26, seed=3)
    seen = [noisy(config, tmp_path / f"noisy-{k}") for k in range(6)]
    assert quiet.summary is not None
    exact = quiet.summary.output_throughput
    assert exact == truth.result(options).output_throughput
    values = [m.summary.output_throughput for m in seen if m.summary is not None]
    assert len(set(values)) == 6 and all(0.6 * exact < v < 1.1 * exact for v in values)


def test_a_slower_host_stretches_a_closed_loop_and_queues_an_open_one() -> None:
    # Closed loop: the same schedule, every step 1/0.8 as long: throughput x0.8, TPOT /0.8.
    truth = Truth(LLAMA)
    options, _ = load_space(LLAMA.space).to_engine(load_space(LLAMA.space).baseline_params())
    fast = truth.result(options)
    slow = simulate(LLAMA.hardware, sim_config(LLAMA, options), LLAMA.workload, speed=0.8)
    assert slow.output_throughput == pytest.approx(0.8 * fast.output_throughput, rel=1e-6)
    assert slow.p50_tpot_ms == pytest.approx(fast.p50_tpot_ms / 0.8, rel=1e-6)
    # Poisson 6 req/s at the SLO landscape's optimum: 10% slower delivers nearly the offered
    # rate still, while the queue more than doubles the p99 TTFT (no linear scaling does).
    best = {"max_num_seqs": 64, "max_num_batched_tokens": 12518,
            "gpu_memory_utilization": 0.90, "tensor_parallel_size": 4}  # fmt: skip
    on_time = Truth(QWEN).result(best)
    late = simulate(QWEN.hardware, sim_config(QWEN, best), QWEN.workload, speed=0.9)
    assert late.output_throughput > 0.95 * on_time.output_throughput
    assert late.p99_ttft_ms > 2 * on_time.p99_ttft_ms
    assert QWEN.score(late) < 0.8 * QWEN.score(on_time)


def test_the_grid_is_auto_tune_sh_order_at_fixed_memory() -> None:
    points = grid_points(load_space(LLAMA.space), LLAMA)
    seqs = [p["max_num_seqs"] for p in points]
    assert seqs == sorted(seqs) and seqs[0] == 16 and seqs[-1] == 1024
    assert {p["gpu_memory_utilization"] for p in points} == {0.92}
    assert all(p["max_num_batched_tokens"] & (p["max_num_batched_tokens"] - 1) == 0 for p in points)


def test_reached_and_medians_count_never_as_worst() -> None:
    steps = [Step(10, 50), Step(20, 96), Step(30, 99)]
    assert reached(steps, 100, 0.95) == (2, 20)
    assert reached(steps, 100, 0.98) == (3, 30)
    assert reached(steps[:2], 100, 0.98) is None
    assert _median([3, None, None]) is None and _median([3, 5, None]) == 5
    table = summarize([steps, steps[:2], [Step(5, 99)]], 100)
    assert table["trials_to_98"] == 3 and table["seeds_95_within_15"] == 3
    long = [Step(k, 90 if k < 10 else 99 if k < 20 else 100) for k in range(1, 21)]
    shares = summarize([long], 100)
    at = (shares["share_at_5"], shares["share_at_8"], shares["share_at_15"], shares["share_at_end"])
    assert at == (0.9, 0.9, 0.99, 1.0)  # the end: after the 20th, the last launched trial


def test_a_seed_deploying_an_slo_miss_is_counted_by_its_last_choice() -> None:
    missed = [Step(10, 99), Step(20, 0, misses=True)]  # the last choice breaks an SLO
    recovered = [Step(10, 0, misses=True), Step(20, 99)]
    nothing = [Step(10, 0)]  # nothing deployed, or a config that does not start: no miss
    table = summarize([missed, recovered, nothing], 100)
    assert (table["seeds_missing_slo"], table["seeds"]) == (1, 3)
    near = [Step(10, 0, misses=True, past=0.008)]  # 0.8% over its bound
    far = [Step(10, 0, misses=True, past=0.05)]
    table = summarize([missed, near, far, nothing], 100)
    assert (table["seeds_missing_slo"], table["seeds_missing_slo_past_2pct"]) == (3, 1)
    assert table["worst_miss"] == 0.05


def test_the_truth_says_how_far_past_its_bound_a_config_is() -> None:
    land = LANDSCAPES["qwen14b-910b-slo"]
    truth = Truth(land)
    options = load_space(land.space).to_engine(load_space(land.space).baseline_params())[0]
    result = truth.result(options)
    worst = max(getattr(result, k) / v - 1 for k, v in land.slos.items())
    assert truth.past(options) == pytest.approx(max(0.0, worst))
    assert (truth.past(options) > 0) == truth.misses(options)


def test_the_truth_tells_an_slo_miss_from_a_failed_start() -> None:
    land = LANDSCAPES["qwen32b-a100-slo"]
    truth = Truth(land)
    space = load_space(land.space)
    defaults = space.to_engine(space.baseline_params())[0]  # TP 1: starts, queues past p99 TTFT
    assert truth.misses(defaults) and truth.score(defaults) == 0
    oom = {**defaults, "gpu_memory_utilization": 0.99}
    assert not truth.result(oom).ok and not truth.misses(oom)
