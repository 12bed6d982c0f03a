"""Early stopping and the confirm step through the runner, on scripted measurements."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from autotune.answer.selection import pareto_front, pick, study_objectives
from autotune.bench import RequestRecord, summarize, t_quantile
from autotune.devices import DevicePool
from autotune.engine import EngineConfig
from autotune.measure import Judge, Measurement
from autotune.space import SearchSpace
from autotune.spec import TuneSpec
from autotune.store import StudyStore, TrialRecord
from autotune.study import Confirmer, Harness, Machine, StudyRunner
from autotune.study._confirm import round_order
from autotune.study._verdict import Bounds, ConfirmRun, Stopping, evaluate, gain
from autotune.vocab.slo import Slo
from autotune.vocab.status import TrialStatus

REQUESTS = 16


def requests_of(seqs: int, n: int = REQUESTS) -> list[RequestRecord]:
    """Requests of an engine whose time to first token shrinks as max_num_seqs grows."""
    ttft = 4.0 / seqs
    out = []
    for i in range(n):
        send = 0.1 * i
        times = tuple(send + ttft + 0.01 * k for k in range(8))
        out.append(RequestRecord(i, send, times[0], times, times[-1], 4, 8))
    return out


@dataclass
class JudgedMeasure:
    """Feeds the judge the requests one by one, as the load client does."""

    judged: list[int] = field(default_factory=list)
    unjudged: list[int] = field(default_factory=list)

    def __call__(
        self, config: EngineConfig, trial_dir: Path, judge: Judge | None = None
    ) -> Measurement:
        seqs = int(config.args["max_num_seqs"])
        records = requests_of(seqs)
        (self.unjudged if judge is None else self.judged).append(seqs)
        for k in range(1, len(records) + 1):
            reason = judge(records[:k]) if judge is not None else None
            if reason is not None:
                partial = summarize(records[:k])
                return Measurement(TrialStatus.PRUNED, reason, partial, device_s=1.0 + 0.25 * k)
        return Measurement("ok", "", summarize(records), device_s=1.0 + 0.25 * len(records))


def test_pruned_trials_are_recorded_apart_and_save_device_time(
    make_spec, space: SearchSpace
) -> None:
    spec = make_spec(trials=8, prune=True, slos={"p99_ttft_ms": 400.0})
    store = StudyStore(spec.storage_url)
    m = JudgedMeasure()
    result = StudyRunner(Harness(spec, space, m, requests_per_run=REQUESTS), store).run()
    trials = store.trials(spec.study)

    assert m.unjudged[0] == 128  # the baseline is always measured in full
    pruned = [t for t in trials if t.status == TrialStatus.PRUNED]
    assert pruned and result.pruned == len(pruned)
    for t in pruned:
        assert t.params["max_num_seqs"] < 10  # TTFT >= 400 ms: the SLO breaks early
        assert "SLO already broken" in t.reason
        assert t.metrics["completed"] < REQUESTS and t.device_s < 5.0
    front = pareto_front(trials, study_objectives(store.study_facts(spec.study)))
    assert front and not any(t.status == TrialStatus.PRUNED for t in front)
    assert result.saved_device_s == len(pruned) * 5.0 - result.pruned_device_s > 0
    assert result.measured + result.pruned + result.failed == 8


def test_a_re_measure_is_never_cut_short(make_spec, space: SearchSpace) -> None:
    """A re-measure runs a front config again for the drift: judged against the front (itself
    among it) it could be pruned on a slower host, and teach nothing."""
    spec = make_spec(
        trials=8, prune=True, search="goal", remeasure="on", slos={"p99_ttft_ms": 400.0}
    )
    store = StudyStore(spec.storage_url)
    m = JudgedMeasure()
    StudyRunner(Harness(spec, space, m, requests_per_run=REQUESTS), store).run()
    again = [t for t in store.trials(spec.study) if t.role == "remeasure"]
    assert again and all(t.metrics["completed"] == REQUESTS for t in again)
    assert len(m.unjudged) == 1 + len(again)  # the baseline and the re-measures: in full


# --- the confirm step ---

TRUE = {128: 100.0, 64: 97.0, 16: 90.0}  # a config's true throughput, by max_num_seqs
NOISE = {128: 0.02, 64: 0.02, 16: 0.40}  # and how much one run of it wanders


@dataclass
class NoisyMeasure:
    """A scripted noisy engine: each run measures the truth times (1 +- noise)."""

    rng: random.Random

    def __call__(
        self, config: EngineConfig, trial_dir: Path, judge: Judge | None = None
    ) -> Measurement:
        seqs = int(config.args["max_num_seqs"])
        value = TRUE[seqs] * (1 + self.rng.uniform(-NOISE[seqs], NOISE[seqs]))
        base = summarize(requests_of(64, 4))
        summary = base.model_copy(update={"output_throughput": value})
        return Measurement("ok", "", summary, device_s=2.0)


def noisy_study(make_spec, space: SearchSpace, seed: int, tmp: Path) -> tuple[StudyStore, object]:
    spec = make_spec(
        study=f"noisy{seed}",
        trials=3,
        objectives=[{"metric": "output_throughput", "direction": "maximize"}],
        root=tmp,
    )
    store = StudyStore(spec.storage_url)
    measure = NoisyMeasure(random.Random(seed))
    first = spec.model_copy(update={"trials": 1})  # the baseline (max_num_seqs 128)
    StudyRunner(Harness(first, space, measure), store).run()
    study = store.load(spec.study)
    for seqs in (64, 16):  # then the other two candidates
        study.enqueue_trial({**space.baseline_params(), "max_num_seqs": seqs})
    StudyRunner(Harness(spec, space, measure), store).run()
    return store, spec


def test_the_conservative_pick_beats_the_single_run_pick_on_a_noisy_engine(
    make_spec, space: SearchSpace, tmp_path: Path
) -> None:
    single, confirmed = [], []
    for seed in range(12):
        store, spec = noisy_study(make_spec, space, seed, tmp_path / str(seed))
        trials = store.trials(spec.study)
        objectives = study_objectives(store.study_facts(spec.study))
        one_run = pick(trials, objectives, "max-throughput")
        single.append(TRUE[one_run.params["max_num_seqs"]])
        measure = NoisyMeasure(random.Random(1000 + seed))
        Confirmer(spec, space, store, measure).run(top=3, rounds=3)
        winner = store.study_facts(spec.study).confirmed_winner
        chosen = next(t for t in trials if t.number == winner)
        confirmed.append(TRUE[chosen.params["max_num_seqs"]])
    print("single-run picks", single, "confirmed picks", confirmed)
    # The noisy config (true 90) wins single runs when it is lucky; rarely the confirm step.
    assert confirmed.count(90.0) < single.count(90.0)
    assert sum(confirmed) / len(confirmed) > sum(single) / len(single)


def test_confirm_keeps_every_run_and_a_stable_engine_confirms_the_same_winner(
    make_spec, space: SearchSpace, tmp_path: Path
) -> None:
    store, spec = noisy_study(make_spec, space, 0, tmp_path)
    global NOISE
    stable = dict.fromkeys(NOISE, 0.0)
    saved, NOISE = NOISE, stable
    try:
        first = Confirmer(spec, space, store, NoisyMeasure(random.Random(1))).run(2, 2)
        second = Confirmer(spec, space, store, NoisyMeasure(random.Random(2))).run(2, 2)
    finally:
        NOISE = saved
    assert first["winner"] == second["winner"] is not None
    confirm = store.study_facts(spec.study).confirm or {}
    assert confirm["finished"] and confirm["winner"] == first["winner"]
    assert first["order"][0] == list(reversed(first["order"][1]))


def runs_of(
    values: dict[int, Sequence[float]], ttft: dict[int, Sequence[float]] | None = None
) -> list[ConfirmRun]:
    """Runs of each candidate, round by round; `ttft`: each one's p99 TTFT per round."""
    return [
        ConfirmRun(k, number, "ok", v, 1.0, {"p99_ttft_ms": (ttft or {}).get(number, [0.0] * 9)[k]})
        for number, vs in values.items()
        for k, v in enumerate(vs)
    ]


def test_the_best_candidate_is_the_best_median_minus_spread() -> None:
    runs = runs_of({1: [100, 101, 99], 2: [130, 80, 104], 0: [95, 96, 94]})
    result = evaluate(runs, [1, 2, 0], "maximize", 0, 3)
    assert result["candidates"]["2"]["median"] == 104  # the best median...
    assert result["best_candidate"] == 1  # ...but 104 - 25 < 100 - 1
    assert result["winner"] == 1 and result["gain"]["low"] > 0  # +5% every round: a gain
    assert result["gain"]["verdict"].startswith("trial 1: gain +5.3% over your defaults")


def test_an_slo_is_judged_by_its_median_over_rounds_not_its_worst_round() -> None:
    bounds = Bounds((Slo("p99_ttft_ms", 100.0),))
    one_bad = runs_of({1: [200, 200, 201], 0: [100, 101, 100]}, {1: [90, 140, 95], 0: [50] * 3})
    result = evaluate(one_bad, [1, 0], "maximize", 0, 3, bounds)
    assert result["candidates"]["1"]["slos"]["p99_ttft_ms"]["median"] == 0.95
    assert result["winner"] == 1  # one round over the bound of three does not decide
    mostly = runs_of({1: [200, 200, 201], 0: [100, 101, 100]}, {1: [90, 140, 120], 0: [50] * 3})
    result = evaluate(mostly, [1, 0], "maximize", 0, 3, bounds)
    assert not result["candidates"]["1"]["holds"] and result["winner"] == 0
    assert result["gain"]["verdict"].startswith("no config measured better than your defaults")


def test_a_relative_bound_is_the_baseline_of_the_same_round() -> None:
    # Round 2 ran on a slow host: every latency doubled, the baseline's too. Against the
    # baseline of round 0 (a bound fixed once) the candidate would miss; paired, it holds,
    # and the baseline can never miss a bound relative to itself.
    bounds = Bounds((Slo("p99_ttft_ms", factor=1.2),))
    runs = runs_of({1: [120, 121, 60], 0: [100, 100, 50]}, {1: [110, 112, 230], 0: [100, 98, 200]})
    result = evaluate(runs, [1, 0], "maximize", 0, 3, bounds)
    assert result["candidates"]["1"]["slos"]["p99_ttft_ms"]["ratios"][2] == pytest.approx(
        230 / 240, abs=1e-4
    )
    assert result["candidates"]["0"]["holds"] and result["candidates"]["1"]["holds"]
    assert result["winner"] == 1


def test_the_baseline_alone_qualifies_and_wins_plainly() -> None:
    bounds = Bounds((Slo("p99_ttft_ms", 100.0),))
    runs = runs_of({1: [300, 300, 300], 0: [100, 100, 100]}, {1: [500] * 3, 0: [50] * 3})
    result = evaluate(runs, [1, 0], "maximize", 0, 3, bounds)
    assert result["best_candidate"] is None and result["winner"] == 0
    assert result["gain"]["verdict"].startswith("no config measured better than your defaults")


def test_a_candidate_wins_where_the_defaults_miss_an_absolute_slo() -> None:
    bounds = Bounds((Slo("p99_ttft_ms", 100.0),))
    runs = runs_of({1: [90, 92, 91], 0: [100, 100, 100]}, {1: [80] * 3, 0: [150] * 3})
    result = evaluate(runs, [1, 0], "maximize", 0, 3, bounds)
    assert result["winner"] == 1
    assert "your defaults miss p99_ttft_ms over the rounds" in result["gain"]["verdict"]


def test_a_bound_tighter_than_the_defaults_makes_the_interval_the_price_of_holding_it() -> None:
    # `--slo p99_ttft_ms=baseline*0.8`: the defaults miss it by construction. A candidate that
    # halves the latency serves 30% less: it is not dropped as worse, the step ends once the
    # interval decides, and the verdict says what holding the bound costs.
    tight = Bounds((Slo("p99_ttft_ms", factor=0.8),))
    runs = runs_of({1: [70, 71, 69], 0: [100, 101, 99]}, {1: [50] * 3, 0: [100] * 3})
    stop = Confirmer._looked(runs, [1, 0], "maximize", 0, 3, tight, Stopping(4))
    assert stop.dropped == frozenset() and stop.ended == "worse"
    result = evaluate(runs, [1, 0], "maximize", 0, 3, tight, stop)
    assert result["winner"] == 1
    assert result["gain"]["verdict"].startswith(
        "trial 1: your defaults miss p99_ttft_ms over the rounds; it holds them; its gain over "
        "them -30.0%: -3"
    )
    # With a bound the defaults hold, the same candidate is worse: dropped, the defaults kept.
    loose = Bounds((Slo("p99_ttft_ms", factor=1.2),))
    stop = Confirmer._looked(runs, [1, 0], "maximize", 0, 3, loose, Stopping(4))
    assert stop.dropped == {1} and stop.ended == "worse"
    assert evaluate(runs, [1, 0], "maximize", 0, 3, loose, stop)["winner"] == 0


def test_defaults_that_failed_a_round_are_not_said_to_miss_an_slo() -> None:
    runs = runs_of({1: [120, 121, 119], 0: [100, 100, 100]})
    runs[4] = ConfirmRun(1, 0, "crash", None, 1.0)  # the baseline's engine failed in round 2
    result = evaluate(runs, [1, 0], "maximize", 0, 3, Bounds((Slo("p99_ttft_ms", 100.0),)))
    assert result["winner"] == 1
    assert "your defaults did not run in every round" in result["gain"]["verdict"]


def test_gain_is_an_interval_and_zero_inside_it_is_no_gain() -> None:
    clear = gain(runs_of({1: [110, 111, 112], 0: [100, 100, 101]}), 1, 0, "maximize")
    assert clear["low"] > 0
    noisy_runs = runs_of({1: [110, 95, 104], 0: [100, 100, 100]})
    noisy = gain(noisy_runs, 1, 0, "maximize")
    assert noisy["low"] < 0 < noisy["high"]
    verdict = evaluate(noisy_runs, [1, 0], "maximize", 0, 3)["gain"]["verdict"]
    assert verdict.startswith(
        "no config measured better than your defaults; best candidate trial 1"
    )
    assert "-" in verdict and "+" in verdict  # the interval, both ends
    assert gain([], 0, 0, "maximize") == {}
    latency = gain(runs_of({1: [50, 51, 50], 0: [100, 101, 99]}), 1, 0, "minimize")
    assert latency["low"] > 0.9  # half the latency: about +100%
    # Student's t from scipy: 3 rounds (2 degrees of freedom) and 30 (29).
    assert t_quantile(2) == pytest.approx(2.920, abs=1e-3)
    assert t_quantile(29) == pytest.approx(1.699, abs=1e-3)


def test_rounds_alternate_their_order() -> None:
    assert round_order([3, 1, 0], 0) == [3, 1, 0]
    assert round_order([3, 1, 0], 1) == [0, 1, 3]


def test_records_spread_makes_the_pick_conservative() -> None:
    steady = TrialRecord(
        number=1, state="complete", status="ok", metrics={"output_throughput": 100.0},
        config={"model": "m"}, spread={"output_throughput": 1.0},
    )  # fmt: skip
    lucky = steady.model_copy(
        update={
            "number": 2,
            "metrics": {"output_throughput": 110.0},
            "spread": {"output_throughput": 30.0},
        }
    )
    objectives = [("output_throughput", "maximize"), ("p99_ttft_ms", "minimize")]
    assert pick([steady, lucky], objectives, "max-throughput").number == 1


def test_the_confirm_step_leases_devices_as_the_trials_did(
    make_spec, space: SearchSpace, tmp_path: Path
) -> None:
    """With a pool (`--devices 4,5`), every confirm run is shown only a leased device, one at
    a time, and gives it back; before, it ran on whatever the host showed."""
    store, spec = noisy_study(make_spec, space, 0, tmp_path)
    seen: list[str] = []

    class Watching(NoisyMeasure):
        def __call__(self, config: EngineConfig, trial_dir: Path) -> Measurement:
            seen.append(config.env.get("CUDA_VISIBLE_DEVICES", "whole host"))
            return super().__call__(config, trial_dir)

    pool = DevicePool([4, 5], platform="cuda")
    harness = Harness(spec, space, Watching(random.Random(7)), machine=Machine(pool=pool))
    Confirmer.of(harness, store).run(top=2, rounds=2)
    assert seen and all(d in ("4", "5") for d in seen), seen
    assert pool.free == [4, 5]  # every lease given back
    seen.clear()
    Confirmer(spec, space, store, Watching(random.Random(8))).run(top=2, rounds=1)
    assert seen and all(d == "whole host" for d in seen)  # no pool: the host as a whole


class SlowingHost:
    """One config under two trial numbers on a host that loses 40% of its speed halfway
    through the confirm step; latencies grow as it slows (the demo's failure of stop 29: the
    baseline, judged against a bound fixed from one early run, missed it in every round)."""

    def __init__(self, runs_before_slow: int) -> None:
        self.left = runs_before_slow
        self.rng = random.Random(11)

    def __call__(
        self, config: EngineConfig, trial_dir: Path, judge: Judge | None = None
    ) -> Measurement:
        speed = 1.0 if self.left > 0 else 0.6
        self.left -= 1
        wobble = 1 + self.rng.uniform(-0.03, 0.03)
        base = summarize(requests_of(64, 4))
        update = {
            "output_throughput": 1000.0 * speed * wobble,
            "ttft_ms": base.ttft_ms.model_copy(update={"p99": 100.0 / speed * wobble}),
        }
        return Measurement("ok", "", base.model_copy(update=update), device_s=2.0)


def test_on_a_slowing_host_the_baseline_against_its_twin_wins_plainly(
    make_spec, space: SearchSpace
) -> None:
    def spec_of(trials: int) -> TuneSpec:  # each its own: the baseline fixes a spec's bounds
        return make_spec(
            trials=trials,
            objectives=[{"metric": "output_throughput", "direction": "maximize"}],
            relative_slos={"p99_ttft_ms": 1.2},
        )

    spec = spec_of(2)
    store = StudyStore(spec.storage_url)
    # The study's two trials and the first round and a half at full speed, then 40% slower.
    measure = SlowingHost(runs_before_slow=5)
    StudyRunner(Harness(spec_of(1), space, measure), store).run()
    # Another config that this host serves exactly as the baseline: the null comparison.
    twin = {**space.baseline_params(), "max_num_seqs": 64}
    store.load(spec.study).enqueue_trial(twin)
    StudyRunner(Harness(spec, space, measure), store).run()
    result = Confirmer(spec, space, store, measure).run(top=1, rounds=3)
    assert result["baseline"] == 0 and set(result["candidates"]) == {"0", "1"}
    # Round 2 ran the baseline fast and its twin 40% slower: a round that pairs nothing. It
    # is left out as degraded and made again, both slow; the twin then holds in every round.
    (out,) = result["degraded_rounds"]
    assert (out["round"], out["trial"]) == (1, 1) and out["ratio"] == pytest.approx(0.6, abs=0.01)
    assert result["run_rounds"] == 4 and result["rounds"] == 3
    twin_ttft = result["candidates"]["1"]["slos"]["p99_ttft_ms"]
    assert max(twin_ttft["ratios"]) <= 1.0
    for c in result["candidates"].values():
        assert c["holds"], c
    assert result["winner"] == 0
    # Its twin is no more than 5% from it over the rounds that pair: said plainly.
    assert result["gain"]["verdict"].startswith(
        "no config is more than 5% better than your defaults; best candidate trial 1"
    )
    assert store.study_facts(spec.study).confirmed_winner == 0


def test_a_confirm_step_cut_short_has_no_verdict_rather_than_a_stale_one() -> None:
    # Issue 45: kept after every run, a step killed in round 1 read "no winner: no candidate
    # held the SLOs over the rounds" on a study with no SLOs, printed again by the rerun.
    runs = runs_of({1: [120, 121, 119], 0: [100, 100, 100]})[:2]
    result = evaluate(runs, [1, 0], "maximize", 0, 3)
    assert result["winner"] is None
    assert result["gain"]["verdict"] == (
        "no verdict: 2 of the step's 6 runs were measured (it is still running, or was stopped)"
    )


@pytest.mark.parametrize(
    ("failed", "bounds", "verdict"),
    [
        (True, Bounds(), "no winner: no candidate ran in every round"),
        (False, Bounds(), "no winner: no candidate held the error-rate bound over the rounds"),
        (
            False,
            Bounds((Slo("p99_ttft_ms", 1.0),)),
            "no winner: no candidate held the SLOs over the rounds",
        ),
        (
            True,
            Bounds((Slo("p99_ttft_ms", 1.0),)),
            "no winner: no candidate both ran in every round and held the SLOs over the rounds",
        ),
    ],
    ids=["failed-a-round", "errors", "missed-an-slo", "both"],
)
def test_no_winner_says_what_each_candidate_missed(
    failed: bool, bounds: Bounds, verdict: str
) -> None:
    # Without SLOs the only bound is the error rate: "held the SLOs" was untrue there.
    runs = runs_of({1: [120, 121, 119], 0: [100, 100, 100]}, {1: [5] * 3, 0: [5] * 3})
    if failed:  # runs of trial 1, then of the baseline (0), by round
        runs[1] = ConfirmRun(1, 1, "crash", None, 1.0)  # the candidate's engine, round 2
        runs[5] = ConfirmRun(2, 0, "crash", None, 1.0)  # the baseline's, round 3
    if not bounds.names and not failed:  # every run served errors
        runs = [ConfirmRun(r.round, r.trial, r.status, r.value, 1.0, r.slos, 0.5) for r in runs]
    result = evaluate(runs, [1, 0], "maximize", 0, 3, bounds)
    assert result["winner"] is None
    assert result["gain"]["verdict"] == verdict


@dataclass
class ScriptedRates:
    """Each config's rate, run by run, as scripted: `rates[max_num_seqs]` in turn."""

    rates: dict[int, list[float]]
    folders: list[Path] = field(default_factory=list)

    def __call__(
        self, config: EngineConfig, trial_dir: Path, judge: Judge | None = None
    ) -> Measurement:
        self.folders.append(trial_dir)
        value = self.rates[int(config.args["max_num_seqs"])].pop(0)
        summary = summarize(requests_of(64, 4)).model_copy(update={"output_throughput": value})
        return Measurement("ok", "", summary, device_s=2.0)


def test_a_clear_gain_ends_the_step_before_its_budget_and_says_so(
    make_spec, space: SearchSpace, tmp_path: Path
) -> None:
    store, spec = noisy_study(make_spec, space, 0, tmp_path)  # trial 1 is max_num_seqs 64
    # 64 is 30% faster than the defaults (128) in every round, give or take 1%.
    rates = {128: [1000.0, 1010.0, 990.0] * 3, 64: [1300.0, 1290.0, 1310.0] * 3, 16: [1.0] * 9}
    result = Confirmer(spec, space, store, ScriptedRates(rates)).run(top=1, rounds=8)
    assert result["ended"] == "gain" and result["rounds"] == 3 < result["max_rounds"] == 8
    assert result["winner"] == 1 and result["gain"]["decision"] == "gain"
    assert "ended by the gain's interval above 0" in result["gain"]["verdict"]
    assert "3 of at most 8 rounds" in result["gain"]["verdict"]


def test_a_twin_of_the_defaults_ends_the_step_as_no_gain_worth_deploying(
    make_spec, space: SearchSpace, tmp_path: Path
) -> None:
    store, spec = noisy_study(make_spec, space, 0, tmp_path)
    steady = [1000.0, 1002.0, 998.0, 1001.0, 999.0, 1000.0, 1001.0, 999.0]
    rates = {128: list(steady), 64: [v + 1.0 for v in steady], 16: [1.0] * 8}
    result = Confirmer(spec, space, store, ScriptedRates(rates)).run(top=1, rounds=8)
    assert result["ended"] == "equivalent" and result["winner"] == 0
    assert result["gain"]["verdict"].startswith(
        "no config is more than 5% better than your defaults; best candidate trial 1"
    )


def test_a_degraded_run_is_made_again_and_both_are_kept(
    make_spec, space: SearchSpace, tmp_path: Path
) -> None:
    store, spec = noisy_study(make_spec, space, 0, tmp_path)
    # The defaults' fifth run comes in a bad window, 45% low; its remake is normal.
    base = [1000.0, 1010.0, 990.0, 1000.0, 550.0, 1005.0, 995.0]
    rates = {128: base, 64: [1000.0, 1300.0, 800.0, 1200.0, 900.0, 1000.0], 16: [1.0] * 9}
    measure = ScriptedRates(rates)
    result = Confirmer(spec, space, store, measure).run(top=1, rounds=5)
    (redo,) = result["degraded"]
    assert redo == {"round": 4, "trial": 0, "value": 550.0, "again": 1005.0}
    assert result["candidates"]["0"]["values"][4] == 1005.0  # the remake counts
    assert sum(f.name.endswith("-again") for f in measure.folders) == 1  # both on disk


def test_a_degraded_first_round_is_left_out_and_made_again(
    make_spec, space: SearchSpace, tmp_path: Path
) -> None:
    store, spec = noisy_study(make_spec, space, 0, tmp_path)
    # 64 is 30% faster than the defaults, but its engine ran at half that through round 1,
    # which no round before it could show.
    rates = {128: [1000.0, 1010.0, 990.0, 1000.0, 1005.0], 64: [650.0, 1300.0, 1290.0, 1310.0,
             1305.0], 16: [1.0] * 9}  # fmt: skip
    measure = ScriptedRates(rates)
    result = Confirmer(spec, space, store, measure).run(top=1, rounds=4)
    (out,) = result["degraded_rounds"]
    assert (out["round"], out["trial"], out["values"]) == (0, 1, {1: 650.0, 0: 1000.0})
    assert result["candidates"]["1"]["values"] == [1300.0, 1290.0, 1310.0]  # round 1 left out
    assert result["ended"] == "gain" and result["winner"] == 1
    assert (result["rounds"], result["run_rounds"]) == (3, 4)
    assert (
        "round 1 left out as degraded and made again: trial 1 measured 0.65x"
        in (result["gain"]["verdict"])
    )
    assert len(measure.folders) == 8  # the left-out round's runs were made, and stay listed
    stored = store.study_facts(spec.study).confirm
    assert stored is not None and stored["degraded_rounds"][0]["round"] == 0
