"""The speed probe in a study: a reading before each benchmark, against the study's first, a
fixed rate sent at rate x speed, and trials compared as at the study's start."""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace

import pytest
from support import fake_settings

from autotune.bench import LoadProfile, RequestSpec, Summary
from autotune.devices import SpeedReading
from autotune.drift import (
    SPEED,
    at_probe,
    compared,
    fit_drift,
    probe_weight,
    probed_speed,
    study_drift,
    weight,
)
from autotune.engine import EngineConfig
from autotune.spec import SpecError, TuneSpec
from autotune.status import TrialStatus
from autotune.store import TrialRecord
from autotune.study import Measurement, Workplan, measure
from autotune.study._confirm import Confirmer
from autotune.study._measure import load_measurement
from autotune.study._remeasure import remeasure_on
from autotune.study._speed import HostSpeed, followed, probes_speed


def reading(speed: float) -> SpeedReading:
    return SpeedReading(speed, {"cuda:0": {"copy_s": 1 / speed}})


def test_the_first_reading_is_the_reference_and_a_rate_follows_the_speed() -> None:
    speed = HostSpeed("cuda", spread=0.0)  # a probe without a spread of its own: weight 1
    rate = LoadProfile(rate=10.0)
    first = speed.facts(reading(200.0), rate)
    assert first["speed"] == 1.0 and first["reference"] == 200.0 and first["rate"] == 10.0
    slow = speed.facts(reading(150.0), rate)
    assert slow["speed"] == pytest.approx(0.75) and slow["rate"] == pytest.approx(7.5)
    assert (
        slow["scales"] is True
        and slow["reading"] == 150.0
        and slow["units"] == {"cuda:0": {"copy_s": 1 / 150.0}}
    )
    assert followed(rate, slow) == LoadProfile(rate=7.5)
    # A closed loop has no rate to move; its runs scale. A trace's arrivals are its own.
    closed = speed.facts(reading(100.0), LoadProfile(concurrency=8))
    assert "rate" not in closed and closed["scales"] is True
    assert followed(LoadProfile(concurrency=8), closed) == LoadProfile(concurrency=8)
    trace = speed.facts(reading(100.0), LoadProfile(trace=True, concurrency=4))
    assert trace["scales"] is False and "rate" not in trace
    capped = speed.facts(reading(100.0), LoadProfile(rate=4.0, concurrency=2))
    assert followed(LoadProfile(rate=4.0, concurrency=2), capped) == LoadProfile(
        rate=2.0, concurrency=2
    )
    assert followed(rate, None) is rate


def test_readings_within_the_probes_own_spread_move_nothing() -> None:
    assert weight([]) == 0.0 and weight([math.log(100.0)]) == 0.0
    steady = [math.log(100.0 * (1 + d)) for d in (0.0, 0.02, -0.015, 0.01, -0.02, 0.005)]
    assert weight(steady) == 0.0  # what a probe with a 2% spread gives on a steady host
    moved = [*steady, math.log(70.0)]
    assert 0.9 < weight(moved) < 1.0
    assert weight(steady, spread=0.0) == 1.0

    speed = HostSpeed("cuda")  # the probe's own spread: PROBE_SPREAD (2%)
    rate = LoadProfile(rate=10.0)
    for value in (100.0, 102.0, 98.5, 101.0):
        facts = speed.facts(reading(value), rate)
        assert facts["weight"] == 0.0 and facts["speed"] == 1.0 and facts["rate"] == 10.0
    assert facts["reading"] == 101.0  # recorded as read
    slow = speed.facts(reading(70.0), rate)  # the host slowed by 30%: that is no probe noise
    assert slow["weight"] > 0.95 and slow["speed"] == pytest.approx(0.7, rel=0.02)
    assert slow["rate"] == pytest.approx(10.0 * slow["speed"])
    # From then on the host is known to move, and a reading counts nearly in full.
    back = speed.facts(reading(95.0), rate)
    assert 0.9 < back["weight"] < 1.0 and back["speed"] == pytest.approx(0.95, rel=0.01)


def test_a_resumed_study_keeps_its_first_reference() -> None:
    speed = HostSpeed("cpu")
    speed.adopt([{}, {"startup_s": 3.0}, {SPEED: {"reference": 80.0}}, {SPEED: {"reference": 1}}])
    assert speed.reference == 80.0 and speed.readings == [math.log(80.0)]
    assert speed.facts(reading(40.0), LoadProfile(concurrency=1))["speed"] == pytest.approx(
        0.5, rel=0.01
    )
    speed.adopt([{SPEED: {"reference": 5.0}}])  # set once: never replaced
    assert speed.reference == 80.0
    # The stored readings count toward the weight: a host seen to move before the resume
    # is corrected from the first trial after it.
    moved = HostSpeed("cpu")
    stored = [{SPEED: {"reference": 100.0, "reading": r}} for r in (100.0, 80.0, 101.0)]
    moved.adopt(stored)
    assert moved.readings == pytest.approx([math.log(r) for r in (100.0, 80.0, 101.0)])
    assert moved.facts(reading(90.0), LoadProfile(concurrency=1))["speed"] == pytest.approx(
        0.9, rel=0.01
    )
    fresh = HostSpeed("cpu")
    fresh.adopt([{SPEED: {"reference": math.nan}}, {SPEED: "garbage"}])
    assert fresh.reference is None


def test_lanes_share_one_reference() -> None:
    speed = HostSpeed("cuda")
    out: list[float] = []

    def one(value: float) -> None:
        out.append(speed.facts(reading(value), LoadProfile(rate=1.0))["reference"])

    threads = [threading.Thread(target=one, args=(v,)) for v in (100.0, 120.0, 140.0, 160.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(out)) == 1


def run(number: int, seqs: int, throughput: float, at: float, probe: float | None,
        scales: bool = True) -> TrialRecord:  # fmt: skip
    metrics = {
        "output_throughput": throughput,
        "p99_tpot_ms": 1000.0 / throughput,
        "duration_s": 10.0,
    }
    engine = {} if probe is None else {SPEED: {"speed": probe, "scales": scales}}
    return TrialRecord(
        number=number, state="complete", status="ok", params={"max_num_seqs": seqs},
        config={"max_num_seqs": seqs}, metrics=metrics, engine=engine, measured_at=at,
        constraints={"p99_tpot_ms": 1000.0 / throughput / 10.0 - 1},
    )  # fmt: skip


def test_probed_runs_are_compared_as_at_the_reference_speed() -> None:
    # Two configs of equal truth (100 tok/s, 10 ms): the second measured on a host at 0.6.
    trials = [run(0, 8, 100.0, 100.0, 1.0), run(1, 16, 60.0, 200.0, 0.6)]
    seen = compared(trials)
    assert [t.metric("output_throughput") for t in seen] == pytest.approx([100.0, 100.0])
    assert [t.metric("p99_tpot_ms") for t in seen] == pytest.approx([10.0, 10.0])
    assert [t.constraints["p99_tpot_ms"] for t in seen] == pytest.approx([0.0, 0.0])
    assert [t.speed for t in seen] == pytest.approx([1.0, 0.6])
    # Unprobed, or a trace's run: as measured.
    assert at_probe(run(2, 8, 60.0, 0.0, None)).metrics["output_throughput"] == 60.0
    assert probed_speed(run(3, 8, 60.0, 0.0, 0.6, scales=False)) is None
    assert probed_speed(run(4, 8, 60.0, 0.0, -1.0)) is None


def test_a_probed_study_is_not_fitted_for_drift_on_top() -> None:
    # Config 8 measured twice, the second run read by the probe at 0.7 where the throughput
    # says 0.7 (and 2% of the run's own): the probe alone undoes it, no fit on top.
    truths = {8: 100.0, 16: 120.0}
    trials = [
        run(0, 8, truths[8] * 1.0, 0.0, 1.0),
        run(1, 16, truths[16] * 0.85, 500.0, 0.85),
        run(2, 8, truths[8] * 0.7 * 1.02, 1000.0, 0.7),  # 2% of the run's own beside it
    ]
    assert study_drift(trials) is None and fit_drift(trials) is not None
    seen = {t.params["max_num_seqs"]: t for t in compared(trials)}
    assert seen[8].runs == 2 and seen[8].metric("output_throughput") == pytest.approx(101.0)
    assert seen[16].metric("output_throughput") == pytest.approx(truths[16])
    assert seen[16].speed == pytest.approx(0.85)
    unprobed = [t.model_copy(update={"engine": {}}) for t in trials]
    assert study_drift(unprobed) is not None  # without a probe the repeats are fitted


def closed(number: int, value: float, read: float, told: float) -> TrialRecord:
    """A closed-loop run (no rate sent) whose probe read `read` against a reference of 100
    and was told `told` at the time (its weight then)."""
    facts = {"reading": read, "reference": 100.0, "speed": told, "scales": True}
    return run(number, number, value, 0.0, None).model_copy(update={"engine": {SPEED: facts}})


def test_a_closed_loop_run_probed_before_the_host_was_seen_to_move_is_corrected_later() -> None:
    # Trial 1 read 80 after a reference of 100: two readings alone are within the probe's
    # own spread only up to ~5%, so it was told 1 (not corrected) at the time. Once the
    # study's readings show the host moving, it is compared at the study's weight now.
    early = [closed(0, 100.0, 100.0, 1.0), closed(1, 80.0, 80.0, 1.0)]
    later = [*early, closed(2, 70.0, 70.0, 0.7), closed(3, 99.0, 99.0, 0.99)]
    w = probe_weight(later)
    assert w is not None and 0.95 < w < 1.0
    seen = compared(later)
    assert seen[1].speed == pytest.approx(0.8**w)
    assert seen[1].metric("output_throughput") == pytest.approx(80.0 / 0.8**w)
    # A steady study's readings weigh 0: nothing is moved.
    steady = [closed(0, 100.0, 100.0, 1.0), closed(1, 98.0, 98.5, 1.0)]
    assert probe_weight(steady) == 0.0 and compared(steady)[1].speed == 1.0
    # A fixed-rate run keeps the speed its rate was sent at: its load cannot be re-sent.
    sent = later[1].model_copy(update={"engine": {SPEED: {**later[1].engine[SPEED], "rate": 5.0}}})
    assert probed_speed(sent, w) == 1.0
    assert probe_weight([run(0, 8, 1.0, 0.0, None)]) is None  # no reading, no weight


CONFIG = EngineConfig(model="tiny", served_model_name="tiny", args={"max_num_seqs": 4})
REQUESTS = [RequestSpec([1, 2, 3, 4], 4) for _ in range(40)]
ENV = {"FAKE_ENGINE_STARTUP_S": "0.1", "FAKE_ENGINE_STEP_S": "0.001"}


class Reader:
    """A probe that reads what it is told, and says what it was shown."""

    def __init__(self, *speeds: float) -> None:
        self.speeds = list(speeds)
        self.seen: list[tuple[str, dict[str, str], str | None]] = []

    def __call__(
        self, platform: str, env: Mapping[str, str], cores: str | None
    ) -> SpeedReading | None:
        self.seen.append((platform, dict(env), cores))
        value = self.speeds.pop(0)
        return None if value <= 0 else reading(value)


def test_a_trial_records_its_reading_and_sends_its_rate_at_the_hosts_speed(
    tmp_path: Path,
) -> None:
    reader = Reader(100.0, 50.0, 0.0)
    speed = HostSpeed("cpu", cores="0", reader=reader, spread=0.0)
    plan = Workplan([], REQUESTS, LoadProfile(rate=40.0), {}, speed=speed)
    settings = fake_settings(tmp_path, extra_env=ENV)
    first = measure(CONFIG, tmp_path / "t0", plan, settings)
    slow = measure(CONFIG, tmp_path / "t1", plan, settings)
    assert first.ok and slow.ok, (first.reason, slow.reason)
    assert first.engine[SPEED]["speed"] == 1.0 and first.engine[SPEED]["rate"] == 40.0
    assert slow.engine[SPEED]["speed"] == 0.5 and slow.engine[SPEED]["rate"] == 20.0
    assert reader.seen[0][0] == "cpu" and reader.seen[0][2] == "0"
    # Sent at 20 req/s, the 40 requests take about twice as long as at 40 (Poisson arrivals
    # of one seed: the same schedule, stretched).
    assert first.summary is not None and slow.summary is not None
    assert slow.summary.duration_s > 1.6 * first.summary.duration_s
    # The reading is kept with the measurement (a lost store rebuilds the trial from it).
    saved = load_measurement(tmp_path / "t1", {})
    assert saved is not None and saved.engine[SPEED] == slow.engine[SPEED]
    # A probe that reads nothing: the trial runs at the user's rate, unscaled.
    blind = measure(CONFIG, tmp_path / "t2", plan, settings)
    assert blind.ok and SPEED not in blind.engine


def test_a_gpu_trial_is_probed_before_its_engine_holds_the_devices(tmp_path: Path) -> None:
    trial = tmp_path / "t"
    started: list[bool] = []

    def reader(platform: str, env: Mapping[str, str], cores: str | None) -> SpeedReading:
        started.append((trial / "engine.log").exists())
        assert (platform, dict(env)) == ("cuda", {"CUDA_VISIBLE_DEVICES": "3"})
        return reading(100.0)

    plan = Workplan(
        [], REQUESTS[:4], LoadProfile(concurrency=4), {}, speed=HostSpeed("cuda", reader=reader)
    )
    settings = dataclasses.replace(
        fake_settings(tmp_path, extra_env=ENV), platform="cuda", release_timeout_s=1.0
    )
    config = EngineConfig(model="tiny", served_model_name="tiny", env={"CUDA_VISIBLE_DEVICES": "3"})
    m = measure(config, trial, plan, settings)
    assert m.ok, m.reason
    assert m.engine[SPEED]["speed"] == 1.0
    assert started == [False]  # read before the engine was launched


def test_vllms_own_server_is_probed_by_default_and_the_probe_replaces_re_measures(
    make_spec: Callable[..., TuneSpec],
) -> None:
    spec = make_spec(search="goal")
    assert probes_speed(spec)  # vLLM's own command, a server scenario: on every platform
    custom = {"command": "{python} my_server.py"}
    assert not probes_speed(make_spec(engine=custom))
    assert probes_speed(make_spec(engine=custom, speed_probe="on"))
    assert not probes_speed(make_spec(speed_probe="off"))
    assert not probes_speed(make_spec(scenario="offline"))
    with pytest.raises(SpecError, match="offline batch is not probed"):
        probes_speed(make_spec(scenario="offline", speed_probe="on"))
    assert remeasure_on(spec) and not remeasure_on(spec, probing=True)
    assert remeasure_on(make_spec(search="goal", remeasure="on"), probing=True)


def test_a_confirm_run_that_was_probed_counts_as_at_the_reference_speed(
    make_spec: Callable[..., TuneSpec], summary_of: Callable[..., Summary]
) -> None:
    # Sent at rate x 0.5 on a host at half speed: 50 tok/s and a p99 TPOT of 30 ms raw are
    # 100 tok/s and 15 ms as at the reference, within a 20 ms bound.
    confirmer = SimpleNamespace(spec=make_spec(slos={"p99_tpot_ms": 20.0}))
    summary = summary_of(throughput=50.0, tpot_p99=30.0)
    facts = {SPEED: {"speed": 0.5, "scales": True}}
    probed = Measurement(TrialStatus.OK, summary=summary, engine=facts)
    run = Confirmer._run(confirmer, 0, 3, probed, "output_throughput")  # type: ignore[arg-type]
    assert run.value == pytest.approx(100.0) and run.feasible
    plain = Measurement(TrialStatus.OK, summary=summary)
    unprobed = Confirmer._run(confirmer, 0, 3, plain, "output_throughput")  # type: ignore[arg-type]
    assert unprobed.value == pytest.approx(50.0) and not unprobed.feasible
