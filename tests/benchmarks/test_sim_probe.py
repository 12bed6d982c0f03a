"""benchmarks/sim/probe.py: the host's speed read from a probe before each run (an experiment)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from sim.landscapes import LANDSCAPES  # noqa: E402
from sim.probe import Probe, probe_class, speeds  # noqa: E402
from sim.tuning import SimMeasure, Truth  # noqa: E402

from autotune.engine import EngineConfig  # noqa: E402
from autotune.space import load_space  # noqa: E402

QWEN = LANDSCAPES["qwen32b-a100-slo"]


def test_only_knobs_that_change_a_lone_request_make_a_probe_class() -> None:
    a = probe_class({"max_num_seqs": 8, "gpu_memory_utilization": 0.9, "tensor_parallel_size": 4})
    b = probe_class({"max_num_seqs": 512, "max_num_batched_tokens": 512, "tensor_parallel_size": 4})
    c = probe_class({"max_num_seqs": 8, "tensor_parallel_size": 2})
    assert a == b != c


def test_the_joint_fit_reads_a_drift_shared_by_two_classes() -> None:
    # A host slowing linearly to 0.8 over 2,000 s; class "tp4" decodes 3x as fast as "tp1".
    def speed(t: float) -> float:
        return 1.0 - 0.2 * t / 2000

    probes: list[Probe] = []
    for k in range(11):
        t = 200.0 * k
        klass, level = ("tp1", 10.0) if k % 3 == 0 else ("tp4", 30.0)
        probes.append(Probe(klass, level * speed(t), t))
    read = speeds(probes)
    assert read[0] == 1.0
    for p, s in zip(probes, read, strict=True):
        assert s == pytest.approx(speed(p.at), rel=0.02)
    # A class seen once takes the drift of the others at its time.
    lone = [*probes, Probe("tp2", 17.0, 2200.0)]
    assert speeds(lone)[-1] == pytest.approx(speed(2200.0), rel=0.03)


def _config(**params: object) -> EngineConfig:
    space = load_space(QWEN.space)
    options, _ = space.to_engine({**space.baseline_params(), **params})
    return EngineConfig(model="m", args=options)


def test_a_host_probe_sends_the_run_at_the_hosts_speed_and_undoes_the_drift() -> None:
    truth = Truth(QWEN)
    best = _config(max_num_seqs=64, max_num_batched_tokens=12518, gpu_memory_utilization=0.9,
                   tensor_parallel_size=4)  # fmt: skip
    exact = truth.result(best.args)
    late = 1800.0  # the drift's trough: the host at 74% of its speed
    plain = SimMeasure(truth, drift=0.26, clock_s=late)(best, Path("."))
    probed = SimMeasure(truth, drift=0.26, clock_s=late, probe="host", probe_noise=0.0)
    seen = probed(best, Path("."))
    assert plain.summary is not None and seen.summary is not None
    assert plain.summary.ttft_ms.p99 > 2 * exact.p99_ttft_ms  # queued under the fixed rate
    assert seen.summary.ttft_ms.p99 == pytest.approx(exact.p99_ttft_ms, rel=1e-6)
    assert seen.summary.tpot_ms.p99 == pytest.approx(exact.p99_tpot_ms, rel=1e-6)


def test_an_engine_probe_is_relative_to_its_class_first_run() -> None:
    truth = Truth(QWEN)
    tp4 = _config(max_num_seqs=64, max_num_batched_tokens=12518, tensor_parallel_size=4)
    other = _config(max_num_seqs=48, max_num_batched_tokens=4096, tensor_parallel_size=4)
    measure = SimMeasure(truth, drift=0.26, probe="engine", probe_noise=0.0)
    measure(tp4, Path("."))  # at the start: the class's level
    measure.clock_s = 1800.0  # the trough
    seen = measure(other, Path("."))
    exact = truth.result(other.args)
    assert seen.summary is not None
    assert seen.summary.tpot_ms.p99 == pytest.approx(exact.p99_tpot_ms, rel=0.03)
    with pytest.raises(ValueError, match="probe"):
        SimMeasure(truth, probe="gpu")
