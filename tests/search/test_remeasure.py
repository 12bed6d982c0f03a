"""The goal search re-measures its incumbent; export compares a config's runs merged, as
measured (no drift correction: autotune.answer.repeats says why)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune import store as keys
from autotune.answer.export import choose_export
from autotune.bench import Summary
from autotune.engine import EngineConfig
from autotune.measure import Measurement
from autotune.search._remeasure import SHARE
from autotune.space import SearchSpace
from autotune.spec import TuneSpec
from autotune.store import StudyStore, TrialRecord
from autotune.study import Harness, StudyRunner, TrialStarted

MakeSpec = Callable[..., TuneSpec]


def truth(args: dict[str, object]) -> float:
    """Output tok/s of a config on a steady host: best near max_num_seqs 32."""
    seqs = int(args["max_num_seqs"])  # type: ignore[call-overload]
    return 1000.0 * (1.0 - 0.1 * abs(math.log2(seqs / 32)))


class DriftingHost:
    """Each launch finds the host 4% slower than the one before (exp-linear in time)."""

    def __init__(self, summary_of: Callable[..., Summary]) -> None:
        self.summary_of = summary_of
        self.clock_s = 0.0
        self.calls: list[EngineConfig] = []
        self.events: list[object] = []

    def speed(self, t: float) -> float:
        return math.exp(-0.04 * t / 100.0)

    def __call__(self, config: EngineConfig, trial_dir: Path) -> Measurement:
        self.calls.append(config)
        self.clock_s += 100.0
        seen = truth(config.args) * self.speed(self.clock_s)
        summary = self.summary_of(throughput=seen, ttft_p99=50.0, tpot_p99=5.0)
        return Measurement("ok", summary=summary, device_s=100.0, at_s=self.clock_s)


def study(
    make_spec: MakeSpec, space: SearchSpace, host: DriftingHost, **fields: object
) -> list[TrialRecord]:
    spec = make_spec(trials=12, search="goal", sampler="random", seed=3, **fields)
    store = StudyStore(spec.storage_url)
    StudyRunner(Harness(spec, space, host), store, host.events.append).run()
    return store.trials(spec.study)


def deployed(trials: list[TrialRecord]) -> TrialRecord:
    chosen, _ = choose_export(
        trials, {"objectives": [{"metric": "output_throughput", "direction": "maximize"}]}
    )
    return chosen


def test_the_incumbent_is_measured_again_and_export_compares_its_runs_merged(
    make_spec: MakeSpec, space: SearchSpace, summary_of: Callable[..., Summary]
) -> None:
    host = DriftingHost(summary_of)
    trials = study(make_spec, space, host)
    launched = [t for t in trials if t.device_s is not None]
    assert len(launched) == 12 == len(host.calls)
    again = [t for t in launched if t.role == keys.ROLE_REMEASURE]
    assert 1 <= len(again) <= int(12 * SHARE)
    by_number = {t.number: t for t in trials}
    started = {e.number: e.description for e in host.events if isinstance(e, TrialStarted)}
    for t in again:  # a re-measure runs a measured config again, on purpose: not a duplicate
        assert t.remeasure_of is not None and by_number[t.remeasure_of].params == t.params
        assert t.status == "ok" and t.measured_at is not None
        assert started[t.number].endswith(f"(again: trial {t.remeasure_of})")  # as the CLI shows
    chosen = deployed(trials)
    runs = [t for t in launched if t.params == chosen.params]
    # The deployed record is the mean of its config's runs, as the engine measured them.
    mean = sum(t.metric("output_throughput") for t in runs) / len(runs)
    assert chosen.runs == len(runs) and chosen.metric("output_throughput") == pytest.approx(mean)
    merged = {}
    for t in launched:
        merged.setdefault(json.dumps(t.params, sort_keys=True), []).append(
            t.metric("output_throughput")
        )
    assert mean == pytest.approx(max(sum(v) / len(v) for v in merged.values()))


def test_remeasure_off_runs_every_config_once(
    make_spec: MakeSpec, space: SearchSpace, summary_of: Callable[..., Summary]
) -> None:
    host = DriftingHost(summary_of)
    trials = study(make_spec, space, host, remeasure="off")
    launched = [t for t in trials if t.device_s is not None]
    assert not [t for t in launched if t.role == keys.ROLE_REMEASURE]
    assert len({tuple(sorted(t.params.items())) for t in launched}) == len(launched)
