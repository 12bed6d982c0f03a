"""Deterministic failures teach the search: an unsupported value (or a crash seen twice the
same way) is never launched again. The rules (`learned_rules`, pure) and the runner with a
scripted `measure` (no processes), configs queued in a known order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.cli._progress import skips_line
from autotune.engine import EngineConfig
from autotune.measure import Measurement
from autotune.space import SearchSpace, load_space
from autotune.store import TrialRecord
from autotune.study import (
    LearnedRule,
    SkipRule,
    StudyResult,
    Tried,
    learned_rules,
)
from autotune.vocab.status import TrialStatus
from study.fakes import STUDY, FakeMeasure, MakeSpec, launched, run

K = TrialStatus
FP8 = (
    "RuntimeError: Worker failed with error 'FP8 KV cache on CPU requires x86 with AVX-512 or AMX.'"
)


# --- the rules, from trials alone ------------------------------------------------------------


def tried(
    number: int, status: str, started: bool = False, reason: str = "", **params: Any
) -> Tried:
    return Tried(number, params, status, reason, started)


BASE = tried(0, K.OK, True, seqs=32, kv="auto", block=128)


def test_one_unsupported_failure_blames_the_values_no_started_config_had() -> None:
    rules = learned_rules([BASE, tried(1, K.UNSUPPORTED, reason=FP8, seqs=64, kv="fp8", block=128)])
    assert rules == [LearnedRule((1,), {"seqs": 64, "kv": "fp8"}, K.UNSUPPORTED, FP8)]


def test_values_that_started_elsewhere_are_cleared() -> None:
    other = tried(1, K.OK, True, seqs=64, kv="auto", block=64)
    rules = learned_rules([BASE, other, tried(2, K.UNSUPPORTED, reason=FP8, seqs=64, kv="fp8")])
    assert [r.values for r in rules] == [{"kv": "fp8"}]


def test_a_combination_of_started_values_blames_what_differs_from_the_nearest() -> None:
    # Every value has started somewhere; the failing config is one step from trial 1.
    one = tried(1, K.OK, True, seqs=64, kv="auto")
    two = tried(2, K.OK, True, seqs=32, kv="fp8")
    base = tried(0, K.OK, True, seqs=32, kv="auto")
    rules = learned_rules([base, one, two, tried(3, K.UNSUPPORTED, reason=FP8, seqs=64, kv="fp8")])
    assert [r.values for r in rules] in ([{"kv": "fp8"}], [{"seqs": 64}])


def test_two_unsupported_failures_of_one_signature_keep_what_they_share() -> None:
    other = "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX."
    rules = learned_rules(
        [
            BASE,
            tried(1, K.UNSUPPORTED, reason=FP8, seqs=64, kv="fp8", block=128),
            tried(2, K.UNSUPPORTED, reason=other, seqs=16, kv="fp8", block=128),
        ]
    )
    assert rules[0] == LearnedRule((1, 2), {"kv": "fp8"}, K.UNSUPPORTED, FP8)  # most general first
    assert len(rules) == 3


def test_unsupported_failures_of_different_signatures_are_not_joined() -> None:
    rules = learned_rules(
        [
            BASE,
            tried(1, K.UNSUPPORTED, reason=FP8, seqs=64, kv="fp8"),
            tried(2, K.UNSUPPORTED, reason="ValueError: x is not supported", seqs=16, kv="fp8"),
        ]
    )
    assert {r.trials for r in rules} == {(1,), (2,)}


def crash(number: int, pid: int, **params: Any) -> Tried:
    reason = (
        f"engine exited with status 1; its log says: (Worker pid={pid}) ERROR 12-01 09:43:14 "
        "[multiproc_executor.py:953] RuntimeError: _C::static_scaled_fp8_quant() expected at "
        "most 0 argument(s) but received 4 argument(s)."
    )
    return tried(number, K.CRASH, reason=reason, **params)


def test_one_crash_teaches_nothing_two_of_one_signature_do() -> None:
    assert learned_rules([BASE, crash(1, 100, seqs=64, q="fp8")]) == []
    rules = learned_rules([BASE, crash(1, 100, seqs=64, q="fp8"), crash(2, 207, seqs=16, q="fp8")])
    assert [(r.trials, r.values, r.kind) for r in rules] == [((1, 2), {"q": "fp8"}, K.CRASH)]


def test_crashes_that_share_no_blamed_value_teach_nothing() -> None:
    rules = learned_rules([BASE, crash(1, 100, seqs=64), crash(2, 207, seqs=16)])
    assert rules == []


def test_a_trial_that_started_then_failed_clears_its_values_but_a_crash_never_does() -> None:
    served = tried(1, K.BENCHMARK_ERROR, True, seqs=64, kv="auto")
    crashed = tried(2, K.CRASH, True, seqs=16, kv="auto")  # died while serving
    failing = tried(3, K.UNSUPPORTED, reason=FP8, seqs=64, kv="fp8")
    assert [r.values for r in learned_rules([BASE, served, failing])] == [{"kv": "fp8"}]
    failing = tried(4, K.UNSUPPORTED, reason=FP8, seqs=16, kv="fp8")
    assert [r.values for r in learned_rules([BASE, crashed, failing])] == [
        {"seqs": 16, "kv": "fp8"}
    ]


# --- the runner: launched at most twice, then predicted --------------------------------------

SPACE = """\
name: fp8
platform: cpu
fixed: {enforce_eager: true, kv_cache_memory_bytes: 268435456}
parameters:
  - {name: max_num_seqs, type: categorical, choices: [16, 32, 64], baseline: 32}
  - {name: kv_cache_dtype, type: categorical, choices: [auto, fp8], baseline: auto}
"""


@pytest.fixture
def fp8_space(tmp_path: Path) -> tuple[SearchSpace, str]:
    file = tmp_path / "fp8.yaml"
    file.write_text(SPACE)
    return load_space(file), str(file)


def failing_fp8(measure: FakeMeasure, status: str = K.UNSUPPORTED) -> Any:
    def script(i: int, config: EngineConfig) -> Measurement:
        if config.args.get("kv_cache_dtype") != "fp8":
            return measure.ok(config)
        if status == K.UNSUPPORTED:
            return Measurement(status=status, reason=FP8, device_s=30.0)
        reason = (
            f"(Worker pid={1000 + i}) ERROR 12-01 09:43:{i:02d} [multiproc_executor.py:953] "
            "RuntimeError: _C::static_scaled_fp8_quant() expected at most 0 argument(s)"
        )
        return Measurement(status=status, reason=reason, device_s=30.0)

    return script


def queue(spec_url: str, *configs: tuple[int, str]) -> None:
    study = optuna.load_study(study_name=STUDY, storage=spec_url)
    for seqs, kv in configs:
        study.enqueue_trial({"max_num_seqs": seqs, "kv_cache_dtype": kv})


def fp8_launches(measure: FakeMeasure) -> int:
    return sum(c.args.get("kv_cache_dtype") == "fp8" for c in measure.calls)


def by_number(trials: list[TrialRecord]) -> dict[int, TrialRecord]:
    return {t.number: t for t in trials}


def test_an_unsupported_value_is_launched_at_most_twice_then_predicted(
    make_spec: MakeSpec, measure: FakeMeasure, fp8_space: tuple[SearchSpace, str]
) -> None:
    space, file = fp8_space
    measure.script = failing_fp8(measure)
    run(make_spec(trials=1, space=file), space, measure)  # the baseline: 32, auto
    spec = make_spec(trials=5, space=file, seed=2)
    queue(spec.storage_url, (16, "fp8"), (64, "fp8"), (32, "fp8"), (16, "auto"), (64, "fp8"))
    result, trials = run(spec, space, measure)
    t = by_number(trials)

    assert t[1].status == t[2].status == K.UNSUPPORTED  # 16+fp8 blames both; 64+fp8 too
    assert t[3].status == K.PREDICTED_UNSUPPORTED and t[3].device_s is None  # never launched
    assert (
        "carries kv_cache_dtype=fp8, which failed as unsupported in trials 1 and 2" in t[3].reason
    )
    assert t[3].constraints["failed"] == 1.0 and t[3].constraints["oom"] == 0.0
    assert t[3].values == [0.0, 1e9, 1e9] and t[3].state == "complete"
    assert t[5].status == K.DUPLICATE  # an exact repeat is a duplicate first
    assert fp8_launches(measure) == 2
    later = [x for x in trials if x.number > 2 and x.params["kv_cache_dtype"] == "fp8"]
    assert all(x.device_s is None for x in later)
    predicted = [x for x in trials if x.status == K.PREDICTED_UNSUPPORTED]
    assert result.skips[SkipRule.UNSUPPORTED] == len(predicted) >= 1
    assert result.predicted == len(predicted)
    assert len(launched(trials)) == 5


def test_a_value_whose_companions_all_started_is_launched_once(
    make_spec: MakeSpec, measure: FakeMeasure, fp8_space: tuple[SearchSpace, str]
) -> None:
    space, file = fp8_space
    measure.script = failing_fp8(measure)
    run(make_spec(trials=1, space=file), space, measure)
    spec = make_spec(trials=3, space=file, seed=2)
    queue(spec.storage_url, (32, "fp8"), (64, "fp8"), (16, "fp8"))
    _, trials = run(spec, space, measure)
    t = by_number(trials)
    assert t[1].status == K.UNSUPPORTED
    assert t[2].status == t[3].status == K.PREDICTED_UNSUPPORTED
    assert "failed as unsupported in trial 1:" in t[2].reason
    assert fp8_launches(measure) == 1


def test_a_crash_that_repeats_the_same_way_is_predicted_after_two(
    make_spec: MakeSpec, measure: FakeMeasure, fp8_space: tuple[SearchSpace, str]
) -> None:
    space, file = fp8_space
    measure.script = failing_fp8(measure, K.CRASH)
    run(make_spec(trials=1, space=file), space, measure)
    spec = make_spec(trials=4, space=file, seed=2)
    queue(spec.storage_url, (32, "fp8"), (64, "fp8"), (16, "fp8"))
    result, trials = run(spec, space, measure)
    t = by_number(trials)
    assert t[1].status == t[2].status == K.CRASH  # one crash proves nothing; two do
    assert t[3].status == K.PREDICTED_UNSUPPORTED
    assert "carries kv_cache_dtype=fp8, which crashed the same way in trials 1 and 2" in t[3].reason
    assert fp8_launches(measure) == 2
    assert result.skips.get(SkipRule.UNSUPPORTED, 0) >= 1


def test_crashes_of_different_causes_are_not_learned(
    make_spec: MakeSpec, measure: FakeMeasure, fp8_space: tuple[SearchSpace, str]
) -> None:
    space, file = fp8_space
    reasons = iter(["RuntimeError: boom", "RuntimeError: bang", "RuntimeError: crash"])

    def script(i: int, config: EngineConfig) -> Measurement:
        if config.args.get("kv_cache_dtype") == "fp8":
            return Measurement(status=K.CRASH, reason=next(reasons), device_s=1.0)
        return measure.ok(config)

    measure.script = script
    run(make_spec(trials=1, space=file), space, measure)
    spec = make_spec(trials=4, space=file, seed=2)
    queue(spec.storage_url, (32, "fp8"), (64, "fp8"), (16, "fp8"))
    _, trials = run(spec, space, measure)
    assert [by_number(trials)[n].status for n in (1, 2, 3)] == [K.CRASH] * 3
    assert fp8_launches(measure) == 3


# --- the summary: what each rule saved -------------------------------------------------------


def test_the_summary_says_what_each_rule_saved() -> None:
    result = StudyResult(name="s", measured=3, failed=2, skipped=6, failed_device_s=60.0)
    result.skips = {
        SkipRule.UNSUPPORTED: 3,
        SkipRule.OOM_ORDER: 1,
        SkipRule.DUPLICATE: 2,
    }
    line = skips_line(result)
    assert line.startswith("skipped before launch: 2 duplicate, 3 predicted_unsupported, ")
    assert "1 predicted_oom by memory order" in line
    assert "the learned rules saved 4 launches (about 120 device-seconds" in line
    assert skips_line(StudyResult(name="s")) == ""


# --- the vocabulary: both statuses are failures, neither is an OOM --------------------------


@pytest.mark.parametrize("status", [K.UNSUPPORTED, K.PREDICTED_UNSUPPORTED])
def test_unsupported_is_failed_not_oom_and_has_a_colour(status: TrialStatus) -> None:
    from autotune.dashboard._labels import GROUP_COLOURS
    from autotune.measure import constraint_values
    from autotune.vocab.status import FAILURE_KINDS

    values = constraint_values(None, {"p99_ttft_ms": 100.0}, 0.05, status)
    assert values["failed"] == 1.0 and values["oom"] == 0.0
    assert status in FAILURE_KINDS and status in GROUP_COLOURS
