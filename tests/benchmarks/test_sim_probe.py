"""The tuner's speed probe in the simulated benchmark: SimMeasure reads the host's speed as
autotune.study._measure does, sends a fixed rate at rate * speed, reports raw values, and the
tuner's own drift module (`autotune.drift.compared`) undoes the drift."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from sim.landscapes import LANDSCAPES  # noqa: E402
from sim.simulate import simulate  # noqa: E402
from sim.tuning import SimMeasure, Truth, sim_config  # noqa: E402

from autotune.drift import SPEED, compared  # noqa: E402
from autotune.engine import EngineConfig  # noqa: E402
from autotune.space import load_space  # noqa: E402
from autotune.store import TrialRecord  # noqa: E402
from autotune.study._speed import HostSpeed  # noqa: E402

QWEN = LANDSCAPES["qwen32b-a100-slo"]
LATE = 1800.0  # the drift's trough: the host at 74% of its speed


def _config(**params: object) -> EngineConfig:
    space = load_space(QWEN.space)
    options, _ = space.to_engine({**space.baseline_params(), **params})
    return EngineConfig(model="m", args=options)


BEST = {"max_num_seqs": 64, "max_num_batched_tokens": 12518, "gpu_memory_utilization": 0.9,
        "tensor_parallel_size": 4}  # fmt: skip


def _record(number: int, m: object, params: dict[str, object]) -> TrialRecord:
    summary = m.summary  # type: ignore[attr-defined]
    metrics = {k: summary.metric(k) for k in ("request_throughput", "p99_ttft_ms", "p99_tpot_ms")}
    return TrialRecord(
        number=number, state="complete", status="ok", params=params, config=params,
        metrics=metrics, engine=m.engine, measured_at=m.at_s,  # type: ignore[attr-defined]
    )  # fmt: skip


def test_a_probed_run_in_the_trough_is_sent_slower_and_compared_as_at_the_start() -> None:
    truth = Truth(QWEN)
    exact = truth.result(_config(**BEST).args)
    plain = SimMeasure(truth, drift=0.26, clock_s=LATE)(_config(**BEST), Path("."))
    assert plain.summary is not None and SPEED not in plain.engine
    assert plain.summary.ttft_ms.p99 > 2 * exact.p99_ttft_ms  # queued under the fixed rate

    speed = HostSpeed("cuda", spread=0.0)  # the simulated reading is exact here
    probed = SimMeasure(truth, drift=0.26, probe_noise=0.0, speed=speed)
    first = probed(_config(max_num_seqs=48, tensor_parallel_size=4), Path("."))
    assert first.engine[SPEED]["speed"] == 1.0  # the study's first reading is the reference
    probed.clock_s = LATE
    late = probed(_config(**BEST), Path("."))
    facts = late.engine[SPEED]
    assert facts["speed"] < 0.8 and facts["rate"] == pytest.approx(6.0 * facts["speed"])
    assert late.summary is not None  # raw: a slower host under a slower rate
    assert late.summary.tpot_ms.p99 == pytest.approx(exact.p99_tpot_ms / facts["speed"], rel=0.02)
    # The tuner's drift module undoes it: the config as the host was at the study's first
    # reading (its speed then, `speed.reference` here: no noise on the probe), SLOs and all.
    assert speed.reference is not None and 0.95 < speed.reference < 1.0
    cfg = sim_config(QWEN, _config(**BEST).args)
    start = simulate(QWEN.hardware, cfg, QWEN.workload, speed=speed.reference)
    seen = compared([_record(0, first, {"max_num_seqs": 48}), _record(1, late, BEST)])[1]
    assert seen.metric("p99_tpot_ms") == pytest.approx(start.p99_tpot_ms, rel=1e-6)
    assert seen.metric("p99_ttft_ms") == pytest.approx(start.p99_ttft_ms, rel=1e-6)
    assert seen.metric("request_throughput") == pytest.approx(start.request_throughput, rel=1e-6)
    assert seen.speed == pytest.approx(facts["speed"])


def test_without_a_probe_the_measured_values_are_what_the_host_did() -> None:
    truth = Truth(QWEN)
    m = SimMeasure(truth, drift=0.26, clock_s=LATE)(_config(**BEST), Path("."))
    seen = compared([_record(0, m, BEST)])[0]
    assert seen.metric("p99_ttft_ms") == pytest.approx(m.summary.ttft_ms.p99)  # type: ignore[union-attr]
